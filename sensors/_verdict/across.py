"""One verdict for a stage over several hosts, from each host's verdict: pure, as ``decide``.

Each host (a *node*, node 0 first) is checked as a stage of its own (``Stage.nodes``): its
process and GPU signals, its own log where the log path names ``{host}`` or ``{node}``; the
outputs and a shared log are read once, on node 0. Where the log path names ``{rank}``, the
node's log is its first rank's, and its other ranks' logs come with its verdict as readings
``log#rankN`` (``NodeCheck.ranks``): any of them with an error line fails the stage (rule 1),
and under ``all`` each must show its completion line (rule 4). Node 0's verdict is the full single-host
verdict (every rule of docs/verdict.md); the other nodes add what only they can tell: whether
their job processes (their *ranks*) are gone, alive, or were lost while others wait.

The rules, first that applies wins (docs/multi-host.md, "One verdict across hosts"):

1. A failure any node's evidence shows (an error line, a recorded non-zero exit; under
   ``success: all`` any node's failed verdict): ``failed``, naming the node. In a log the
   nodes share, an error line that text after it cleared (one job's rule: it went on past it)
   fails the stage still where the check that first read it first found a rank gone: the
   text may be another rank's (``AcrossMemory.last_words``); ``unknown`` for good where that
   check first read the completion line too.
2. A hung collective: ranks lost on a node (fewer alive than ``process.per_host`` after all
   were seen, or every one gone) while ranks on other nodes are alive and every node with live
   ranks has made no progress for ``stall_after``: ``failed``, naming who is gone and who waits.
   GPU utilisation is never progress here (NCCL spins at 100 % while it waits). A rank that
   ended after its run's completion line (its own log's; node 0's under ``chief``, or in a log
   the nodes share) is not lost: ranks hung in their teardown after it are their nodes'
   verdicts' business (stalled), never a failure here. Under ``chief`` that line is rank 0's:
   rank 0 gone with it ended after it, whatever error line follows it (rule 1's words).
3. A node that cannot be read: ``unknown``, never done.
4. Node 0 complete, and every other node done (its readings all done — under ``chief`` its own
   log need not be — its ranks seen alive in this watch or its own log's completion line
   read, no fewer ranks seen than ``per_host``): ``complete``.
5. Otherwise the gravest of node 0's verdict and of the nodes whose ranks are alive
   (contradiction, stalled, unknown, running), with the reasons that hold a stage back, that
   of the node whose state it is first (after a lost rank's, where one is said).
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from sensors._base.model import Reading, Says, State, Stuck, Verdict
from sensors._base.tolerances import CLOCKS_APART, START_ROUNDING, WHOLE_SECOND
from sensors._config.stage import PolicySpec
from sensors._verdict.progress import short

__all__ = ["AcrossMemory", "NodeCheck", "at_work_elsewhere", "decide_across"]


@dataclass(frozen=True)
class NodeCheck:
    """One node's check: its host's name as the verdict writes it, its verdict, and its other
    ranks' log readings (``log#rankN``, where the log path names ``{rank}``)."""

    host: str
    verdict: Verdict
    ranks: Mapping[str, Reading] = field(default_factory=dict)
    #: The least and the most its host's clock was ahead of the checking machine's, measured
    #: in the check's round trip (``Checker.clock_ahead``); None: not measured.
    ahead: tuple[float, float] | None = None
    #: Its job's processes whose end its host's exit watch saw, and the last moment each was
    #: known alive (its host's clock; ``Checker.ended_alive``).
    ended: Mapping[int, float] = field(default_factory=dict)

    @property
    def readings(self) -> dict[str, Reading]:
        """The node's own readings and its ranks' logs."""
        return {**self.verdict.readings, **self.ranks}


@dataclass(frozen=True)
class AcrossMemory:
    """What the verdict across hosts remembers between checks, per host (by name)."""

    most_alive: Mapping[str, int] = field(default_factory=dict)  # the most ranks seen alive at once
    # When each host was first found with fewer ranks alive than it had (its clock): what
    # "found gone at" says where its ranks cannot be named one by one (``gone_at``).
    lost_at: Mapping[str, float] = field(default_factory=dict)
    marks: Mapping[str, tuple[object, ...]] = field(default_factory=dict)  # what progress is measured by
    moved_at: Mapping[str, float] = field(default_factory=dict)  # when it last moved
    chief_pids: tuple[int, ...] = ()  # node 0's job processes seen alive in this memory's run
    chief_began: float | None = None  # where node 0's run began, found begun again here (its clock)
    pids: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # job processes seen alive, per host
    pids_before: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # those of the run before
    # Each host's ranks seen alive, by PID: (global rank or None, how it was told, last seen
    # alive on the host's clock): what names a lost rank once its process is gone.
    sightings: Mapping[str, Mapping[int, tuple[int | None, str, float]]] = field(default_factory=dict)
    # Each host's last check with all its ranks alive (``per_host``, else the most seen): a
    # rank last seen before it was replaced then (an elastic restart), it is not lost now.
    whole_at: Mapping[str, float] = field(default_factory=dict)
    # Each host's ranks seen alive and gone since, by PID: the check that first found each
    # one gone (the host's clock). Not when the host began to count as lost: that was 6 s
    # after the rank was found gone where a worker's line after the chief's unset its done
    # (notes/ml43.md, item 5).
    gone_at: Mapping[str, Mapping[int, float]] = field(default_factory=dict)
    # Each host's ranks that ended before node 0's completion line was written, by PID:
    # found gone at a check before one whose read of node 0's log found no line of this run
    # (see ``_ended_before_line``). The line in a log the nodes share says nothing of them.
    ended_before_line: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    # Each host's rank sighting proven after node 0's run began, and the start it was proven
    # against (its host's clock; node 0's): a proof made with the offsets of its check holds
    # at every later check of that run, where a slow round trip (as wide as ``CLOCK_STEP``,
    # which keeps no narrower bounds) left the order untold again: complete, then unknown
    # (multi-host fuzzer seeds 21179, 23076, 32020, 32029).
    ordered: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    # A host whose job began again (live processes this memory never saw there, its last ones
    # seen) while none of node 0's was alive: a later run, and node 0's completion line is the
    # last run's, until node 0's job begins again too (multi-host fuzzer seed 20).
    later_elsewhere: str | None = None
    # Each host's latest check read (its clock's ``checked_at``, taken before that check's
    # scan): a check that found processes gone there had ended by then.
    read_at: Mapping[str, float] = field(default_factory=dict)
    # Each host whose last run's processes (``pids_before``) had all been found gone at a
    # check before another read it: that later check's time (its clock). None of them wrote
    # what the host's clock stamps later (a file's time comes from the kernel's coarse clock,
    # which lags the one ``date`` reads, never leads it). Only where that run's processes
    # there are all its ranks there (``per_host`` of them seen alive at once): a proof of those
    # seen says nothing of one never seen (tests/test_adversary_53997.py).
    before_gone_by: Mapping[str, float] = field(default_factory=dict)
    # An error line in a log the nodes share, first read at the check that first found a rank
    # gone, though text after it cleared it (``survived_error``): the error may be that rank's
    # last words, and the text after it another rank's. (The error line, who was found gone
    # then, in words, and whether that check first read node 0's completion line too.) Kept
    # for the run: nothing that rank can write again tells otherwise.
    last_words: tuple[str, str, bool] | None = None

    def next_run(self, chief_began: float | None = None, per_host: int | None = None) -> AcrossMemory:
        """The memory a new run of node 0's job begins with: the processes each host showed
        in this one kept as the last run's (``pids_before``). A host that showed none in it
        (not read through it: an SSH blip) keeps those of the run before: every read lists
        each live process, so one of an earlier run still alive was shown where the host was
        read. Forgotten, node 1's rank of run 1, hung through run 2 while node 1 could not be
        read, stood for its rank of run 3, which never started (an adversary's review).

        What was proven gone (``before_gone_by``) is kept for no such host: a proof of the run
        before's processes says nothing of the last run's there, never seen (run 2's rank on
        node 1, hidden by a blip, wrote clearly after run 3 began, after run 1's were proven
        gone: complete with run 3's rank there never started). Nor for a host that showed
        fewer of the last run's ranks at once than ``per_host``: one never seen may have
        outlived the rest (tests/test_adversary_53997.py)."""
        hosts = {*self.pids, *self.pids_before}
        kept = {h: self.pids.get(h) or self.pids_before.get(h, ()) for h in hosts}
        gone_by = {}
        for h, pids in self.pids.items():
            found, read = self.gone_at.get(h, {}), self.read_at.get(h)
            if (
                pids
                and self.most_alive.get(h, 0) >= (per_host or 1)
                and read is not None
                and all(p in found for p in pids)
                and read > max(found[p] for p in pids)
            ):
                gone_by[h] = read
        return AcrossMemory(
            chief_began=chief_began, pids_before=kept, read_at=self.read_at, before_gone_by=gone_by
        )


#: Graver first: the state a stage shows when node 0 and the live nodes disagree.
_GRAVITY = (State.CONTRADICTION, State.STALLED, State.UNKNOWN, State.RUNNING)


