"""Many stages, one scheduler: each stage checked at its own interval by a bounded pool.

:class:`Scheduler` keeps every stage's next due time in a heap and hands due checks to at
most ``workers`` threads, at most ``per_host`` probes at once on one host; the stages due on
one host at the same tick are read by one probe (``sensors._check.batch``). A stage over
several hosts is checked in that same probe of each of its hosts: its nodes join their hosts'
batches, and the verdict across them is made when the last one is back. Each host keeps a
cycle its stages are due on (shared by every host of a stage over several), so that they stay
in one probe when a check comes back late: with ``phased=True`` (``crosscheck serve``) at a
phase of the interval of its own (a hash), else (``crosscheck wait``) where its first stage
was first due. It is shared by ``crosscheck wait``
(:func:`watch_all`) and ``crosscheck serve`` (``sensors._watch.watcher``), with stages keyed by
a string the caller chooses. Why, and how the phases work: docs/serve.md, "In the code".

Example:
    >>> results = watch_all(checkers, on_verdict=print, timeout=3600)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import cast

from sensors._base.model import Verdict
from sensors._base.schema import MAX_DURATION, MIN_DURATION, MIN_INTERVAL
from sensors._check.batch import check_batch
from sensors._check.checker import Checker
from sensors._check.span import AnyChecker, Span, SpanChecker
from sensors._hosts import Host

#: What a phase belongs to: a host, or a stage over several hosts (whose hosts share its
#: phase, so that each is probed once in a cycle for that stage and its own).
HostKey = Host | Span


def bounded(seconds: object, *, default: float, floor: float = MIN_DURATION) -> float:
    """A number of seconds the heap, the clock and a sleep can take: finite, within [``floor``
    (1 ms), 365 d]; ``default`` for what is not a number at all (NaN included).

    Stage files are bounded when they load (``sensors._base.schema.bounded_duration``); this is the
    scheduler's own guard, for a Checker built in Python without that check or a callback's
    arithmetic: one NaN in the heap breaks its order for every stage (``.nan`` stopped
    ``crosscheck serve``, ``.inf`` left every other stage undue)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or math.isnan(seconds):
        return default
    return min(max(float(seconds), floor), MAX_DURATION)


#: One probe for the stages due on one host (a node of a stage over several hosts among them):
#: a verdict per checker, or None for a stage this round did not look at (``crosscheck
#: serve``: a stage another watcher holds, nothing stored).
Batch = Callable[[list[Checker]], Sequence[Verdict | None]]
#: How a check of a stage over several hosts begins: ``(True, None)``: its nodes are probed
#: (``SpanChecker.begin`` returned None, and the checker waits for ``finish``); ``(False,
#: verdict)``: no probe, this is the check's verdict (followed from another watch; None:
#: nothing to say this round).
Begin = Callable[[SpanChecker], tuple[bool, Verdict | None]]
#: After a check: ``(key, verdict, began)`` → when the stage is due next (the scheduler's
#: clock), or None to stop watching it.
OnVerdict = Callable[[str, Verdict, float], float | None]
#: A batch that raised: ``(keys, error)`` → when those stages are due next, or raise to end
#: the run (the error propagates out of :meth:`Scheduler.run`).
OnError = Callable[[list[str], Exception], float | None]


def hosts_of(checker: AnyChecker) -> list[Host]:
    """The hosts a check of ``checker`` probes (a stage over several hosts: each node's)."""
    return [n.host for n in checker.nodes] if isinstance(checker, SpanChecker) else [checker.host]


def begin_span(span: SpanChecker) -> tuple[bool, Verdict | None]:
    """The default :data:`Begin`: the span's own rule (follow another watch that holds it)."""
    followed = span.begin()
    return followed is None, followed


