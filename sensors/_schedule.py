"""Many stages, one scheduler: each stage checked at its own interval by a bounded pool.

Not a thread per stage: one loop keeps every stage's next due time in a heap and hands due
checks to at most ``workers`` threads, at most ``per_host`` probes at once on one host, so a
host that is down or slow (its checks run until their deadline) delays no stage on another
host, and a thousand stages cost a heap, not a thousand threads. Every stage due on a host at
the same tick is read by one probe (``sensors._batch``): one round trip per host per tick,
``/proc`` scanned once for all of them.

Example:
    >>> results = watch_all(checkers, on_verdict=print, timeout=3600)  # doctest: +SKIP
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from sensors._batch import check_batch
from sensors._check import Checker
from sensors._hosts import Host
from sensors._model import State, Verdict

#: The verdicts that end a stage's watch.
FINAL = (State.COMPLETE, State.FAILED)


@dataclass
class Watched:
    """How one stage's watch ended: its last verdict, and whether its timeout passed first."""

    last: Verdict | None = None
    timed_out: bool = False
    done: bool = False


def watch_all(
    checkers: Sequence[Checker],
    *,
    on_verdict: Callable[[int, Verdict], None],
    timeout: float | None = None,
    stop: threading.Event | None = None,
    workers: int = 16,
    per_host: int = 4,
    clock: Callable[[], float] = time.monotonic,
) -> list[Watched]:
    """Check every stage every ``policy.interval`` until complete, failed or its timeout.

    ``on_verdict(index, verdict)`` is called (in a worker thread) after each check. The first
    error a check raises (an unverifiable host key) stops every watch and is raised here.
    ``timeout`` overrides each stage's ``policy.timeout``.
    """
    stop = stop or threading.Event()
    start = clock()
    results = [Watched() for _ in checkers]
    deadlines = [start + (c.stage.policy.timeout if timeout is None else timeout) for c in checkers]
    due: list[tuple[float, int]] = [(start, i) for i in range(len(checkers))]
    heapq.heapify(due)
    busy: dict[Host, int] = {}  # probes running per host object (not name: see _submit_due)
    running: dict[Future[list[Verdict]], tuple[list[int], float]] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(checkers)))) as pool:
        try:
            while (due or running) and not stop.is_set():
                waiting = _submit_due(checkers, due, busy, running, pool, per_host, clock)
                if not running:
                    stop.wait(max(0.0, min(waiting, 1.0)))
                    continue
                finished, _ = wait(
                    list(running), timeout=max(0.0, min(waiting, 1.0)), return_when=FIRST_COMPLETED
                )
                for fut in finished:
                    indexes, began = running.pop(fut)
                    busy[checkers[indexes[0]].host] -= 1
                    verdicts = fut.result()  # a host key error ends every watch, now
                    for index, verdict in zip(indexes, verdicts, strict=True):
                        _record(index, verdict, results[index], deadlines[index], checkers, due, began, clock)
                        on_verdict(index, verdict)
        except BaseException:
            stop.set()
            raise
    return results


def _submit_due(
    checkers: Sequence[Checker],
    due: list[tuple[float, int]],
    busy: dict[Host, int],
    running: dict[Future[list[Verdict]], tuple[list[int], float]],
    pool: ThreadPoolExecutor,
    per_host: int,
    clock: Callable[[], float],
) -> float:
    """Submit one probe per host for the stages due there; seconds until the next is due."""
    now = clock()
    # Keyed by the host object, never its name: two SSH hosts may share a name (one address,
    # two ports) and must not share a probe.
    batches: dict[Host, list[int]] = {}
    held: list[tuple[float, int]] = []
    while due and due[0][0] <= now:
        at, index = heapq.heappop(due)
        host = checkers[index].host
        if host not in batches and busy.get(host, 0) >= per_host:
            held.append((at, index))  # its host is full: it goes when a probe there ends
            continue
        batches.setdefault(host, []).append(index)
    for host, indexes in batches.items():
        busy[host] = busy.get(host, 0) + 1
        running[pool.submit(check_batch, [checkers[i] for i in indexes])] = (indexes, now)
    for item in held:
        heapq.heappush(due, item)
    if held:
        return 0.05
    return max(0.0, due[0][0] - now) if due else 1.0


def _record(
    index: int,
    verdict: Verdict,
    result: Watched,
    deadline: float,
    checkers: Sequence[Checker],
    due: list[tuple[float, int]],
    began: float,
    clock: Callable[[], float],
) -> None:
    """Keep the verdict; schedule the stage's next check, or end its watch."""
    result.last = verdict
    if verdict.state in FINAL:
        result.done = True
        return
    now = clock()
    if now >= deadline:
        result.done = result.timed_out = True
        return
    interval = checkers[index].stage.policy.interval
    heapq.heappush(due, (min(max(began + interval, now), deadline), index))