def decide_across(
    stage: str,
    nodes: Sequence[NodeCheck],
    policy: PolicySpec,
    per_host: int | None,
    memory: AcrossMemory,
    now: float | None,
) -> tuple[Verdict, AcrossMemory]:
    """The stage's verdict from its nodes' verdicts (node 0 first), and the new memory.

    Each host's times are its own clock's (its check's ``checked_at``): what is measured
    between two checks of a host (progress, when ranks were found gone) never mixes clocks.
    """
    live = {n.host: live_pids(n.verdict) for n in nodes}  # read once: each node's list is walked
    chief_live = live[nodes[0].host]
    if chief_live and memory.chief_pids and not chief_live & set(memory.chief_pids):
        # Every live process of node 0 is one this memory never saw: the job began again,
        # and what the hosts showed was the last run's. Node 0's run (the caller's test)
        # changes only for processes begun 2 s or more after it: kept across a re-run begun
        # sooner, the 2 ranks node 1 showed in run 1 stood for the 1 of run 2 (fuzzer seed 272).
        began = _process_started(nodes[0].verdict)
        # The processes each host showed in the last run: evidence of theirs (a rank last
        # seen, a line they wrote) is that run's, whatever the clocks say (seeds 339, 165:
        # node 1's run-1 rank last seen 0.3 s before run 2 began, within the clocks apart).
        memory = memory.next_run(chief_began=began, per_host=per_host)
    later = memory.later_elsewhere
    if later is None and memory.chief_pids and not chief_live:
        # A host with a live process this memory never saw there, node 0's gone: a later run.
        # Also where this memory saw none there (node 1's rank never started in node 0's run):
        # run 3 began on node 1 alone, its rank was killed, and node 0's run-2 line completed
        # the stage (multi-host fuzzer seed 12117, under chief).
        later = next(
            (n.host for n in nodes[1:] if live[n.host] - set(memory.pids.get(n.host, ()))),
            None,
        )
    alive = {n.host: _alive(n.verdict) for n in nodes}
    start = _chief_start(nodes[0], memory)
    ordered = {h: o for h, o in memory.ordered.items() if o[1] == start}  # this run's start's
    for n in nodes[1:]:
        p = n.verdict.readings.get("process")
        last = p.evidence.get("last_seen_alive") if p is not None else None
        if start is not None and _seen_since(last, n.ahead, start, nodes[0].ahead):
            ordered[n.host] = (float(last["at"]), start)  # type: ignore[index]
    most = dict(memory.most_alive)
    for n in nodes:
        count = alive[n.host]
        if count is not None:
            # The last run's processes still alive (kept as that run's: ``pids_before``) are
            # no ranks of this one: counted, node 1's run-1 rank hung into run 2 made 2 of 2
            # with run 2's rank 3 never started (an adversary's review). Left out, a count
            # errs low: "the others were never seen", never a rank made up.
            earlier = len(live[n.host] & set(memory.pids_before.get(n.host, ())))
            most[n.host] = max(most.get(n.host, 0), count - earlier)
    short = {n.host for n in nodes if _short(alive[n.host], most.get(n.host, 0), per_host)}
    sightings = {
        n.host: _sighted(n, k, per_host, memory.sightings.get(n.host, {})) for k, n in enumerate(nodes)
    }
    gone_at = {n.host: _found_gone(n, sightings[n.host], memory.gone_at.get(n.host, {})) for n in nodes}
    last_words = memory.last_words or _last_words(nodes, sightings, gone_at, short)
    holders = _holders(nodes, sightings)
    # Each host's ranks seen alive and gone now, named; those that ended after their own
    # completion line said finished.
    # Under ``chief`` node 0's completion line is rank 0's: rank 0 gone with it in node 0's
    # log ended after it, whatever error line another rank wrote after it (notes/ml44.md,
    # item 3: rank 2's traceback after it named rank 0 among the ranks a collective may wait for).
    chief_wrote = policy.success == "chief" and _line_written(nodes[0].verdict.readings.get("log"))
    gone = {
        n.host: _gone_ranks(
            n,
            k,
            per_host,
            sightings.get(n.host, {}),
            memory.whole_at.get(n.host),
            holders,
            _cut(n.verdict),
            gone_at[n.host],
            chief_wrote=k == 0 and chief_wrote,
        )
        for k, n in enumerate(nodes)
        if n.host in short
    }
    # Under ``chief``, node 0's completion line is the job's success: ranks that end after it
    # tear down, they are not lost (no collective waits for them, nothing failed). So is the
    # line in a log every rank writes (the nodes share it), whatever the policy: node 1's
    # ranks ended after their teardown lines there, and were a lost rank (notes/ml43.md).
    job_done = (policy.success == "chief" or _log_shared(nodes)) and _chief_line(nodes[0])
    # Under ``all`` only ranks that ended after the line: one found gone before a check that
    # read node 0's log without it ended before it was written (killed while rank 0 worked on
    # alone, then waited in the last collective): the line says nothing of it.
    before_line = _ended_before_line(nodes[0], memory, gone_at)
    after_line = {
        h
        for h, ranks in gone.items()
        if job_done and (policy.success == "chief" or not any(g.pid in before_line.get(h, ()) for g in ranks))
    }
    lost = {
        n.host
        for n in nodes
        if n.host in short
        and n.host not in after_line
        and not _finished(n, policy)
        and _lost_one(alive[n.host], per_host, gone[n.host])
    }
    gone = {h: ranks for h, ranks in gone.items() if h in lost}
    whole_at = dict(memory.whole_at)
    for n in nodes:
        count, at = alive[n.host], n.verdict.checked_at
        if count and at is not None and count >= (per_host or most.get(n.host, 0)):
            whole_at[n.host] = at
    # Kept for a host not read this check (a blip says nothing of its ranks): dropped, the
    # time they were first found gone became the time the host was read again.
    lost_at = {h: t for h, t in memory.lost_at.items() if h in short or alive.get(h) is None}
    marks, moved_at = dict(memory.marks), dict(memory.moved_at)
    idle: dict[str, float] = {}
    for node in nodes:
        at = node.verdict.checked_at
        if node.host in short and node.host not in lost_at and at is not None:
            lost_at[node.host] = at
        mark = _mark(node)
        if mark is None or at is None:
            continue  # not read: neither progress nor its absence
        before = marks.get(node.host)
        if before is None or _moved(before, mark, at - moved_at.get(node.host, at), alive[node.host]):
            # The mark kept is the one progress was last seen at: a trickle is measured
            # against it as a whole, not check by check (where each step is under a tick).
            moved_at[node.host] = at
            marks[node.host] = mark
        idle[node.host] = at - moved_at[node.host]
    new_memory = AcrossMemory(
        most_alive=most,
        lost_at=lost_at,
        marks=marks,
        moved_at=moved_at,
        chief_pids=tuple(sorted(set(memory.chief_pids) | chief_live)),
        chief_began=memory.chief_began,
        pids={n.host: tuple(sorted(set(memory.pids.get(n.host, ())) | live[n.host])) for n in nodes},
        pids_before=memory.pids_before,
        sightings=sightings,
        whole_at=whole_at,
        ordered=ordered,
        gone_at={h: found for h, found in gone_at.items() if found},
        ended_before_line=before_line,
        later_elsewhere=later,
        read_at={
            **memory.read_at,
            # A host not read: its verdict's time is this machine's clock, not the host's.
            **{
                n.host: n.verdict.checked_at
                for n in nodes
                if n.verdict.checked_at is not None and not _unreadable(n.verdict)
            },
        },
        before_gone_by=memory.before_gone_by,
        last_words=last_words,
    )
    state, reasons, shown = _rules(
        nodes, policy, per_host, alive, most, lost, lost_at, idle, new_memory, gone
    )
    shown = _as_shown(shown, nodes, state, per_host, alive, most, gone)
    verdict = Verdict(
        stage=stage,
        state=state,
        reasons=tuple(reasons),
        readings=shown,
        checked_at=now,
        host=", ".join(n.host for n in nodes),
        since=None,
        run=nodes[0].verdict.run,
        # Only the last words' rule says unknown while they are kept with the line (it comes
        # before every other rule that says unknown): for good.
        stuck=_UNTOLD if state is State.UNKNOWN and last_words is not None and last_words[2] else None,
    )
    return verdict, new_memory