class _Round:
    """One check of a stage over several hosts whose nodes are probed in their hosts'
    batches: begun once (by the first batch to reach it), finished by the last one back.
    ``future`` holds its verdict (a list of one, as a batch's)."""

    def __init__(self, span: SpanChecker, begin: Begin) -> None:
        self.span = span
        self.future: Future[Sequence[Verdict | None]] = Future()
        self._begin = begin
        self._lock = threading.Lock()
        self._probe: bool | None = None  # None: not begun yet
        self._verdicts: list[Verdict | None] = [None] * len(span.probes)
        self._left = len(span.probes)
        self._error: BaseException | None = None

    def start(self) -> bool:
        """Whether the nodes are to be probed (the same answer for every batch)."""
        with self._lock:
            if self._probe is None:
                self._probe = False
                try:
                    probe, verdict = self._begin(self.span)
                except Exception as exc:  # a store that failed: the stage's error, not the host's
                    self._settle(error=exc)
                else:
                    self._probe = probe
                    if not probe:
                        self._settle(verdict=verdict)
            return self._probe

    def put(self, index: int, verdict: Verdict | None = None, error: BaseException | None = None) -> None:
        """Node ``index``'s verdict (or its batch's error); the last one back ends the check."""
        with self._lock:
            self._verdicts[index] = verdict
            if self._error is None:
                self._error = error
            self._left -= 1
            if self._left:
                return
        verdicts = [v for v in self._verdicts if v is not None]
        if self._error is not None or len(verdicts) != len(self._verdicts):
            if self._probe:  # begun (not where every batch of it was cancelled unrun)
                self.span.abandon()
            if self._error is not None:
                self._settle(error=self._error)
            else:  # a batch that did not look at a node (no verdict): nothing to say
                self._settle(verdict=None)
            return
        try:
            verdict = self.span.finish(verdicts)
        except Exception as exc:
            self._settle(error=exc)
        else:
            self._settle(verdict=verdict)

    def _settle(self, *, verdict: Verdict | None = None, error: BaseException | None = None) -> None:
        if self.future.done():  # cancelled: the scheduler's run ended meanwhile
            return
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result([verdict])


@dataclass(frozen=True)
class _Part:
    """Probe ``index`` of a stage over several hosts (a node, or a rank's log: ``probes``), in
    its host's batch."""

    round: _Round
    index: int

    @property
    def checker(self) -> Checker:
        return self.round.span.probes[self.index]


@dataclass
class _Slot:
    checker: AnyChecker
    due: float
    interval: float
    running: bool = False
    turn: int = 0  # bumped on every reschedule: older heap items for the slot are stale
    hurried: bool = False  # asked to be due now while its check ran: due as soon as it is back
    #: Goes when due, even while a probe of its host is in flight: it waited for the host's
    #: next cycle point once already (or was hurried).
    waited: bool = False


_Future = Future[Sequence[Verdict | None]]


@dataclass(frozen=True)
class _Running:
    """A probe (or a round across hosts) in flight: the host it keeps busy (None: a round,
    whose probes are its hosts' batches), the stages whose verdicts it brings, when handed out,
    the nodes of stages over several hosts it reads."""

    host: Host | Span | None
    members: list[tuple[str, _Slot]]
    began: float
    parts: tuple[_Part, ...] = ()


