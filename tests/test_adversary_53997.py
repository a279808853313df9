"""Adversary review of ae9c1d4: under ``chief``, a worker's own log stamped in node 0's run after
every process of the last run there was found gone (``AcrossMemory.before_gone_by``) orders the
worker into the run, though its last sighting is the last run's (multi-host fuzzer seed 53997).

The rule holds where nothing but a rank of this run can have written the log after that proof:
every process of the last run there was seen, and none was alive, at a check before the proving
read, on a clock that did not move back since the write. Each test below is a history where one
of those fails. Table tests of ``decide_across``: each check's node verdicts given by hand, each
with its own check time (the memory's ``read_at`` is the hosts' ``checked_at``).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sensors import Reading, Says, State, Verdict
from sensors._base.tolerances import CLOCKS_APART
from sensors._config.stage import PolicySpec
from sensors._verdict.across import AcrossMemory, NodeCheck, decide_across
from tests.test_fuzz_span_routes import NOW, RUN_3, SLOW, _chief_run_3, _r, _ranks

CHIEF = PolicySpec(success="chief", exit_grace=0.3)
SAME = (-0.004, 0.004)  # a loopback host's round trip: the clocks one, to 4 ms


def _at(host: str, at: float, *pids: int, started: float = NOW - 60) -> NodeCheck:
    """A node read at ``at`` (its clock), its processes ``pids`` alive (none: all gone)."""
    process = _ranks(*pids, at=at, started=started)
    if not pids:
        process = replace(process, says=Says.DONE)
    verdict = Verdict("t", State.RUNNING, (f"{host} running",), {"process": process}, at, host)
    return NodeCheck(host, verdict, ahead=SAME)


def _unread(host: str, at: float) -> NodeCheck:
    """A node whose probe could not read it (an SSH blip)."""
    process = Reading("process", Says.UNKNOWN, "the host cannot be read", {}, None)
    return NodeCheck(host, Verdict("t", State.UNKNOWN, ("cannot be read",), {"process": process}, at, host))


def _worker(pid: int, seen_at: float, wrote_at: float, ahead: tuple[float, float] = SLOW) -> NodeCheck:
    """Node 1 under chief, its own log: ``pid`` last seen alive at ``seen_at``, its log last
    written at ``wrote_at`` (its clock) with bytes of its node's run; no process alive."""
    seen = {"pid": pid, "cpu_seconds": 0.1, "at": seen_at, "until": seen_at + 0.02}
    process = _r("process", Says.DONE, alive=0, seen_alive=True, cpu_seconds=None, last_seen_alive=seen)
    log = _r("log", Says.WORKING, path="/n1/train.log", size=21, run_from_offset=14, written_at=wrote_at)
    v = Verdict("t", State.FAILED, ("no completion line",), {"process": process, "log": log}, NOW, "b")
    return NodeCheck("b", v, ahead=ahead)


def _play(checks: list[tuple[float, list[NodeCheck]]], per_host: int = 1) -> AcrossMemory:
    memory = AcrossMemory()
    for at, nodes in checks:
        _, memory = decide_across("t", nodes, CHIEF, per_host, memory, at)
    return memory


def _run_1_gone_and_proven() -> list[tuple[float, list[NodeCheck]]]:
    """Run 1: node 1's rank (pid 9) seen, found gone at NOW - 38, node 1 read again at NOW - 36:
    every process of run 1 there gone by then (node 0's rank, pid 1, still at work)."""
    return [
        (NOW - 40, [_at("a", NOW - 40, 1), _at("b", NOW - 40, 9)]),
        (NOW - 38, [_at("a", NOW - 38, 1), _at("b", NOW - 38)]),
        (NOW - 36, [_at("a", NOW - 36, 1), _at("b", NOW - 36)]),
    ]


# --- 1. the proof carried through a run node 1 showed nothing in ------------------------------
#
# ae9c1d4's next_run keeps, for a host that showed no process in the last run (an SSH blip
# through it), the run before's proof with the run before's processes. But that proof is of the
# run before's processes alone: the last run's own processes there were never seen, so no check
# found them gone. Run 2's rank on node 1, hidden by the blip, outlived node 0's run 2 (its peer
# killed, it finished its step), wrote it clearly after run 3 began, and was killed before node 1
# was read again; run 3's launch on node 1 failed (the same blip). The stamp is after run 1's
# proof: complete, with node 1's rank of run 3 never started.


