"""A stage over several hosts: one Checker per host (node), read in parallel, one verdict.

Each node is a single-host stage (``Stage.nodes``) checked by its own :class:`Checker` — the
same probe, one round trip per host, the same rules — so a slow or dead host delays no other
beyond the check's deadline, and its failure is that node's ``unknown``, never a dead job.
The verdict across them is ``_verdict.across.decide_across``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sensors._base.model import Verdict
from sensors._base.run import Since
from sensors._check.checker import Checker, Watch
from sensors._config.stage import Stage
from sensors._store import Store
from sensors._verdict.across import AcrossMemory, NodeCheck, decide_across

__all__ = ["AnyChecker", "SpanChecker", "checker_for"]


@dataclass(frozen=True)
class Span:
    """The hosts of a stage over several hosts, as a scheduler groups checks: its own group
    (the nodes' probes are each their host's round trip)."""

    name: str
    stage: str


class SpanChecker:
    """Checks a stage over several hosts: each :meth:`check` checks every node at once and
    returns the one verdict across them (``complete`` only when every host agrees)."""

    def __init__(
        self,
        stage: Stage,
        *,
        since: str | float | Since | None = None,
        state: Store | str | os.PathLike[str] | None = None,
    ) -> None:
        self.stage = stage
        self.nodes = tuple(Checker(node, since=since, state=state) for node in stage.nodes)
        self.host = Span(", ".join(stage.host_labels), stage.stage)
        self.labels = stage.host_labels
        self.lock = threading.Lock()
        self.last: Verdict | None = None
        self._memory = AcrossMemory()
        self._pool = ThreadPoolExecutor(max_workers=min(32, len(self.nodes)), thread_name_prefix="span")

    def followed(self) -> Verdict | None:
        """None: a stage over several hosts is always checked by the watch that asks."""
        return None

    def check(self) -> Verdict:
        """One check of every node, in parallel; the verdict across them."""
        with self.lock:
            verdicts = list(self._pool.map(lambda c: c.check(), self.nodes))
            nodes = [NodeCheck(label, v) for label, v in zip(self.labels, verdicts, strict=True)]
            now = max((v.checked_at for v in verdicts if v.checked_at is not None), default=time.time())
            per_host = self.stage.process.per_host if self.stage.process is not None else None
            verdict, self._memory = decide_across(
                self.stage.stage, nodes, self.stage.policy, per_host, self._memory, now
            )
            if self.last is not None and self.last.state is verdict.state and self.last.since is not None:
                since = self.last.since
            else:
                since = now
            verdict = Verdict(
                stage=verdict.stage,
                state=verdict.state,
                reasons=verdict.reasons,
                readings=verdict.readings,
                checked_at=now,
                host=verdict.host,
                since=since,
                run=verdict.run,
            )
            self.last = verdict
            return verdict

    def watch(
        self,
        *,
        timeout: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> Watch:
        """As :meth:`Checker.watch`: a check every ``policy.interval`` until final or timeout."""
        return Watch.of(self.check, self.stage.policy, timeout=timeout, sleep=sleep, clock=clock)

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        self._pool.shutdown(wait=False)

    def __enter__(self) -> SpanChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def checker_for(
    stage: Stage,
    *,
    since: str | float | Since | None = None,
    state: Store | str | os.PathLike[str] | None = None,
) -> Checker | SpanChecker:
    """The checker of ``stage``: a :class:`Checker` for one host, a :class:`SpanChecker` for
    a stage over several (``hosts:``)."""
    if stage.hosts is not None:
        return SpanChecker(stage, since=since, state=state)
    return Checker(stage, since=since, state=state)


#: What checks a stage: one host's :class:`Checker`, or a :class:`SpanChecker` over several.
AnyChecker = Checker | SpanChecker
