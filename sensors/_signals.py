"""Readings from raw probe sections: process, log, outputs (gpu lives in ``_gpu``).

Each ``read_*`` is a pure function of the probe's sections, the monitored host's clocks and
what the previous check remembered, returning ``(Reading, memory)``. Nothing here runs a
command or opens a file: the probe did the reading, so local and SSH hosts share this code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from sensors._config import LogSpec, OutputsSpec, ProcessSpec
from sensors._model import Reading, Says
from sensors._probe import (
    CMDLINE_CAP,
    CMDLINE_PER_PROCESS,
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
from sensors._run import FINGERPRINT_BYTES, Run
from sensors._text import redact

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
    nonce: str,
    exclude_pids: frozenset[int] = frozenset(),
    launched_pid: int | None = None,
) -> tuple[Reading, ProcessMemory, frozenset[int]]:
    """Read the process signal. Returns the reading, the memory, and the job's PIDs
    (matched processes and their live descendants) for the GPU attribution.

    ``launched_pid``: the PID crosscheck started for this run (its exit is this run's).
    """
    memory = memory or ProcessMemory()

    def unknown(why: str, **evidence: object) -> tuple[Reading, ProcessMemory, frozenset[int]]:
        return (
            Reading("process", Says.UNKNOWN, why, evidence, meta.now, host),
            memory,
            frozenset(),
        )

    table = _ProcessTable.parse(sections, nonce)
    if isinstance(table, str) or meta.now is None:
        return unknown(table if isinstance(table, str) else "the host's clock could not be read")
    stats = table.stats

    # Never match the probe itself, crosscheck, or their ancestors: `pgrep -f` over SSH
    # matches the remote shell whose own command line holds the pattern.
    excluded = set(exclude_pids)
    if meta.script_pid is not None:
        excluded |= ancestors(meta.script_pid, stats)
        excluded |= descendants([meta.script_pid], stats)

    boot_changed = memory.boot_id is not None and meta.boot_id != memory.boot_id
    reused = False
    if spec.pid is not None:
        candidates = [spec.pid] if spec.pid in stats or spec.pid in table.cmdlines else []
        # Identity is (boot_id, pid, start ticks): a reused PID is another process.
        if candidates and spec.pid in memory.identities:
            st = stats.get(spec.pid)
            if boot_changed or (st and st.starttime != memory.identities[spec.pid]):
                candidates, reused = [], True
        how = f"pid {spec.pid}"
    else:
        rx = compile_user_regex(spec.match or "")
        matched = {
            pid
            for pid, cmd in table.cmdlines.items()
            if pid not in excluded and pid not in table.cut and cmd and rx.search(cmd)
        }
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
        how = f"match {spec.match!r}"

    processes, alive_pids, missing_stat = _describe(candidates, table, meta)
    if missing_stat:
        return unknown(
            f"process(es) {missing_stat} listed but their /proc stat was unreadable",
            matched=missing_stat,
        )
    cut = sorted(p for p in table.cut if p not in excluded and p not in candidates)
    if cut and not alive_pids:
        # A command line longer than the probe reads may be the job's: "no match" is not known.
        return unknown(
            f"the command line of pid {cut[0]} is longer than {CMDLINE_PER_PROCESS} bytes:"
            " whether it is the job cannot be told",
            cut_pids=cut[:16],
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
    # Remember only identities that can still matter: live processes (a dead PID, reused,
    # has other start ticks and is no longer the job), and the configured PID's.
    remembered = {
        pid: start
        for pid, start in {**memory.identities, **{p["pid"]: p["start_ticks"] for p in processes}}.items()
        if (pid in stats and stats[pid].starttime == start) or pid == spec.pid
    }
    started = [p["started_at"] for p in processes if p["pid"] in alive_pids and p["started_at"] is not None]
    new_memory = ProcessMemory(
        boot_id=meta.boot_id,
        identities=remembered,
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
        "processes": [{k: v for k, v in p.items() if k != "started_at"} for p in processes[:16]],
        "boot_id": meta.boot_id,
        # When the earliest live job process started (host clock): where its run begins.
        "started_at": min(started) if started else None,
    }
    if not alive_pids and memory.last_seen:
        evidence["last_seen_alive"] = dict(memory.last_seen)
    # Whether this watch ever saw the job alive: "gone" and "not started yet (or a wrong
    # match)" look the same in one snapshot, and only the first is evidence of an exit.
    evidence["seen_alive"] = bool(alive_pids) or memory.last_seen is not None
    # The PID crosscheck launched for this run is this run's process, seen or not.
    evidence["launched"] = launched_pid is not None and (
        spec.pid == launched_pid or launched_pid in candidates
    )
    if main and "elapsed_unknown" in main:
        evidence["elapsed_unknown"] = main["elapsed_unknown"]
    if alive_pids:
        return (
            Reading(
                "process",
                Says.WORKING,
                _alive_detail(main, processes, alive_pids, evidence),
                evidence,
                meta.now,
                host,
            ),
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


@dataclass(frozen=True)
class _ProcessTable:
    """The process sections of one probe, parsed."""

    stats: Mapping[int, ProcStat]
    cmdlines: Mapping[int, str]
    cut: frozenset[int]
    tasks: Mapping[int, list[ProcStat]]

    @classmethod
    def parse(cls, sections: Mapping[str, bytes], nonce: str) -> _ProcessTable | str:
        """The table, or why it cannot be read."""
        stat_body, cmd_body = sections.get("stat"), sections.get("cmdline")
        if stat_body is None or cmd_body is None:
            return "the probe's process section is missing (output cut short)"
        if len(stat_body) >= STAT_CAP or len(cmd_body) >= CMDLINE_CAP:
            return "the process table was too large to read in full"
        stats = parse_stats(stat_body, nonce)
        if not stats:
            return "no process could be read from /proc"
        cmds = parse_cmdlines(cmd_body, nonce)
        text, cut = dict(cmds.text), set(cmds.cut)
        threads = parse_task_cmdlines(sections.get("taskcmd"), nonce)
        for leader, line in threads.text.items():
            if not text.get(leader):
                text[leader] = line
                if leader in threads.cut:
                    cut.add(leader)
        return cls(stats, text, frozenset(cut), parse_task_stats(sections.get("tasks"), nonce))


def _describe(
    candidates: list[int], table: _ProcessTable, meta: Meta
) -> tuple[list[dict[str, object]], list[int], list[int]]:
    """Evidence per candidate process, the live ones, and those listed without a stat."""
    processes: list[dict[str, object]] = []
    alive_pids: list[int] = []
    missing_stat: list[int] = []
    for pid in candidates:
        st = table.stats.get(pid)
        if st is None:
            # Listed in cmdline but its stat line could not be parsed (or it just exited):
            # don't guess.
            if table.cmdlines.get(pid):
                missing_stat.append(pid)
            continue
        state, note = _effective_state(st, table.tasks)
        elapsed, elapsed_why = _elapsed(st, meta)
        entry: dict[str, object] = {
            "pid": pid,
            "state": state,
            "threads": st.num_threads,
            "cpu_seconds": _ticks_to_s(st.utime + st.stime, meta),
            "elapsed_seconds": None if elapsed is None else round(elapsed, 1),
            "start_ticks": st.starttime,
            # Redacted whole, then cut: a secret cut in half would no longer look like one.
            "cmdline": redact(table.cmdlines.get(pid, ""))[:_CMD_EVIDENCE],
            "started_at": None if elapsed is None or meta.now is None else round(meta.now - elapsed, 2),
        }
        if elapsed_why:
            entry["elapsed_unknown"] = elapsed_why
        if note:
            entry["note"] = note
        processes.append(entry)
        if state in ALIVE_STATES:
            alive_pids.append(pid)
    return processes, alive_pids, missing_stat


def _alive_detail(
    main: Mapping[str, object] | None,
    processes: list[dict[str, object]],
    alive_pids: list[int],
    evidence: Mapping[str, object],
) -> str:
    assert main is not None
    states = "".join(sorted({str(p["state"]) for p in processes if p["pid"] in alive_pids}))
    detail = (
        f"pid {main['pid']} alive in state {main['state']}"
        + (f" ({len(alive_pids)} processes)" if len(alive_pids) > 1 else "")
        + f", cpu {evidence['cpu_seconds']:.1f}s"
    )
    if states == "D" or main["state"] == "D":
        detail += " — uninterruptible I/O wait (D)"
    return detail


def _ticks_to_s(ticks: int, meta: Meta) -> float:
    return round(ticks / (meta.clk_tck or 100), 2)


# --------------------------------------------------------------------------- log


@dataclass(frozen=True)
class LogMemory:
    """The log as the last check left it, and where this run's bytes begin in it.

    ``run_from`` is the offset in ``inode`` where the run's bytes begin (None: not bound
    yet). Bytes before it are an earlier run's, or, when ``before_uncertain``, of a run
    that cannot be told (the log was written both before and after the run began, or no
    run start is known at all).
    """

    inode: int | None = None
    size: int = 0
    fingerprint: str | None = None  # hex of the bytes just before `size`
    absent: bool = False  # no log at an earlier check: a file that appears is this run's
    run_from: int | None = None
    before_uncertain: bool = False
    bound_by: str | None = None
    bound_at: float | None = None
    complete_line: str | None = None  # this run's completion line
    complete_end: int | None = None  # the offset just after it
    error_line: str | None = None
    earlier_complete: str | None = None  # a completion line before run_from


def seed_log_memory(run: Run) -> LogMemory | None:
    """The log memory a launch leaves: the file as it was just before the job started."""
    if run.source != "launch" or run.started_at is None:
        return None
    if run.log_inode is None:
        return LogMemory(absent=True, bound_by="launch", bound_at=run.started_at)
    return LogMemory(
        inode=run.log_inode,
        size=run.log_offset or 0,
        fingerprint=run.log_fingerprint,
        run_from=run.log_offset or 0,
        bound_by="launch",
        bound_at=run.started_at,
    )


@dataclass(frozen=True)
class _LogStat:
    inode: int
    size: int
    mtime: int
    birth: int  # 0: unknown (the filesystem or stat keeps none)


def _parse_log_stat(raw: bytes, path: str) -> _LogStat | str:
    """The log's stat, or why it cannot be read (not there, not a regular file)."""
    text = raw.decode("utf-8", "replace").strip()
    parts = text.split()
    try:
        st = _LogStat(int(parts[0]), int(parts[1]), int(parts[2]), _int_or_zero(parts[3]))
    except (ValueError, IndexError):
        why = text.splitlines()[-1:] or ["no answer"]
        return f"log unreadable: {why[0][:200]}"
    kind = " ".join(parts[4:])
    if not kind.startswith("regular"):
        # A FIFO would block the reader, a device never ends: neither is read.
        return f"log is not a regular file: {kind or 'unknown type'} ({path})"
    return st


