"""How the scheduler checks a stage over several hosts (issue 25): each node in its host's
batch with that host's own stages, the check begun once and finished by the last node back,
the hosts on the stage's phase. The batch and the span's two halves are recorded here; the
real probes, sshd hosts and verdicts are tests/test_span.py's (which counts the round trips
on the hosts themselves)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from sensors import Checker, LocalHost, stage_from_dict
from sensors._check.span import Span, SpanChecker
from sensors._watch.schedule import Scheduler


class _Host(LocalHost):
    """A host that is never probed here: the batch is recorded instead."""


def _stage(name: str, interval: str = "1s") -> Any:
    return stage_from_dict(
        {"stage": name, "process": {"match": f"never-{name} "}, "policy": {"interval": interval}}
    )


class _Span(SpanChecker):
    """A stage over ``hosts`` whose halves are recorded: ``followed`` (None: probe) is what
    :meth:`begin` gives; :meth:`finish` returns the nodes' answers joined."""

    def __init__(
        self, name: str, hosts: list[_Host], followed: Any = None
    ) -> None:  # no super: no Stage of hosts
        self.stage = _stage(name)
        self.nodes = tuple(Checker(_stage(f"{name}-node{k}"), host=h) for k, h in enumerate(hosts))
        self.probes = self.nodes
        self.host = Span(", ".join(h.name for h in hosts), name)
        self.lock = threading.Lock()
        self._persist = None
        self.followed_verdict = followed
        self.begun = self.finished = self.abandoned = 0

    def begin(self) -> Any:
        assert self.lock.acquire(blocking=False), "begun twice at once"
        self.begun += 1
        if self.followed_verdict is not None:
            self.lock.release()
        return self.followed_verdict

    def finish(self, verdicts: Sequence[Any]) -> Any:
        self.finished += 1
        self.lock.release()
        return "across:" + "+".join(verdicts)

    def abandon(self) -> None:
        self.abandoned += 1
        self.lock.release()

    def close(self) -> None:
        pass


class _Batches:
    """The batch function: each call's stages (by stage name), and an answer per stage."""

    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self, checkers: list[Checker]) -> list[Any]:
        host = checkers[0].host.name
        with self.lock:
            self.calls.append((host, [c.stage.stage for c in checkers]))
        if host == self.fail:
            raise OSError(f"{host}: the batch failed")
        return [f"{c.stage.stage}@{host}" for c in checkers]


def _run(scheduler: Scheduler, seconds: float, **kwargs: Any) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []

    def record(key: str, verdict: Any, began: float) -> float:
        seen.append((key, verdict))
        return began + 1.0

    stop = threading.Event()
    timer = threading.Timer(seconds, stop.set)
    timer.start()
    try:
        scheduler.run(stop, on_verdict=record, **kwargs)
    finally:
        timer.cancel()
    return seen


@pytest.mark.parametrize("phased", [True, False], ids=["serve", "wait"])
def test_each_node_is_read_in_its_hosts_batch_with_the_hosts_own_stages(phased: bool) -> None:
    a, b = _Host("a"), _Host("b")
    span = _Span("train", [a, b])
    batches = _Batches()
    scheduler = Scheduler(batch=batches, phased=phased)
    scheduler.add("own-a", Checker(_stage("own-a"), host=a))  # added first: a's own phase, then the span's
    scheduler.add("train", span)
    scheduler.add("own-b", Checker(_stage("own-b"), host=b))
    if phased:
        assert scheduler.due("own-b") == scheduler.due("train")  # b is on the span's phase at once
    seen = _run(scheduler, 3.5)
    rounds = [v for k, v in seen if k == "train"]
    assert len(rounds) >= 3, seen
    assert set(rounds) == {"across:train-node0@a+train-node1@b"}  # each node's answer, in order
    assert span.begun == span.finished == len(rounds) and span.abandoned == 0
    # One batch per host and cycle: the node with the host's own stage (after a first cycle
    # at most, where a's own stage was due at a's phase of its own).
    for host, own in (("a", "own-a"), ("b", "own-b")):
        calls = [stages for h, stages in batches.calls if h == host]
        assert len(calls) <= len(rounds) + 1, calls
        assert (
            sum(1 for stages in calls if sorted(stages) == sorted([own, f"train-node{'ab'.index(host)}"]))
            >= len(rounds) - 1
        ), calls


def test_a_stage_another_watch_holds_is_followed_and_its_nodes_are_not_probed() -> None:
    a, b = _Host("a"), _Host("b")
    span = _Span("train", [a, b], followed="followed")
    batches = _Batches()
    scheduler = Scheduler(batch=batches, phased=True)
    scheduler.add("train", span)
    scheduler.add("own-a", Checker(_stage("own-a"), host=a))
    seen = _run(scheduler, 2.5)
    assert {v for k, v in seen if k == "train"} == {"followed"}
    assert span.begun >= 2 and span.finished == span.abandoned == 0
    assert all(stages == ["own-a"] for _, stages in batches.calls), batches.calls  # no node probed


def test_a_batch_that_raised_ends_the_round_with_its_error() -> None:
    a, b = _Host("a"), _Host("b")
    span = _Span("train", [a, b])
    scheduler = Scheduler(batch=_Batches(fail="b"), phased=True)
    scheduler.add("train", span)
    scheduler.add("own-b", Checker(_stage("own-b"), host=b))
    scheduler.add("own-a", Checker(_stage("own-a"), host=a))
    errors: list[tuple[list[str], str]] = []

    def on_error(keys: list[str], exc: Exception) -> float:
        errors.append((sorted(keys), str(exc)))
        return time.monotonic() + 1.0

    seen = _run(scheduler, 2.5, on_error=on_error)
    assert not [v for k, v in seen if k == "train"], seen  # no verdict across hosts without b
    assert (["train"], "b: the batch failed") in errors and (["own-b"], "b: the batch failed") in errors
    assert {k for k, _ in seen} == {"own-a"}  # host a's own stage is not held up by b
    assert span.abandoned == span.begun >= 2 and span.finished == 0
    assert not span.lock.locked()


def test_hosts_linked_by_stages_over_several_share_one_phase_whatever_the_order() -> None:
    """Two stages over several hosts sharing host b: a, b and c take one phase, the least
    stage's by name, added in either order (the same in every process)."""
    dues = []
    for order in ((0, 1), (1, 0)):
        a, b, c = _Host("a"), _Host("b"), _Host("c")
        spans = [_Span("s1", [a, b]), _Span("s2", [b, c])]
        scheduler = Scheduler(batch=_Batches(), phased=True)
        scheduler.add("own-c", Checker(_stage("own-c"), host=c))
        for k in order:
            scheduler.add(spans[k].stage.stage, spans[k])
        scheduler.add("own-a", Checker(_stage("own-a"), host=a))
        assert scheduler.due("own-a") == scheduler.due("s1")
        phases = {scheduler._phase(key) for key in (a, b, c, spans[0].host, spans[1].host)}
        assert len(phases) == 1, phases
        dues.append(phases.pop())
    assert dues[0] == dues[1]
