"""A stage over several hosts: one Checker per host (node), read in parallel, one verdict.

Each node is a single-host stage (``Stage.nodes``) checked by its own :class:`Checker` — the
same probe, one round trip per host, the same rules — so a slow or dead host delays no other
beyond the check's deadline, and its failure is that node's ``unknown``, never a dead job. A
scheduler (``crosscheck wait``, ``serve``) reads each node in its host's batch with the host's
other stages, around :meth:`SpanChecker.begin` and :meth:`SpanChecker.finish`.
The verdict across them is ``_verdict.across.decide_across``.

With a state store, the stage is one row: one lease, one stored verdict (the one across
hosts), and one memory document holding every node's memory and the memory across them
(the ranks seen alive on each host, when ranks were lost, when each host last moved). A
restarted watch, or a watcher taking the stage over, goes on from all of it; a node's memory
is never kept apart from the others' (a node's row of its own, restored without the memory
across hosts, let a second watch forget the ranks a first one had seen).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from sensors._base.errors import ConfigError
from sensors._base.model import Reading, Says, Verdict
from sensors._base.probe import Meta
from sensors._check.batch import check_batch
from sensors._check.checker import Checker, Following, Watch
from sensors._check.persist import OwnRun, Persistence, is_followed, is_this_run, save_all
from sensors._config.stage import Stage
from sensors._run.run import Run, Since, parse_since
from sensors._signals.base import JobView
from sensors._store import Store
from sensors._verdict.across import AcrossMemory, NodeCheck, at_work_elsewhere, decide_across, live_pids

__all__ = ["AnyChecker", "Span", "SpanChecker", "checker_for"]

log = logging.getLogger("crosscheck")


@dataclass(frozen=True)
class Span:
    """The hosts of a stage over several hosts, as a scheduler knows them: the phase its
    hosts share (its nodes are probed in their hosts' batches: ``sensors._watch.schedule``)."""

    name: str
    stage: str


class SpanChecker(Following):
    """Checks a stage over several hosts: each :meth:`check` checks every node at once and
    returns the one verdict across them (``complete`` only when every host agrees).

    It answers as a :class:`Checker` does where a watch needs it (``followed``, ``save``,
    ``persistence``, ``announce``, ``announced``, ``run``, ``own_run``): ``crosscheck
    serve`` and the Prefect gate take either.
    """

    def __init__(
        self,
        stage: Stage,
        *,
        since: str | float | Since | None = None,
        state: Store | str | os.PathLike[str] | None = None,
        run: Run | None = None,
    ) -> None:
        if stage.hosts is None:
            raise ConfigError("SpanChecker is for a stage over several hosts (hosts:)", field="hosts")
        if run is not None:
            raise ConfigError(
                "a stage over several hosts has no launch record (a launch across hosts is not built)",
                field="launch",
            )
        try:
            self._since = parse_since(since)
        except ValueError as exc:
            raise ConfigError(str(exc), field="since") from None
        self.stage = stage
        # The nodes keep no row of their own: their memories are this stage's document.
        self.nodes = tuple(Checker(node, since=self._since) for node in stage.nodes)
        #: Each node's other ranks' logs (``log.path`` with ``{rank}``), a Checker each, read
        #: on the node's host in its probe: ``(node index, rank, checker)``.
        self.rank_logs = tuple(
            (k, _rank_of(rank_stage), _RankLog(rank_stage, self.nodes[k], since=self._since))
            for k, ranks in enumerate(stage.rank_logs)
            for rank_stage in ranks
        )
        #: Every checker a check of this stage probes: the nodes, then the ranks' logs. A
        #: scheduler adds each to its host's batch and hands their verdicts, in this order, to
        #: :meth:`finish`.
        self.probes: tuple[Checker, ...] = (*self.nodes, *(c for _, _, c in self.rank_logs))
        self.host = Span(", ".join(stage.host_labels), stage.stage)
        self.labels = stage.host_labels
        self.lock = threading.Lock()
        self.last: Verdict | None = None
        self._memory = AcrossMemory()
        #: Node 0's run when the memory across hosts was last added to: another run of node 0
        #: starts that memory afresh.
        self._across_run: Run | None = None
        self._pool = ThreadPoolExecutor(max_workers=min(32, len(self.nodes)), thread_name_prefix="span")
        self._persist: Persistence | None = None
        self._saving = True
        self._checked_here = False
        self._told_not_ours = False
        if state is not None:
            # A store given open is the caller's; one opened from a location, the row's.
            self._persist = Persistence(state, stage, self.host.name)
            self._restore()

    # ------------------------------------------------------------------ one check

    def check(self) -> Verdict:
        """One check of every node, in parallel; the verdict across them (another watch's,
        followed, where it holds the stage)."""
        followed = self.begin()
        if followed is not None:
            return followed
        try:
            verdicts = self._probe_nodes()
        except BaseException:
            self.abandon()
            raise
        return self.finish(verdicts)

    # A check in two halves, for a scheduler that probes each node with its host's other
    # stages (one round trip per host and cycle, ``sensors._watch.schedule``): begin, the
    # nodes' verdicts from their hosts' batches, then finish (or abandon).

    def begin(self) -> Verdict | None:
        """Begin a check: the verdict followed from another watch that holds the stage (the
        check ends there), or None: the nodes are to be checked, and their verdicts handed
        to :meth:`finish` (or the check ended by :meth:`abandon`); until then this checker
        is locked."""
        self.lock.acquire()
        try:
            followed = self.followed()
        except BaseException:
            self.lock.release()
            raise
        if followed is not None:
            self.lock.release()
        return followed

    def finish(self, verdicts: Sequence[Verdict]) -> Verdict:
        """End a check :meth:`begin` began: the verdict across the nodes' ``verdicts`` (one per
        node, in order), saved."""
        try:
            if len(verdicts) != len(self.probes):
                raise ValueError(f"{len(verdicts)} verdicts for {len(self.probes)} probes")
            return self.save(self._combine(verdicts))
        finally:
            self.lock.release()

    def abandon(self) -> None:
        """End a check :meth:`begin` began without a verdict (a node's probe raised)."""
        self.lock.release()

    def _probe_nodes(self) -> list[Verdict]:
        """Every probe's verdict, in :attr:`probes` order: one round trip per host, the hosts
        in parallel."""
        by_host: dict[Any, list[int]] = {}
        for k, checker in enumerate(self.probes):
            by_host.setdefault(checker.host, []).append(k)
        groups = list(by_host.values())
        verdicts: list[Verdict | None] = [None] * len(self.probes)
        answers = self._pool.map(lambda g: check_batch([self.probes[k] for k in g]), groups)
        for group, answer in zip(groups, answers, strict=True):
            for k, verdict in zip(group, answer, strict=True):
                verdicts[k] = verdict
        return [v for v in verdicts if v is not None]

    def _check(self) -> Verdict:
        return self._combine(self._probe_nodes())

    def _combine(self, verdicts: Sequence[Verdict]) -> Verdict:
        self._checked_here = True
        run = self.nodes[0].run
        if run is not None and self._across_run is not None and run != self._across_run:
            # A new run of the job (node 0's Checker set its last run's memory aside): what
            # the hosts showed was that run's. Kept, the most ranks a host showed in run 1
            # stood for run 2's, and a host that showed 1 of 2 passed the per-host check
            # (an adversary's review: serve and the store keep this memory run after run).
            # The processes each host showed in it are kept as that run's, as decide_across
            # keeps them where it finds node 0's job begun again itself: forgotten, node 1's
            # rank of the last run, killed, was taken for the writer of a re-run's line no
            # check saw, and for a rank of this run (multi-host fuzzer seed 51033: complete
            # with a rank of run 2 never started).
            per_host = self.stage.process.per_host if self.stage.process is not None else None
            self._memory = self._memory.next_run(per_host=per_host)
        self._across_run = run if run is not None else self._across_run
        ranks: list[dict[str, Reading]] = [{} for _ in self.nodes]
        for (k, rank, _), rank_verdict in zip(self.rank_logs, verdicts[len(self.nodes) :], strict=True):
            reading = rank_verdict.readings.get("log")
            if reading is not None:
                ranks[k][f"log#rank{rank}"] = reading
        verdicts = verdicts[: len(self.nodes)]
        nodes = [
            NodeCheck(label, v, r, probe.clock_ahead, probe.ended_alive)
            for label, v, r, probe in zip(self.labels, verdicts, ranks, self.nodes, strict=True)
        ]
        # The verdict's own times (when it was checked, since when it holds) on one clock, this
        # machine's: the latest of the hosts' was whichever host's was ahead, or this
        # machine's for a host that could not be read, and a state held while that changed
        # was said to have lasted the hosts' skew ("still unknown for 1h" after 30 s). What
        # is measured on a host (progress, ranks found gone) stays on its clock (decide_across).
        now = time.time()
        per_host = self.stage.process.per_host if self.stage.process is not None else None
        verdict, self._memory = decide_across(
            self.stage.stage, nodes, self.stage.policy, per_host, self._memory, now
        )
        self.nodes[0].elsewhere = at_work_elsewhere(nodes, self._memory)
        held = self.last is not None and self.last.state is verdict.state and self.last.since is not None
        verdict = replace(verdict, since=self.last.since if held and self.last is not None else now)
        self.last = verdict
        return verdict

    # ------------------------------------------------------------------ the store

    @property
    def persistence(self) -> Persistence | None:
        """This stage's row in the state store (None: memory lives with this checker only)."""
        return self._persist

    @property
    def saving(self) -> bool:
        return self._persist is not None and self._saving

    @property
    def own_run(self) -> OwnRun:
        """What this watch was told of its run: a start given with ``since``, or None."""
        return self._since

    @property
    def run(self) -> Run | None:
        """Where node 0's run begins, once known: the stage's run (its announcements are
        keyed by it)."""
        return self.nodes[0].run

    def _take_over(self) -> None:
        self._restore()

    def _own_memory(self) -> Any:
        return self._snapshot()

    def _as_holder(self, memory: Mapping[str, Any]) -> None:
        self._reset()
        self._adopt(memory)

    def _restore_own(self, kept: Any) -> None:
        self._put_back(kept)

    def _snapshot(self) -> tuple[Any, ...]:
        return ([probe.kept() for probe in self.probes], self._memory, self._across_run, self.last)

    def _put_back(self, snapshot: tuple[Any, ...]) -> None:
        probes, self._memory, self._across_run, self.last = snapshot
        for probe, kept in zip(self.probes, probes, strict=True):
            probe.put_back(kept)

    def _reset(self) -> None:
        for probe in self.probes:
            probe.forget()
        self._memory, self._across_run, self.last = AcrossMemory(), None, None

    def memory_doc(self) -> dict[str, Any]:
        """What the store keeps of this stage: every node's memory, the memory across them,
        the run (node 0's) and the last verdict."""
        return {
            "nodes": {label: node.memory_doc() for label, node in zip(self.labels, self.nodes, strict=True)},
            "ranks": {str(rank): c.memory_doc() for _, rank, c in self.rank_logs},
            "across": self._memory,
            "run": self.run,
            "last": self.last,
        }

    def _restore(self) -> None:
        assert self._persist is not None
        restored = self._persist.restore()
        for note in restored.notes:
            log.warning("%s: %s", self.stage.stage, note)
        if restored.memory:
            self._go_on_from(restored.memory)

    def _go_on_from(self, memory: Mapping[str, Any]) -> None:
        """Go on from a stored document of this stage, where it is of this watch's run: each
        node from its own memory where it is of this watch's run (as a Checker does), the
        hosts together only when node 0 went on from it (the document's run is node 0's; a
        node whose own memory was not of the run starts afresh beside it)."""
        nodes = memory.get("nodes")
        if not isinstance(nodes, Mapping) or not is_this_run(memory.get("run"), self._since, one_clock=False):
            return
        for label, node in zip(self.labels, self.nodes, strict=True):
            node.go_on_from(nodes.get(label))
        ranks = memory.get("ranks")
        for _, rank, checker in self.rank_logs:
            checker.go_on_from(ranks.get(str(rank)) if isinstance(ranks, Mapping) else None)
        if self.nodes[0].run != memory.get("run"):
            return  # node 0 did not go on from it (another run): nothing across hosts either
        self._across_from(memory)

    def _adopt(self, memory: Mapping[str, Any]) -> None:
        """Go on from the holder's document whole (its run was found this watch's run): every
        node's memory as the holder had it, as :meth:`Checker._confirmed` adopts a holder's
        memory. Not through :meth:`_go_on_from`: a node's memory is of this run there only
        where its run is this watch's ``since`` exactly, and a holder told nothing of the run
        (serve) began its nodes' runs with their processes: the check "with the holder's
        memory" was a fresh one, ranks gone before this watch looked were never seen, and a
        follower given ``since`` never confirmed a finished stage (an adversary's review)."""
        nodes = memory.get("nodes")
        if not isinstance(nodes, Mapping):
            return
        ranks = memory.get("ranks")
        ranks = ranks if isinstance(ranks, Mapping) else {}
        own = [*zip(self.labels, self.nodes, strict=True), *((str(r), c) for _, r, c in self.rank_logs)]
        for k, (key, checker) in enumerate(own):
            doc = (nodes if k < len(self.nodes) else ranks).get(key)
            if isinstance(doc, Mapping):
                checker.adopt(doc)
        self._across_from(memory)

    def _across_from(self, memory: Mapping[str, Any]) -> None:
        """The memory across hosts and the last verdict, from a stored document."""
        across = memory.get("across")
        if isinstance(across, AcrossMemory):
            self._memory, self._across_run = across, memory.get("run")
        last = memory.get("last")
        self.last = last if isinstance(last, Verdict) else None

    def save(self, verdict: Verdict) -> Verdict:
        """``verdict``, after saving this stage's memory (when a state store keeps it)."""
        if self._persist is not None and self._saving:
            save_all([(self._persist, self.memory_doc(), verdict)])
        return verdict

    def announced(self) -> Verdict | None:
        """This run's final verdict when the store says it was announced already (a gate
        started again on a finished run), after one fresh check: a rank alive on any host,
        or node 0 on a new run, is no finished run."""
        if self._persist is None:
            return None
        run, last = self.run, self.last
        known = self._persist.announced(run, last)
        if known is None:
            return None
        fresh = self.check()
        if is_followed(fresh) and not fresh.state.final:
            # Another watch's verdict, not confirmed here: the nodes' last verdicts are not
            # of a check made now, and say nothing of ranks alive now.
            return None
        alive = any(
            (r := v.readings.get("process")) is not None and r.says is Says.WORKING
            for v in [n.last for n in self.nodes if n.last is not None]
        )
        if self.run != run or alive:
            return None
        return known

    def announce(self, verdict: Verdict) -> bool:
        """Record ``verdict`` as this run's final one; False when it was announced before."""
        if self._persist is None:
            return True
        return self._persist.announce(self.run, verdict)

    # ------------------------------------------------------------------ waiting

    def watch(
        self,
        *,
        timeout: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> Watch:
        """As :meth:`Checker.watch`: a check every ``policy.interval`` until final or timeout."""
        return Watch.of(self.check, self.stage.policy, timeout=timeout, sleep=sleep, clock=clock)

    @property
    def takes_since(self) -> bool:
        """Whether this watch can be given a run start: its nodes' checks (see Following)."""
        return self.nodes[0].takes_since

    @takes_since.setter
    def takes_since(self, value: bool) -> None:
        for node in self.nodes:
            node.takes_since = value
        for _, _, rank_log in self.rank_logs:
            rank_log.takes_since = value

    def close(self) -> None:
        """Release the stage's lease; close the store when it was opened here."""
        for probe in self.probes:
            probe.close()
        if self._persist is not None:
            self._persist.close()
        self._pool.shutdown(wait=False)

    def __enter__(self) -> SpanChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _RankLog(Checker):
    """The log of one of a node's other ranks (``Stage.rank_logs``), read on the node's host in
    its probe, after the node: a log of its own (bound by ``since``, or else by this watch: the
    lines written while it looks), whose memory is of its node's run. A new run of the node
    (its ranks begun again) sets that memory aside: what it held (a completion line found,
    where the watch's bytes began) was the last run's. Kept, a rank that wrote nothing in run 2
    showed run 1's line, found while a watch looked at run 1, as run 2's (an adversary's
    review). The node's run binds it as it binds the node's own log, and the node's processes
    as its check saw them tell whose its lines are (:meth:`_borrowed_job`)."""

    #: Its lines are of its node's run, not of this watch's start (see Checker).
    watch_start_binds = False

    def __init__(self, stage: Stage, node: Checker, *, since: Since | None) -> None:
        super().__init__(stage, host=node.host, since=since)
        self.node = node
        #: The node's run this memory is of (None: not known yet).
        self.node_run: Run | None = None
        #: The node's job processes seen alive since this memory began.
        self.node_pids: frozenset[int] = frozenset()
        #: Where the node's run stayed the same across a re-run (begun within
        #: RERUN_START_GAP), the re-run's start, which this memory's run is (None: the node's).
        self.again_run: Run | None = None

    def absorb(self, sections: dict[str, bytes], nonce: str, meta: Meta | None = None) -> Verdict:
        run = self.node.run
        live = live_pids(self.node.last)
        # The node's run changes only when its processes began 2 s or more after the run it
        # knew: a re-run begun sooner (an elastic restart) is the same "run" there. Every
        # live process of the node one this memory never saw is a new run as well (fuzzer
        # seed 195: run 2 began 1 s after run 1, rank 1 was killed without a line, and run
        # 1's line in its log was taken for run 2's).
        again = bool(live) and bool(self.node_pids) and not live & self.node_pids
        if (run is not None and run != self.node_run) or again:
            same_run = run == self.node_run  # forget() clears it
            if self.node_run is not None or again:
                log.info("%s: its node's job began again: its last run's memory set aside", self.stage.stage)
                self.forget()
            # Begun again within the node's run (its start unchanged): this memory's run begins
            # with the new processes, not the node's first. Bound by the node's run, a line the
            # last run wrote in the rank's log (born after that run began: all of it "the
            # run's") was found anew with the re-run's ranks gone, no later process at work to
            # show it older: run 1's line completed run 2, whose rank was killed without a byte
            # (tests/test_fuzz_span_routes.py seed 195, 2 of 8 under load).
            began = _earliest_start(self.node.last, live) if again and same_run else None
            self.again_run = (
                replace(run, started_at=began)
                if run is not None
                and run.started_at is not None
                and began is not None
                and began > run.started_at
                else None
            )
            self.node_run = run
        self.node_pids |= live
        if self._since is None and run is not None and self._memory.run is None:
            # Bound by its node's run, as the node's own log is (told by the same processes,
            # _borrowed_job): what was written before the run began is an earlier run's. Bound
            # by this watch alone, a log the run's rank wrote into before a check read it held
            # the last run's line beside its own ("no run start is known", unknown for good)
            # and the last run's error line (failed: multi-host fuzzer seeds 7089, 7118, 7237).
            self._memory.run = self.again_run or run
        return super().absorb(sections, nonce, meta)

    def _borrowed_job(self) -> JobView | None:
        """Its node's processes as the node's check (read just before, in the same probe) saw
        them: whose lines the rank's log holds is a question of which of them was alive when
        they were written. Without them, a rank's teardown words after its own completion line
        were no known process's, and its log unknown for good (an ML engineer's trial: a log
        per rank under ``all``, the gate never opened)."""
        return self.node.job_seen

    def memory_doc(self) -> dict[str, Any]:
        return {**super().memory_doc(), "node_run": self.node_run, "node_pids": sorted(self.node_pids)}

    def _adopt(self, memory: Mapping[str, Any]) -> None:
        super()._adopt(memory)
        node_run = memory.get("node_run")
        self.node_run = node_run if isinstance(node_run, Run) else None
        pids = memory.get("node_pids")
        listed = pids if isinstance(pids, list) else []
        self.node_pids = frozenset(p for p in listed if isinstance(p, int))

    def kept(self) -> tuple[Any, ...]:
        return (*super().kept(), self.node_run, self.node_pids)

    def put_back(self, kept: tuple[Any, ...]) -> None:
        super().put_back(kept[:-2])
        self.node_run, self.node_pids = kept[-2], kept[-1]

    def forget(self) -> None:
        super().forget()
        self.node_run = None
        self.node_pids = frozenset()


def _rank_of(stage: Stage) -> int:
    """The rank a log of a rank's stage is (its name ends ``#rank<N>``: ``Stage.rank_logs``)."""
    return int(stage.stage.rpartition("#rank")[2])


def checker_for(
    stage: Stage,
    *,
    since: str | float | Since | None = None,
    state: Store | str | os.PathLike[str] | None = None,
    run: Run | None = None,
    began: float | None = None,
) -> Checker | SpanChecker:
    """The checker of ``stage``: a :class:`Checker` for one host, a :class:`SpanChecker` for
    a stage over several (``hosts:``). ``began``: see :class:`Checker` (a stage over several
    hosts takes no run start from its watch)."""
    if stage.hosts is not None:
        return SpanChecker(stage, since=since, state=state, run=run)
    return Checker(stage, since=since, state=state, run=run, began=began)


#: What checks a stage: one host's :class:`Checker`, or a :class:`SpanChecker` over several.
AnyChecker = Checker | SpanChecker


def _earliest_start(verdict: Verdict | None, pids: frozenset[int]) -> float | None:
    """When the earliest of ``pids`` began (host clock), as the node's check listed them."""
    p = verdict.readings.get("process") if verdict is not None else None
    listed = p.evidence.get("processes") if p is not None else None
    starts = [
        float(e["started_at"])
        for e in (listed if isinstance(listed, (list, tuple)) else ())
        if isinstance(e, Mapping) and e.get("pid") in pids and isinstance(e.get("started_at"), (int, float))
    ]
    return min(starts) if starts else None