def _int_or_zero(value: str) -> int:
    try:
        return max(int(value), 0)
    except ValueError:
        return 0


def _bind(memory: LogMemory, st: _LogStat, run: Run | None, now: float) -> LogMemory:
    """Where this run's bytes begin, decided at the first check that sees the file."""
    base = replace(memory, inode=st.inode, bound_at=memory.bound_at or now)
    if memory.absent:
        return replace(base, run_from=0, bound_by=memory.bound_by or "watch")
    started = run.started_at if run is not None and run.source in ("since", "process") else None
    if started is None:
        # No run start: only what is written while this watch looks is this run's.
        return replace(base, run_from=st.size, before_uncertain=True, bound_by="watch")
    if st.birth and st.birth >= started + 1:
        return replace(base, run_from=0, bound_by=run.source if run else None)
    # mtime is whole seconds (rounded down). A job first seen alive may have started a
    # moment after an earlier run's last write: only a log written clearly after its start
    # (2 s) may hold its lines.
    last_write_before = st.mtime + 1 <= started if run and run.source == "since" else st.mtime <= started + 2
    return replace(
        base,
        run_from=st.size,
        before_uncertain=not last_write_before,
        bound_by=run.source if run else None,
    )


def _continuity(memory: LogMemory, st: _LogStat, prev: bytes | None) -> str | None:
    """How the file changed other than by appending since the last check, if it did."""
    if memory.inode is None:
        return None
    if st.inode != memory.inode:
        return "replaced"
    if st.size < memory.size:
        return "truncated"
    if memory.size > 0 and (prev is None or prev.hex() != (memory.fingerprint or "")):
        return "rewritten"
    return None