def _rules(
    nodes: Sequence[NodeCheck],
    policy: PolicySpec,
    per_host: int | None,
    alive: Mapping[str, int | None],
    most: Mapping[str, int],
    lost: set[str],
    lost_at: Mapping[str, float],
    idle: Mapping[str, float],
    memory: AcrossMemory | None = None,
    gone: Mapping[str, Sequence[_Gone]] | None = None,
) -> tuple[State, list[str], dict[str, Reading]]:
    chief = nodes[0]
    every = _readings(nodes)
    # Rule 1: a failure some node's own evidence shows.
    waiting = [n for n in nodes if (alive[n.host] or 0) > 0]
    # Node 0's ranks gone with the outputs short is a failure on one host, not yet across
    # several: the outputs are shared storage, and ranks alive on another node may still write
    # them (a shard per rank). Failed once they end so (multi-host fuzzer seeds 2066, 2311,
    # 2314, 2941, 2968, 2985, 2998, 3049, 3149: node 0 failed while node 1 still worked).
    # Only while one of them makes progress (``stall_after``, as rule 2 measures it): ranks
    # hung in their teardown after rank 0 left (nothing lost: node 0's line is written) never
    # end, and the stage said "running, they may still write them" for good, where before it
    # failed at once (tests/test_adversary_42.py).
    others = [n for n in waiting if n is not chief]
    short_only = _only_short(chief, shared=_log_shared(nodes))
    short_held = short_only and any(idle.get(n.host, 0.0) < policy.stall_after for n in others)
    short_stalled = (
        [
            f"ranks alive on {_alive_on(others, alive)} made no"
            f" progress for {min(idle[n.host] for n in others):.0f}s (I/O, log and outputs unchanged,"
            f" CPU under {_WAITING_CPU_SHARE:.0%} of a core a rank): they are not writing the outputs"
        ]
        if short_only and others and not short_held
        else []
    )
    # Ranks lost while others are alive: said with a failure (the others may wait for them).
    left = (
        [
            f"{_all_lost(lost, alive, most, per_host, lost_at, gone or {})}; ranks alive on "
            + _alive_on(waiting, alive)
            + ": a collective may be waiting for a lost rank"
        ]
        if lost and waiting
        else []
    )
    for k, node in enumerate(nodes):
        if k == 0 and short_held:
            continue
        # A rank's log is named (``log#rank3: ...``): the host's own readings need no name. A
        # log the nodes share is no host's own: any rank may have written its error line, and
        # "node 0: error line" read as node 0 failed (notes/ml43.md, item 6).
        failed = [
            f"shared log (read on {node.host}, node {k}): {r.detail}"
            if name == "log" and _shared_log(nodes, k)
            else f"{node.host}: {name}: {r.detail}"
            if name in node.ranks
            else f"{node.host}: {r.detail}"
            for name, r in node.readings.items()
            if r.says is Says.FAILED
        ]
        if failed or (node.verdict.state is State.FAILED and (k == 0 or policy.success == "all")):
            why = failed[0] if failed else f"{node.host}: {node.verdict.reasons[0]}"
            stalled = short_stalled if k == 0 else []
            reasons = [why, *stalled, *left, *_others(nodes, node, policy)]
            return State.FAILED, reasons, every
    # Rule 1 still: an error line in a log the nodes share, cleared by text after it, first
    # read at the check that first found a rank gone (``AcrossMemory.last_words``). The rule
    # of one job's log (text after an error line: the job went on past it) does not hold
    # there: the text may be another rank's, and says nothing of the one that wrote the error.
    if memory is not None and memory.last_words is not None:
        error, who, with_line = memory.last_words
        where = f"shared log (read on {chief.host}, node 0): error line: {error}"
        if not with_line:
            return (
                State.FAILED,
                [
                    f"{where} (first read at the check that first found gone {who}: it may be the"
                    " last words of a rank that ended then, and the text after it that cleared it"
                    " another rank's, which says nothing of the rank that wrote it)",
                    *left,
                    *_others(nodes, chief, policy),
                ],
                every,
            )
        return (
            State.UNKNOWN,
            [
                f"{where}; it, node 0's completion line and the end of {who} were all first read"
                " at one check: whether a rank that ended then wrote the error as its last words, or a"
                " rank went on past it, cannot be told",
                *(_said(n) for n in nodes),
            ],
            every,
        )
    # Rule 2: ranks lost on a node while the others wait without progress.
    # Progress is CPU time, I/O, the log and the outputs (``_mark``): a GPU busy is not, for
    # NCCL spins at 100 % while it waits for a peer that is gone.
    if lost and waiting and all(n.host in idle and idle[n.host] >= policy.stall_after for n in waiting):
        which = _all_lost(lost, alive, most, per_host, lost_at, gone or {})
        live = _alive_on(waiting, alive)
        quiet = min(idle[n.host] for n in waiting)
        busy = [n.host for n in waiting if _gpu_busy(n.verdict)]
        return (
            State.FAILED,
            [
                f"{which}; ranks alive on {live} with no progress for {quiet:.0f}s"
                f" (I/O, log and outputs unchanged, CPU under {_WAITING_CPU_SHARE:.0%} of a core a rank)"
                + (f", GPUs busy on {', '.join(busy)}" if busy else "")
                + ": a collective waiting for a lost rank",
                *(f"{n.host}: {n.verdict.reasons[0]}" for n in waiting if n.verdict.reasons),
            ],
            every,
        )
    if short_held:
        o = chief.verdict.readings["outputs"]
        reasons = [
            f"{chief.host} (node 0): its ranks are gone with the outputs short ({o.detail}), but"
            f" ranks are alive on {_alive_on(others, alive)}: the outputs are shared, and they may"
            " still write them;"
            f" failed if they end with the outputs short, or make no progress for {policy.stall_after:g}s",
            *_others(nodes, chief, policy),
        ]
        if lost:
            reasons.insert(0, _may_wait(_all_lost(lost, alive, most, per_host, lost_at, gone or {}), policy))
        return State.RUNNING, reasons, every
    # Rule 3: a node that cannot be read. Each one is named with its own cause: the person on
    # call mends every host the stage waits for, not the first alone.
    unread = [node for node in nodes if _unreadable(node.verdict)]
    if unread:
        return (
            State.UNKNOWN,
            [
                *(
                    f"{n.host} cannot be read: {next(iter(n.verdict.readings.values())).detail}"
                    for n in unread
                ),
                *(_said(n) for n in nodes if n not in unread),
            ],
            every,
        )
    # Rule 4: node 0 complete and every other node done.
    start = _chief_start(chief, memory)
    before = memory.pids_before if memory is not None else {}
    after = _unseen_run_after(chief.verdict)
    held = [
        (node, why)
        for k, node in enumerate(nodes)
        if (
            why := _not_done(
                k,
                node,
                policy,
                per_host,
                most,
                start,
                after,
                frozenset(before.get(node.host, ())),
                chief.ahead,
                _written_by(chief.verdict),
                memory.ordered.get(node.host) if memory is not None else None,
                memory.before_gone_by.get(node.host) if memory is not None else None,
            )
        )
    ]
    if not held and (why := _chief_line_unowned(nodes)):
        held = [(chief, why)]
    if not held and memory is not None and memory.later_elsewhere is not None:
        # Node 0's line is the last run's: another host's job began again after node 0's
        # ranks were all gone, and node 0's has not (a run whose node 0 never started).
        held = [
            (
                chief,
                f"{memory.later_elsewhere}: its job began again after node 0's ranks ended, and"
                f" node 0's has not: node 0's completion line is the last run's",
            )
        ]
    if not held:
        shown = {
            key: r
            for key, r in every.items()
            if r.says is Says.DONE or not (policy.success == "chief" and r.signal == "log")
        }
        left_out = sorted(k for k in every if k not in shown)
        notes = [f"{', '.join(left_out)}: not needed under success: chief"] if left_out else []
        hosts = ", ".join(n.host for n in nodes)
        # Node 0's own reasons ("agreed for 3 consecutive checks", its PID gone) are its alone:
        # named, not read as every host's.
        own = [f"{chief.host} (node 0): {r}" for r in chief.verdict.reasons]
        return State.COMPLETE, [f"every host agrees ({hosts})", *own, *notes], shown
    # Rule 5: the gravest of node 0's verdict and those of the nodes alive or holding it back;
    # with no rank alive anywhere, nothing is running: what holds the stage is unknown.
    holding = {node.host for node, _ in held}
    states = [chief.verdict.state] + [
        n.verdict.state for n in nodes[1:] if (alive[n.host] or 0) > 0 or n.host in holding
    ]
    fallback = State.RUNNING if waiting else State.UNKNOWN
    state = next((s for s in _GRAVITY if s in states), fallback)
    # The reason of the host whose state was chosen comes first (the one that decided it,
    # docs/verdict.md): node 0 "running: confirming (1/2 checks)" led an unknown that node 1's
    # exit grace decided (notes/ml43.md, item 3). Node order otherwise.
    first = next((i for i, (node, _) in enumerate(held) if node.verdict.state is state), 0)
    reasons = [held[first][1], *(why for i, (_, why) in enumerate(held) if i != first)]
    # Whatever the gravest state (node 0 stalled on its own log, say), a lost rank is said:
    # only under running it was, and a stalled stage hid the rank that may be why.
    if lost and waiting:
        reasons.insert(0, _may_wait(_all_lost(lost, alive, most, per_host, lost_at, gone or {}), policy))
    return state, reasons, every


#: The last words' rule's unknown (:attr:`AcrossMemory.last_words`, with the line): for good.
_UNTOLD = Stuck(
    "an error line in the log the nodes share, a rank's end and the completion line were all"
    " first read at one check: whether the error was that rank's last words cannot be told,"
    " and it can write no more, so no later check can tell either",
    "give each rank a log of its own ({rank} in log.path): an error line there is its writer's,"
    " and no other rank's text follows it",
)


def _last_words(
    nodes: Sequence[NodeCheck],
    sightings: Mapping[str, Mapping[int, tuple[int | None, str, float]]],
    gone_at: Mapping[str, Mapping[int, float]],
    short: set[str],
) -> tuple[str, str, bool] | None:
    """:attr:`AcrossMemory.last_words` where this check holds them (None: it does not): node
    0's log is one the nodes share, its read found an error line first there that later text
    cleared (``survived_error``), and a rank on some host (node 0's too) was first found gone
    at this same check, its host left with fewer ranks than it had (``short``). Checks follow
    one another: the error and that rank's end both came after the last check, and which
    came first cannot be told. A host whose ranks are all there again, the gone one replaced
    by a new process, restarted them (an elastic restart after the error: the job went on
    past it, as one job's log would say; an adversary's review)."""
    lg = nodes[0].verdict.readings.get("log")
    error = lg.evidence.get("survived_error") if lg is not None else None
    if lg is None or not isinstance(error, str) or not _log_shared(nodes):
        return None
    ended = [
        (n.host, pid)
        for n in nodes
        for pid, at in sorted(gone_at.get(n.host, {}).items())
        if at == n.verdict.checked_at and n.host in short
    ]
    if not ended:
        return None
    who = " and ".join(_rank_words(sightings.get(h, {}).get(pid), pid, h) for h, pid in ended)
    # Node 0's completion line of this run read now: after the error (a line before it would
    # not have cleared it), so first read at this check too.
    return error, who, isinstance(lg.evidence.get("complete_line"), str)