def test_a_proof_of_run_1s_processes_says_nothing_of_run_2s_hidden_by_a_blip() -> None:
    memory = _play(
        [
            *_run_1_gone_and_proven(),
            (NOW - 30, [_at("a", NOW - 30, 5, started=NOW - 31), _unread("b", NOW - 30)]),  # run 2
            (RUN_3 + 0.3, [_at("a", RUN_3 + 0.3, 6, started=RUN_3), _unread("b", RUN_3 + 0.3)]),  # run 3
        ]
    )
    assert memory.pids_before.get("b") == (9,), memory.pids_before  # run 1's, kept (a270e40)
    verdict, _ = decide_across(
        "t", [_chief_run_3(SLOW), _worker(9, NOW - 40, RUN_3 + 5.0)], CHIEF, 1, memory, NOW
    )
    assert verdict.state is State.UNKNOWN, verdict.reasons
    assert "no job process seen in this watch since node 0's run began" in " ".join(verdict.reasons)


def test_a_new_run_keeps_no_proof_for_a_host_that_showed_no_process_in_the_last() -> None:
    """The same at the memory: the run before's processes kept (they are no rank of this run),
    not what was proven of them (it says nothing of the last run's, never seen there)."""
    memory = AcrossMemory(pids_before={"b": (9,)}, before_gone_by={"b": 7.0}, read_at={"b": 12.0})
    assert memory.next_run().pids_before == {"b": (9,)}
    assert memory.next_run().before_gone_by == {}


# --- 2. a rank of the last run never seen there -----------------------------------------------
#
# Two ranks a host. Run 2: node 1's rank 2 (pid 20) seen, found gone, node 1 read again: the
# proof covers pid 20 alone. Run 2's rank 3 there started late (never seen at a check, node 1
# unreadable from then on), outlived node 0's run 2, wrote its step clearly after run 3 began
# and was killed; run 3 never started on node 1. Every process of the last run there was not
# found gone: one was never seen.


def test_a_proof_needs_every_rank_of_the_last_run_there_seen() -> None:
    memory = _play(
        [
            (NOW - 40, [_at("a", NOW - 40, 1, 2), _at("b", NOW - 40, 20)]),
            (NOW - 38, [_at("a", NOW - 38, 1, 2), _at("b", NOW - 38)]),
            (NOW - 36, [_at("a", NOW - 36, 1, 2), _at("b", NOW - 36)]),
            (NOW - 30, [_at("a", NOW - 30, 1, 2), _unread("b", NOW - 30)]),
            (RUN_3 + 0.3, [_at("a", RUN_3 + 0.3, 5, 6, started=RUN_3), _unread("b", RUN_3 + 0.3)]),
        ],
        per_host=2,
    )
    assert memory.pids_before.get("b") == (20,), memory.pids_before
    verdict, _ = decide_across(
        "t", [_chief_run_3(SLOW), _worker(20, NOW - 40, RUN_3 + 5.0)], CHIEF, 2, memory, NOW
    )
    assert verdict.state is State.UNKNOWN, verdict.reasons


@pytest.mark.parametrize(
    ("memory", "per_host", "gone_by"),
    [
        pytest.param(AcrossMemory(most_alive={"b": 2}, pids={"b": (8, 9)}, gone_at={"b": {8: 10.0, 9: 10.0}}, read_at={"b": 12.0}), 2, {"b": 12.0}, id="both ranks seen, found gone: by the read after"),
        pytest.param(AcrossMemory(most_alive={"b": 1}, pids={"b": (9,)}, gone_at={"b": {9: 10.0}}, read_at={"b": 12.0}), 2, {}, id="1 of 2 ranks seen: the other may be alive"),
        pytest.param(AcrossMemory(most_alive={"b": 1}, pids={"b": (9,)}, gone_at={"b": {9: 10.0}}, read_at={"b": 12.0}), None, {"b": 12.0}, id="no per_host: the ranks seen"),
        pytest.param(AcrossMemory(pids={"b": (9,)}, gone_at={"b": {9: 10.0}}, read_at={"b": 12.0}), None, {}, id="pid 9 the run before's, hung: none of this run's seen"),
    ],
)  # fmt: skip
def test_a_new_runs_proof_counts_the_last_runs_ranks(
    memory: AcrossMemory, per_host: int | None, gone_by: dict[str, float]
) -> None:
    assert memory.next_run(per_host=per_host).before_gone_by == gone_by


# --- 3. a clock stepped back between the last run's write and the proving read ---------------
#
# Node 1's clock 0.8 s ahead (within CLOCKS_APART), stepped back by NTP just after run 1's rank
# there wrote its last step and was killed. Checks 300 ms apart (the fuzzer's interval): found
# gone, read again 0.3 s later, run 2 seen on node 0. The write's stamp, 0.8 s ahead of the
# truth, is after the proving read on node 1's own clock: the comparison of two times on one
# clock holds only if the clock did not move back between them. Run 2's rank on node 1 never
# started: complete.

