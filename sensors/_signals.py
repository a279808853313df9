"""Readings from raw probe sections: process, log, outputs (gpu lives in ``_gpu``).

Each ``read_*`` is a pure function of the probe's sections, the monitored host's clocks and
what the previous check remembered, returning ``(Reading, memory)``. Nothing here runs a
command or opens a file: the probe did the reading, so local and SSH hosts share this code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sensors._config import LogSpec, OutputsSpec, ProcessSpec
from sensors._model import Reading, Says
from sensors._probe import (
    CMDLINE_CAP,
    STAT_CAP,
    Meta,
    ProcStat,
    ancestors,
    descendants,
    parse_cmdlines,
    parse_io,
    parse_stats,
    parse_task_cmdlines,
    parse_task_stats,
)
from sensors._regex import compile_user_regex

#: How far two elapsed-time sources may disagree before neither is believed (seconds).
#: /proc/stat btime moves when NTP steps the wall clock; a few seconds is normal.
ELAPSED_TOLERANCE = 30.0
ALIVE_STATES = frozenset("RSDIWTtPK")  # everything but Z (zombie) and X/x (dead)
_CMD_EVIDENCE = 512


# --------------------------------------------------------------------------- process


@dataclass(frozen=True)
class ProcessMemory:
    """Identity of the processes seen last check: (boot_id, pid) → start ticks."""

    boot_id: str | None = None
    identities: Mapping[int, int] = field(default_factory=dict)
    first_pids: tuple[int, ...] = ()
    last_seen: Mapping[str, object] | None = None  # the job as last seen alive


def _elapsed(st: ProcStat, meta: Meta) -> tuple[float | None, str | None]:
    """Elapsed seconds from /proc start ticks against the host's boot clock, checked.

    ``ps -o etime`` is never used: procps-ng 4.0.1 to 4.0.4 wraps in unsigned arithmetic when
    /proc/uptime is virtualised (lxcfs), printing e.g. ``441077231-01:14:40``
    (2^64/100/86400 days; fixed upstream in procps-ng commit a5fad53b). Two primary
    sources are compared instead: /proc/uptime (CLOCK_BOOTTIME) and now - /proc/stat btime.
    """
    if not meta.clk_tck or meta.clk_tck <= 0:
        return None, "clock tick rate (getconf CLK_TCK) unreadable"
    started = st.starttime / meta.clk_tck
    candidates: dict[str, float] = {}
    if meta.uptime is not None and not meta.uptime_virtualised:
        candidates["uptime"] = meta.uptime - started
    if meta.now is not None and meta.btime is not None:
        candidates["btime"] = meta.now - meta.btime - started
    if not candidates:
        return None, "no trustworthy boot clock (/proc/uptime virtualised, btime unreadable)"
    values = list(candidates.values())
    if max(values) - min(values) > ELAPSED_TOLERANCE:
        return (
            None,
            f"boot clocks disagree: {', '.join(f'{k}={v:.0f}s' for k, v in candidates.items())}",
        )
    value = values[0]
    limit = meta.uptime if (meta.uptime and not meta.uptime_virtualised) else None
    if value < -1 or (limit is not None and value > limit + ELAPSED_TOLERANCE):
        return None, f"implausible elapsed time {value:.0f}s"
    return max(value, 0.0), None


def _effective_state(st: ProcStat, tasks: Mapping[int, list[ProcStat]]) -> tuple[str, str | None]:
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


def read_process(
    spec: ProcessSpec,
    sections: Mapping[str, bytes],
    meta: Meta,
    memory: ProcessMemory | None,
    *,
    host: str,
    exclude_pids: frozenset[int] = frozenset(),
) -> tuple[Reading, ProcessMemory, frozenset[int]]:
    """Read the process signal. Returns the reading, the memory, and the job's PIDs
    (matched processes and their live descendants) for the GPU attribution."""
    memory = memory or ProcessMemory()
    stat_body = sections.get("stat")
    cmd_body = sections.get("cmdline")

    def unknown(why: str, **evidence: object) -> tuple[Reading, ProcessMemory, frozenset[int]]:
        return (
            Reading("process", Says.UNKNOWN, why, evidence, meta.now, host),
            memory,
            frozenset(),
        )

    if stat_body is None or cmd_body is None or meta.now is None:
        return unknown("the probe's process section is missing (output cut short)")
    if len(stat_body) >= STAT_CAP or len(cmd_body) >= CMDLINE_CAP:
        return unknown("the process table was too large to read in full")
    stats = parse_stats(stat_body)
    if not stats:
        return unknown("no process could be read from /proc")
    cmdlines = parse_cmdlines(cmd_body)
    for leader, text in parse_task_cmdlines(sections.get("taskcmd")).items():
        if not cmdlines.get(leader):
            cmdlines[leader] = text
    tasks = parse_task_stats(sections.get("tasks"))

    # Never match the probe itself, crosscheck, or their ancestors (field-notes.md).
    excluded = set(exclude_pids)
    if meta.script_pid is not None:
        excluded |= ancestors(meta.script_pid, stats)
        excluded |= descendants([meta.script_pid], stats)

    boot_changed = memory.boot_id is not None and meta.boot_id != memory.boot_id
    if spec.pid is not None:
        candidates = [spec.pid] if spec.pid in stats or spec.pid in cmdlines else []
        # Identity is (boot_id, pid, start ticks): a reused PID is another process.
        if candidates and spec.pid in memory.identities:
            st = stats.get(spec.pid)
            if boot_changed or (st and st.starttime != memory.identities[spec.pid]):
                candidates = []
                reused = True
            else:
                reused = False
        else:
            reused = False
        how = f"pid {spec.pid}"
    else:
        rx = compile_user_regex(spec.match or "")
        matched = {pid for pid, cmd in cmdlines.items() if pid not in excluded and cmd and rx.search(cmd)}
        # Once matched, a process stays the job while its identity (boot, pid, start ticks)
        # holds, even if its command line stops matching (setproctitle, or a zombie leader
        # whose cmdline reads empty while its threads still run).
        if not boot_changed:
            matched |= {
                pid
                for pid, start in memory.identities.items()
                if pid in stats and stats[pid].starttime == start and pid not in excluded
            }
        candidates = sorted(matched)
        reused = False
        how = f"match {spec.match!r}"

    processes = []
    alive_pids: list[int] = []
    identities: dict[int, int] = {}
    missing_stat = []
    for pid in candidates:
        st = stats.get(pid)
        if st is None:
            # Listed in cmdline but its stat line could not be parsed (or it just exited):
            # don't guess.
            if cmdlines.get(pid):
                missing_stat.append(pid)
            continue
        state, note = _effective_state(st, tasks)
        elapsed, elapsed_why = _elapsed(st, meta)
        entry: dict[str, object] = {
            "pid": pid,
            "state": state,
            "threads": st.num_threads,
            "cpu_seconds": _ticks_to_s(st.utime + st.stime, meta),
            "elapsed_seconds": None if elapsed is None else round(elapsed, 1),
            "start_ticks": st.starttime,
            "cmdline": cmdlines.get(pid, "")[:_CMD_EVIDENCE],
        }
        if elapsed_why:
            entry["elapsed_unknown"] = elapsed_why
        if note:
            entry["note"] = note
        processes.append(entry)
        identities[pid] = st.starttime
        if state in ALIVE_STATES:
            alive_pids.append(pid)

    if missing_stat:
        return unknown(
            f"process(es) {missing_stat} listed but their /proc stat was unreadable",
            matched=missing_stat,
        )

    live_desc = descendants(alive_pids, stats)
    cpu_ticks = sum(stats[p].utime + stats[p].stime for p in alive_pids) + sum(
        stats[p].utime + stats[p].stime for p in live_desc if stats[p].state in ALIVE_STATES
    )
    io = parse_io(sections.get("io"))
    io_bytes = sum(io[p] for p in alive_pids if p in io) if io else None
    job_pids = frozenset(alive_pids) | frozenset(live_desc)
    evidence_cpu = _ticks_to_s(cpu_ticks, meta) if alive_pids else None
    main = next((p for p in processes if p["pid"] in alive_pids), processes[0] if processes else None)
    new_memory = ProcessMemory(
        boot_id=meta.boot_id,
        identities={**memory.identities, **identities},
        first_pids=memory.first_pids or tuple(alive_pids),
        last_seen=(
            {"pid": main["pid"], "cpu_seconds": evidence_cpu, "at": meta.now}
            if alive_pids and main
            else memory.last_seen
        ),
    )
    evidence: dict[str, object] = {
        "how": how,
        "pid": main["pid"] if main else None,
        "state": main["state"] if main else None,
        "cpu_seconds": evidence_cpu,
        "elapsed_seconds": main["elapsed_seconds"] if main else None,
        "io_bytes": io_bytes,
        "alive": len(alive_pids),
        "matched": len(processes),
        "descendants": len(live_desc),
        "processes": processes[:16],
        "boot_id": meta.boot_id,
    }
    if not alive_pids and memory.last_seen:
        evidence["last_seen_alive"] = dict(memory.last_seen)
    # Whether this watch ever saw the job alive: "gone" and "not started yet (or a wrong
    # match)" look the same in one snapshot, and only the first is evidence of an exit.
    evidence["seen_alive"] = bool(alive_pids) or memory.last_seen is not None
    if main and "elapsed_unknown" in main:
        evidence["elapsed_unknown"] = main["elapsed_unknown"]
    if alive_pids:
        states = "".join(sorted({str(p["state"]) for p in processes if p["pid"] in alive_pids}))
        detail = (
            f"pid {main['pid']} alive in state {main['state']}"
            + (f" ({len(alive_pids)} processes)" if len(alive_pids) > 1 else "")
            + f", cpu {evidence['cpu_seconds']:.1f}s"
        )
        if states == "D" or (main and main["state"] == "D"):
            detail += " — uninterruptible I/O wait (D)"
        return (
            Reading("process", Says.WORKING, detail, evidence, meta.now, host),
            new_memory,
            job_pids,
        )
    if reused:
        detail = f"pid {spec.pid} now belongs to another process: the job is gone"
    elif boot_changed:
        detail = "the host rebooted since the last check: the job is gone"
    elif processes:
        detail = f"pid {processes[0]['pid']} exited (zombie)"
    elif memory.last_seen:
        last = memory.last_seen
        ago = meta.now - float(last["at"]) if isinstance(last.get("at"), (int, float)) else None
        detail = f"pid {last['pid']} exited" + (
            f" (last seen alive {ago:.0f}s ago, {last['cpu_seconds']}s CPU)" if ago is not None else ""
        )
    else:
        detail = f"no process found ({how})"
    return Reading("process", Says.DONE, detail, evidence, meta.now, host), new_memory, frozenset()


def _ticks_to_s(ticks: int, meta: Meta) -> float:
    return round(ticks / (meta.clk_tck or 100), 2)


# --------------------------------------------------------------------------- log


@dataclass(frozen=True)
class LogMemory:
    inode: int | None = None
    size: int = 0
    complete_line: str | None = None  # a completion line already seen in this file
    error_line: str | None = None


def _split_lines(text: str) -> tuple[list[str], str]:
    """Complete lines (terminated by \\n) and the unterminated rest.

    tqdm rewrites one line with \\r: each \\r-segment counts as a line for progress, but a
    completion marker must be a whole line ending in \\n (field-notes.md).
    """
    *complete, rest = text.split("\n")
    return complete, rest


def read_log(
    spec: LogSpec,
    sections: Mapping[str, bytes],
    meta: Meta,
    memory: LogMemory | None,
    *,
    host: str,
) -> tuple[Reading, LogMemory]:
    memory = memory or LogMemory()
    stat_raw = sections.get("log_stat")
    tail = sections.get("log_tail")
    if stat_raw is None or tail is None or meta.now is None:
        return Reading("log", Says.UNKNOWN, "the probe's log section is missing", {}, meta.now, host), memory
    parts = stat_raw.decode("utf-8", "replace").split()
    try:
        inode, size, mtime = int(parts[0]), int(parts[1]), int(parts[2])
    except (ValueError, IndexError):
        why = stat_raw.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no answer"]
        return (
            Reading(
                "log",
                Says.UNKNOWN,
                f"log unreadable: {why[0][:200]}",
                {"path": spec.path},
                meta.now,
                host,
            ),
            memory,
        )
    rotated = memory.inode is not None and inode != memory.inode
    truncated = memory.inode == inode and size < memory.size
    if rotated or truncated:
        memory = LogMemory()
    text = tail.decode("utf-8", "replace")
    if size > len(tail):
        # The first line of the tail is partial unless the tail starts right after a newline.
        text = text.split("\n", 1)[1] if "\n" in text else ""
    complete, rest = _split_lines(text)
    complete_rx = compile_user_regex(spec.complete)
    error_rx = compile_user_regex(spec.error) if spec.error else None
    progress_rx = compile_user_regex(spec.progress) if spec.progress else None
    # One C-speed search over the whole tail (\r as line breaks, MULTILINE) tells whether any
    # line can match; only then are lines examined one by one. A per-line match implies a
    # whole-text match for every pattern but those anchored with \A or \Z.
    flat = text.replace("\r", "\n")

    def may_match(pattern: str | None) -> bool:
        if pattern is None:
            return False
        if "\\A" in pattern or "\\Z" in pattern:
            return True
        return compile_user_regex(pattern, multiline=True).search(flat) is not None

    complete_line = memory.complete_line
    error_line = memory.error_line
    if may_match(spec.complete) or may_match(spec.error):
        for line in complete:
            clean = line.rstrip("\r")
            # The marker is the last \r-segment of a line: "...\rExtraction complete\n".
            segment = clean.rsplit("\r", 1)[-1]
            if complete_rx.search(segment):
                complete_line = segment
                error_line = None  # errors before the completion line were survived
            elif error_rx and error_rx.search(clean):
                error_line = clean
    progress: dict[str, object] | None = None
    if progress_rx and may_match(spec.progress):
        for seg in reversed(flat.split("\n")):
            m = progress_rx.search(seg)
            if m:
                progress = {
                    "line": seg.strip()[:200],
                    **{k: _num(v) for k, v in m.groupdict().items() if v is not None},
                }
                if not m.groupdict():
                    progress["match"] = m.group(0)[:200]
                break
    trimmed = flat.rstrip()
    last_line = trimmed[trimmed.rfind("\n") + 1 :].strip()[:300]
    age = round(meta.now - mtime, 1)
    evidence: dict[str, object] = {
        "path": spec.path,
        "last_line": last_line,
        "age_seconds": age,
        "size": size,
        "inode": inode,
        "mtime": mtime,
        "complete_line": complete_line,
        "error_line": error_line,
        "progress": progress,
        "partial_last_line": bool(rest),
    }
    if rotated:
        evidence["rotated"] = True
    if truncated:
        evidence["truncated"] = True
    new_memory = LogMemory(inode, size, complete_line, error_line)
    if error_line is not None:
        says, detail = Says.FAILED, f"error line: {error_line.strip()[:200]}"
    elif complete_line is not None:
        says, detail = Says.DONE, f"completion line: {complete_line.strip()[:200]}"
    else:
        says = Says.WORKING
        detail = f"no completion line yet; last: {last_line[:160]!r}, {age:.0f}s ago"
    if rotated:
        detail += " (log rotated since last check)"
    elif truncated:
        detail += " (log truncated since last check)"
    return Reading("log", says, detail, evidence, meta.now, host), new_memory


def _num(value: str) -> object:
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            return value


# --------------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class OutputsMemory:
    count: int | None = None
    lines_inode: int | None = None
    lines_size: int = 0
    checked_at: float | None = None  # the monitored host's clock at this check


def _recently_modified(raw: bytes | None, evidence: dict[str, object]) -> str | None:
    """What the probe's in-place-write check found: a file modified since the last check."""
    if raw is None:
        return None  # not asked this time (the count is not yet at the expected number)
    text = raw.decode("utf-8", "replace")
    if not text.startswith("ok"):
        # No GNU find (-newermt) on the host: the count alone decides, and the evidence says so.
        evidence["in_place_writes"] = "not checked: find -newermt unavailable on the host"
        return None
    name = text[2:].strip()
    evidence["in_place_writes"] = name or None
    return f"{name.rsplit('/', 1)[-1]} was modified since the last check" if name else None