class Scheduler:
    """Stages keyed by string, each due at its own time; due stages of a host share a probe.

    :meth:`add` and :meth:`remove` may be called from any thread, also while :meth:`run`
    runs; the callbacks are called in the thread that runs :meth:`run`.
    """

    def __init__(
        self,
        *,
        workers: int = 16,
        per_host: int = 4,
        batch: Batch = check_batch,
        begin: Begin = begin_span,
        clock: Callable[[], float] = time.monotonic,
        phased: bool = False,
    ) -> None:
        self.workers = max(1, workers)
        self.per_host = max(1, per_host)
        self.clock = clock
        self.phased = phased
        #: Each phase owner's offset on the clock: phased, a hash of it; unphased, where its
        #: first stage was first due (``crosscheck wait``: the start).
        self._phases: dict[HostKey, float] = {}
        #: Whose phase a host or a stage over several hosts keeps: the stage over several
        #: hosts it belongs to (the least by name, where several share a host), or its own.
        self._phase_of: dict[HostKey, HostKey] = {}
        self._batch = batch
        self._begin = begin
        self._slots: dict[str, _Slot] = {}
        self._heap: list[tuple[float, int, str, int]] = []
        self._order = itertools.count()
        # Probes running per host *object*, never per name: two SSH hosts may share a name
        # (one address, two ports) and must not share a probe.
        self._busy: dict[HostKey, int] = {}
        #: Stages over several hosts whose check is in flight: one watched under two keys
        #: waits for it (a second check begun meanwhile waited for the first's lock in a
        #: batch the first needed: every batch of both stuck).
        self._checking: set[SpanChecker] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()

    # ------------------------------------------------------------------ stages

    def add(
        self, key: str, checker: AnyChecker, *, due: float | None = None, interval: float | None = None
    ) -> None:
        """Watch ``checker`` under ``key`` (replacing what was there), first due at ``due``
        (by default now, or when phased its host's next phase point), then every
        ``interval`` (its policy's by default)."""
        with self._lock:
            now = self.clock()
            if due is not None and not math.isfinite(due):
                due = now
            if not self.phased:
                due = now if due is None else due
                # Its host's cycle starts here where it has none yet (a stage over several
                # hosts: its own, which its hosts take if it is the least).
                self._phases.setdefault(self._phase_of.get(checker.host, checker.host), due)
            if isinstance(checker, SpanChecker):
                self._link(checker, now)
            interval = bounded(interval or checker.stage.policy.interval, default=30.0, floor=MIN_INTERVAL)
            if due is None:
                due = self._next_phase(checker.host, interval, now)
            slot = _Slot(checker, due, interval)
            self._slots[key] = slot
            self._push(key, slot)
        self._wake.set()

    def remove(self, key: str) -> AnyChecker | None:
        """Stop watching ``key``; its checker (the caller closes it). A check of it in flight
        finishes, and its verdict is dropped."""
        with self._lock:
            slot = self._slots.pop(key, None)
        return None if slot is None else slot.checker

    def hurry(self, key: str) -> None:
        """Make ``key`` due now, once (a stage a watcher has just taken over is checked at
        once, not at its next phase point); while its check runs, due as soon as it is back."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                return
            if slot.running:
                slot.hurried = True  # that check may be from before: one more once it is back
                return
            slot.due = self.clock()
            slot.waited = True
            self._push(key, slot)
        self._wake.set()

    def running(self, key: str) -> bool:
        with self._lock:
            slot = self._slots.get(key)
            return slot is not None and slot.running

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._slots)

    def __len__(self) -> int:
        return len(self._slots)

    def due(self, key: str) -> float | None:
        """When ``key`` is due (while its check runs: the due time it was handed out for)."""
        with self._lock:
            slot = self._slots.get(key)
            return None if slot is None else slot.due

    # ------------------------------------------------------------------ phases

    def _link(self, span: SpanChecker, now: float) -> None:
        """Give the span's hosts (and every host and span already sharing a phase with one of
        them) one phase: the least span's by name, whatever order they were added in.

        Unphased, that phase is where the span is first due (``now``: before it, each host's
        own). The stages due later on a host whose phase moved are moved to its next phase
        point (sooner, once, or within an interval), not left due at the old one: there, a
        node's probe and the host's own stages' were two probes a cycle, at once where the
        first was slow."""
        keys: list[HostKey] = [span.host, *hosts_of(span)]
        owners = {self._phase_of.get(k, k) for k in keys}
        owner = min((o for o in owners if isinstance(o, Span)), key=repr)
        if not self.phased:
            self._phases.setdefault(owner, now)
        moved = {o for o in owners if o != owner and self._phase(o) != self._phase(owner)}
        before = {
            key: self._phase_of.get(slot.checker.host, slot.checker.host) for key, slot in self._slots.items()
        }
        for key, mine in list(self._phase_of.items()):
            if mine in owners:
                self._phase_of[key] = owner
        for key in keys:
            self._phase_of[key] = owner
        for name, slot in self._slots.items():
            if not slot.running and slot.due > now and before[name] in moved:  # due now: goes now
                slot.due = self._next_phase(slot.checker.host, slot.interval, now)
                self._push(name, slot)

    def _phase(self, host: HostKey) -> float:
        """The host's offset on the clock, in [0, 1 day): a stable hash of its identity (the
        repr names user, address and port; a host of a stage over several: that stage's),
        the same in every process and run."""
        owner = self._phase_of.get(host, host)
        phase = self._phases.get(owner)
        if phase is None:
            digest = hashlib.blake2b(repr(owner).encode(), digest_size=8).digest()
            phase = self._phases[owner] = int.from_bytes(digest, "big") % 86_400_000 / 1000
        return phase

    def _next_phase(self, host: HostKey, interval: float, at: float) -> float:
        """The host's first phase point at or after ``at``: ``H + k * interval``."""
        phase = self._phase(host)
        return phase + math.ceil((at - phase) / interval) * interval

    def _nearest_phase(self, host: HostKey, interval: float, at: float) -> float:
        """The host's phase point nearest to ``at`` (a due a callback asked for)."""
        phase = self._phase(host)
        return phase + round((at - phase) / interval) * interval

    def _push(self, key: str, slot: _Slot) -> None:
        slot.turn += 1
        heapq.heappush(self._heap, (slot.due, next(self._order), key, slot.turn))

    # ------------------------------------------------------------------ the loop

    def run(
        self,
        stop: threading.Event,
        *,
        on_verdict: OnVerdict,
        on_error: OnError | None = None,
        tick: Callable[[], float] | None = None,
        until_empty: bool = False,
    ) -> None:
        """Check due stages until ``stop`` is set (or, with ``until_empty``, no stage is left).

        ``tick()`` is called every turn of the loop, before due stages are handed out (the
        place to add and remove stages); it returns how many seconds it may wait. Checks in
        flight when it ends are waited for and their verdicts delivered.
        """
        running: dict[_Future, _Running] = {}
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            try:
                while not stop.is_set():
                    wait_for = bounded(tick(), default=1.0) if tick is not None else 1.0
                    if until_empty and not self._slots and not running:
                        break
                    wait_for = min(wait_for, self._submit(pool, running))
                    self._wake.clear()
                    for fut in [f for f in running if f.done()]:
                        self._finished(running.pop(fut), fut, on_verdict, on_error)
                        wait_for = 0.0
                    if wait_for > 0:
                        self._wake.wait(max(0.0, min(wait_for, 1.0)))
            except BaseException:
                stop.set()
                for fut, done in running.items():
                    if fut.cancel():
                        # A batch never run: the checks across hosts it had a node of end
                        # without it (one begun by another batch is abandoned: unlocked).
                        for part in done.parts:
                            part.round.put(part.index, error=CancelledError())
                raise
            for fut in list(running):
                fut.exception()  # wait for it
                self._finished(running.pop(fut), fut, on_verdict, on_error)

    def _submit(self, pool: ThreadPoolExecutor, running: dict[_Future, _Running]) -> float:
        """Hand out one probe per host for the stages due there (and the nodes of the stages
        over several hosts due now); seconds until the next is due."""
        now = self.clock()
        batches: dict[Host | Span, list[tuple[str, _Slot] | _Part]] = {}
        held: list[tuple[float, int, str, int]] = []
        # A probe kept on each host of a held stage, for it: no later stage takes the last one
        # there first (one over several hosts, held while its hosts were full in turn, was
        # passed over for ever by each host's own stages).
        kept: dict[Host, int] = {}
        wake = lambda _: self._wake.set()  # noqa: E731 - a done callback
        with self._lock:
            while self._heap and self._heap[0][0] <= now:
                item = heapq.heappop(self._heap)
                _, _, key, turn = item
                slot = self._slots.get(key)
                if slot is None or slot.turn != turn or slot.running:
                    continue  # removed, rescheduled since, or in flight: a stale item
                checker = slot.checker
                if checker in self._checking:
                    held.append(item)  # its check under another key is in flight
                    continue
                hosts = hosts_of(checker)
                if not slot.waited and any(h not in batches and self._busy.get(h, 0) for h in hosts):
                    # Due while a probe of its host is in flight (one it missed: it was in
                    # flight itself, or added since): it joins the host's next one, at the next
                    # point of its cycle, not a probe of its own now, at once with that one,
                    # and on every cycle after where that host is slower than the interval.
                    # Once: a host whose probe is still not back by then gets a second.
                    slot.waited = True
                    slot.due = self._next_phase(checker.host, slot.interval, now + MIN_DURATION)
                    self._push(key, slot)
                    continue
                if any(
                    h not in batches and self._busy.get(h, 0) + kept.get(h, 0) >= self.per_host for h in hosts
                ):
                    held.append(item)  # a host of it is full: it goes when a probe there ends
                    for h in set(hosts) - batches.keys():
                        kept[h] = kept.get(h, 0) + 1
                    continue
                slot.running = True
                slot.waited = False
                if isinstance(checker, SpanChecker):
                    # Each node in its host's batch; the verdict across them is this round's.
                    self._checking.add(checker)
                    round_ = _Round(checker, self._begin)
                    for index, node in enumerate(checker.probes):
                        batches.setdefault(node.host, []).append(_Part(round_, index))
                    round_.future.add_done_callback(wake)
                    running[round_.future] = _Running(None, [(key, slot)], now)
                else:
                    batches.setdefault(checker.host, []).append((key, slot))
            for item in held:
                heapq.heappush(self._heap, item)
            for host, members in batches.items():
                self._busy[host] = self._busy.get(host, 0) + 1
                singles = [m for m in members if not isinstance(m, _Part)]
                parts = [m for m in members if isinstance(m, _Part)]
                # A stage over several hosts is never a single here: its nodes are its parts.
                fut = pool.submit(self._probe, [cast(Checker, slot.checker) for _, slot in singles], parts)
                fut.add_done_callback(wake)
                running[fut] = _Running(host, singles, now, tuple(parts))
            if held:
                return 0.05
            return max(0.0, self._heap[0][0] - now) if self._heap else 1.0

    def _probe(self, checkers: list[Checker], parts: list[_Part]) -> Sequence[Verdict | None]:
        """One host's batch: its own stages and the nodes of stages over several hosts
        (those whose check began: not another watch's), in one probe."""
        probing: list[_Part] = []
        try:
            for part in parts:
                if part.round.start():
                    probing.append(part)
            if not checkers and not probing:
                return []
            verdicts = self._batch([*checkers, *(p.checker for p in probing)])
        except BaseException as exc:
            for part in probing:
                part.round.put(part.index, error=exc)
            raise
        for part, verdict in zip(probing, verdicts[len(checkers) :], strict=True):
            part.round.put(part.index, verdict)
        return verdicts[: len(checkers)]

    def _finished(
        self,
        done: _Running,
        fut: Future[Sequence[Verdict | None]],
        on_verdict: OnVerdict,
        on_error: OnError | None,
    ) -> None:
        members, began = done.members, done.began
        with self._lock:
            if done.host is not None:
                self._busy[done.host] -= 1
            else:  # a round across hosts
                self._checking.difference_update(slot.checker for _, slot in members)
            for _, slot in members:
                slot.running = False
        if not members:
            return  # a probe of nodes only: their stage's round says how it went
        error = fut.exception()
        if error is not None:
            if on_error is None or not isinstance(error, Exception):
                raise error  # a host key error ends every watch, now
            due = on_error([key for key, _ in members], error)
            for key, slot in members:
                self._reschedule(key, slot, due, began)
            return
        for (key, slot), verdict in zip(members, fut.result(), strict=True):
            if self._slots.get(key) is not slot:
                continue  # removed or replaced while it was checked
            due = began + slot.interval if verdict is None else on_verdict(key, verdict, began)
            self._reschedule(key, slot, due, began)

    def _reschedule(self, key: str, slot: _Slot, due: float | None, began: float) -> None:
        with self._lock:
            if self._slots.get(key) is not slot:
                return
            if due is None:
                del self._slots[key]
                return
            now = self.clock()
            if not math.isfinite(due):  # a callback's arithmetic on a bad number: next interval
                due = now + slot.interval
            if slot.hurried:
                slot.hurried = False
                slot.waited = True
                slot.due = now
                self._push(key, slot)
                return
            # On the host's cycle, with the host's other stages: a check back late is due at
            # the next point of it, not now (due now, it was a probe of its own on that host,
            # every cycle after: two round trips a cycle, at once where the other was slow).
            # Unphased, a due sooner than an interval after the check began is the caller's
            # own (``watch_all``'s timeout): kept as asked.
            if self.phased or due >= began + slot.interval * (1 - 1e-9):
                due = self._nearest_phase(slot.checker.host, slot.interval, due)
                if due < now:
                    due = self._next_phase(slot.checker.host, slot.interval, now)
            slot.due = max(due, now)
            self._push(key, slot)