W = RUN_3 - 0.5  # run 1's rank on node 1 writes and is killed (the truth); its clock says W + 0.8


@pytest.mark.xfail(
    strict=True,
    reason=(
        "left open: a margin of CLOCKS_APART over the proof (stamp > before_gone_by + 1 s)"
        " closes it, and leaves seed 53997 unknown for good (run 3's rank there wrote within"
        " 0.3 s checks of the proving read: replayed, missed). Closing it keeps seed 53997 only"
        " where the memory knows the host's clock offset did not move (by CLOCK_STEP) from the"
        " last sighting of the last run's processes to the proving read: not kept today."
    ),
)
def test_a_write_stamped_by_a_clock_stepped_back_since_is_not_after_the_proof() -> None:
    memory = _play(
        [
            (W - 0.2, [_at("a", W - 0.2, 1), _at("b", W - 0.2, 9)]),
            (W + 0.1, [_at("a", W + 0.1), _at("b", W + 0.1)]),  # stepped back by now
            (W + 0.4, [_at("a", W + 0.4), _at("b", W + 0.4)]),
            (W + 0.7, [_at("a", W + 0.7, 6, started=RUN_3), _at("b", W + 0.7)]),  # run 2
        ]
    )
    assert memory.before_gone_by == {"b": W + 0.4}, memory.before_gone_by
    assert memory.before_gone_by["b"] + CLOCKS_APART > W + 0.8  # the write within the clocks apart of it
    verdict, _ = decide_across(
        "t", [_chief_run_3(SAME), _worker(9, W - 0.2, W + 0.8, ahead=SAME)], CHIEF, 1, memory, NOW
    )
    assert verdict.state is State.UNKNOWN, verdict.reasons


# --- 4. a host not read: its verdict's time is the checking machine's -------------------------
#
# A host that cannot be read gets a verdict stamped on the checking machine's clock
# (``Checker.host_failed``). Taken for the host's latest read, a host ahead of the checking
# machine had its proof dated by that much too early on its own clock: a write by the last
# run's rank in the scan of the check that found it gone (after that check's time) stamped after
# the "proof". The read time is the host's clock or none.


def test_a_host_not_read_keeps_its_last_read_on_its_own_clock() -> None:
    memory = _play([(NOW - 40, [_at("a", NOW - 40, 1), _at("b", NOW - 40, 9)]),
                    (NOW - 38, [_at("a", NOW - 38, 1), _unread("b", NOW - 38.25)])])  # fmt: skip
    assert memory.read_at == {"a": NOW - 38, "b": NOW - 40}, memory.read_at


# --- 5. a writer the process signal does not match ---------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason=(
        "left open: the proof is of the processes process.match finds. Run 1's job script on"
        " node 1 appends to the node's log after its rank exits (an upload, then 'exit 0 after"
        " upload'), long after the rank was found gone and clearly after run 2 began; run 2's"
        " rank there never starts. The same bytes, stamped the same, are seed 53997's run-3"
        " rank begun and ended between two checks: nothing read tells the two (b7a342a's rule"
        " takes such a write for the run's where no rank was ever seen there, too)."
    ),
)
def test_a_write_by_the_last_runs_job_script_after_its_rank_is_no_rank_of_this_run() -> None:
    memory = _play(
        [
            *_run_1_gone_and_proven(),
            (RUN_3 + 0.3, [_at("a", RUN_3 + 0.3, 6, started=RUN_3), _at("b", RUN_3 + 0.3)]),  # run 2
        ]
    )
    assert memory.before_gone_by == {"b": NOW - 36}, memory.before_gone_by
    verdict, _ = decide_across(
        "t", [_chief_run_3(SLOW), _worker(9, NOW - 40, RUN_3 + 5.0)], CHIEF, 1, memory, NOW
    )
    assert verdict.state is State.UNKNOWN, verdict.reasons


# --- the rule still holds where it should (seed 53997's shape) ---------------------------------


def test_run_1s_rank_found_gone_then_run_2s_written_unseen_completes() -> None:
    """Run 1's rank on node 1 seen, found gone, node 1 read again; run 2 begins on node 0; its
    rank on node 1 writes a step clearly after both and exits 0 between two checks: complete."""
    memory = _play(
        [
            *_run_1_gone_and_proven(),
            (RUN_3 + 0.3, [_at("a", RUN_3 + 0.3, 6, started=RUN_3), _at("b", RUN_3 + 0.3)]),
        ]
    )
    verdict, _ = decide_across(
        "t", [_chief_run_3(SLOW), _worker(9, NOW - 40, RUN_3 + 5.0)], CHIEF, 1, memory, NOW
    )
    assert verdict.state is State.COMPLETE, verdict.reasons
