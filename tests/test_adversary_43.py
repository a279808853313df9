"""Adversary of b77dd7f, 62bd571, 11df13f (a stage over several hosts: ``_seen_after`` by the
measured clock offsets, ``Checker._kept_offset``, ``at_work_elsewhere``/``JobView.elsewhere``,
and the multi-host fuzzer's oracle): the routes tried, each a test."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from sensors import State, stage_from_dict
from sensors._check.span import SpanChecker
from tests.test_fuzz_span import _truth
from tests.test_fuzz_span_routes import _checks, _world

# --- A: node 1's run-1 rank seen after node 0's ranks ended, then a re-run no check saw ----------
#
# Run 1: rank 0 writes its line and exits 0; rank 1 hangs, seen at the next check (after node
# 0's ranks' last sighting), then SIGKILLed (the fuzzer's end_hangs). Run 2 begins and ends
# between two checks, node 1's rank never started: node 0's new line is written by none of
# node 0's processes seen (``after``), and node 1's run-1 rank, seen after node 0's last
# sighting, counts as that run's. It was dead before run 2 began.


@pytest.mark.parametrize(
    "hung_checks",
    [
        pytest.param(1, id="seen once 0.35 s after: counted since b77dd7f (measured offsets)"),
        pytest.param(3, id="seen 1 s and more after: counted before it too (the fixed second)"),
    ],
)
def test_a_run_1_rank_seen_after_node_0s_does_not_stand_for_an_unseen_rerun(
    tmp_path: Path, hosts: list[Any], hung_checks: int
) -> None:
    """Complete at every check after run 2 before the fix (rank 1 of run 2 never started)."""
    world, stage = _world(tmp_path, hosts, "fz-adv43a", success="chief", log_mode="shared")
    try:
        with SpanChecker(stage) as checker:
            run_1 = world.start(set())
            checker.check()  # both ranks seen at work
            world.tell(run_1, 0, "line")
            world.tell(run_1, 0, "exit0")
            during = _checks(checker, hung_checks)  # rank 1 (hung) seen after rank 0's last sighting
            world.end_hangs()
            time.sleep(0.3)
            run_2 = world.start({1})  # rank 1 never starts
            world.tell(run_2, 0, "step")
            world.tell(run_2, 0, "line")
            world.tell(run_2, 0, "exit0")
            after = _checks(checker, 5)
            grade, why = _truth(world)
    finally:
        world.stop()
    assert grade == "hard", why
    shown = [(v.state, v.reasons[:2]) for v in during + after]
    assert [v.state for v in after if v.state is State.COMPLETE] == [], shown


# --- D: a clock stepped by less than a slow round trip's bounds -----------------------------
#
# Checker._kept_offset meets each check's bounds with the last ones (widened by CLOCK_SLEW):
# a step is found only where the new bounds miss the kept ones. Node 1's clock stepped 0.3 s
# ahead, then a slow round trip (a second wide) holds both the old offset and the new: the
# kept 8 ms window, now 0.3 s off, stood; a sighting made after the step read 0.3 s late.
# Bounds as wide as the least step NTP makes (CLOCK_STEP, 128 ms) keep nothing now.


def test_a_step_within_a_slow_round_trips_bounds_is_not_kept_away() -> None:
    """Bounds as wide as the least step NTP makes (CLOCK_STEP) narrow nothing and keep nothing."""
    from sensors._check.checker import Checker
    from sensors._config.stage import PolicySpec
    from sensors._verdict.across import AcrossMemory, decide_across
    from tests.test_fuzz_span_routes import CHIEF_SEEN, _chief_gone_shared_log, _rank_last_seen

    checker = Checker(stage_from_dict({"stage": "t", "process": {"match": "nothing-such"}}))
    checker._kept_offset((-0.004, 0.004), 0.0)
    kept = checker._kept_offset((0.3 - 0.5, 0.3 + 0.5), 1.0)  # stepped 0.3 s, then a slow trip
    # Node 1's rank seen at the check that last saw node 0's (the same moment), its clock
    # 0.3 s ahead now: ordered after node 0's by the kept offset, a rank of node 0's unseen run.
    nodes = [_chief_gone_shared_log(0.1), _rank_last_seen(CHIEF_SEEN + 0.3, kept)]
    verdict, _ = decide_across("t", nodes, PolicySpec(success="all", exit_grace=0.3), 1, AcrossMemory(), 1e6)
    assert kept[0] <= 0.3 <= kept[1] and verdict.state is not State.COMPLETE, (kept, verdict.reasons)