def _rank_words(seen: tuple[int | None, str, float] | None, pid: int, host: str) -> str:
    """A rank gone, in words, its rank as it was told: ``pid 4121 on gpu-02 (rank 13, so its
    environment's RANK says)``."""
    if seen is None or seen[0] is None:
        return f"pid {pid} on {host}"
    return f"pid {pid} on {host} (rank {seen[0]}, so {_HOW.get(seen[1], seen[1])} says)"


def _readings(nodes: Sequence[NodeCheck]) -> dict[str, Reading]:
    """Every node's readings, by ``signal@host``; what is read once (the outputs, a shared
    log) by its signal's name alone."""
    out: dict[str, Reading] = {}
    for node in nodes:
        for name, reading in node.readings.items():
            once = name == "outputs" or (name == "log" and not _per_host_log(nodes))
            out[name if once else f"{name}@{node.host}"] = reading
    return out


def _mark(node: NodeCheck) -> tuple[object, ...] | None:
    """What moves when a node's job makes progress: its CPU time and I/O, its logs' sizes, the
    output count (None: the node could not be read)."""
    if _unreadable(node.verdict):
        return None
    r = node.readings
    p, o = r.get("process"), r.get("outputs")
    logs = [
        (k, lg.evidence.get("inode"), lg.evidence.get("size"))
        for k, lg in sorted(r.items())
        if lg.signal == "log"
    ]
    return (
        p.evidence.get("cpu_seconds") if p else None,
        p.evidence.get("io_bytes") if p else None,
        tuple(logs) or None,
        o.evidence.get("count") if o else None,
        _cpu_by_pid(p),
    )


def _cpu_by_pid(p: Reading | None) -> dict[int, float]:
    """Each listed process's own CPU time (the list is cut at 16: those shown)."""
    listed = p.evidence.get("processes") if p else None
    out: dict[int, float] = {}
    for e in listed if isinstance(listed, (list, tuple)) else ():
        if not isinstance(e, Mapping):
            continue
        pid, cpu = e.get("pid"), e.get("cpu_seconds")
        if isinstance(pid, int) and isinstance(cpu, (int, float)) and e.get("state") not in _GONE_STATES:
            out[pid] = cpu
    return out


#: The CPU a rank blocked in a collective may still be charged, as a share of one core: a
#: waiting loop's wakeups (gloo's, a Python poll, a watchdog thread) are charged a whole
#: clock tick each time one lands on a tick, ~1 % of a core on a quiet host. Work shows
#: well above it; under it, CPU time alone is no progress.
_WAITING_CPU_SHARE = 0.05

#: CPU time is counted in clock ticks: two of them are within its precision.
_CPU_TICKS_SLACK = 0.02


def _moved(before: tuple[object, ...], now: tuple[object, ...], quiet: float, ranks: int | None) -> bool:
    """Whether a node's job made progress since ``before`` (its mark when it last did,
    ``quiet`` seconds ago): its I/O, logs or outputs changed, or its CPU time grew by more
    than ``ranks`` waiting ranks are charged in that time (or fell: a process gone or new), or
    one listed process's own CPU time by more than one waiting rank is."""
    if before[1:4] != now[1:4]:
        return True
    # One rank at work among waiting peers (rank 0's evaluation while the others wait at a
    # barrier) is work however many peers wait: measured rank by rank where they are listed.
    one = _CPU_TICKS_SLACK + _WAITING_CPU_SHARE * quiet
    # None in a mark kept by an older version (four fields).
    pids_was = before[4] if len(before) > 4 else None
    pids_now = now[4] if len(now) > 4 else None
    if (
        isinstance(pids_was, Mapping)
        and isinstance(pids_now, Mapping)
        and any(pid in pids_was and c - pids_was[pid] > one for pid, c in pids_now.items())
    ):
        return True
    cpu, was = now[0], before[0]
    if not isinstance(cpu, (int, float)) or not isinstance(was, (int, float)):
        return cpu != was
    floor = _CPU_TICKS_SLACK + _WAITING_CPU_SHARE * quiet * max(1, ranks or 1)
    return cpu < was or cpu - was > floor


def _gpu_busy(verdict: Verdict) -> bool:
    g = verdict.readings.get("gpu")
    return g is not None and g.says is Says.WORKING


def _per_host_log(nodes: Sequence[NodeCheck]) -> bool:
    return sum(1 for n in nodes if "log" in n.verdict.readings) > 1


#: Process states of a process that is gone (a zombie, dead): not a live rank.
_GONE_STATES = frozenset({"Z", "X", "x"})


def _alive(verdict: Verdict) -> int | None:
    """How many of the job's ranks the node's probe saw alive (None: not read): the live
    matched processes whose parent is not matched too (a rank's forked workers, such as
    DataLoader's, share its command line), as the probe counts them (``ranks``); from the
    listed processes where an older reading has no such count, or every live match where
    that list was cut."""
    p = verdict.readings.get("process")
    if p is None or p.says is Says.UNKNOWN:
        return None
    count = p.evidence.get("alive")
    if not isinstance(count, int):
        return None
    ranks = p.evidence.get("ranks")
    if isinstance(ranks, int) and not isinstance(ranks, bool):
        return ranks  # the probe's, over every match (the list below is cut at 16)
    listed = p.evidence.get("processes")
    matched = p.evidence.get("matched")
    if isinstance(listed, (list, tuple)) and isinstance(matched, int) and len(listed) == matched:
        pids = {e.get("pid") for e in listed if isinstance(e, Mapping)}
        return sum(
            1
            for e in listed
            if isinstance(e, Mapping) and e.get("state") not in _GONE_STATES and e.get("ppid") not in pids
        )
    return count


def live_pids(verdict: Verdict | None) -> frozenset[int]:
    """The PIDs of the job processes a node's verdict lists alive (none where not read)."""
    p = verdict.readings.get("process") if verdict is not None else None
    listed = p.evidence.get("processes") if p is not None and p.says is Says.WORKING else None
    if not isinstance(listed, (list, tuple)):
        return frozenset()
    return frozenset(
        e["pid"]
        for e in listed
        if isinstance(e, Mapping) and isinstance(e.get("pid"), int) and e.get("state") not in _GONE_STATES
    )


def _line_read(reading: Reading | None) -> bool:
    """Whether a log reading holds this run's completion line (its ``complete_line``: an
    earlier run's is not), done or not: followed by text its run's ranks may have written
    (their teardown, a wandb summary), or still written after it. Not with an error line."""
    if reading is None or reading.says is Says.FAILED:
        return False
    if not isinstance(reading.evidence.get("complete_line"), str):
        return reading.says is Says.DONE
    if reading.evidence.get("undatable_by") is not None or reading.evidence.get("exit_unclear"):
        # The line itself may be older than a process of the run (``undatable_by``: that
        # process may be a later run with no line of its own, the very rank now gone), or a
        # later run may have written the log since the launched job's exit: unknown, or
        # "still written after it", it is no rank's last word.
        return False
    # Unknown only for whose the text after it is.
    return reading.says is not Says.UNKNOWN or reading.evidence.get("followed_by") is not None


def _line_written(reading: Reading | None) -> bool:
    """Whether a log reading holds this run's completion line as :func:`_line_read` takes it,
    or would but for an error line after it: the line was written, whatever came after."""
    if reading is None or reading.says is not Says.FAILED:
        return _line_read(reading)
    return (
        isinstance(reading.evidence.get("complete_line"), str)
        and reading.evidence.get("undatable_by") is None
        and not reading.evidence.get("exit_unclear")
    )


def _ended_before_line(
    chief: NodeCheck, memory: AcrossMemory, gone_at: Mapping[str, Mapping[int, float]]
) -> dict[str, tuple[int, ...]]:
    """Each host's ranks that ended before node 0's completion line was written, by PID: the
    memory's, and those found gone at an earlier check (``memory.gone_at``) where node 0's log,
    read at this one, holds no completion line of this run (read, and at work: ``working``).
    One check of every host ends before the next begins: the rank ended before this read,
    the line was written after it. No clock is compared. Kept while the rank is still gone
    (``gone_at``: this check's)."""
    out = {h: set(pids) for h, pids in memory.ended_before_line.items()}
    lg = chief.verdict.readings.get("log")
    if lg is not None and lg.says is Says.WORKING and not _chief_line(chief):
        for h, found in memory.gone_at.items():
            out.setdefault(h, set()).update(found)
    return {
        h: kept
        for h, pids in out.items()
        if (kept := tuple(sorted(p for p in pids if p in gone_at.get(h, {}))))
    }


def _finished(node: NodeCheck, policy: PolicySpec) -> bool:
    """The node's own evidence says its job finished (its own verdict complete, or its own
    log's completion line of this run) and, with a log per rank under ``all``, every rank's
    log there shows its line: its ranks gone is no loss. (Its own log is its first rank's:
    that rank done says nothing of another killed there; under ``chief`` the others need
    write none.)"""
    if policy.success == "all" and not all(_line_read(r) for r in node.ranks.values()):
        return False
    return node.verdict.state is State.COMPLETE or _line_read(node.verdict.readings.get("log"))


def _short(alive: int | None, most: int, per_host: int | None) -> bool:
    """Whether a host has fewer ranks alive than it had: fewer than ``per_host`` after all
    were seen, or (without ``per_host``) none after some were."""
    if alive is None or most == 0:
        return False
    if per_host is not None:
        return most >= per_host and alive < per_host
    return alive == 0