def read_log(
    spec: LogSpec,
    sections: Mapping[str, bytes],
    meta: Meta,
    memory: LogMemory | None,
    *,
    host: str,
    run: Run | None = None,
) -> tuple[Reading, LogMemory]:
    """Read the log signal: this run's completion and error lines, progress, staleness.

    A completion line counts only when this run wrote it (``run`` and the memory say where
    its bytes begin: see ``sensors._run``).
    """
    memory = memory or LogMemory()
    stat_raw = sections.get("log_stat")
    if stat_raw is None or meta.now is None:
        return Reading("log", Says.UNKNOWN, "the probe's log section is missing", {}, meta.now, host), memory
    st = _parse_log_stat(stat_raw, spec.path)
    if isinstance(st, str):
        # A log that is not there yet: the file that appears later is this run's.
        kept = replace(memory, absent=True) if "No such file" in st and memory.inode is None else memory
        return Reading("log", Says.UNKNOWN, st, {"path": spec.path}, meta.now, host), kept
    tail = sections.get("log_tail")
    if tail is None or len(tail) != min(st.size, spec.tail_bytes):
        why = "the probe's log section is missing" if tail is None else "the log changed while it was read"
        return Reading("log", Says.UNKNOWN, why, {"path": spec.path}, meta.now, host), memory

    change = _continuity(memory, st, sections.get("log_prev"))
    if change is not None:
        # Rewritten after a check this watch made: everything in it now is this run's
        # (when bound), and nothing remembered of the old content holds.
        was_bound = memory.run_from is not None
        memory = LogMemory(
            absent=True, bound_by=memory.bound_by if was_bound else None, bound_at=memory.bound_at
        )
    if memory.run_from is None:
        memory = _bind(memory, st, run, meta.now)
    elif (
        memory.before_uncertain
        and run is not None
        and run.started_at
        and memory.bound_at
        and run.started_at >= memory.bound_at
    ):
        # The run began after this watch first read the log: what was there is older.
        memory = replace(memory, before_uncertain=False)
    assert memory.run_from is not None
    scan = _scan_log(spec, tail, st, memory)
    complete_line, complete_end = scan.complete_line, scan.complete_end
    accepted_earlier = False
    if (
        complete_line is None
        and scan.earlier_complete is not None
        and memory.before_uncertain
        and scan.earlier_is_last
        and st.size == memory.run_from
        and run is not None
        and run.started_at is not None
    ):
        # Written before this watch saw the file, when it was already written both before and
        # after the run began: it counts only as the last line of a log nothing has been
        # appended to since.
        complete_line, complete_end, accepted_earlier = scan.earlier_complete, st.size, True
    still_writing = (
        complete_end is not None
        and change is None
        and memory.inode is not None
        and st.size > memory.size
        and st.size > complete_end
        and memory.size > 0
    )
    age = round(meta.now - st.mtime, 1)
    evidence: dict[str, object] = {
        "path": spec.path,
        "last_line": scan.last_line,
        "age_seconds": age,
        "size": st.size,
        "inode": st.inode,
        "mtime": st.mtime,
        "complete_line": complete_line,
        "error_line": scan.error_line,
        "progress": scan.progress,
        "partial_last_line": scan.partial,
        "run_from_offset": memory.run_from,
        "run_bound_by": memory.bound_by,
    }
    if scan.earlier_complete is not None and not accepted_earlier:
        evidence["earlier_complete_line"] = scan.earlier_complete
    if change:
        evidence[change] = True
        if change in ("replaced", "truncated"):
            evidence["rotated" if change == "replaced" else "truncated"] = True
    tail_hex = tail[-FINGERPRINT_BYTES:].hex()
    new_memory = replace(
        memory,
        inode=st.inode,
        size=st.size,
        fingerprint=tail_hex,
        absent=False,
        complete_line=complete_line,
        complete_end=complete_end,
        error_line=scan.error_line,
        earlier_complete=scan.earlier_complete,
    )
    says, detail = _log_says(scan, complete_line, still_writing, memory, age)
    if change:
        detail += f" (log {change} since the last check)"
    return Reading("log", says, detail, evidence, meta.now, host), new_memory


