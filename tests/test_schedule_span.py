"""How the scheduler checks a stage over several hosts (issue 25): each node in its host's
batch with that host's own stages, the check begun once and finished by the last node back,
the hosts on the stage's phase. The batch and the span's two halves are recorded here; the
real probes, sshd hosts and verdicts are tests/test_span.py's (which counts the round trips
on the hosts themselves)."""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
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


class _Pool:
    """A pool whose probes run when the simulation says (their end on the simulated clock)."""

    def __init__(self) -> None:
        self.submitted: list[tuple[Any, tuple[Any, ...], Future[Any]]] = []

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        self.submitted.append((fn, args, fut))
        return fut


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


#: A probe as the simulation saw it: (host, began, ended, the stages it read).
_Probe = tuple[str, float, float, list[str]]


def _simulate(
    scheduler: Scheduler,
    clock: _Clock,
    took: Callable[[str, int], float],
    until: float,
    on_verdict: Callable[[str, Any, float], float | None],
) -> list[_Probe]:
    """The scheduler's loop (``Scheduler.run``'s turn: hand out, deliver, wait) on ``clock``:
    the ``n``th probe of host ``h`` takes ``took(h, n)`` simulated seconds. Each probe as
    ``(host, began, ended, stages)``."""
    pool = _Pool()
    running: dict[Future[Any], Any] = {}
    ends: list[tuple[float, int, Any, tuple[Any, ...], Future[Any], _Probe]] = []
    probes: list[_Probe] = []
    order = itertools.count()
    for _ in range(100_000):
        wait_for = scheduler._submit(pool, running)  # type: ignore[arg-type]  # a pool of its own
        for fn, args, fut in pool.submitted:
            checkers, parts = args
            host = (checkers[0] if checkers else parts[0].checker).host.name
            n = sum(1 for p in probes if p[0] == host)
            probe: _Probe = (host, clock.now, clock.now + took(host, n), [])
            probes.append(probe)
            heapq.heappush(ends, (probe[2], next(order), fn, args, fut, probe))
        pool.submitted.clear()
        for fut in [f for f in running if f.done()]:
            scheduler._finished(running.pop(fut), fut, on_verdict, None)
            wait_for = 0.0
        after = min(clock.now + wait_for, ends[0][0] if ends else math.inf)
        if after > until:
            return probes
        clock.now = max(clock.now, after)
        while ends and ends[0][0] <= clock.now:
            _, _, fn, args, fut, probe = heapq.heappop(ends)
            probe[3].extend(c.stage.stage for c in [*args[0], *(p.checker for p in args[1])])
            fut.set_result(fn(*args))
    raise AssertionError("the simulated loop did not reach its end")


@pytest.mark.parametrize("phased", [True, False], ids=["serve", "wait"])
@pytest.mark.parametrize(
    "took",
    [
        lambda host, n: 0.2,  # every probe in time
        lambda host, n: 1.5 if (host, n) == ("b", 0) else 0.2,  # b's first (its login) late
        lambda host, n: 1.3 if n % 3 == 1 else 0.2,  # now and then one host late, now the other
        lambda host, n: 1.05 if host == "a" else 0.3,  # a always just past the interval
    ],
    ids=["in-time", "b-late-once", "late-by-turns", "a-always-late"],
)
def test_a_host_keeps_one_probe_a_cycle_when_a_probe_is_late(
    phased: bool, took: Callable[[str, int], float]
) -> None:
    """Hosts a and b carry a stage of their own and a node of a stage over both, every 1 s,
    with probes that end late (a verdict across hosts waits for the slower host): each host
    still gets at most one probe a cycle, never two at once, the node with the host's own
    stage; and no stage waits more than an interval past its due. Before, ``wait`` (unphased)
    set a late check due *now*: the stage over both drifted off a host's own stage's cycle
    for good, two probes a cycle on that host (``tests/test_span.py`` counted them on sshd)."""
    clock = _Clock(1000.0)
    a, b = _Host("a"), _Host("b")
    scheduler = Scheduler(batch=_Batches(), phased=phased, clock=clock)
    scheduler.add("own-a", Checker(_stage("own-a"), host=a))
    clock.now += 0.001
    scheduler.add("own-b", Checker(_stage("own-b"), host=b))
    clock.now += 0.001
    scheduler.add("train", _Span("train", [a, b]))
    checks: dict[str, list[float]] = {}
    asked: dict[str, float] = {}

    def record(key: str, verdict: Any, began: float) -> float:
        checks.setdefault(key, []).append(began)
        asked[key] = began + 1.0
        return asked[key]

    start = clock.now
    probes = _simulate(scheduler, clock, took, start + 30.0, record)
    for host, own, node in (("a", "own-a", "train-node0"), ("b", "own-b", "train-node1")):
        mine = [p for p in probes if p[0] == host]
        for (_, _, ended, _), (_, later, _, _) in itertools.pairwise(mine):
            assert later >= ended, (host, mine)  # never two at once on the host
        cycles = {math.floor(began - start) for _, began, _, _ in mine}
        assert len(mine) <= len(cycles) + 1, (host, mine)  # one a cycle (a first one apart, at most)
        # The node with the host's own stage (a first one apart, at most).
        assert sum(1 for p in mine if node in p[3] and own not in p[3]) <= 1, (host, mine)
    for key, began in checks.items():
        assert len(began) >= 10, checks  # checked on, every cycle or every other one
        # No check later than an interval past the due it asked for (from its last one).
        for earlier, later in itertools.pairwise(began):
            assert later - (earlier + 1.0) <= 1.0 + 1e-9, (key, began)


def test_unphased_a_due_sooner_than_an_interval_is_kept_and_a_late_one_keeps_the_cycle() -> None:
    """``crosscheck wait``: a stage's cycle starts where it was first due; a check back late
    is due at the next point of it (not now, off the cycle); a due the callback asks for
    sooner than an interval after the check began (``watch_all``'s timeout) is kept as asked."""
    clock = _Clock(500.0)
    scheduler = Scheduler(batch=_Batches(), clock=clock)
    scheduler.add("s", Checker(_stage("s"), host=_Host("a")))
    began: list[float] = []

    def record(key: str, verdict: Any, at: float) -> float | None:
        began.append(at)
        if len(began) == 5:
            return None
        return at + (0.25 if len(began) == 3 else 1.0)  # the third: a timeout 0.25 s on

    took = lambda host, n: 1.4 if n == 1 else 0.1  # noqa: E731 - the second probe late
    _simulate(scheduler, clock, took, 510.0, record)
    # 500 (first due), 501 (back at 502.4: not due then), 503, 503.25 (the timeout, as
    # asked), then on the cycle again.
    assert began == pytest.approx([500.0, 501.0, 503.0, 503.25, 504.0]), began