def read_outputs(
    spec: OutputsSpec,
    sections: Mapping[str, bytes],
    meta: Meta,
    memory: OutputsMemory | None,
    *,
    host: str,
) -> tuple[Reading, OutputsMemory]:
    memory = memory or OutputsMemory()
    where = spec.files or spec.lines

    def unknown(why: str) -> tuple[Reading, OutputsMemory]:
        ev = {"path": where, "count": None, "expected": spec.expected}
        return Reading("outputs", Says.UNKNOWN, why, ev, meta.now, host), memory

    evidence: dict[str, object] = {"path": where, "expected": spec.expected}
    if spec.files:
        raw = sections.get("outputs")
        if raw is None:
            return unknown("the probe's outputs section is missing")
        text = raw.decode("utf-8", "replace").strip()
        if text in ("missing", "unreadable"):
            return unknown(f"output directory {text}: {spec.files}")
        try:
            count = int(text)
        except ValueError:
            return unknown(f"output count unreadable: {text[:100]!r}")
        evidence["pattern"] = spec.pattern
        new_memory = OutputsMemory(count=count, checked_at=meta.now)
        changed = _recently_modified(sections.get("outputs_recent"), evidence)
    else:
        raw = sections.get("lines")
        if raw is None:
            return unknown("the probe's outputs section is missing")
        text = raw.decode("utf-8", "replace").strip()
        if text in ("missing", "unreadable") or text.startswith("not a regular file"):
            return unknown(f"output file {text}: {spec.lines}")
        try:
            ino_s, size_s, _mtime, base_s, n_s, last = text.split()
            inode, size, base, n = int(ino_s), int(size_s), int(base_s), int(n_s)
        except ValueError:
            return unknown(f"record count unreadable: {text[:100]!r}")
        previous = (memory.count or 0) if base > 0 else 0
        count = previous + n
        evidence["partial_record"] = last not in ("0a", "none")
        evidence["size"] = size
        new_memory = OutputsMemory(count=count, lines_inode=inode, lines_size=size, checked_at=meta.now)
        changed = None
        if evidence["partial_record"]:
            changed = "a record is being written (the file does not end with a newline)"
        elif memory.lines_inode is not None and (inode, size) != (memory.lines_inode, memory.lines_size):
            changed = "the file changed since the last check"
    evidence["count"] = count
    evidence["previous_count"] = memory.count
    stable = memory.count is not None and memory.count == count
    if count >= spec.expected and stable and changed:
        # Same count, but written in place: a file finished only when it stops changing.
        says, detail = Says.WORKING, f"{count}/{spec.expected} outputs, but {changed}"
    elif count >= spec.expected and stable:
        says, detail = Says.DONE, f"{count}/{spec.expected} outputs, unchanged since last check"
    elif count >= spec.expected:
        says, detail = (
            Says.WORKING,
            f"{count}/{spec.expected} outputs; confirming they stopped changing",
        )
    else:
        says, detail = Says.WORKING, f"{count}/{spec.expected} outputs"
    return Reading("outputs", says, detail, evidence, meta.now, host), new_memory