# --------------------------------------------------------------------------- crosscheck wait


@dataclass
class HandoffSeen:
    """How one stage's watch ended: its last verdict, and whether its timeout passed first."""

    last: Verdict | None = None
    timed_out: bool = False
    done: bool = False


def watch_all(
    checkers: Sequence[AnyChecker],
    *,
    on_verdict: Callable[[int, Verdict], None],
    timeout: float | None = None,
    stop: threading.Event | None = None,
    workers: int = 16,
    per_host: int = 4,
    clock: Callable[[], float] = time.monotonic,
) -> list[HandoffSeen]:
    """Check every stage every ``policy.interval`` until complete, failed or its timeout.

    ``on_verdict(index, verdict)`` is called (in the scheduling thread) after each check. The
    first error a check raises (an unverifiable host key) stops every watch and is raised
    here. ``timeout`` overrides each stage's ``policy.timeout``.
    """
    stop = stop or threading.Event()
    start = clock()
    results = [HandoffSeen() for _ in checkers]
    deadlines = [
        start + bounded(c.stage.policy.timeout if timeout is None else timeout, default=MAX_DURATION)
        for c in checkers
    ]
    # A thread per stage, and per host of a stage over several (its probes run in parallel:
    # one dead host delays no other).
    hosts = {h for c in checkers for h in hosts_of(c)}
    scheduler = Scheduler(
        workers=min(workers, max(1, len(checkers), len(hosts))), per_host=per_host, clock=clock
    )
    for index, checker in enumerate(checkers):
        scheduler.add(str(index), checker, due=start)

    def record(key: str, verdict: Verdict, began: float) -> float | None:
        index = int(key)
        result = results[index]
        result.last = verdict
        on_verdict(index, verdict)
        if verdict.settled:  # complete, failed, or stuck: an unknown that cannot become complete
            result.done = True
            return None
        if clock() >= deadlines[index]:
            result.done = result.timed_out = True
            return None
        interval = bounded(checkers[index].stage.policy.interval, default=30.0, floor=MIN_INTERVAL)
        return min(began + interval, deadlines[index])

    scheduler.run(stop, on_verdict=record, until_empty=True)
    return results
