"""Adversary review 42 of three changes: the hosts' measured clock offsets ordering a rank's
last sighting against node 0's run start (c2236b8), node 0 gone with the shared outputs short
held as running while ranks work elsewhere (7b71b6f), and a follower's confirmation going on
from the holder's memory as it advanced it (49b3bcb). Each test is a route those changes opened
or left; each failed before its fix."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sensors import Reading, Says, State, Verdict
from sensors._config.stage import PolicySpec
from sensors._verdict.across import AcrossMemory, NodeCheck, decide_across
from tests.test_fuzz_span_routes import NOW, RUN_3, _chief_run_3, _chief_short, _r

# --- 1. a slow round trip, or a clock stepped since, widens "before node 0's run" ----------------
#
# The offsets measured in a check's round trip bound each host's clock between its reading less
# the answer's arrival and its reading less the sending: the width is the whole round trip, the
# probe's own run included (NVML, a large outputs directory, a loaded host: a second or more).
# A rank last seen 1.5 s before node 0's run began was an earlier run's under the fixed second;
# with 1.5 s round trips on both hosts, "before on every offset the round trips allow" no longer
# held, and run 2's rank stood for run 3's on a node that never started: complete (seed 3210's
# route, reopened wider than it was closed). So too a host's clock stepped back 2 s by NTP since
# the sighting: the offset measured now is not the one the sighting was written under.


def _rank_seen(at: float, ahead: tuple[float, float] | None) -> NodeCheck:
    seen = {"pid": 9, "cpu_seconds": 0.1, "at": at, "until": at + 0.02}
    process = _r("process", Says.DONE, alive=0, seen_alive=True, cpu_seconds=None, last_seen_alive=seen)
    verdict = Verdict("t", State.COMPLETE, ("b complete",), {"process": process}, NOW, "b", run=None)
    return NodeCheck("b", verdict, ahead=ahead)


# A probe sent at 0, its clock read at 0.1, its answer back at 1.6 (this machine's clock), the
# clocks one: the host's clock is between 1.5 s behind and 0.1 s ahead, as far as it can tell.
SLOW = (-1.5, 0.1)
SAME = (-0.004, 0.004)


@pytest.mark.parametrize(
    ("chief_ahead", "b_ahead"),
    [
        pytest.param(SLOW, SLOW, id="1.5 s round trips on both hosts"),
        pytest.param(SAME, (-2.004, -1.996), id="node 1's clock stepped back 2 s since the sighting"),
    ],
)
def test_a_rank_last_seen_1_5_s_before_node_0s_run_is_not_its(
    chief_ahead: tuple[float, float], b_ahead: tuple[float, float]
) -> None:
    nodes = [_chief_run_3(chief_ahead), _rank_seen(RUN_3 - 1.5, b_ahead)]
    verdict, _ = decide_across(
        "t", nodes, PolicySpec(success="chief", exit_grace=0.3), 1, AcrossMemory(), NOW
    )
    assert verdict.state is not State.COMPLETE, verdict.reasons
    assert "no job process seen in this watch since node 0's run began" in " ".join(verdict.reasons)


def test_measured_offsets_still_order_a_sighting_within_the_second() -> None:
    """The fix keeps what c2236b8 gained: 0.5 s before, measured to 4 ms, is run 2's; 0.5 s
    after is run 3's."""
    policy = PolicySpec(success="chief", exit_grace=0.3)
    before = [_chief_run_3(SAME), _rank_seen(RUN_3 - 0.5, SAME)]
    after = [_chief_run_3(SAME), _rank_seen(RUN_3 + 0.5, SAME)]
    assert decide_across("t", before, policy, 1, AcrossMemory(), NOW)[0].state is State.UNKNOWN
    assert decide_across("t", after, policy, 1, AcrossMemory(), NOW)[0].state is State.COMPLETE


# --- 2. node 0 gone with the outputs short, node 1's ranks alive and hung: running for good ------
#
# 7b71b6f holds node 0's outputs-short failure while ranks are alive on another host (they may
# still write the shared outputs). Ranks that hang (a worker stuck in its process group's
# teardown after rank 0 left, common with NCCL) never end: nothing is lost (node 0's line is
# written, so neither `chief` nor `all` counts its ranks lost), rule 2 never fires, and the stage
# said "running ... they may still write them" for good, where before it failed at once.


