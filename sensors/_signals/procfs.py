"""The /proc records the process signal reads, and their framing.

The framing of each record needs no secret (see ``table_lines`` in the process signal): a
stat record is cut at ``head``'s ``==> /proc/PID/stat <==`` headers, which the 15 bytes of a
comm cannot hold; a command line comes as ``grep -z -H``'s ``/proc/PID/cmdline:ARG`` pieces,
each ended by a NUL that no argument holds. Parsers here are pure functions of the output.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from sensors._base.probe import Meta
from sensors._base.tolerances import (
    BOOT_CLOCKS_APART,
    ELAPSED_BELOW_ZERO,
    PROC_START_TICKS,
    PROC_START_WHOLE_SECONDS,
    START_ROUNDING,
    UPTIME_RESOLUTION,
    WHOLE_SECOND,
)

#: Caps on what one section may carry back (bytes). Sized for hosts with ~20k processes.
STAT_CAP = 16 * 1024 * 1024
#: A command line is read whole up to this (Linux's default limit on argv + environment is
#: a quarter of the 8 MiB stack limit); a longer one is "cut", and its match unknown.
CMDLINE_PER_PROCESS = 2 * 1024 * 1024
CMDLINE_CAP = 64 * 1024 * 1024
TASKS_CAP = 4 * 1024 * 1024


#: PF_KTHREAD (include/linux/sched.h): the process is a kernel thread.
_PF_KTHREAD = 0x00200000
#: PF_EXITING (include/linux/sched.h): set as do_exit begins, before the process lets its
#: memory go (exit_mm), after which /proc/PID/cmdline reads empty.
_PF_EXITING = 0x00000004


class ProcStat(NamedTuple):
    """The fields of /proc/PID/stat that crosscheck uses (parsed after the last ')').

    A named tuple, not a dataclass: one per process per probe (hundreds per batch), and a
    tuple is built several times faster.
    """

    pid: int
    comm: str
    state: str
    ppid: int
    utime: int
    stime: int
    num_threads: int
    starttime: int
    #: The kernel's per-process flags (PF_*): a kernel thread has no command line.
    flags: int = 0

    @property
    def kernel_thread(self) -> bool:
        return bool(self.flags & _PF_KTHREAD)

    @property
    def exiting(self) -> bool:
        """The process has begun to exit (its command line may read empty already)."""
        return bool(self.flags & _PF_EXITING)


def parse_stat_line(line: str) -> ProcStat | None:
    # The command name may hold spaces and parentheses: split after the *last* ')'
    # (psutil _pslinux.py does the same).
    head, sep, rest = line.rpartition(")")
    if not sep:
        return None
    pid_s, _, comm = head.partition(" (")
    fields = rest.split()
    try:
        return ProcStat(
            int(pid_s),
            comm,
            fields[0],  # state
            int(fields[1]),  # ppid
            int(fields[11]),  # utime
            int(fields[12]),  # stime
            int(fields[17]),  # num_threads
            int(fields[19]),  # starttime
            int(fields[6]),  # flags
        )
    except (ValueError, IndexError):
        return None


def _records(body: bytes | None, name: str) -> Iterator[tuple[int, bytes]]:
    """(PID, raw bytes) for each ``/proc/PID/NAME`` (or ``/proc/PID/task/TID/NAME``) file in
    ``head`` output (used for the stat files only: their text a process controls, its comm,
    is too short to hold a header).

    head writes ``\\n==> FILE <==\\n`` before every file but the first (``/dev/null``), so a
    record is exactly the bytes between two such headers. A piece whose start is not a
    header's rest is content: it goes back into the record before it.
    """
    lead = b"\n==> /proc/"
    rest = _header_rest(name)
    pieces = (b"\n" + (body or b"")).split(lead)
    pid: int | None = None
    record: list[bytes] = []
    for piece in pieces[1:]:
        m = rest.match(piece)
        if m is None:
            record += (lead, piece)
            continue
        if pid is not None:
            yield pid, b"".join(record)
        pid, record = int(m.group(1)), [piece[m.end() :]]
    if pid is not None:
        yield pid, b"".join(record)


@functools.cache
def _header_rest(name: str) -> re.Pattern[bytes]:
    return re.compile(rb"(\d+)(?:/task/\d+)?/" + re.escape(name.encode()) + rb" <==\n")


_PIECE = re.compile(rb"/proc/(\d+)/(?:task/\d+/)?cmdline:")


def _argv_records(body: bytes | None) -> Iterator[tuple[int, bytes]]:
    """(PID, raw command line) from ``grep -a -z -H ""`` over ``/proc/*/cmdline`` files.

    Each argument comes as ``/proc/PID/cmdline:ARG`` and a NUL (an empty file gives nothing;
    grep ends a last argument that has no NUL with one). An argument holds no NUL, so each
    piece is named by the file it came from, whatever its bytes. A piece that is not one (the
    cap cut it) ends the reading. Threads of one leader come one after another: a file's
    pieces are consecutive, and a record is every piece of one file.
    """
    pid: int | None = None
    name = b""
    args: list[bytes] = []
    for piece in (body or b"").split(b"\0")[:-1]:
        m = _PIECE.match(piece)
        if m is None:
            break
        if m.group(0) != name:
            if pid is not None:
                yield pid, b"\0".join(args) + b"\0"
            pid, name, args = int(m.group(1)), m.group(0), []
        args.append(piece[m.end() :])
    if pid is not None:
        yield pid, b"\0".join(args) + b"\0"


def parse_stats(body: bytes | None) -> dict[int, ProcStat]:
    stats: dict[int, ProcStat] = {}
    for pid, raw in _records(body, "stat"):
        st = _stat_of(raw)
        if st is not None and st.pid == pid:
            stats[pid] = st
    return stats


#: Parsed stat lines by their bytes: a sleeping process's line is the same at every check
#: (its CPU times stand still), and most of a host's processes sleep. Bounded; a pure
#: function of the bytes, so a hit is what parsing again would give.
_parsed: dict[bytes, ProcStat | None] = {}
_PARSED_MAX = 65536


def _stat_of(raw: bytes) -> ProcStat | None:
    st = _parsed.get(raw, _parsed)
    if st is _parsed:
        st = parse_stat_line(raw.decode("utf-8", "replace").rstrip("\n"))
        if len(_parsed) >= _PARSED_MAX:
            _parsed.clear()
        _parsed[raw] = st
    return st  # type: ignore[return-value]


def parse_task_stats(body: bytes | None) -> dict[int, list[ProcStat]]:
    """Leader PID → its threads' stat (read for zombie leaders that still have threads)."""
    tasks: dict[int, list[ProcStat]] = {}
    for leader, raw in _records(body, "stat"):
        st = parse_stat_line(raw.decode("utf-8", "replace").rstrip("\n"))
        if st is not None:
            tasks.setdefault(leader, []).append(st)
    return tasks


def _argv_text(raw: bytes) -> str:
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")


@dataclass(frozen=True)
class Cmdlines:
    """PID → argv joined by spaces (as ``ps -o args`` and ``pgrep -f`` show it), whole.

    ``cut``: PIDs whose command line is longer than the probe reads (CMDLINE_PER_PROCESS):
    for those, "does not match" cannot be known.
    """

    text: Mapping[int, str]
    cut: frozenset[int]


def parse_cmdlines(body: bytes | None) -> Cmdlines:
    text: dict[int, str] = {}
    cut: set[int] = set()
    for pid, raw in _argv_records(body):
        if len(raw) > CMDLINE_PER_PROCESS:
            cut.add(pid)
            raw = raw[:CMDLINE_PER_PROCESS]
        text[pid] = _argv_text(raw)
    return Cmdlines(text, frozenset(cut))


def parse_task_cmdlines(body: bytes | None) -> Cmdlines:
    """Leader PID → the command line its threads show (for zombie leaders with live threads)."""
    text: dict[int, str] = {}
    cut: set[int] = set()
    for leader, raw in _argv_records(body):
        if len(raw) > CMDLINE_PER_PROCESS:
            cut.add(leader)
            raw = raw[:CMDLINE_PER_PROCESS]
        if raw and leader not in text:
            text[leader] = _argv_text(raw)
    return Cmdlines(text, frozenset(cut))


def parse_io(body: bytes | None) -> dict[int, int]:
    """PID → rchar + wchar (bytes read and written, all I/O incl. pipes and page cache)."""
    result: dict[int, int] = {}
    if not body:
        return result  # not asked: no job PIDs known at the last check
    pid: int | None = None
    for line in body.decode("ascii", "replace").splitlines():
        if line.startswith("== "):
            try:
                pid = int(line[3:])
            except ValueError:
                pid = None
            continue
        key, _, value = line.partition(":")
        if pid is not None and key in ("rchar", "wchar"):
            with contextlib.suppress(ValueError):
                result[pid] = result.get(pid, 0) + int(value)
    return result


def children_of(stats: Mapping[int, ProcStat]) -> dict[int, list[int]]:
    """PPID → the PIDs it is the parent of."""
    children: dict[int, list[int]] = {}
    for st in stats.values():
        children.setdefault(st.ppid, []).append(st.pid)
    return children


def descendants(
    roots: Iterable[int], stats: Mapping[int, ProcStat], children: Mapping[int, list[int]] | None = None
) -> set[int]:
    """Live descendants of ``roots`` (not including the roots).

    ``children``: :func:`children_of` ``stats``, when the caller keeps it (stages sharing one
    table look up their jobs' trees in one index, not one each).
    """
    roots = list(roots)
    if not roots:
        return set()  # most checks: no live job, nothing to index the table for
    if children is None:
        children = children_of(stats)
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen - set(roots)


def ancestors(pid: int, stats: Mapping[int, ProcStat]) -> set[int]:
    """``pid`` and its ancestors as far as the stats reach."""
    chain: set[int] = set()
    while pid in stats and pid not in chain and pid > 0:
        chain.add(pid)
        pid = stats[pid].ppid
    chain.add(pid)
    return chain


ALIVE_STATES = frozenset("RSDIWTtPK")  # everything but Z (zombie) and X/x (dead)


def elapsed(st: ProcStat, meta: Meta) -> tuple[float | None, str | None]:
    """Elapsed seconds from /proc start ticks against the host's boot clock, checked.

    ``ps -o etime`` is never used: procps-ng 4.0.1 to 4.0.4 wraps in unsigned arithmetic when
    /proc/uptime is virtualised (lxcfs), printing e.g. ``441077231-01:14:40``
    (2^64/100/86400 days; fixed upstream in procps-ng commit a5fad53b). Two primary
    sources are compared instead: /proc/uptime (CLOCK_BOOTTIME) and now - /proc/stat btime.
    """
    return elapsed_since(st.starttime, meta)


def elapsed_since(starttime: int, meta: Meta) -> tuple[float | None, str | None]:
    """:func:`elapsed` of a start read as ticks since boot (/proc/PID/stat's field 22)."""
    if not meta.clk_tck or meta.clk_tck <= 0:
        return None, "clock tick rate (getconf CLK_TCK) unreadable"
    started = starttime / meta.clk_tck
    candidates: dict[str, float] = {}
    if meta.uptime is not None and not meta.uptime_virtualised:
        candidates["uptime"] = meta.uptime - started
    if meta.now is not None and meta.btime is not None:
        candidates["btime"] = meta.now - meta.btime - started
    if not candidates:
        return None, "no trustworthy boot clock (/proc/uptime virtualised, btime unreadable)"
    values = list(candidates.values())
    if max(values) - min(values) > BOOT_CLOCKS_APART:
        return (
            None,
            f"boot clocks disagree: {', '.join(f'{k}={v:.0f}s' for k, v in candidates.items())}",
        )
    value = values[0]
    limit = meta.uptime if (meta.uptime and not meta.uptime_virtualised) else None
    if value < -ELAPSED_BELOW_ZERO or (limit is not None and value > limit + BOOT_CLOCKS_APART):
        return None, f"implausible elapsed time {value:.0f}s"
    return max(value, 0.0), None


def _uptime_off(meta: Meta) -> float | None:
    """None where a start read in this probe stands on the kernel's /proc/uptime, as far as
    the probe can tell; else how far such a start may be off either way (seconds).

    Not where /proc/uptime is virtualised or unread (the start stands on btime's whole
    seconds, see :func:`elapsed`), nor where it ran backwards between its two reads (no
    kernel's CLOCK_BOOTTIME does), nor where it is off btime: the kernel's btime is the
    boot's wall clock rounded down to the second, read just after `date`, so now - uptime
    lies within [btime - span - 10 ms, btime + 1 s + 10 ms] (a second lower where ``now`` is
    whole seconds). Further off, /proc/uptime is not this clock's boot clock (virtualised
    where no mount shows it, the clock stepped between the reads): a start read against it
    is as far off as the two disagree.
    """
    if meta.uptime_virtualised or meta.uptime is None:
        return PROC_START_WHOLE_SECONDS
    span = meta.uptime - meta.uptime_before if meta.uptime_before is not None else 0.0
    if span < 0:
        return PROC_START_WHOLE_SECONDS
    if meta.now is not None and meta.btime is not None:
        gap = meta.now - meta.uptime - meta.btime
        low = -span - 2 * UPTIME_RESOLUTION - (WHOLE_SECOND if meta.now_coarse else 0.0)
        if not low <= gap <= WHOLE_SECOND + 2 * UPTIME_RESOLUTION:
            return round(abs(gap) + PROC_START_WHOLE_SECONDS, 3)
    return None


def start_precision(meta: Meta) -> float:
    """How far a process's start read from /proc in this probe (``meta.now - elapsed``) may
    be from the truth, in seconds.

    The start is ``now - uptime + starttime / CLK_TCK``. ``starttime`` is rounded down to a
    tick, /proc/uptime down to 10 ms, and ``uptime`` is read after ``date``: the truth lies
    in (start - 10 ms, start + (uptime - uptime_before) + 1 tick), and half a ms more either
    way for the start's rounding to the ms. Measured so in every probe that read
    /proc/uptime on both sides of ``date`` where /proc/uptime is the kernel's
    (:func:`_uptime_off`; as far off as that says otherwise). The fixed worst case
    (PROC_START_TICKS) where the answer lacks the read before ``date``; a second more where
    ``now`` is whole seconds (a date without %N: rounded down, the start reads early).
    """
    off = _uptime_off(meta)
    if off is not None:
        return off
    assert meta.uptime is not None  # _uptime_off: unread is off
    if meta.uptime_before is None or not meta.clk_tck or meta.clk_tck <= 0:
        measured = PROC_START_TICKS
    else:
        # The start is kept to the ms (process._describe rounds it: half a ms either way),
        # and the precision rounded up to the ms, never below the bound.
        bound = meta.uptime - meta.uptime_before + UPTIME_RESOLUTION + 1.0 / meta.clk_tck + START_ROUNDING
        measured = math.ceil(bound * 1000 - 1e-6) / 1000
    return WHOLE_SECOND + measured if meta.now_coarse else measured


def start_lead(meta: Meta) -> float:
    """How far a process's start read in this probe may be *after* the truth (seconds): the
    late side of :func:`start_precision`'s interval. Read against the kernel's /proc/uptime,
    /proc/uptime's 10 ms of rounding and half a ms of the start's own, whatever the span
    between its two reads and even where ``now`` is whole seconds (rounded down: that makes
    a start early, never late); otherwise as far off as :func:`_uptime_off` says."""
    off = _uptime_off(meta)
    return off if off is not None else UPTIME_RESOLUTION + START_ROUNDING


def effective_state(st: ProcStat, tasks: Mapping[int, list[ProcStat]]) -> tuple[str, str | None]:
    """The process state, looking past a zombie thread-group leader to its live threads."""
    if st.state != "Z":
        return st.state, None
    live = [t.state for t in tasks.get(st.pid, []) if t.state in ALIVE_STATES and t.pid != st.pid]
    if live:
        # Prefer the most telling thread state: R (working) over D (stuck) over S.
        for letter in "RDS":
            if letter in live:
                return letter, f"leader is Z but {len(live)} thread(s) still run"
        return live[0], f"leader is Z but {len(live)} thread(s) still run"
    return "Z", None
