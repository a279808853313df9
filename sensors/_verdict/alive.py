"""Rules 3-5: the process is alive — running, stalled, or a completion that never let go."""

from __future__ import annotations

from collections.abc import Mapping

from sensors._base.model import Reading, Says, State
from sensors._config.stage import PolicySpec
from sensors._verdict.progress import Clocks, ev


def alive(readings: Mapping[str, Reading], policy: PolicySpec, clocks: Clocks) -> tuple[State, list[str]]:
    p, lg, o, g = (readings.get(n) for n in ("process", "log", "outputs", "gpu"))
    assert p is not None
    reasons = [f"process alive: {p.detail}"]
    if clocks.stuck_d:
        reasons.append(
            f"in state D (uninterruptible I/O) for over {policy.stuck_in_d_after:.0f}s:"
            " not counted as progress"
        )
        gpu_job_pids = list(ev(g, "job_pids_on_gpu") or []) if g else []  # type: ignore[call-overload]
        if gpu_job_pids:
            reasons.append(f"while its PIDs {gpu_job_pids} hold GPU memory: {g.detail if g else ''}")
    idle_for = clocks.idle_for
    # The reason that decided comes first: events, the terminal's headline and the logs show
    # the first reason alone ("why stalled", not "process alive").
    if idle_for >= policy.stall_after:
        # Rule 3: no progress for stall_after, the log already complete: complete long ago
        # but never exited.
        if lg is not None and lg.says is Says.DONE:
            return State.CONTRADICTION, [
                f"the log says complete ({lg.detail}) but the process has made no progress"
                f" for {idle_for:.0f}s and has not exited",
                *reasons,
            ]
        # Rule 4: no progress for stall_after.
        return State.STALLED, [
            f"no progress for {idle_for:.0f}s ({_unchanged(readings, clocks)};"
            f" stall_after {policy.stall_after:.0f}s)",
            *reasons,
            *(f"{r.signal}: {r.detail}" for r in (lg, o, g) if r is not None),
        ]
    # Rule 5: running — also with "ETA 0", every output present, a completion line, or an
    # idle GPU (incident 2: a CPU phase after the GPU work).
    if clocks.moved:
        reasons.append("progress: " + ", ".join(clocks.moved))
    elif clocks.started:
        # Not "no progress seen for 0s": nothing was compared (notes/ml44.md, item 8).
        reasons.append(
            f"progress not measured yet: no earlier check to compare with (stall after"
            f" {policy.stall_after:.0f}s)"
        )
    elif not clocks.stuck_d:
        reasons.append(f"no progress seen for {idle_for:.0f}s (stall after {policy.stall_after:.0f}s)")
    return State.RUNNING, [*reasons, *_tempting_wrong_answers(lg, o, g, clocks.moved)]


def _unchanged(readings: Mapping[str, Reading], clocks: Clocks) -> str:
    """What did not move, in the words of the progress rule (``progress.progress``): only
    the signals this stage has; in long state D, that nothing counts, not "unchanged"."""
    if clocks.stuck_d:
        return "in state D, what moved is not counted"
    parts = ["CPU time", "I/O"] if "process" in readings else []
    parts += [what for name, what in (("log", "log size"), ("outputs", "output count")) if name in readings]
    said = ", ".join(parts) + " unchanged"
    if "gpu" in readings:
        said += "; the job's GPU not busy"
    return said


def _tempting_wrong_answers(
    lg: Reading | None, o: Reading | None, g: Reading | None, moved: list[str]
) -> list[str]:
    """Incident 2's wrong answers, each named so the reader sees why not. Work is claimed
    only where this check measured it (``moved``): alive is not at work, and a CPU phase
    is CPU time that rose."""
    at_work = bool(moved)
    cpu_phase = any(m.startswith("CPU time") for m in moved)
    reasons = []
    if lg is not None and lg.says is Says.DONE:
        if at_work:
            reasons.append(f"the log says complete, but the process is still at work: {lg.detail}")
        else:
            reasons.append(f"the log says complete, but the process has not exited: {lg.detail}")
    elif lg is not None and lg.says is Says.FAILED:
        reasons.append(f"the log shows an error while the process still runs: {lg.detail}")
    elif lg is not None:
        reasons.append(f"log: {lg.detail}")
    if o is not None:
        reasons.append(
            f"outputs: {o.detail}" + (" — but the process has not exited" if o.says is Says.DONE else "")
        )
    if g is not None:
        if g.says is Says.DONE and cpu_phase:
            reasons.append(f"GPU idle while the process works (a CPU phase): {g.detail}")
        elif g.says is Says.DONE:
            reasons.append(f"GPU idle while the process is alive: {g.detail}")
        else:
            reasons.append(f"gpu: {g.detail}")
    return reasons