def _lost_one(alive: int | None, per_host: int | None, gone: Sequence[_Gone]) -> bool:
    """Whether a short host's missing ranks are not all ranks that finished (``gone``: its
    ranks seen alive and gone now, named; each one's own log says whether it finished)."""
    if per_host is not None:
        return per_host - (alive or 0) > sum(g.finished for g in gone)
    return not gone or not all(g.finished for g in gone)


def _all_lost(
    lost: set[str],
    alive: Mapping[str, int | None],
    most: Mapping[str, int],
    per_host: int | None,
    lost_at: Mapping[str, float],
    gone: Mapping[str, Sequence[_Gone]],
) -> str:
    return "; ".join(
        _lost_words(h, alive[h], per_host, lost_at.get(h), gone.get(h, ())) for h in sorted(lost)
    )


def _lost_words(
    host: str, alive: int | None, per_host: int | None, at: float | None, gone: Sequence[_Gone] = ()
) -> str:
    """A host's lost ranks in words: how many, when they were found gone (its clock), each
    one named; a rank there that finished (its own log's completion line) is said apart."""
    lost = [g for g in gone if not g.finished]
    done = [g for g in gone if g.finished]
    # When each was first found gone: one time for all, or each its own. Where none is
    # named, when the host was first found short of ranks (``at``): with several missing,
    # the first of them then; without ``per_host``, every one by then (it counts none).
    found = {g.found_at for g in lost if g.found_at is not None}
    missing = per_host - (alive or 0) - len(done) if per_host is not None else None
    if len(found) == 1:
        when = f" (found gone at {_hms(found.pop())}, its clock)"
    elif found:
        when = " (times on its clock)"
    elif at is not None:
        first = "the first of them " if missing is not None and missing > 1 else ""
        when = f" ({first}found gone at {_hms(at)}, its clock)"
    else:
        when = ""
    # Which rank: on a node of 8 GPUs a person should not have to diff command lines to
    # find the stderr to read.
    named = [g.words(found=len(found) > 1) for g in lost]
    which = f": {'; '.join(named)}" if named else ""
    if done:
        ended = ", ".join(f"{g.rank} (pid {g.pid})" for g in done)
        which += (
            f"; rank {ended} ended after its log's completion line: not lost"
            if len(done) == 1
            else f"; ranks {ended} ended after their logs' completion lines: not lost"
        )
    if per_host is not None and missing is not None and missing < per_host:
        return f"{missing} of {per_host} ranks on {host} gone{when}{which}"
    if done:
        return f"ranks on {host} gone{when}{which}"
    return f"every rank on {host} gone{when}{which}"


def _hms(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC).strftime("%H:%M:%S UTC")


def _unreadable(verdict: Verdict) -> bool:
    """The host could not be asked (no reading has a time on its clock)."""
    return all(r.read_at is None for r in verdict.readings.values())


def _alive_on(nodes: Sequence[NodeCheck], alive: Mapping[str, int | None]) -> str:
    """The hosts of ``nodes`` with their ranks alive, in words: ``gpu-01 (8), gpu-02 (7)``."""
    return ", ".join(f"{n.host} ({alive[n.host]})" for n in nodes)


def _may_wait(lost: str, policy: PolicySpec) -> str:
    """Ranks lost (``lost``, in words) while others are alive: what would make it a failure."""
    return (
        f"{lost}; if the others make no progress for {policy.stall_after:g}s, it is a collective"
        " waiting for a lost rank"
    )


def _only_short(node: NodeCheck, shared: bool = False) -> bool:
    """Whether the node's verdict failed on the output count alone: its outputs short, its
    log's completion line found (or no log), no reading that says failed (an error line, an
    exit status). In a log the nodes share (``shared``), the line found is enough: text after
    it is any rank's (node 1's rank wrote a step after rank 0's line and exit, the log said
    working, and node 0's outputs short failed the stage while node 1 still worked: multi-host
    fuzzer seeds 57246, 58398, false failed)."""
    v = node.verdict
    o, lg = v.readings.get("outputs"), v.readings.get("log")
    line = lg is None or lg.says is Says.DONE
    if shared and lg is not None and lg.says is not Says.FAILED:
        line = line or isinstance(lg.evidence.get("complete_line"), str)
    return (
        v.state is State.FAILED
        and o is not None
        and o.says is Says.WORKING
        and short(o)
        and line
        and not any(r.says is Says.FAILED for r in v.readings.values())
    )


def _process_started(verdict: Verdict) -> float | None:
    """The earliest live job process's start that the node's process reading shows."""
    p = verdict.readings.get("process")
    started = p.evidence.get("started_at") if p is not None else None
    return float(started) if isinstance(started, (int, float)) else None


def _log_shared(nodes: Sequence[NodeCheck]) -> bool:
    """Whether node 0's log is not node 0's alone: the stage's one log (read on node 0 alone:
    no {host}, {node} or {rank} in its path), or a path another node reads too."""
    lg = nodes[0].verdict.readings.get("log")
    if lg is None or len(nodes) < 2:
        return False
    others = [node.verdict.readings.get("log") for node in nodes[1:]]
    path = lg.evidence.get("path")
    return all(other is None for other in others) or any(
        isinstance(path, str) and other is not None and other.evidence.get("path") == path for other in others
    )


def _shared_log(nodes: Sequence[NodeCheck], k: int) -> bool:
    """Whether node ``k``'s log is one the nodes share: node 0's where it is not node 0's
    alone (:func:`_log_shared`), or another node's at node 0's path."""
    if k == 0:
        return _log_shared(nodes)
    lg, chief = nodes[k].verdict.readings.get("log"), nodes[0].verdict.readings.get("log")
    path = lg.evidence.get("path") if lg is not None else None
    return isinstance(path, str) and chief is not None and chief.evidence.get("path") == path


def _chief_line_unowned(nodes: Sequence[NodeCheck]) -> str:
    """Why node 0's completion line is not known to be its own ("" when it is): no process of
    node 0 was seen in this watch (nor launched there), none of its processes is known to
    have written the line, and the log is the stage's one log (read on node 0 alone) or one
    another node reads at the same path (no ``{host}`` or ``{node}`` in it): a `complete`
    pattern that matches any rank's line finds another node's there (multi-host fuzzer seed
    2965: rank 0 never started, rank 1's `rank 1 done` completed node 0)."""
    chief = nodes[0].verdict
    p, lg = chief.readings.get("process"), chief.readings.get("log")
    if p is None or lg is None or lg.says is not Says.DONE or p.says is not Says.DONE:
        return ""
    if p.evidence.get("seen_alive") or p.evidence.get("launched") or lg.evidence.get("complete_writers"):
        return ""
    if not _log_shared(nodes):
        return ""
    return (
        f"{nodes[0].host} (node 0): no job process seen there in this watch, and its completion line"
        " is in a log that is not node 0's alone (no {host} or {node} in its path): it may be another"
        " node's, and node 0's ranks may never have run"
    )


def _chief_start(chief: NodeCheck, memory: AcrossMemory | None) -> float | None:
    """The latest moment node 0's run can have begun (its host's clock; None: not known): a
    sighting after it is after the run began. A start read from /proc is late, never early,
    but for its rounding to the ms; a supervisor's record gives whole seconds rounded down
    (the truth up to a second later)."""
    start = _run_start(chief.verdict)
    if start is not None:
        late = WHOLE_SECOND if (chief.verdict.run or {}).get("source") == "supervisor" else 0.0
        start += START_ROUNDING + late
    began = memory.chief_began if memory is not None else None
    if began is not None and (start is None or began + START_ROUNDING > start):
        start = began + START_ROUNDING  # node 0's job began again, sooner than its verdict's run tells
    return start


def at_work_elsewhere(nodes: Sequence[NodeCheck], memory: AcrossMemory | None) -> float | None:
    """Where node 0's log is one the nodes share: the latest moment a rank of node 0's run on
    another node was seen alive, moved onto node 0's clock at the earliest it can be (by the
    measured offsets; by :data:`CLOCKS_APART` where one is not measured). None where the log
    is node 0's alone, or no such rank was seen. Node 0's next check takes what its log got
    before it for the run's (``JobView.elsewhere``): each node's ranks write a shared log,
    and node 0's probe sees only its own."""
    if not _log_shared(nodes):
        return None
    chief = nodes[0]
    start = _chief_start(chief, memory)
    if start is None:
        return None
    before = memory.pids_before if memory is not None else {}
    moments = [_alive_until(node, chief.ahead, start, before.get(node.host, ())) for node in nodes[1:]]
    return max((m for m in moments if m is not None), default=None)


def _alive_until(
    node: NodeCheck,
    chief_ahead: tuple[float, float] | None,
    start: float | None,
    before: Sequence[int] | frozenset[int],
) -> float | None:
    """The latest moment a rank of node 0's run (begun at ``start``, node 0's clock) was known
    alive on ``node``, moved onto node 0's clock at the earliest it can be (by the measured
    offsets; by :data:`CLOCKS_APART` where one is not measured); None: none known."""
    p = node.verdict.readings.get("process")
    last = p.evidence.get("last_seen_alive") if p is not None else None
    # Its ranks' last sightings, and the ends its exit watch saw (known alive until a moment
    # after the check that last saw them: a rank that wrote, was seen and ended back to back
    # is ordered after what it wrote only by its end).
    alive = [(last.get("pid"), last.get("at"))] if isinstance(last, Mapping) else []
    alive += list(node.ended.items())
    latest = None
    for pid, at in alive:
        if pid in before or not isinstance(at, (int, float)):
            continue
        if start is not None and not _seen_since({"at": at}, node.ahead, start, chief_ahead):
            continue  # not known to be alive in node 0's run
        if node.ahead is not None and chief_ahead is not None:
            moved = at - node.ahead[1] + chief_ahead[0]
        else:
            moved = at - CLOCKS_APART
        latest = moved if latest is None else max(latest, moved)
    return latest


