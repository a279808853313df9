"""Adversary of b77dd7f, 62bd571, 11df13f (a stage over several hosts: ``_seen_after`` by the
measured clock offsets, ``Checker._kept_offset``, ``at_work_elsewhere``/``JobView.elsewhere``,
and the multi-host fuzzer's oracle): the routes tried, each a test."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from sensors import State, Verdict, stage_from_dict
from sensors._check.span import SpanChecker
from tests.test_fuzz_span import _truth, _World


def _world(tmp_path: Path, hosts: list[Any], tag: str, *, success: str, log_mode: str) -> tuple[_World, Any]:
    world = _World(
        folder=tmp_path / "job", tag=tag, per_host=1, success=success, log_mode=log_mode, expected=None
    )
    world.folder.mkdir()
    return world, stage_from_dict(world.stage(hosts))


def _checks(checker: SpanChecker, n: int) -> list[Verdict]:
    out = []
    for _ in range(n):
        time.sleep(0.35)
        out.append(checker.check())
    return out


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