def _log_says(
    scan: _LogScan, complete_line: str | None, still_writing: bool, memory: LogMemory, age: float
) -> tuple[Says, str]:
    if scan.error_line is not None:
        return Says.FAILED, f"error line: {scan.error_line.strip()[:200]}"
    if complete_line is not None and still_writing:
        return (
            Says.WORKING,
            f"completion line seen ({complete_line.strip()[:120]}), but the log is still being"
            " written after it",
        )
    if complete_line is not None:
        return Says.DONE, f"completion line: {complete_line.strip()[:200]}"
    if scan.earlier_complete is not None and memory.before_uncertain:
        why = (
            "no run start is known"
            if memory.bound_by == "watch"
            else "the log was written both before and after the run began, and more since"
        )
        return (
            Says.UNKNOWN,
            f"a completion line is in the log ({scan.earlier_complete.strip()[:120]}) but it may be an"
            f" earlier run's: {why}. Give the run's start (--since TIME|DURATION), watch from"
            " before the job ends, or launch the job through crosscheck (a launch section)",
        )
    earlier = " (the completion line in it is an earlier run's)" if scan.earlier_complete else ""
    return (
        Says.WORKING,
        f"no completion line from this run yet{earlier}; last: {scan.last_line[:160]!r}, {age:.0f}s ago",
    )


