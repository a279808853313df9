"""Adversarial tests of a stage over several hosts in the state store (commit 123e4ba: one
row per stage, one lease, the verdict across hosts, every node's memory and the memory across
hosts in one document; a follower confirms a final verdict as a Checker does).

Real components: real sshd hosts on 127.0.0.1 (tests/test_span.py's fixture ``hosts``), real
ranks (tests/span_job.py), a real SQLite state store, real SpanCheckers. Each test asserts what
SHOULD happen; a failing test is a finding.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from sensors import State, Verdict
from tests.test_span import _Host, _Ranks


def _shared_log_stage(tmp_path: Path, hosts: list[_Host], ranks: _Ranks, **policy: Any) -> Any:
    """The stage of tests/test_span.py's ``_stage``, but with ONE shared log (no ``{node}``):
    node 1 has no log of its own, so only its ranks seen alive in this watch (and how many)
    tell that they ran."""
    from sensors import load_stage

    stage = {
        "stage": "train",
        "hosts": [h.sshd.spec() for h in hosts],
        "process": {"match": ranks.match, "per_host": 2},
        "log": {"path": str(ranks.folder / "node0.log"), "complete": r"node \d+ done", "progress": r"^step"},
        "outputs": {"files": str(ranks.folder / "out"), "expected": 2},
        "policy": {"interval": "300ms", "settle": 1, "exit_grace": "300ms", "stall_after": "20s", **policy},
    }
    path = tmp_path / f"train-{len(list(tmp_path.glob('train-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(stage, sort_keys=False))
    return load_stage(path)


def _checks(checker: Any, n: int, pause: float = 0.4) -> list[Verdict]:
    out = []
    for _ in range(n):
        out.append(checker.check())
        time.sleep(pause)
    return out


def _until_complete(checker: Any, timeout: float = 30.0) -> Verdict:
    end = time.monotonic() + timeout
    while True:
        verdict = checker.check()
        if verdict.state is State.COMPLETE or time.monotonic() > end:
            return verdict
        time.sleep(0.35)


# --------------------------------------------------------------------------- S1


def test_S1_an_edit_to_the_policy_does_not_forget_how_many_ranks_a_host_showed(
    tmp_path: Path,
    hosts: list[_Host],
) -> None:
    """A first watch sees only one of node 1's two ranks (the other never ran). The stage
    file's policy is then edited (stall_after 20s -> 30s: nothing the counts depend on) and
    the watch restarted (a `wait` again, or `serve` re-reading the edited file). Every rank
    ends; node 0's line is written.

    ``Persistence.restore`` (``_without``) drops the memory across hosts on any change but
    keeps each node's process memory: node 1's ranks count as "seen alive in this watch"
    (restored) while the count of them (``most_alive``, in the memory across hosts) is gone,
    and the per-host check has nothing to compare: complete. A watch with all of the memory
    says "at most 1 of 2 ranks seen alive"; a watch with none says node 1's ranks were never
    seen. Only the half-kept memory says complete: a false complete made by the restore."""
    from sensors import SpanChecker

    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    db = tmp_path / "state.db"
    try:
        ranks.procs[(1, 1)].kill()  # one of node 1's ranks never runs with the others
        ranks.procs[(1, 1)].wait()
        with SpanChecker(_shared_log_stage(tmp_path, hosts, ranks), state=db) as first:
            seen = _checks(first, 3)
        assert not [v for v in seen if v.state is State.COMPLETE]
        ranks.finish()
        for key, proc in ranks.procs.items():
            if key != (1, 1):
                assert proc.wait(30) == 0
        time.sleep(0.5)  # past exit_grace
        edited = _shared_log_stage(tmp_path, hosts, ranks, stall_after="30s")
        with SpanChecker(edited, state=db) as second:
            after = _checks(second, 4)
    finally:
        ranks.stop()
    assert [v.state for v in after if v.state is State.COMPLETE] == [], after[-1].reasons


# --------------------------------------------------------------------------- S2


def test_S2_a_follower_given_since_confirms_the_holders_complete(
    tmp_path: Path,
    hosts: list[_Host],
) -> None:
    """`crosscheck serve` (told nothing of the run) holds the stage and finds it complete;
    a gate or a `wait --since T` (T before the job began: the same run) follows it. The
    stored verdict is of its run (node 0's run began after T), so it is followed, and its
    ``complete`` confirmed with the holder's memory — as a Checker's ``_confirmed`` adopts
    the holder's memory whole.

    SpanChecker's ``_confirmed`` goes through ``_go_on_from``, whose per-node
    ``Checker.go_on_from`` refuses a node memory whose run is not ``since`` exactly (the
    holder's runs began with the processes): no node memory is adopted, the "holder's memory"
    check is a fresh one, node 1's ranks (gone before the follower looked) were never seen,
    and the follower answers unknown for as long as the holder holds — a gate that never
    opens on a finished stage (and on takeover, too, it never goes on from the holder)."""
    from sensors import SpanChecker

    since = time.time() - 5  # before the ranks start
    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    db = tmp_path / "state.db"
    stage = _shared_log_stage(tmp_path, hosts, ranks)
    try:
        with SpanChecker(stage, state=db) as holder:
            _checks(holder, 3)
            ranks.finish()
            ranks.wait()
            done = _until_complete(holder)
            assert done.state is State.COMPLETE, done.reasons
            with SpanChecker(stage, since=since, state=db) as follower:
                followed = [follower.check() for _ in range(2)]
    finally:
        ranks.stop()
    assert [v.state for v in followed] == [State.COMPLETE, State.COMPLETE], followed[-1].reasons


# --------------------------------------------------------------------------- S3


def _run_again(ranks: _Ranks, *, without: set[tuple[int, int]]) -> None:
    """The same job run again (the same command lines, the same folder): every rank but
    ``without``."""
    import subprocess
    import sys

    from tests.test_span import JOB

    (ranks.folder / "finish").unlink()
    ranks.procs = {
        (node, rank): subprocess.Popen(
            [
                sys.executable,
                str(JOB),
                ranks.tag,
                "--node",
                str(node),
                "--rank",
                str(rank),
                str(ranks.folder),
            ],
            start_new_session=True,
        )
        for node in range(2)
        for rank in range(2)
        if (node, rank) not in without
    }


def test_S3_a_second_run_is_not_counted_with_the_ranks_the_first_one_showed(
    tmp_path: Path,
    hosts: list[_Host],
) -> None:
    """`crosscheck serve` watches a stage over two hosts run after run (or a `wait` told
    nothing of its run is started again on the next run: the stored run is the latest one
    known, so every node's memory and the memory across hosts are restored). Run 1 shows
    both ranks on each host and completes. Run 2 starts only one of node 1's two ranks.

    Each node's Checker sets its last run's memory aside when it finds a new run; the memory
    across hosts (``most_alive``: the most ranks each host showed) is never set aside: run 1's
    2 stands for run 2's 1, and the per-host check passes. Complete, where a watch of run 2
    alone says "at most 1 of 2 ranks seen alive". Before 123e4ba that memory lived with one
    `wait` (which ends at run 1's verdict); serve and the store now keep it run after run."""
    from sensors import SpanChecker

    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    db = tmp_path / "state.db"
    stage = _shared_log_stage(tmp_path, hosts, ranks)
    try:
        with SpanChecker(stage, state=db) as watch:
            _checks(watch, 3)
            ranks.finish()
            ranks.wait()
            first = _until_complete(watch)
            assert first.state is State.COMPLETE, first.reasons
            time.sleep(1.1)  # run 2 begins in another second (a process start is to the tick)
            _run_again(ranks, without={(1, 1)})
            during = _checks(watch, 4)
            assert all(v.state is not State.COMPLETE for v in during), during[-1].reasons
            ranks.finish()
            ranks.wait()
            time.sleep(0.5)  # past exit_grace
            after = _checks(watch, 4)
    finally:
        ranks.stop()
    assert [v.state for v in after if v.state is State.COMPLETE] == [], after[-1].reasons
    assert "at most 1 of 2 ranks seen alive" in " ".join(after[-1].reasons), after[-1].reasons