def _run_start(verdict: Verdict) -> float | None:
    """Where node 0's run begins (its host's clock), as its verdict records it."""
    started = (verdict.run or {}).get("started_at")
    if not isinstance(started, str):
        return None
    try:
        return _dt.datetime.fromisoformat(started).timestamp()
    except ValueError:
        return None


def _unseen_run_after(verdict: Verdict) -> Mapping[str, object] | None:
    """When node 0's completion line was written by none of the job's processes this watch saw
    there, though it saw node 0's ranks (gone at the check before the line was found): the
    line is a later run's, one no check saw, begun after those ranks were last seen alive.
    That sighting (``last_seen_alive``: node 0's clock), or None. Node 0's run start (its
    verdict's ``run``) is then the run seen, not the line's: another host's ranks seen in
    that run, or its own line written by them, say nothing of the later one
    (tests/test_fuzz_span.py: node 0's re-run wrote its line between two checks, node 1's was
    killed without one, run 1's line in its log and its ranks seen in run 1 made it done)."""
    lg, p = verdict.readings.get("log"), verdict.readings.get("process")
    if lg is None or p is None or lg.says is not Says.DONE or lg.evidence.get("complete_writers"):
        return None
    last = p.evidence.get("last_seen_alive")
    at = last.get("at") if isinstance(last, Mapping) else None
    return last if p.evidence.get("seen_alive") and isinstance(at, (int, float)) else None


def _written_by(verdict: Verdict) -> float | None:
    """When node 0's log was last written, at the latest (its reading's ``written_by``)."""
    lg = verdict.readings.get("log")
    at = lg.evidence.get("written_by") if lg is not None else None
    return float(at) if isinstance(at, (int, float)) else None


def _seen_after(
    last: object,
    ahead: tuple[float, float] | None,
    chief_last: Mapping[str, object],
    chief_ahead: tuple[float, float] | None,
) -> bool:
    """Whether a rank's last sighting (its host's clock) was after node 0's ranks' last one
    (``chief_last``: node 0's clock) whatever the two hosts' measured clock offsets allow: its
    start (the probe's clock read before its scan), moved to the checking machine's clock at
    the least it can be, is after node 0's sighting's end (the clock read after that scan)
    moved there at the most. Where either offset or that end is not known, by
    :data:`CLOCKS_APART`. As in :func:`_seen_since`, the offsets only narrow the fixed
    second: a fixed second kept a rank seen 0.6 s after node 0's were gone, at work while
    node 0's log got its last line, from counting (multi-host fuzzer seeds 6070, 6342, 6417,
    6419, 6592, 6766: a log the nodes share, its last line node 1's, unknown for good)."""
    if not isinstance(last, Mapping):
        return False
    at, chief_at = last.get("at"), chief_last.get("at")
    if not isinstance(at, (int, float)) or not isinstance(chief_at, (int, float)):
        return False
    if at > chief_at + CLOCKS_APART:
        return True
    chief_until = chief_last.get("until")
    if ahead is None or chief_ahead is None or not isinstance(chief_until, (int, float)):
        return False
    return at - ahead[1] > chief_until - chief_ahead[0]


def _seen_since(
    last: object,
    ahead: tuple[float, float] | None,
    start: float,
    chief_ahead: tuple[float, float] | None,
) -> bool:
    """Whether a rank's last sighting (``last_seen_alive``: its host's clock) was after node
    0's run began (``start``: node 0's clock; the truth no later) whatever the two hosts'
    measured clock offsets allow: the sighting's first moment (the probe's clock read before
    its scan: the rank was alive then or later), moved to the checking machine's clock at the
    least it can be, is after the start moved there at the most. Where either offset is not
    measured, only a sighting more than :data:`CLOCKS_APART` after the start is.

    A sighting that cannot be ordered is not this run's: run 2's rank hung on node 1, last
    seen 14 ms before it was killed and run 3 began without it, counted as run 3's because it
    was not clearly before (multi-host fuzzer seed 9431: complete, node 1 never started in run
    3). Nor is one more than :data:`CLOCKS_APART` before the start on the two clocks, whatever
    the offsets measure: their bounds are as wide as each round trip and they are this
    check's, not the sighting's (a clock NTP stepped since moves it by the step: run 2's rank
    last seen 1.5 s before run 3 began stood for run 3's: tests/test_adversary_42.py), and
    run 2's rank last seen 0.5 s before run 3 began stood for it by a fixed second
    (multi-host fuzzer seed 3210)."""
    if not isinstance(last, Mapping):
        return False
    at = last.get("at")
    if not isinstance(at, (int, float)) or at <= start - CLOCKS_APART:
        return False
    if at > start + CLOCKS_APART:
        return True
    if ahead is None or chief_ahead is None:
        return False
    return at - ahead[1] > start - chief_ahead[0]


def _stamped_in_run(
    own_log: Reading | None,
    chief_only: bool,
    ahead: tuple[float, float] | None,
    start: float,
    chief_ahead: tuple[float, float] | None,
) -> float | None:
    """The latest stamp of a node's own log (its host's clock) that orders its job into node
    0's run (begun at ``start``): written clearly after that start, ordered as a sighting is
    (:func:`_seen_since`). None: none does.

    Two stamps may: its completion line's (``complete_at``), written by its ranks seen there
    (multi-host fuzzer seed 34067: under all with a log per rank, a rank seen 0.3 s after the
    start under slow round trips, its line 5 s after: unknown for good); and, under chief,
    where a worker needs no line, its last write (``written_at``) with bytes of its node's run
    (seeds 52083, 52947: a rank seen once, within the clocks' offsets of the start, that wrote
    a step 60 ms later and exited 0: unknown for good)."""
    if own_log is None:
        return None
    ev = own_log.evidence
    stamps = []
    line_at = ev.get("complete_at")
    if ev.get("complete_writers") and isinstance(line_at, (int, float)):
        stamps.append(float(line_at))
    wrote_at, run_from, size = ev.get("written_at"), ev.get("run_from_offset"), ev.get("size")
    if (
        chief_only
        and isinstance(run_from, int)
        and isinstance(size, int)
        and size > run_from
        and isinstance(wrote_at, (int, float))
    ):
        stamps.append(float(wrote_at))
    ordered = [t for t in stamps if _seen_since({"at": t}, ahead, start, chief_ahead)]
    return max(ordered) if ordered else None


