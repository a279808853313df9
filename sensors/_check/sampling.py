"""How many quick checks ``crosscheck status`` takes: as many as the verdict needs, bounded."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sensors._base.model import Reading, Says, State, Verdict
from sensors._check.span import AnyChecker

#: ``status`` stops sampling after this many seconds (and after ``settle + 2`` checks).
STATUS_MAX_SECONDS = 10.0


@dataclass(frozen=True)
class StatusSampling:
    """What ``status`` saw: the last verdict, how many checks over how long, and why it stopped."""

    verdict: Verdict
    checks: int
    seconds: float
    stopped: str

    def summary(self) -> str:
        plural = "s" if self.checks != 1 else ""
        return f"took {self.checks} sample{plural} over {self.seconds:.1f}s ({self.stopped})"

    def to_json(self) -> dict[str, Any]:
        return {"checks": self.checks, "seconds": round(self.seconds, 3), "stopped": self.stopped}


def _settling(r: Reading, remaining: float) -> bool:
    """Whether more quick checks could turn this reading into done (nothing else is waited for).

    Outputs at the expected count say done only once the count is unchanged since the
    previous check (and nothing was written in place): their first reading is "confirming".
    A GPU not yet shown idle (nothing busy) may be within ``remaining`` seconds.
    """
    if r.says is Says.DONE:
        return True
    if r.says is not Says.WORKING:
        return False
    ev = r.evidence
    if r.signal == "outputs":
        count, expected = ev.get("count"), ev.get("expected")
        return isinstance(count, int) and isinstance(expected, int) and count >= expected
    if r.signal == "gpu":
        idle_for, span = ev.get("idle_for_seconds"), ev.get("window_seconds")
        return (
            ev.get("idle") is None
            and isinstance(idle_for, (int, float))
            and isinstance(span, (int, float))
            and idle_for - span <= remaining
        )
    return False


def _why_stop(verdict: Verdict, remaining: float) -> str | None:
    """Why more checks would not change the verdict now (None: they might: keep sampling)."""
    if verdict.state.final:
        return f"{verdict.state.value}: final"
    readings = verdict.readings
    stuck = [r for r in readings.values() if not _settling(r, remaining)]
    if stuck:
        r = stuck[0]
        return f"{r.signal} {r.says.value}: more samples cannot make it complete now"
    if all(r.says is Says.DONE for r in readings.values()) and verdict.state is not State.RUNNING:
        # Every signal done, yet a rule decides otherwise: not a matter of settling.
        return f"every signal done, verdict {verdict.state.value}: more samples would not change it"
    return None


def sample_status(
    checker: AnyChecker,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    max_seconds: float = STATUS_MAX_SECONDS,
) -> StatusSampling:
    """The checks ``status`` takes: as many as the verdict needs, within a bound.

    At least two (CPU progress and a stable output count are seen between two samples);
    then more while every signal is done or only settling -- outputs at the expected count
    confirming they stopped changing, a GPU not yet shown idle for ``idle_for`` -- so that a
    finished stage can reach ``complete`` at its ``settle`` (outputs need ``settle + 1``
    checks: their first has no previous count). It stops as soon as more samples cannot
    change the verdict (complete, failed, the process alive, a signal not settling), and at
    ``settle + 2`` checks or ``max_seconds``. Checks are ``min(policy.interval, 0.5 s)`` apart.

    Example:
        >>> sampling = sample_status(Checker(stage), sleep=lambda s: None)  # doctest: +SKIP
        >>> sampling.summary()  # doctest: +SKIP
        'took 3 samples over 1.0s (complete: final)'
    """
    policy = checker.stage.policy
    most = policy.settle + 2
    pause = min(policy.interval, 0.5)
    start = clock()
    verdict = checker.check()
    took = clock() - start  # the next check is expected to take as long as the last
    checks = 1
    while True:
        elapsed = clock() - start
        left = max_seconds - elapsed - pause - took  # after the next check
        why = _why_stop(verdict, left) if checks >= 2 else None
        if why is None and checks >= most:
            why = f"at the bound of {most} samples (settle {policy.settle} + 2)"
        if why is None and left < 0:
            why = f"at the bound of {max_seconds:g}s"
        if why is not None:
            return StatusSampling(verdict, checks, clock() - start, why)
        sleep(pause)
        began = clock()
        verdict = checker.check()
        took = clock() - began
        checks += 1
