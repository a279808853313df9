"""An adversary's review of issue 25's scheduling (commit 471affa): a stage over several hosts
whose nodes are read in their hosts' batches. Where the scheduler's logic is the subject, the
batch and the span's halves are recorded (tests/test_schedule_span.py's fakes); elsewhere the
hosts are real sshd hosts on 127.0.0.1 (tests/test_span.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from sensors import Checker
from sensors._check.span import Span, SpanChecker
from sensors._watch.schedule import Scheduler
from tests.test_schedule_span import _Host, _Span, _stage


def test_a_stage_over_two_busy_hosts_is_not_held_for_ever_by_their_own_stages() -> None:
    """per_host 1, each host busy in turn with a stage of its own (a probe longer than its
    interval, the two out of step): the stage over both hosts found one of them full at every
    turn, while each host's own stage took the probe that had just ended there. It was never
    checked (before issue 25 it was a group of its own)."""
    a, b = _Host("a"), _Host("b")
    span = _Span("train", [a, b])

    def batch(checkers: list[Checker]) -> list[Any]:
        time.sleep(0.3)
        host = checkers[0].host.name
        return [f"{c.stage.stage}@{host}" for c in checkers]

    scheduler = Scheduler(batch=batch, per_host=1)
    now = time.monotonic()
    scheduler.add("own-a", Checker(_stage("own-a", "0.1s"), host=a), due=now)
    scheduler.add("own-b", Checker(_stage("own-b", "0.1s"), host=b), due=now + 0.15)
    scheduler.add("train", span, due=now + 0.05)
    seen: list[tuple[str, Any]] = []

    def record(key: str, verdict: Any, began: float) -> float:
        seen.append((key, verdict))
        return began + 0.1

    stop = threading.Event()
    timer = threading.Timer(3.0, stop.set)
    timer.start()
    try:
        scheduler.run(stop, on_verdict=record)
    finally:
        timer.cancel()
    rounds = [v for k, v in seen if k == "train"]
    assert rounds, seen  # checked, within a few probes of its hosts
    assert set(rounds) == {"across:train-node0@a+train-node1@b"}
    assert {"own-a", "own-b"} <= {k for k, _ in seen}  # and the hosts' own stages still are
    assert not span.lock.locked()


def test_a_run_ended_by_an_error_leaves_no_stage_over_several_hosts_locked() -> None:
    """A host key error on a third host ends the run while a stage over two hosts is half
    read: its first host's batch began it (the span locked), its second host's batch was
    still waiting for a worker and was cancelled. Nothing finished or abandoned the check:
    the span stayed locked, and the next check of it (a watch run again after the host key was
    fixed) waited for ever."""
    from sensors._base.errors import HostKeyError

    a, b, c, d = _Host("a"), _Host("b"), _Host("c"), _Host("d")
    span = _Span("train", [a, b])

    def batch(checkers: list[Checker]) -> list[Any]:
        host = checkers[0].host.name
        if host == "c":
            time.sleep(0.1)  # then a's batch takes this worker
            raise HostKeyError("host key changed", host="c")
        time.sleep(0.5)
        return [f"{c.stage.stage}@{host}" for c in checkers]

    scheduler = Scheduler(batch=batch, workers=2)  # c's and d's batches; then a's, b's waits
    now = time.monotonic()
    scheduler.add("own-c", Checker(_stage("own-c"), host=c), due=now)
    scheduler.add("own-d", Checker(_stage("own-d"), host=d), due=now)
    scheduler.add("train", span, due=now)
    with pytest.raises(HostKeyError):
        scheduler.run(threading.Event(), on_verdict=lambda key, verdict, began: began + 1.0)
    assert span.begun == 1  # a's batch began it: the case this test is about
    assert not span.lock.locked()
    assert span.abandoned == 1 and span.finished == 0


class _Halves(SpanChecker):
    """A stage over ``hosts`` checked by SpanChecker's own halves (``begin`` takes its lock
    and waits for it, as the real one does); nothing followed, nothing stored."""

    def __init__(self, hosts: list[_Host]) -> None:  # no super: no Stage of hosts
        self.stage = _stage("train")
        self.nodes = tuple(Checker(_stage(f"train-node{k}"), host=h) for k, h in enumerate(hosts))
        self.probes = self.nodes
        self.host = Span(", ".join(h.name for h in hosts), "train")
        self.lock = threading.Lock()
        self._persist = None

    def followed(self) -> Any:
        return None

    def _combine(self, verdicts: Any) -> Any:
        return "across:" + "+".join(verdicts)

    def save(self, verdict: Any) -> Any:
        return verdict


def test_one_stage_over_several_hosts_watched_under_two_keys_does_not_hang_the_run() -> None:
    """The same SpanChecker twice (``watch_all([span, span])``, or added under a second key):
    both due at once, each node's batch held both checks; the first batch began the first
    and waited in the second's ``begin`` for the span's lock, which the first held until its
    other batch was back, and that batch waited for the second check's begin: every batch
    stuck, and the run with them (before issue 25 each check was its own, one after the
    other)."""
    a, b = _Host("a"), _Host("b")
    span = _Halves([a, b])
    scheduler = Scheduler(batch=lambda checkers: [f"{c.stage.stage}" for c in checkers])
    scheduler.add("0", span)
    scheduler.add("1", span)
    seen: list[tuple[str, Any]] = []

    def record(key: str, verdict: Any, began: float) -> float | None:
        seen.append((key, verdict))
        return None if len([k for k, _ in seen if k == key]) >= 2 else began + 0.2

    runner = threading.Thread(
        target=scheduler.run,
        args=(threading.Event(),),
        kwargs={"on_verdict": record, "until_empty": True},
        daemon=True,
    )
    runner.start()
    runner.join(10)
    assert not runner.is_alive(), seen
    assert sorted(seen) == [(k, "across:train-node0+train-node1") for k in ("0", "0", "1", "1")]
    assert not span.lock.locked()


def test_one_stage_of_one_host_given_twice_to_a_batch_is_checked_once(tmp_path: Any) -> None:
    """``watch_all([c, c])`` (or a span's node also watched as a stage of its own): both in
    one batch, whose thread took the checker's lock twice: the run hung (older than 471affa,
    found by the same review). Real processes and the local probe."""
    from sensors import State, stage_from_dict
    from sensors._watch.schedule import watch_all
    from sensors.testing import SimulatedJob

    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01)
    job.start()
    seen: list[int] = []
    try:
        checker = Checker(stage_from_dict(job.stage_dict(name="twice", interval="200ms", stall_after="1h")))
        done: list[Any] = []
        runner = threading.Thread(
            target=lambda: done.append(
                watch_all([checker, checker], on_verdict=lambda i, v: seen.append(i), timeout=1.5)
            ),
            daemon=True,
        )
        runner.start()
        runner.join(20)
    finally:
        job.stop()
    assert not runner.is_alive(), "the run hung"
    assert {0, 1} <= set(seen)
    assert all(r.last is not None and r.last.state is State.RUNNING for r in done[0])