def _not_done(
    k: int,
    node: NodeCheck,
    policy: PolicySpec,
    per_host: int | None,
    most: Mapping[str, int],
    start: float | None,
    after: Mapping[str, object] | None = None,
    before: frozenset[int] = frozenset(),
    chief_ahead: tuple[float, float] | None = None,
    written_by: float | None = None,
    ordered: tuple[float, float] | None = None,
    before_gone_by: float | None = None,
) -> str:
    """Why node ``k`` is not done ("" when it is). ``after``: node 0's line is a run's that no
    check saw, begun after node 0's ranks' last sighting, this (:func:`_unseen_run_after`);
    ``written_by``: node 0's log was last written by then (its reading's ``written_by``).
    ``chief_ahead``: node 0's host's clock offset (:attr:`NodeCheck.ahead`); ``ordered``: the
    node's sighting proven after node 0's run began at a check of this run, and that start
    (:attr:`AcrossMemory.ordered`); ``before_gone_by``: the node's processes of node 0's last
    run (``before``) were all gone by then, its clock (:attr:`AcrossMemory.before_gone_by`)."""
    v = node.verdict
    if k == 0 and v.state is not State.COMPLETE:
        return f"{node.host} (node 0): {v.state}: {v.reasons[0] if v.reasons else ''}".rstrip(": ")
    chief_only = policy.success == "chief" and k > 0
    if k > 0:
        said = f"{node.host}: {v.state}: {v.reasons[0] if v.reasons else ''}"
        if "process" not in v.readings:
            return f"{node.host}: no process signal read there: nothing shows its ranks gone"
        own = "log" in v.readings or "outputs" in v.readings
        # What the node's own verdict may be and the node still done: with its own log, every
        # rule of one host holds for it too (the exit grace, the settle count, run binding):
        # complete — or under chief, gone without its own completion line (failed by rule 12);
        # without one, unknown as rule 12b says (nothing of its own tells success from a crash).
        if own:
            allowed = {State.COMPLETE, State.FAILED} if chief_only else {State.COMPLETE}
            if chief_only and _only_absent_logs(v):
                # Its own log never made (a rank that wrote nothing): no line in it, no error
                # line either; whether its ranks finished is the process signal's, below
                # (multi-host fuzzer seed 12: unknown for good).
                allowed.add(State.UNKNOWN)
        else:
            allowed = {State.COMPLETE, State.UNKNOWN}
        if v.state not in allowed:
            return said
    for name, r in node.readings.items():
        if after is not None and name in node.ranks and r.says is Says.DONE and policy.success == "all":
            # Node 0's line is a run's no check saw: a rank's log (its reading sees no
            # processes) is that run's only when written clearly after node 0's ranks were
            # last seen; else its line may be the run before's (a rank killed in the unseen
            # run without a byte, its log's run-1 line left standing).
            mtime, after_at = r.evidence.get("mtime"), after.get("at")
            if not (
                isinstance(mtime, (int, float))
                and isinstance(after_at, (int, float))
                and mtime > after_at + CLOCKS_APART
            ):
                return (
                    f"{node.host}: {name}: its completion line may be the last run's"
                    " (a later run no check saw)"
                )
        # Under chief, rank 0's completion line is node 0's own log: no other log need say done.
        if r.says is Says.DONE or (
            policy.success == "chief" and r.signal == "log" and (k > 0 or name != "log")
        ):
            continue
        return f"{node.host}: {name} {r.says}: {r.detail}"
    p, own_log = v.readings.get("process"), v.readings.get("log")
    if k > 0 and p is not None:
        last = p.evidence.get("last_seen_alive")
        last_at = last.get("at") if isinstance(last, Mapping) else None
        # Proven after the start at a check of this run (``AcrossMemory.ordered``), or now.
        proven = ordered is not None and ordered == (last_at, start)
        earlier = start is not None and not proven and not _seen_since(last, node.ahead, start, chief_ahead)
        unseen_since = False
        if after is not None:
            # Node 0's line is an unseen later run's: ranks seen here count only when seen
            # clearly after node 0's were last seen (the clocks apart), and a line of its own
            # only when none of the processes seen wrote it (it too is a run no check saw).
            earlier = earlier or not _seen_after(last, node.ahead, after, chief_ahead)
            # And only when known alive (seen, or its end seen) after node 0's log was last
            # written: a rank seen after node 0's were gone, but gone itself before the line
            # was written, was no rank of the line's run (it hung in run 1 and was killed; run
            # 2 began and ended between two checks, its rank never started here: complete).
            until = _alive_until(node, chief_ahead, start, before)
            unseen_since = not (
                isinstance(written_by, (int, float)) and until is not None and until > written_by
            )
        stamp = (
            _stamped_in_run(own_log, chief_only, node.ahead, start, chief_ahead)
            if after is None and start is not None
            else None
        )
        if stamp is not None:
            earlier = False
        if isinstance(last, Mapping) and last.get("pid") in before:
            # Last seen alive in node 0's last run: that run's rank. Its own log stamped in
            # this run after every process of the last run there was found gone was written
            # by none of them: a rank of this run begun and ended between two checks (multi-
            # host fuzzer seed 53997: run 3's rank on node 1 wrote a step and exited 0 unseen,
            # unknown for good).
            earlier = not (stamp is not None and before_gone_by is not None and stamp > before_gone_by)
        seen = (p.evidence.get("seen_alive") and not earlier and not unseen_since) or p.evidence.get(
            "launched"
        )
        own_done = own_log is not None and own_log.says is Says.DONE
        if (
            own_log is not None
            and own_log.evidence.get("complete_writers")
            and (after is not None or earlier)
        ):
            # Written by ranks seen there, last seen before node 0's run began: an earlier
            # run's line (seed 339's route with the runs more than the clocks apart).
            own_done = False
        writers = own_log.evidence.get("complete_writers") if own_log is not None else None
        if isinstance(writers, (list, tuple)) and writers and set(writers) <= before:
            own_done = False  # its line written by node 0's last run's ranks there
        if not seen and not own_done:
            return (
                f"{node.host}: no job process seen in this watch"
                + (" since node 0's run began" if earlier else "")
                + (
                    " (node 0's completion line was written by none of the processes seen there: a"
                    " later run no check saw)"
                    if after is not None
                    else ""
                )
                + ", and nothing of its own says its ranks finished (a log path with {host} or"
                " {node}); they may never have run"
            )
        if (
            isinstance(last_at, (int, float))
            and v.checked_at is not None
            and v.checked_at - last_at < policy.exit_grace
        ):
            return (
                f"{node.host}: its ranks were last seen alive {v.checked_at - last_at:.0f}s ago:"
                f" waiting {policy.exit_grace:g}s (exit_grace) for what they wrote last"
            )
    seen_most = most.get(node.host, 0)
    if per_host is not None and 0 < seen_most < per_host:
        return f"{node.host}: at most {seen_most} of {per_host} ranks seen alive: the others were never seen"
    return ""


def _only_absent_logs(verdict: Verdict) -> bool:
    """Whether every reading of a node that cannot tell is a log not there (no such file: not
    one that could not be read), and one is."""
    unknown = [r for r in verdict.readings.values() if r.says is Says.UNKNOWN]
    return bool(unknown) and all(r.signal == "log" and r.evidence.get("absent") is True for r in unknown)


def _others(nodes: Sequence[NodeCheck], but: NodeCheck, policy: PolicySpec) -> list[str]:
    """The other nodes' states, in words the policy makes true: under ``chief`` a worker
    node whose own verdict failed only because its ranks ended without a line of their own
    (single-host rule 12) did not fail: it needs none."""
    words = []
    for k, n in enumerate(nodes):
        if n is but:
            continue
        if (
            k > 0
            and policy.success == "chief"
            and n.verdict.state is State.FAILED
            and not any(r.says is Says.FAILED for r in n.readings.values())
        ):
            words.append(
                f"{n.host}: its ranks ended (under success: chief a worker needs no completion line)"
            )
        else:
            words.append(_said(n))
    return words


def _said(node: NodeCheck) -> str:
    """A host's own verdict as a reason: its state and what its first reason says (a bare
    "gpu-02: running" told nothing of why: notes/ml44.md, item 8)."""
    first = node.verdict.reasons[0] if node.verdict.reasons else ""
    return f"{node.host}: {node.verdict.state}: {first}".rstrip(": ")


# --------------------------------------------------------------------------- naming the ranks


def _chief_line(chief: NodeCheck) -> bool:
    """Node 0 shows the chief's completion line of this run (its own log; done, or followed
    by the workers' teardown in a log they share) or its verdict is complete."""
    return chief.verdict.state is State.COMPLETE or _line_read(chief.verdict.readings.get("log"))


#: A rank's number on its command line: ``--local_rank 1``, ``--local-rank=1``, ``--rank 3``,
#: ``--node_rank 1`` (torchrun's older launch passes ``--local_rank``; scripts take ``--rank``).
_ARG = re.compile(r"(?:^|\s)--(local[_-]rank|node[_-]rank|rank)[= ](\d{1,6})(?=\s|$)")