@dataclass(frozen=True)
class _LogScan:
    complete_line: str | None
    complete_end: int | None
    error_line: str | None
    earlier_complete: str | None
    earlier_is_last: bool
    progress: dict[str, object] | None
    last_line: str
    partial: bool


def _scan_log(spec: LogSpec, tail: bytes, st: _LogStat, memory: LogMemory) -> _LogScan:
    """The tail's lines, split at ``memory.run_from`` into this run's and those before."""
    tail_start = st.size - len(tail)
    run_from = memory.run_from or 0
    flat = tail.decode("utf-8", "replace").replace("\r", "\n")
    if tail_start > 0:
        flat = flat.split("\n", 1)[1] if "\n" in flat else ""
    raw_lines = tail.split(b"\n")
    partial = bool(raw_lines[-1])
    complete_rx = compile_user_regex(spec.complete)
    error_rx = compile_user_regex(spec.error) if spec.error else None
    complete_line, complete_end = memory.complete_line, memory.complete_end
    error_line = memory.error_line
    earlier, earlier_end = memory.earlier_complete, None
    offset = tail_start
    last_content_end = None
    # One C-speed search over the whole tail (\r as line breaks, MULTILINE) tells whether any
    # line can match; only then are lines examined one by one. A per-line match implies a
    # whole-text match for every pattern but those anchored with \A or \Z.
    if not (_may_match(spec.complete, flat) or _may_match(spec.error, flat)):
        raw_lines = raw_lines[-1:]
    for i, raw in enumerate(raw_lines[:-1]):
        end = offset + len(raw) + 1
        offset = end
        if i == 0 and tail_start > 0:
            continue  # the first line of a tail that starts mid-file is partial
        if raw.strip():
            last_content_end = end
        line = raw.decode("utf-8", "replace")
        clean = line.rstrip("\r")
        # The marker is the last \r-segment of a line: "...\rExtraction complete\n".
        segment = clean.rsplit("\r", 1)[-1]
        if end <= run_from:
            # Ended before this run's first byte: a completion line is noted, never counted.
            if complete_rx.search(segment):
                earlier, earlier_end = segment, end
            continue
        if complete_rx.search(segment):
            complete_line, complete_end = segment, end
            error_line = None  # errors before the completion line were survived
        elif error_rx and error_rx.search(clean):
            error_line = clean
    if raw_lines[-1].strip():
        last_content_end = st.size
    earlier_is_last = earlier_end is not None and earlier_end == last_content_end
    trimmed = flat.rstrip()
    last_line = trimmed[trimmed.rfind("\n") + 1 :].strip()[:300]
    return _LogScan(
        complete_line,
        complete_end,
        error_line,
        earlier,
        earlier_is_last,
        _progress_of(spec, flat),
        last_line,
        partial,
    )


def _may_match(pattern: str | None, flat: str) -> bool:
    if pattern is None:
        return False
    if "\\A" in pattern or "\\Z" in pattern:
        return True
    return compile_user_regex(pattern, multiline=True).search(flat) is not None


