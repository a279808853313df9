"""Rule 16: a stage without a process signal (log, outputs and GPU only)."""

from __future__ import annotations

from collections.abc import Mapping

from sensors._config import PolicySpec
from sensors._model import Reading, Says, State
from sensors._verdict.gone import HOW_TO_TIE, Outcome
from sensors._verdict.progress import Clocks, details, ev


def no_process(readings: Mapping[str, Reading], policy: PolicySpec, clocks: Clocks) -> Outcome:
    """failed > complete (settled; without a log only with an output written during the run)
    > unknown > stalled > running."""
    lg, o = readings.get("log"), readings.get("outputs")
    failed = [r for r in readings.values() if r.says is Says.FAILED]
    if failed:
        return State.FAILED, [f"{r.signal}: {r.detail}" for r in failed]
    if all(r.says is Says.DONE for r in readings.values()):
        if lg is None and not (o is not None and ev(o, "written_this_run")):
            # Outputs may predate the run (resumable jobs skip what exists) and a GPU at rest
            # says nothing of which run: without a log, only an output written during the
            # run ties them to it.
            return State.UNKNOWN, [
                "every signal says done, but nothing ties it to this run: no output was"
                f" written since the run began ({HOW_TO_TIE})",
                *details(readings),
            ]
        return None, []
    unknowns = [r for r in readings.values() if r.says is Says.UNKNOWN]
    if unknowns:
        return State.UNKNOWN, [f"{r.signal} unknown: {r.detail}" for r in unknowns]
    if clocks.idle_for >= policy.stall_after:
        return State.STALLED, [
            f"no progress for {clocks.idle_for:.0f}s (log size, output count unchanged)",
            *details(readings),
        ]
    return State.RUNNING, [
        *(["progress: " + ", ".join(clocks.moved)] if clocks.moved else []),
        *details(readings),
    ]
