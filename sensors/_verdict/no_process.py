"""Rule 16: a stage without a process signal (log, outputs and GPU only)."""

from __future__ import annotations

from collections.abc import Mapping

from sensors._base.model import Reading, Says, State
from sensors._config.stage import PolicySpec
from sensors._run.run import LaunchEnd, Run, describe_exit
from sensors._verdict.gone import Outcome, how_to_tie
from sensors._verdict.progress import Clocks, details, ev
from sensors._verdict.stuck import had_of
from sensors._verdict.supervised import recorded_exit_ok


def no_process(
    readings: Mapping[str, Reading],
    policy: PolicySpec,
    clocks: Clocks,
    launch: LaunchEnd | None = None,
    run: Run | None = None,
    *,
    takes_since: bool = True,
) -> Outcome:
    """failed > complete (settled; without a log only with an output written during the run)
    > unknown > stalled > running. A launched job's end, as its wrapper recorded it, counts
    as the process signal's would (rules 7b, 7c): a status other than 0 is a failure; a
    wrapper gone without a record was killed with the job, and how it ended cannot be told;
    with no record yet, the job has not ended (its wrapper writes one the moment it does):
    every signal saying done is not complete before it; nor with a record another user could
    have written (not read: its end is not known)."""
    lg, o = readings.get("log"), readings.get("outputs")
    failed = [f"{r.signal}: {r.detail}" for r in readings.values() if r.says is Says.FAILED]
    if launch is not None and launch.status is not None and launch.status != 0:
        failed.insert(0, f"launched job: {describe_exit(launch.status)}")
    if failed:
        return State.FAILED, failed
    if launch is not None and launch.killed_unrecorded:
        return State.UNKNOWN, [
            "the launched job's wrapper is gone without recording an exit status (killed with the"
            " job?): how the job ended cannot be told",
            *details(readings),
        ]
    if all(r.says is Says.DONE for r in readings.values()):
        if launch is not None and launch.untrusted:
            # A record another user could have written says nothing of the job's end.
            return State.RUNNING if launch.alive else State.UNKNOWN, [
                f"every signal says done, but the launched job's exit record is {launch.untrusted}",
                *details(readings),
            ]
        if launch is not None and launch.unreadable:
            # Nor one the probe cannot read: the launched run may have failed, and what says
            # done may be a later run's work (fuzzer seed 4001078: run 1 launched and exited
            # 1, run 2 started by hand wrote every output; a probe as another user completed).
            return State.RUNNING if launch.alive else State.UNKNOWN, [
                "every signal says done, but the launched job's exit record cannot be read by the"
                " probe's user (the launcher's own directory): whether it ended, how, and whether"
                " what says done is its own work cannot be told",
                *details(readings),
            ]
        if launch is not None and launch.missing:
            why = (
                "its launch wrapper is at work and has recorded no exit status"
                if launch.alive
                else "no exit status is recorded and whether its launch wrapper is at work cannot"
                " be seen from this probe"
            )
            state = State.RUNNING if launch.alive else State.UNKNOWN
            return state, [
                f"every signal says done, but the launched job has not ended: {why}",
                *details(readings),
            ]
        if (
            lg is None
            and not (o is not None and ev(o, "written_this_run"))
            and not recorded_exit_ok(readings)
            and not (launch is not None and launch.status == 0)
        ):
            # Outputs may predate the run (resumable jobs skip what exists) and a GPU at rest
            # says nothing of which run: without a log, only an output written during the
            # run, or this run's own exit 0 on record (a supervisor's, or its launch
            # wrapper's: a resumable re-run that found every output there and skipped it,
            # fuzzer seed 4000781), ties them to it.
            had = had_of(readings, run, takes_since=takes_since)
            return State.UNKNOWN, [
                "every signal says done, but nothing ties it to this run: no output was"
                f" written since the run began ({how_to_tie(had)})",
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
