"""The verdict: a pure function of this check's readings and what earlier checks saw.

Rules, in order (README has them as a table):

1. The host could not be asked → ``unknown`` (a failed SSH connection is not a dead process).
2. With a process signal:
   - process unknown → ``unknown``.
   - process alive:
     - no progress (CPU time, I/O, log size, output count all unchanged; state D beyond
       ``stuck_in_d_after`` counts as none) for ``stall_after``:
       ``contradiction`` if the log already says complete (completion long after the
       process should have exited), else ``stalled``;
     - otherwise ``running`` — also when the log says "ETA 0" or complete, the outputs
       are all there, or the GPU is idle (incident 2: a CPU phase after the GPU work).
   - process gone:
     - an error line → ``failed``;
     - never seen alive during this watch nor launched by it, and no completion line of
       this run → ``unknown``: not started yet, or a wrong match, is no evidence of an
       exit, and outputs may be an earlier run's;
     - the job's PIDs still busy on a GPU → ``contradiction``;
     - within ``exit_grace`` of the exit, log or outputs lagging → ``unknown`` (buffered
       writes, NFS attribute caching);
     - outputs short → ``failed``; outputs complete but no completion line →
       ``contradiction``; no completion line and no outputs configured → ``failed``;
     - any configured signal unknown → ``unknown``;
     - every signal done → ``complete`` after ``settle`` consecutive checks.
3. Without a process signal: failed > complete (all done, settled; without a log only when
   an output was written during the run, else unknown) > unknown > stalled (no progress
   for ``stall_after``) > running.

``complete`` requires every configured signal to say done; the :class:`Verdict` constructor
refuses anything else, so no rule can advance on a partial picture.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sensors._config import PolicySpec
from sensors._model import Reading, Says, State, Verdict
from sensors._run import Run

#: What a person can do when evidence cannot be tied to the run being watched.
HOW_TO_TIE = (
    "give the run's start with --since TIME|DURATION, watch from before the job ends,"
    " or launch the job through crosscheck (a launch section)"
)


@dataclass(frozen=True)
class VerdictMemory:
    """What the verdict remembers between checks (all times on the monitored host's clock)."""

    previous: Mapping[str, Reading] = field(default_factory=dict)
    last_progress_at: float | None = None
    d_since: float | None = None
    gone_since: float | None = None
    done_streak: int = 0
    state: State | None = None
    state_since: float | None = None


def _ev(r: Reading | None, key: str) -> object:
    return None if r is None else r.evidence.get(key)


def _progress(readings: Mapping[str, Reading], previous: Mapping[str, Reading]) -> list[str]:
    """What moved since the previous check (empty list: nothing did, or no previous)."""
    moved: list[str] = []
    p, pp = readings.get("process"), previous.get("process")
    if p and pp and p.says is Says.WORKING and pp.says is Says.WORKING:
        same_pid = _ev(p, "pid") == _ev(pp, "pid")
        cpu, pcpu = _ev(p, "cpu_seconds"), _ev(pp, "cpu_seconds")
        if same_pid and isinstance(cpu, (int, float)) and isinstance(pcpu, (int, float)) and cpu > pcpu:
            moved.append(f"CPU time +{cpu - pcpu:.2f}s")
        io, pio = _ev(p, "io_bytes"), _ev(pp, "io_bytes")
        if same_pid and isinstance(io, int) and isinstance(pio, int) and io > pio:
            moved.append(f"I/O +{io - pio} bytes")
    lg, plg = readings.get("log"), previous.get("log")
    if (
        lg
        and plg
        and _ev(lg, "size") is not None
        and _ev(plg, "size") is not None
        and (_ev(lg, "size") != _ev(plg, "size") or _ev(lg, "inode") != _ev(plg, "inode"))
    ):
        moved.append("log grew")
    o, po = readings.get("outputs"), previous.get("outputs")
    if (
        o
        and po
        and _ev(o, "count") is not None
        and _ev(po, "count") is not None
        and _ev(o, "count") != _ev(po, "count")
    ):
        moved.append(f"outputs {_ev(po, 'count')} → {_ev(o, 'count')}")
    g = readings.get("gpu")
    if g and g.says is Says.WORKING and _ev(g, "job_gpu_busy") is True:
        # A long kernel with the host thread blocked moves no counter: the job's own GPU
        # work is progress too (only when attributed to its PIDs, not any busy device).
        moved.append("the job's GPU busy")
    return moved


def decide(
    stage: str,
    host: str,
    readings: Mapping[str, Reading],
    policy: PolicySpec,
    memory: VerdictMemory,
    now: float | None,
    *,
    run: Run | None = None,
) -> tuple[Verdict, VerdictMemory]:
    """One verdict from this check's readings and the memory of earlier checks.

    ``run`` (where the watched run begins) is carried into the verdict for the record; the
    readings already hold what ties their evidence to it.
    """
    state, reasons, mem = _rules(readings, policy, memory, now)
    done_all = bool(readings) and all(r.says is Says.DONE for r in readings.values())
    streak = memory.done_streak + 1 if done_all and state is None else 0
    if state is None:
        if done_all and streak >= policy.settle:
            state = State.COMPLETE
            reasons = ["every signal says done", *(r.detail for r in readings.values())]
            if policy.settle > 1:
                reasons.insert(1, f"agreed for {streak} consecutive checks")
        elif done_all:
            state = State.RUNNING
            reasons = [
                f"every signal says done; confirming ({streak}/{policy.settle} checks)",
                *(r.detail for r in readings.values()),
            ]
        else:  # pragma: no cover - _rules returns a state whenever not all are done
            state, reasons = State.UNKNOWN, ["no rule applied"]
    since = memory.state_since if memory.state is state and memory.state_since else now
    verdict = Verdict(
        stage=stage,
        state=state,
        reasons=tuple(reasons),
        readings=readings,
        checked_at=now,
        host=host,
        since=since,
        run=run.to_json() if run is not None else None,
    )
    mem = VerdictMemory(
        previous=dict(readings),
        last_progress_at=mem.last_progress_at,
        d_since=mem.d_since,
        gone_since=mem.gone_since,
        done_streak=streak,
        state=state,
        state_since=since,
    )
    return verdict, mem


def _rules(
    readings: Mapping[str, Reading],
    policy: PolicySpec,
    memory: VerdictMemory,
    now: float | None,
) -> tuple[State | None, list[str], VerdictMemory]:
    """The state (None: every signal says done, let the settle count decide) and reasons."""
    host_errors = [str(r.evidence["host_error"]) for r in readings.values() if "host_error" in r.evidence]
    if host_errors or now is None:
        why = host_errors[0] if host_errors else "the monitored host's clock could not be read"
        return (
            State.UNKNOWN,
            [f"could not read the host: {why}", "nothing is assumed meanwhile"],
            memory,
        )

    p, lg, o, g = (readings.get(n) for n in ("process", "log", "outputs", "gpu"))
    moved = _progress(readings, memory.previous)
    first = not memory.previous
    last_progress = now if (moved or first or memory.last_progress_at is None) else memory.last_progress_at

    d_since = memory.d_since
    in_d = p is not None and p.says is Says.WORKING and _ev(p, "state") == "D"
    d_since = (d_since or now) if in_d else None
    stuck_d = in_d and d_since is not None and now - d_since >= policy.stuck_in_d_after
    if stuck_d:
        # Uninterruptible sleep this long is the kernel's hung-task territory: it does not
        # count as progress, whatever counters moved (the Ceph hang in incident 2).
        last_progress = memory.last_progress_at if memory.last_progress_at is not None else now
    idle_for = now - last_progress
    gone_since = memory.gone_since
    if p is not None and p.says is Says.DONE:
        gone_since = gone_since or now
    elif p is not None and p.says is Says.WORKING:
        gone_since = None
    mem = VerdictMemory(
        previous=memory.previous,
        last_progress_at=last_progress,
        d_since=d_since,
        gone_since=gone_since,
        done_streak=memory.done_streak,
        state=memory.state,
        state_since=memory.state_since,
    )
    gpu_job_pids = list(_ev(g, "job_pids_on_gpu") or []) if g else []
    gpu_job_busy = bool(_ev(g, "job_gpu_busy")) if g else False

    if p is not None:
        if p.says is Says.UNKNOWN:
            reasons = [f"process unknown: {p.detail}"]
            if lg is not None and lg.says is Says.FAILED:
                reasons.append(
                    f"the log shows an error, but whether the job still runs is unknown: {lg.detail}"
                )
            return State.UNKNOWN, reasons, mem
        if p.says is Says.WORKING:
            state, reasons = _alive(p, lg, o, g, moved, idle_for, stuck_d, policy, gpu_job_pids)
            return state, reasons, mem
        # The process is gone.
        gone_for = now - (gone_since or now)
        if lg is not None and lg.says is Says.FAILED:
            return State.FAILED, [f"process gone: {p.detail}", f"log: {lg.detail}"], mem
        if gpu_job_pids:
            # Gone (or a zombie) yet its PIDs still hold a GPU context: the process table and
            # the driver disagree. Busy or merely holding memory, it is not a clean exit.
            held = "busy on" if gpu_job_busy else "holding memory on"
            return (
                State.CONTRADICTION,
                [
                    f"process says gone: {p.detail}",
                    f"but the job's PIDs {gpu_job_pids} are still {held} the GPU: {g.detail if g else ''}",
                ],
                mem,
            )
        others = [r for r in readings.values() if r is not p]
        if not (_ev(p, "seen_alive") or _ev(p, "launched")) and not (lg is not None and lg.says is Says.DONE):
            # Never seen alive in this watch, nor launched by it: not started yet, or a match
            # that matches nothing. Neither is evidence that the job ran and exited, and
            # without this run's completion line, outputs may be an earlier run's.
            return (
                State.UNKNOWN,
                [
                    f"no process found and none seen alive during this watch: {p.detail}",
                    "not started yet, or process.match/pid is wrong; nothing else ties the"
                    f" evidence to this run ({HOW_TO_TIE})",
                    *(f"{r.signal}: {r.detail}" for r in others),
                ],
                mem,
            )
        unknowns = [r for r in readings.values() if r.says is Says.UNKNOWN]
        # Lagging: no completion line yet, or outputs short. (Outputs all there but being
        # confirmed stable is not lagging: the settle count handles it.)
        lagging = [r for r in (lg, o) if r is not None and r.says is Says.WORKING and (r is lg or _short(r))]
        if lagging and gone_for < policy.exit_grace:
            return (
                State.UNKNOWN,
                [
                    f"process gone: {p.detail}",
                    *(f"{r.signal}: {r.detail}" for r in lagging),
                    f"waiting up to {policy.exit_grace:.0f}s after the exit for writes to land"
                    f" ({gone_for:.0f}s so far)",
                ],
                mem,
            )
        if o is not None and o.says is Says.WORKING and _short(o):
            return State.FAILED, [f"process gone: {p.detail}", f"outputs short: {o.detail}"], mem
        if lg is not None and lg.says is Says.WORKING:
            if o is not None and o.says is Says.DONE:
                return (
                    State.CONTRADICTION,
                    [
                        f"process gone: {p.detail}",
                        f"outputs complete: {o.detail}",
                        f"but the log has no completion line: {lg.detail}",
                    ],
                    mem,
                )
            if o is None:
                return (
                    State.FAILED,
                    [
                        f"process gone: {p.detail}",
                        f"and the log has no completion line: {lg.detail}",
                    ],
                    mem,
                )
        if unknowns:
            return State.UNKNOWN, [f"{r.signal} unknown: {r.detail}" for r in unknowns], mem
        not_done = [r for r in readings.values() if r.says is not Says.DONE]
        if not_done:
            return (
                State.RUNNING,
                [f"process gone: {p.detail}", *(f"{r.signal}: {r.detail}" for r in not_done)],
                mem,
            )
        return None, [], mem

    # No process signal: log, outputs and GPU only.
    failed = [r for r in readings.values() if r.says is Says.FAILED]
    if failed:
        return State.FAILED, [f"{r.signal}: {r.detail}" for r in failed], mem
    if all(r.says is Says.DONE for r in readings.values()):
        if lg is None and not (o is not None and _ev(o, "written_this_run")):
            # Outputs may predate the run (resumable jobs skip what exists) and a GPU at rest
            # says nothing of which run: without a log, only an output written during the
            # run ties them to it.
            return (
                State.UNKNOWN,
                [
                    "every signal says done, but nothing ties it to this run: no output was"
                    f" written since the run began ({HOW_TO_TIE})",
                    *_details(readings),
                ],
                mem,
            )
        return None, [], mem
    unknowns = [r for r in readings.values() if r.says is Says.UNKNOWN]
    if unknowns:
        return State.UNKNOWN, [f"{r.signal} unknown: {r.detail}" for r in unknowns], mem
    if idle_for >= policy.stall_after:
        return (
            State.STALLED,
            [
                f"no progress for {idle_for:.0f}s (log size, output count unchanged)",
                *_details(readings),
            ],
            mem,
        )
    return (
        State.RUNNING,
        [*(["progress: " + ", ".join(moved)] if moved else []), *_details(readings)],
        mem,
    )


def _short(o: Reading) -> bool:
    count, expected = _ev(o, "count"), _ev(o, "expected")
    return isinstance(count, int) and isinstance(expected, int) and count < expected


def _details(readings: Mapping[str, Reading]) -> list[str]:
    return [f"{r.signal}: {r.detail}" for r in readings.values()]


def _alive(
    p: Reading,
    lg: Reading | None,
    o: Reading | None,
    g: Reading | None,
    moved: list[str],
    idle_for: float,
    stuck_d: bool,
    policy: PolicySpec,
    gpu_job_pids: list[int],
) -> tuple[State, list[str]]:
    """The process is alive: running, stalled, or a completion that never let go."""
    reasons = [f"process alive: {p.detail}"]
    if stuck_d:
        reasons.append(
            f"in state D (uninterruptible I/O) for over {policy.stuck_in_d_after:.0f}s:"
            " not counted as progress"
        )
        if gpu_job_pids:
            reasons.append(f"while its PIDs {gpu_job_pids} hold GPU memory: {g.detail if g else ''}")
    if idle_for >= policy.stall_after:
        if lg is not None and lg.says is Says.DONE:
            return State.CONTRADICTION, [
                *reasons,
                f"the log says complete ({lg.detail}) but the process has made no progress"
                f" for {idle_for:.0f}s and has not exited",
            ]
        return State.STALLED, [
            *reasons,
            f"no progress for {idle_for:.0f}s (CPU time, I/O, log size, output count unchanged;"
            f" stall_after {policy.stall_after:.0f}s)",
            *(f"{r.signal}: {r.detail}" for r in (lg, o, g) if r is not None),
        ]
    if moved:
        reasons.append("progress: " + ", ".join(moved))
    elif not stuck_d:
        reasons.append(f"no progress seen for {idle_for:.0f}s (stall after {policy.stall_after:.0f}s)")
    # The tempting wrong answers of incident 2, each named so the reader sees why not.
    if lg is not None and lg.says is Says.DONE:
        reasons.append(f"the log says complete, but the process is still at work: {lg.detail}")
    elif lg is not None and lg.says is Says.FAILED:
        reasons.append(f"the log shows an error while the process still runs: {lg.detail}")
    elif lg is not None:
        reasons.append(f"log: {lg.detail}")
    if o is not None:
        reasons.append(
            f"outputs: {o.detail}" + (" — but the process has not exited" if o.says is Says.DONE else "")
        )
    if g is not None:
        if g.says is Says.DONE:
            reasons.append(f"GPU idle while the process works (a CPU phase): {g.detail}")
        else:
            reasons.append(f"gpu: {g.detail}")
    return State.RUNNING, reasons