def _hung(at: float) -> NodeCheck:
    process = Reading(
        "process",
        Says.WORKING,
        "process working",
        {
            "alive": 1,
            "matched": 1,
            "ranks": 1,
            "processes": [{"pid": 9, "ppid": 1, "state": "S", "cpu_seconds": 3.0}],
            "seen_alive": True,
            "cpu_seconds": 3.0,
            "io_bytes": 1000,
            "started_at": NOW - 500,
        },
        at,
    )
    verdict = Verdict("t", State.RUNNING, ("b running",), {"process": process}, at, "b", run=None)
    return NodeCheck("b", verdict)


def _chief_short_at(at: float) -> NodeCheck:
    return NodeCheck("a", replace(_chief_short(1).verdict, checked_at=at))


@pytest.mark.parametrize("success", ["all", "chief"])
def test_node_0_short_with_node_1_hung_fails_after_stall_after(success: str) -> None:
    policy = PolicySpec(success=success, stall_after=60.0, exit_grace=0.3)
    memory = AcrossMemory()
    verdicts: list[Verdict] = []
    for at in (NOW - 120.0, NOW - 61.0, NOW):
        v, memory = decide_across("t", [_chief_short_at(at), _hung(at)], policy, 1, memory, at)
        verdicts.append(v)
    # Within stall_after it may still write them: running, and says so.
    assert verdicts[0].state is State.RUNNING, verdicts[0].reasons
    # No progress on node 1 for 120 s (CPU, I/O unchanged): it is not writing them.
    last = verdicts[-1]
    assert last.state is State.FAILED, last.reasons
    text = " ".join(last.reasons)
    assert "outputs short" in text, last.reasons
    assert "no progress" in text, last.reasons


def test_node_0_short_with_node_1_at_work_stays_running() -> None:
    """Node 1's CPU time grows: it may still write them, running (7b71b6f's case)."""
    policy = PolicySpec(success="chief", stall_after=60.0, exit_grace=0.3)
    memory = AcrossMemory()
    v: Any = None
    for k, at in enumerate((NOW - 120.0, NOW - 61.0, NOW)):
        p = _hung(at).verdict.readings["process"]
        working = replace(p, evidence={**p.evidence, "cpu_seconds": 3.0 + 10 * k, "io_bytes": 1000 + k})
        node = NodeCheck("b", Verdict("t", State.RUNNING, ("b running",), {"process": working}, at, "b"))
        v, memory = decide_across("t", [_chief_short_at(at), node], policy, 1, memory, at)
    assert v.state is State.RUNNING, v.reasons


# --- 3. a follower with no memory of its own advanced the holder's twice a confirmation ---------
#
# 49b3bcb carries the holder's memory from one confirmation to the next. A watch that never read
# the host before it began to follow (started after the holder settled) keeps that memory as its
# own after its first confirmation; from the second on, "once more with its own memory" checked
# the very memory the first check had just advanced: two checks of one memory a few ms apart,
# each a step of the settle count. Outputs rewritten in place by a writer the process signal does
# not find (a hidden process), once every three confirmations, never stay unchanged for three
# checks one interval apart; two of them ms apart counted, and the follower confirmed the
# holder's complete while they still changed.


def test_a_follower_with_no_memory_of_its_own_steps_the_settle_count_once_a_confirmation(
    tmp_path: Any,
) -> None:
    import contextlib
    import os
    import signal
    import uuid

    from sensors import Checker
    from sensors._hosts import LocalHost
    from tests.test_false_complete_routes import _ended, _launched_outputs_stage

    host, tag = LocalHost(), f"adv42-{uuid.uuid4().hex[:8]}"
    out, run1, pid1, stage, store = _launched_outputs_stage(tmp_path, host, tag, "adv42-follower", settle=3)
    holder = Checker(stage, run=run1, state=store)
    follower = None
    try:
        assert holder.check().readings["process"].says is Says.WORKING  # seen at work
        _ended(pid1)
        settled = [holder.check() for _ in range(6)]
        assert settled[-1].state is State.COMPLETE, settled[-1].reasons
        # A watch begun now (it never read the host): it follows the holder's complete.
        follower = Checker(stage, run=run1, state=store)
        said = []
        for k in range(7):
            if k % 3 == 0:
                # The hidden writer: an output rewritten in place (not the watched process).
                (out / "0.pt").write_text("y" * (k + 2))
            said.append(follower.check())
    finally:
        holder.close()
        if follower is not None:
            follower.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid1, signal.SIGKILL)
    assert all(v.state is not State.COMPLETE for v in said), [
        (v.state.value, v.reasons[0][:60]) for v in said
    ]