def _rank_of(entry: Mapping[str, object], k: int, per_host: int | None) -> tuple[int | None, str]:
    """A rank process's global rank and how it was told: its environment's ``RANK`` (or
    ``LOCAL_RANK`` on node ``k``) where the probe could read it, else its command line's
    arguments; (None, "") when neither says."""
    rank, local = entry.get("env_rank"), entry.get("env_local_rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        return rank, "RANK"
    if isinstance(local, int) and not isinstance(local, bool) and per_host is not None:
        return k * per_host + local, "LOCAL_RANK"
    cmdline = entry.get("cmdline")
    args = (
        {m.group(1).replace("-", "_"): int(m.group(2)) for m in _ARG.finditer(cmdline)}
        if isinstance(cmdline, str)
        else {}
    )
    if "rank" in args:
        return args["rank"], "--rank"
    if "local_rank" in args and per_host is not None:
        node = args.get("node_rank", k)
        return node * per_host + args["local_rank"], "--local_rank"
    return None, ""


def _rank_entries(verdict: Verdict) -> list[Mapping[str, object]] | None:
    """The node's live rank processes as its process reading lists them (a rank's forked
    workers left out: their parent is matched too); None where not read."""
    p = verdict.readings.get("process")
    if p is None or p.says is Says.UNKNOWN or p.read_at is None:
        return None
    listed = p.evidence.get("processes")
    if not isinstance(listed, (list, tuple)):
        return None
    pids = {e.get("pid") for e in listed if isinstance(e, Mapping)}
    return [
        e
        for e in listed
        if isinstance(e, Mapping)
        and isinstance(e.get("pid"), int)
        and e.get("state") not in _GONE_STATES
        and e.get("ppid") not in pids
    ]


#: The most PIDs remembered per host (a job restarting its ranks in place for days).
_SIGHTINGS_KEPT = 64


def _sighted(
    node: NodeCheck, k: int, per_host: int | None, before: Mapping[int, tuple[int | None, str, float]]
) -> dict[int, tuple[int | None, str, float]]:
    """The node's ranks seen alive so far, by PID: each one's global rank (told by its
    environment or command line; else by its place among the node's ranks by start, when
    all ``per_host`` were seen at once) and when it was last seen alive (the host's clock)."""
    seen = dict(before)
    at = node.verdict.checked_at
    entries = _rank_entries(node.verdict)
    if entries is None or at is None:
        return seen
    ordered = sorted(entries, key=lambda e: (_num(e.get("started_at")), _num(e.get("pid"))))
    whole = per_host is not None and len(ordered) == per_host
    for place, e in enumerate(ordered):
        pid = int(e["pid"])  # type: ignore[call-overload]
        rank, how = _rank_of(e, k, per_host)
        old = seen.get(pid)
        if rank is None and old is not None and old[0] is not None:
            rank, how = old[0], old[1]
        elif rank is None and whole and per_host is not None:
            rank, how = k * per_host + place, "position"
        seen[pid] = (rank, how, at)
    if len(seen) > _SIGHTINGS_KEPT:
        seen = dict(sorted(seen.items(), key=lambda kv: kv[1][2])[-_SIGHTINGS_KEPT:])
    return seen


def _num(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else float("inf")


def _rank_log(node: NodeCheck, k: int, per_host: int | None, rank: int | None) -> tuple[str, Reading] | None:
    """The rank's own log reading (``log#rankN``, or the node's own log where it is the
    node's first rank's), where the log path names ``{rank}``."""
    if rank is None:
        return None
    key = f"log#rank{rank}"
    if key in node.ranks:
        return key, node.ranks[key]
    own = node.verdict.readings.get("log")
    if node.ranks and per_host is not None and rank == k * per_host and own is not None:
        return "log", own
    return None


@dataclass(frozen=True)
class _Gone:
    """A rank seen alive on a node and gone now: who it was, and the words that name it
    (``seen``: who and when last seen alive; ``line``: its log's last line, or "")."""

    rank: int | None
    pid: int
    last_seen: float
    seen: str
    how: str = ""  # how its rank was told (``position``: by its place, a guess said as one)
    twin: bool = False  # a live process is told the same rank: its log is not its alone
    line: str = ""
    found_at: float | None = None  # the check that first found it gone (its host's clock)
    # Its own log (``{rank}`` in the path) holds its run's completion line: it ended after
    # its line, as rank 0 does once it prints "Training complete": no rank lost.
    finished: bool = False

    def words(self, found: bool = False) -> str:
        """The words that name it, with when it was first found gone where ``found``."""
        when = f", found gone at {_hms(self.found_at)}" if found and self.found_at is not None else ""
        return f"{self.seen}{when}{self.line}"


#: How a rank's number was told, in words (``position`` is said where the rank is named).
_HOW = {
    "RANK": "its environment's RANK",
    "LOCAL_RANK": "its LOCAL_RANK and its node",
    "--rank": "its command line's --rank",
    "--local_rank": "its command line's --local_rank",
    "position": "its place among the host's ranks",
}

#: Live rank processes by the rank they are told: (host, pid, when it began, its host's clock).
_Holders = Mapping[int, Sequence[tuple[str, int, float | None]]]


def _holders(
    nodes: Sequence[NodeCheck], sightings: Mapping[str, Mapping[int, tuple[int | None, str, float]]]
) -> dict[int, list[tuple[str, int, float | None]]]:
    out: dict[int, list[tuple[str, int, float | None]]] = {}
    for n in nodes:
        seen = sightings.get(n.host, {})
        for e in _rank_entries(n.verdict) or ():
            pid = int(e["pid"])  # type: ignore[call-overload]
            rank = seen.get(pid, (None,))[0]
            began = e.get("started_at")
            if rank is not None:
                out.setdefault(rank, []).append(
                    (n.host, pid, float(began) if isinstance(began, (int, float)) else None)
                )
    return out


def _cut(verdict: Verdict) -> int | None:
    """How many processes the probe matched where its list (16) left out live ranks: a rank
    seen before and not listed now is not known gone. None where the list holds them all."""
    p = verdict.readings.get("process")
    entries = _rank_entries(verdict)
    if p is None or entries is None:
        return None
    ranks, matched = p.evidence.get("ranks"), p.evidence.get("matched")
    if isinstance(ranks, int) and isinstance(matched, int) and len(entries) < ranks:
        return matched
    return None


def _gone_ranks(
    node: NodeCheck,
    k: int,
    per_host: int | None,
    seen: Mapping[int, tuple[int | None, str, float]],
    whole_at: float | None = None,
    holders: _Holders | None = None,
    cut: int | None = None,
    found_at: Mapping[int, float] | None = None,
    *,
    chief_wrote: bool = False,
) -> list[_Gone]:
    """Each rank seen alive on the node and gone now, named: its global rank, PID, last
    sighting, when it was first found gone (``found_at``, by PID) and its log's last line;
    finished where its own log holds its completion line. Not a process replaced since (last
    seen before the host last had all its ranks, or its rank held now by one begun after it
    was last seen: an elastic restart); where a live process is told the same rank, both are
    said. ``chief_wrote``: the node is node 0, and its log holds the chief's completion line
    (rank 0's, under ``chief``): rank 0 gone ended after it, as after its own log's line."""
    if cut is not None:
        # The list holds 16 processes: a rank left out of it now may be alive (its place
        # taken by a lower PID): which rank is gone is not told rather than told wrong.
        return [_Gone(None, 0, 0.0, f"which one is not told (the probe lists 16 of its {cut} processes)")]
    found_at = found_at or {}
    live = live_pids(node.verdict)
    holders = holders or {}
    out = []
    for pid, (rank, how, at) in sorted(seen.items(), key=lambda kv: (kv[1][0] is None, kv[1][0] or 0, kv[0])):
        if pid in live or (whole_at is not None and at < whole_at):
            continue
        held = list(holders.get(rank, ())) if rank is not None else []
        if any(host == node.host and began is not None and began > at for host, _, began in held):
            continue  # begun again in a new process since it was last seen: not lost
        who = "a rank" if rank is None else f"rank {rank}"
        if how == "position":
            who += " (told by its place among the host's ranks)"
        if held:
            others = ", ".join(f"pid {p} on {host}" for host, p, _ in held)
            who += (
                f" (so {_HOW.get(how, how)} says; {others}, alive, is told rank {rank} too:"
                " which one the job counts as it cannot be told)"
            )
        text = f"{who}, pid {pid}, last seen alive {_hms(at)}"
        found = _rank_log(node, k, per_host, rank)
        line = found[1].evidence.get("last_line") if found is not None else None
        said = ""
        if isinstance(line, str) and line:
            # With a twin alive the log may be either's: its line is rank N's log's, not its own.
            whose = "its log's last line"
            if held:
                whose = f"rank {rank}'s log's last line (either may have written it)"
            said = f", {whose}: {line[:160]!r}"
        # Its own log's completion line: it wrote it, then ended (no other process writes
        # rank N's log; with a twin alive, which one wrote it is not told; a rank told by
        # its place is a guess, and another rank's line would hide this one lost).
        finished = (
            not held
            and how != "position"
            and ((found is not None and _line_read(found[1])) or (chief_wrote and rank == 0))
        )
        out.append(_Gone(rank, pid, at, text, how, bool(held), said, found_at.get(pid), finished))
    # Two processes gone that were told the same rank (twins seen alive together: a replaced
    # one is left out above): which one wrote its log's line is not told either, and the
    # other may have been killed: neither finished.
    told = [g.rank for g in out]
    return [
        replace(g, finished=False) if g.finished and g.rank is not None and told.count(g.rank) > 1 else g
        for g in out
    ]


def _found_gone(
    node: NodeCheck, seen: Mapping[int, tuple[int | None, str, float]], before: Mapping[int, float]
) -> dict[int, float]:
    """When each rank seen alive on the node was first found gone, by PID (its host's clock):
    ``before``'s, and this check's time for a rank it finds gone first. Kept through a check
    that cannot read the node's processes (a blip finds nothing gone) or lists only some of
    them (a rank left out of a cut list is not known gone)."""
    live = live_pids(node.verdict)
    out = {pid: at for pid, at in before.items() if pid in seen and pid not in live}
    at = node.verdict.checked_at
    if at is None or _rank_entries(node.verdict) is None or _cut(node.verdict) is not None:
        return out
    for pid in seen:
        if pid not in live and pid not in out:
            out[pid] = at
    return out


def _as_shown(
    shown: Mapping[str, Reading],
    nodes: Sequence[NodeCheck],
    state: State,
    per_host: int | None,
    alive: Mapping[str, int | None],
    most: Mapping[str, int],
    gone: Mapping[str, Sequence[_Gone]],
) -> dict[str, Reading]:
    """The readings as a person is shown them, each row true of its host: a process row says
    how many ranks are alive against ``per_host``; a host where no job process was ever seen
    says so (not ``done``: nothing ended there that this watch knows of); a lost rank's own
    log no longer says ``working`` once its writer is gone. Only the words and ``says`` of
    the rows shown change: the rules above read the readings as they came."""
    out = dict(shown)
    final = state is State.COMPLETE  # a complete verdict shows only done readings, as they are
    for k, node in enumerate(nodes):
        key = f"process@{node.host}"
        p = out.get(key)
        if p is None:
            continue
        count = alive.get(node.host)
        if (
            not final
            and p.says is Says.DONE
            and most.get(node.host, 0) == 0
            and not p.evidence.get("seen_alive")
            and not p.evidence.get("launched")
        ):
            out[key] = replace(
                p,
                says=Says.UNKNOWN,
                detail=(
                    f"never saw the job on {node.host} in this watch (it may never have run there):"
                    f" {p.detail}"
                ),
            )
        elif per_host is not None and count is not None:
            out[key] = replace(
                p,
                detail=f"ranks {count}/{per_host} alive on {node.host}; {p.detail}",
                evidence={**p.evidence, "per_host": per_host},  # for the key values: ranks=1/2
            )
        if final or node.host not in gone:
            continue
        for g in gone[node.host]:
            rank, at = g.rank, g.last_seen
            found = _rank_log(node, k, per_host, rank)
            if found is None or g.twin or g.finished:
                # A live process told the same rank may write that log still; one that
                # finished wrote its completion line (it is no lost writer).
                continue
            name, reading = found
            row = f"{name}@{node.host}"
            if row not in out or reading.says is not Says.WORKING:
                continue
            line = reading.evidence.get("last_line")
            out[row] = replace(
                reading,
                says=Says.FAILED,
                detail=f"writer gone: rank {rank}"
                + (" (told by its place among the host's ranks)" if g.how == "position" else "")
                + f" last seen alive {_hms(at)}, no completion line"
                + (f"; last line: {line[:160]!r}" if isinstance(line, str) and line else ""),
            )
    return out