def _progress_of(spec: LogSpec, flat: str) -> dict[str, object] | None:
    if not spec.progress or not _may_match(spec.progress, flat):
        return None
    progress_rx = compile_user_regex(spec.progress)
    for seg in reversed(flat.split("\n")):
        m = progress_rx.search(seg)
        if m:
            progress: dict[str, object] = {
                "line": seg.strip()[:200],
                **{k: _num(v) for k, v in m.groupdict().items() if v is not None},
            }
            if not m.groupdict():
                progress["match"] = m.group(0)[:200]
            return progress
    return None


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
    lines_fingerprint: str | None = None  # hex of the bytes before lines_size
    checked_at: float | None = None  # the monitored host's clock at this check
    first_count: int | None = None  # the count at this watch's first reading
    written_this_run: bool = False  # an output written since the run began was seen


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


def _written_since_run(raw: bytes | None) -> bool:
    """Whether the probe found an output modified since the run began."""
    text = (raw or b"").decode("utf-8", "replace")
    return text.startswith("ok") and bool(text[2:].strip())


def read_outputs(
    spec: OutputsSpec,
    sections: Mapping[str, bytes],
    meta: Meta,
    memory: OutputsMemory | None,
    *,
    host: str,
    run_since: float | None = None,
) -> tuple[Reading, OutputsMemory]:
    """Read the outputs signal: the count against the expected number, and stability.

    Outputs may predate the run (resumable jobs skip what exists), so the count stays a
    count; ``written_this_run`` says whether an output was written while the run went on
    (the count moved during this watch, or one is newer than ``run_since``).
    """
    memory = memory or OutputsMemory()
    where = spec.files or spec.lines

    def unknown(why: str) -> tuple[Reading, OutputsMemory]:
        ev = {"path": where, "count": None, "expected": spec.expected}
        return Reading("outputs", Says.UNKNOWN, why, ev, meta.now, host), memory

    evidence: dict[str, object] = {"path": where, "expected": spec.expected}
    written = memory.written_this_run
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
        changed = _recently_modified(sections.get("outputs_recent"), evidence)
        written = written or _written_since_run(sections.get("outputs_run"))
        new_memory = OutputsMemory(count=count, checked_at=meta.now)
    else:
        raw = sections.get("lines")
        if raw is None:
            return unknown("the probe's outputs section is missing")
        text = raw.decode("utf-8", "replace").strip()
        if text in ("missing", "unreadable") or text.startswith("not a regular file"):
            return unknown(f"output file {text}: {spec.lines}")
        if text.startswith("notregular"):
            return unknown(f"output file is not a regular file: {text[11:].strip()} ({spec.lines})")
        try:
            ino_s, size_s, mtime_s, base_s, n_s, tail_hex = text.split()
            inode, size, mtime, base, n = int(ino_s), int(size_s), int(mtime_s), int(base_s), int(n_s)
        except ValueError:
            return unknown(f"record count unreadable: {text[:100]!r}")
        if base == 0 and memory.lines_size > 0 and memory.lines_inode == inode and size >= memory.lines_size:
            # Same inode, not shorter, but the bytes before the last end changed: rewritten in
            # place (truncated and regrown past its old size). Counted again from the start.
            evidence["rewritten"] = True
        previous = (memory.count or 0) if base > 0 else 0
        count = previous + n
        evidence["partial_record"] = tail_hex != "none" and not tail_hex.endswith("0a")
        evidence["size"] = size
        written = written or (run_since is not None and mtime >= run_since)
        new_memory = OutputsMemory(
            count=count,
            lines_inode=inode,
            lines_size=size,
            lines_fingerprint=None if tail_hex == "none" else tail_hex,
            checked_at=meta.now,
        )
        changed = None
        if evidence["partial_record"]:
            changed = "a record is being written (the file does not end with a newline)"
        elif memory.lines_inode is not None and (inode, size) != (memory.lines_inode, memory.lines_size):
            changed = "the file changed since the last check"
    first = memory.first_count if memory.first_count is not None else count
    written = written or count != first
    new_memory = replace(new_memory, first_count=first, written_this_run=written)
    evidence["count"] = count
    evidence["previous_count"] = memory.count
    evidence["written_this_run"] = written
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
