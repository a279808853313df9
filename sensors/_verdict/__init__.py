"""The verdict: a pure function of this check's readings and what earlier checks saw.

:func:`decide` applies the rules of docs/verdict.md's table, first that applies wins: the
host unknown (1) here, a supervisor's record (S1-S3: :mod:`~sensors._verdict.supervised`),
the process signal unknown (2), then by what the process signal says —
:mod:`~sensors._verdict.alive` (rules 3-5, the process alive), :mod:`~sensors._verdict.gone`
(6-15, gone), :mod:`~sensors._verdict.no_process` (16, no process signal) — with
:mod:`~sensors._verdict.progress` for what moved between two checks; each rule is labelled
with its number where it is written. ``complete`` requires every configured signal to say done; the
:class:`Verdict` constructor refuses anything else, so no rule can advance on a partial
picture.

May import :mod:`sensors._base`, :mod:`sensors._run` and :mod:`sensors._config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sensors._base.model import Reading, Says, State, Verdict
from sensors._config.stage import PolicySpec
from sensors._run.run import LaunchEnd, Run, describe_exit
from sensors._verdict.alive import alive
from sensors._verdict.gone import HOW_TO_TIE, gone
from sensors._verdict.no_process import no_process
from sensors._verdict.progress import Clocks, clocks
from sensors._verdict.stuck import stuck
from sensors._verdict.supervised import supervised

__all__ = ["HOW_TO_TIE", "VerdictMemory", "decide"]


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


def decide(
    stage: str,
    host: str,
    readings: Mapping[str, Reading],
    policy: PolicySpec,
    memory: VerdictMemory,
    now: float | None,
    *,
    run: Run | None = None,
    launch: LaunchEnd | None = None,
    takes_since: bool = True,
) -> tuple[Verdict, VerdictMemory]:
    """One verdict from this check's readings and the memory of earlier checks.

    ``run`` (where the watched run begins) is carried into the verdict for the record; the
    readings already hold what ties their evidence to it. ``launch``: how a launched job
    ended, for a stage without a process signal (with one, its reading carries it).
    ``takes_since``: whether the watch can be given a run start (advice names one only then).
    """
    state, reasons, kept = _rules(readings, policy, memory, now, launch, run, takes_since)
    last_progress_at, d_since, gone_since = kept
    done_all = state is None and bool(readings) and all(r.says is Says.DONE for r in readings.values())
    streak = memory.done_streak + 1 if done_all else 0
    if state is None:
        state, reasons = _settle(readings, policy, streak)
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
        # An unknown that no later reading of this run can make complete says so at once.
        stuck=stuck(
            state,
            readings,
            run,
            gone_for=now - gone_since if now is not None and gone_since is not None else 0.0,
            grace=policy.exit_grace,
            takes_since=takes_since,
        ),
    )
    new_memory = VerdictMemory(
        previous=verdict.readings,  # the verdict's own copy: read-only, kept as the memory's
        last_progress_at=last_progress_at,
        d_since=d_since,
        gone_since=gone_since,
        done_streak=streak,
        state=state,
        state_since=since,
    )
    return verdict, new_memory


def _settle(readings: Mapping[str, Reading], policy: PolicySpec, streak: int) -> tuple[State, list[str]]:
    """Every signal says done: ``complete`` once they agreed for ``settle`` checks."""
    if not all(r.says is Says.DONE for r in readings.values()):  # pragma: no cover - a rule applies
        return State.UNKNOWN, ["no rule applied"]
    if streak >= policy.settle:
        reasons = ["every signal says done", *(r.detail for r in readings.values())]
        if policy.settle > 1:
            reasons.insert(1, f"agreed for {streak} consecutive checks")
        return State.COMPLETE, reasons
    return State.RUNNING, [
        f"every signal says done; confirming ({streak}/{policy.settle} checks)",
        *(r.detail for r in readings.values()),
    ]


def _rules(
    readings: Mapping[str, Reading],
    policy: PolicySpec,
    memory: VerdictMemory,
    now: float | None,
    launch: LaunchEnd | None = None,
    run: Run | None = None,
    takes_since: bool = True,
) -> tuple[State | None, list[str], tuple[float | None, float | None, float | None]]:
    """The state (None: every signal says done, let the settle count decide), its reasons,
    and this check's clocks to remember (last progress, in D since, gone since)."""
    # Rule 1: the host could not be asked.
    host_errors = [str(r.evidence["host_error"]) for r in readings.values() if "host_error" in r.evidence]
    if host_errors or now is None:
        why = host_errors[0] if host_errors else "the monitored host's clock could not be read"
        kept = (memory.last_progress_at, memory.d_since, memory.gone_since)
        return State.UNKNOWN, [f"could not read the host: {why}", "nothing is assumed meanwhile"], kept
    c = clocks(
        readings, memory.previous, policy, memory.last_progress_at, memory.d_since, memory.gone_since, now
    )
    state, reasons = _by_process(readings, policy, c, launch, run, takes_since)
    return state, reasons, (c.last_progress_at, c.d_since, c.gone_since)


def _by_process(
    readings: Mapping[str, Reading],
    policy: PolicySpec,
    c: Clocks,
    launch: LaunchEnd | None = None,
    run: Run | None = None,
    takes_since: bool = True,
) -> tuple[State | None, list[str]]:
    p, lg = readings.get("process"), readings.get("log")
    by_record = supervised(readings, stalled=c.idle_for >= policy.stall_after)
    if by_record is not None:
        return by_record
    if p is None:
        return no_process(readings, policy, c, launch, run, takes_since=takes_since)
    if p.says is Says.UNKNOWN:
        if launch is not None and launch.status is not None and launch.status != 0:
            # The launched job's own recorded failure (a record of the user's own): failed,
            # whether or not this probe can see what it left behind.
            failure = f"launched job: {describe_exit(launch.status)}"
            return State.FAILED, [failure, f"process unknown: {p.detail}"]
        # Rule 2: whether the job still runs is unknown.
        reasons = [f"process unknown: {p.detail}"]
        if lg is not None and lg.says is Says.FAILED:
            reasons.append(f"the log shows an error, but whether the job still runs is unknown: {lg.detail}")
        return State.UNKNOWN, reasons
    if p.says is Says.WORKING:
        return alive(readings, policy, c)
    return gone(readings, policy, c, run, takes_since=takes_since)
