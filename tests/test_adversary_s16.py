"""Three leads the s15 adversary left without tests (brief adv16), each tried on the real
components: real SpanCheckers over the two test sshd hosts and the fuzzer's ranks
(tests/test_fuzz_span_routes.py's harness), real Checkers on real files
(tests/test_adversary_s14.py's), a real SQLite state store.

1. A log the nodes share is read on node 0 alone: a rank of another node that writes a
   traceback there and dies is seen only through node 0's read of the log. Read by a check
   before anything follows it, it fails the stage at once (pinned). Followed, before the next
   check, by another rank's next step or its completion line, the log's scan clears it as the
   single-host rule clears an error the job went on past (``_scan_log``: "Errors before the
   completion line were survived"; progress to a new count after an error: "work went on past
   it"), and says so (``survived_error``) at the read that first found it. Where the check of
   that read first found a rank gone, on any host, the error may be that rank's last words
   (``AcrossMemory.last_words``, kept for the run): ``failed`` where node 0's completion line
   was not first read at that check too, ``unknown`` for good where it was (which came first
   cannot be told); once ``running`` until ``stall_after``, and ``complete`` where the other
   node's rank finished on its own. The gate's side: a handled error matching ``log.error``,
   gone past with every rank alive at the check that read it, still completes (pinned).
2. A clock stepped back, or a file time set back, just before a watch begins: a log first read
   stamped ahead of the host's clock is no word of the run, after the clock passes the stamp
   too; this run's line written after the first read counts though its mtime reads before the
   log's birth (both pinned). Left: an earlier run's log whose times the step puts between the
   watch's start and its first read is byte for byte a job begun after the watch and over
   before its first check (the rule's own case): strict xfail, as tests/test_adversary_s14.py's.
3. A follower that took the stage over from a holder gone (its lease released) after a re-run
   no check saw, node 1's rank of it SIGKILLed without a byte: it goes on from the holder's
   memory of run 1 and never takes run 1's rank on node 1 for run 2's (pinned).

Run alone: ``PYTHONPATH=$PWD python -m pytest -q -p no:cacheprovider tests/test_adversary_s16.py``.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from sensors import Checker, Reading, Says, State, Verdict, stage_from_dict
from sensors._check.span import SpanChecker
from sensors._config.stage import PolicySpec
from sensors._verdict.across import AcrossMemory, NodeCheck, decide_across
from sensors.testing import COMPLETE_LINE
from tests.test_adversary_s14 import _EARLIER, _stage, _states, _watch
from tests.test_fuzz_span import _Run, _World
from tests.test_fuzz_span_routes import _checks, _world

# --- 1. a traceback in a log the nodes share --------------------------------------------------


def _shared(tmp_path: Path, hosts: list[Any], tag: str) -> tuple[_World, Any]:
    """The fuzzer's world with one log both nodes append to (``success: all``, a rank a host),
    its progress pattern counting steps: a step to a new count is work going on."""
    world, _ = _world(tmp_path, hosts, tag, log_mode="shared")
    doc = world.stage(hosts)
    doc["log"]["progress"] = r"^step (?P<step>\d+)"
    return world, stage_from_dict(doc)


def _say(run: _Run, g: int, text: str) -> None:
    """Rank ``g`` appends ``text`` to its log (the fuzzer's ``tell`` writes fixed words only)."""
    rank = run.ranks[g]
    assert rank.proc is not None and rank.proc.stdin is not None and rank.proc.stdout is not None
    rank.proc.stdin.write(f"w {rank.log} {text}\n")
    rank.proc.stdin.flush()
    assert rank.proc.stdout.readline() == "ok\n"


_TRACEBACK = "ERROR rank 1: Traceback (most recent call last): RuntimeError: CUDA error"


def _both_at_work(world: _World, checker: SpanChecker) -> _Run:
    """A run begun, both its ranks seen at work by two checks: the run."""
    run = world.start(set())
    _say(run, 0, "step 1")
    checker.check()
    time.sleep(0.3)
    checker.check()
    return run


def _node_1_dies(tmp_path: Path, hosts: list[Any], tag: str, then: str) -> list[Verdict]:
    """Both ranks seen at work; node 1's rank writes a traceback to the log they share and
    exits 1; before the next check node 0's rank does ``then`` ("nothing", "steps on": its next
    step, "finishes": its completion line and exit 0). The checks after it."""
    world, stage = _shared(tmp_path, hosts, tag)
    try:
        with SpanChecker(stage) as checker:
            run = _both_at_work(world, checker)
            _say(run, 1, _TRACEBACK)
            world.tell(run, 1, "exit1")
            if then == "steps on":
                _say(run, 0, "step 2")
            elif then == "finishes":
                world.tell(run, 0, "line")
                world.tell(run, 0, "exit0")
            return _checks(checker, 6)
    finally:
        world.stop()


def _said(verdicts: list[Verdict]) -> list[tuple[str, tuple[str, ...]]]:
    return [(v.state.value, v.reasons[:1]) for v in verdicts]


def test_a_traceback_another_nodes_rank_writes_to_the_shared_log_fails_the_stage_at_once(
    tmp_path: Path, hosts: list[Any]
) -> None:
    """Read by a check before anything follows it: ``failed`` at that check, naming the shared
    log, not node 0 (any rank may have written it)."""
    after = _node_1_dies(tmp_path, hosts, "as16-tb", "nothing")
    assert after[0].state is State.FAILED, _said(after)
    assert after[0].reasons[0].startswith("shared log (read on "), after[0].reasons
    assert "error line: ERROR rank 1: Traceback" in after[0].reasons[0], after[0].reasons


def test_a_traceback_followed_by_another_ranks_step_before_the_next_check_still_fails(
    tmp_path: Path, hosts: list[Any]
) -> None:
    """Node 0's rank writes its next step between the traceback and the next check, which
    first reads both and finds node 1's rank gone: ``failed``, the traceback named as the
    shared log's (it was ``running``, node 1's rank lost, failed only after ``stall_after``
    where the others block, never where they go on)."""
    after = _node_1_dies(tmp_path, hosts, "as16-st", "steps on")
    assert any(v.state is State.FAILED for v in after), _said(after)
    failed = next(v for v in after if v.state is State.FAILED)
    assert failed.reasons[0].startswith("shared log (read on "), failed.reasons
    assert "error line: ERROR rank 1: Traceback" in failed.reasons[0], failed.reasons


def test_a_traceback_followed_by_node_0s_completion_line_is_no_complete(
    tmp_path: Path, hosts: list[Any]
) -> None:
    """Node 0's rank finishes (its completion line, exit 0) between node 1's traceback and the
    next check, as ranks with no collective do. It was ``complete`` at every check after, the
    traceback and node 1's exit 1 not a word of it (a false complete). The traceback, both
    ranks' ends and the line are first read at one check, which came first untold: never
    complete, and ``unknown`` for good where it is unknown (the gate stops waiting)."""
    after = _node_1_dies(tmp_path, hosts, "as16-fin", "finishes")
    assert all(v.state is not State.COMPLETE for v in after), _said(after)
    assert all(v.stuck is not None for v in after if v.state is State.UNKNOWN), _said(after)


def test_a_handled_error_read_with_every_rank_alive_is_gone_past_and_the_gate_opens(
    tmp_path: Path, hosts: list[Any]
) -> None:
    """The gate's side: node 1's rank logs a handled error that matches log.error, then its
    next step, before a check reads both; that check finds every rank alive, so the error is
    no rank's last words, and the text after it clears it as in one job's log. Both ranks then
    write their completion lines and exit 0 between two checks: complete."""
    world, stage = _shared(tmp_path, hosts, "as16-ok")
    try:
        with SpanChecker(stage) as checker:
            run = _both_at_work(world, checker)
            _say(run, 1, "ERROR rank 1: a shard read failed, retrying (handled)")
            _say(run, 1, "step 2")
            read = _checks(checker, 1)[0]  # the error first read: every rank alive
            for g in range(2):
                world.tell(run, g, "line")
            for g in range(2):
                world.tell(run, g, "exit0")
            after = _checks(checker, 8)
    finally:
        world.stop()
    assert read.state is State.RUNNING, _said([read])
    # Read as an error gone past at the check that first read it (what the rule above looks
    # at): only the ranks all alive then kept it from standing.
    survived = read.readings["log"].evidence.get("survived_error")
    assert isinstance(survived, str) and survived.startswith("ERROR rank 1: a shard read failed"), survived
    states = [v.state for v in after]
    assert State.FAILED not in states and states[-1] is State.COMPLETE, _said(after)


_T = 1_000_000.0


def _at(host: str, k: int, pids: tuple[int, ...], *logs: Reading) -> NodeCheck:
    """Host ``host`` at check ``k`` (a second apart), its ranks ``pids`` alive (none: gone)."""
    procs = [{"pid": p, "ppid": 1, "state": "S", "cmdline": f"train --rank {p % 10}"} for p in pids]
    process = Reading(
        "process",
        Says.WORKING if pids else Says.DONE,
        "process",
        {
            "alive": len(pids),
            "ranks": len(pids),
            "matched": len(pids),
            "processes": procs,
            "seen_alive": True,
        },
        _T + k,
    )
    state = State.RUNNING if pids else State.UNKNOWN  # gone with nothing of its own to tell
    verdict = Verdict("t", state, (f"{host} {state}",), {r.signal: r for r in (process, *logs)}, _T + k, host)
    return NodeCheck(host, verdict)


def _log(k: int, says: Says, path: str = "/shared/train.log", **evidence: Any) -> Reading:
    return Reading("log", says, f"log {says}", {"path": path, **evidence}, _T + k)


_GONE_PAST = {"survived_error": "ERROR rank 1: Traceback"}
_LINE = {"complete_line": "rank 0 done"}


@pytest.mark.parametrize(
    ("second", "third", "node_1_log", "said"),
    [
        pytest.param(
            _log(1, Says.WORKING, **_GONE_PAST), _log(2, Says.DONE, **_LINE), None,
            "failed", id="then node 0's line, read a check later: the error stands",
        ),
        pytest.param(
            _log(1, Says.WORKING, **_GONE_PAST), _log(2, Says.DONE, **_LINE), "restarted",
            "neither", id="node 1's rank replaced at that check (an elastic restart): gone past",
        ),
        pytest.param(
            _log(1, Says.DONE, **_GONE_PAST, **_LINE), _log(2, Says.DONE, **_LINE), None,
            "stuck", id="node 0's line read with them: unknown for good",
        ),
        pytest.param(
            _log(1, Says.WORKING, **_GONE_PAST), _log(2, Says.WORKING), "own",
            "neither", id="node 0's own log: one job's rule holds",
        ),
        pytest.param(
            _log(1, Says.WORKING), _log(2, Says.WORKING, **_GONE_PAST), None,
            "neither", id="gone past a check after the rank was found gone",
        ),
    ],
)  # fmt: skip
def test_an_error_gone_past_in_a_shared_log_at_the_check_that_found_a_rank_gone(
    second: Reading, third: Reading, node_1_log: str | None, said: str
) -> None:
    """The rule, table-tested (``decide_across`` alone): both ranks seen at work; at the next
    check node 1's rank is found gone and node 0's read of the log finds an error line gone
    past (``survived_error``): ``failed``, or ``unknown`` for good (``stuck``), or neither
    where the rule does not hold. Kept for the run: the check after says the same."""
    policy = PolicySpec(stall_after=60.0)
    own = [_log(k, Says.WORKING, "/node1/train.log") for k in range(3)] if node_1_log == "own" else [None] * 3
    later = (22,) if node_1_log == "restarted" else ()  # pid 21's place taken by a new process
    memory = AcrossMemory()
    got = []
    for k, (log, alive_1) in enumerate([(_log(0, Says.WORKING), (21,)), (second, later), (third, later)]):
        nodes = [_at("a", k, (10,), log), _at("b", k, alive_1, *([own[k]] if own[k] else []))]
        verdict, memory = decide_across("t", nodes, policy, 1, memory, _T + k)
        got.append(verdict)
    shown = [(v.state, v.stuck is not None, v.reasons[:1]) for v in got]
    for v in got[1:]:
        assert (v.state is State.FAILED) is (said == "failed"), shown
        assert (v.state is State.UNKNOWN and v.stuck is not None) is (said == "stuck"), shown
    first = got[1].reasons[0]
    if said == "failed":
        assert first.startswith(
            "shared log (read on a, node 0): error line: ERROR rank 1: Traceback (first read at the"
            " check that first found gone pid 21 on b (rank 1, so its command line's --rank says)"
        ), first
    if said == "stuck":
        assert got[1].stuck is not None and "{rank} in log.path" in got[1].stuck.fix, got[1].stuck
    assert memory.next_run().last_words is None  # a new run of node 0's job begins without it


# --- 2. a clock stepped back, a file time set back, before the watch ----------------------------


def test_an_earlier_runs_log_stamped_ahead_at_the_first_read_is_no_word_of_the_run(tmp_path: Path) -> None:
    """The host's clock stepped back 1 s just after an earlier run ended: its log is stamped 1 s
    ahead of the clock when the watch first reads it (here its times set so: the birth cannot
    be). Never complete, also at the checks after the clock has passed the stamp."""
    log = tmp_path / "job.log"
    log.write_text(_EARLIER)
    ahead = time.time() + 1.0
    os.utime(log, (ahead, ahead))
    verdicts = _watch(log, time.time(), checks=25)
    assert time.time() > ahead + 0.5, "the checks did not outlast the stamp"
    assert all(v.state is not State.COMPLETE for v in verdicts), _states(verdicts)
    assert verdicts[-1].state is State.UNKNOWN, _states(verdicts)


def test_this_runs_line_written_after_the_first_read_counts_though_stamped_before_the_logs_birth(
    tmp_path: Path,
) -> None:
    """The gate's side: the job at work, its log read by the watch's first check; the clock then
    reads 0.3 s before the log's birth when the job writes its completion line (a step back:
    here the mtime set so, 0.5 s before its ctime, under MTIME_SET_BACK). The line is in the
    bytes written after the first read: complete, not refused for good."""
    log = tmp_path / "job.log"
    log.write_text("step 1\n")
    born = os.stat(log).st_mtime
    checker = Checker(_stage(log, f"as16-{uuid.uuid4().hex[:8]}"), began=time.time())
    try:
        verdicts = [checker.check()]
        time.sleep(0.1)
        with log.open("a") as f:
            f.write(f"step 2\n{COMPLETE_LINE}\n")
        os.utime(log, (born - 0.3, born - 0.3))
        for _ in range(6):
            time.sleep(0.15)
            verdicts.append(checker.check())
    finally:
        checker.close()
    assert verdicts[0].state is not State.COMPLETE, _states(verdicts)
    assert verdicts[-1].state is State.COMPLETE, _states(verdicts)


@pytest.mark.xfail(
    strict=True,
    reason="left open: a clock stepped back by D just after a short earlier run puts its log's birth"
    " and mtime between the watch's start and its first read on the new clock; that log is byte for"
    " byte one a job begun after the watch and over before its first check left (_bind: born after"
    " the watch began, wholly its run's), and a read-only probe finds no trace of the step (btime"
    " moves with the clock). tests/test_adversary_s14.py's copy made after the watch began is the"
    " same limit",
)
def test_an_earlier_runs_log_the_clock_step_puts_after_the_watchs_start_is_no_word_of_the_run(
    tmp_path: Path,
) -> None:
    """The earlier run begins and ends; the clock steps back 0.3 s; the watch begins: on the
    host's clock the watch began 0.25 s before the log was born (``began`` moved back so)."""
    log = tmp_path / "job.log"
    log.write_text(_EARLIER)
    time.sleep(0.05)
    verdicts = _watch(log, time.time() - 0.3)
    assert all(v.state is not State.COMPLETE for v in verdicts), _states(verdicts)


# --- 3. a follower takes the stage over after a re-run no check saw -----------------------------


def test_a_follower_taking_over_after_an_unseen_rerun_takes_no_earlier_rank_for_this_runs(
    tmp_path: Path, hosts: list[Any]
) -> None:
    """Two watches over one store (serve and a second watcher): A holds, B follows and confirms
    run 1's complete with A's memory (``_as_holder``: its nodes' memories reset, then A's). Run 2
    begins 1.5 s later and ends between two checks, node 1's rank SIGKILLed without a byte. A
    stops (its lease released); B takes the stage over from A's memory of run 1. Node 1's rank
    of run 1 is not run 2's: never complete."""
    world, stage = _world(tmp_path, hosts, "as16-to", log_mode="node")
    db = tmp_path / "state.db"
    a = SpanChecker(stage, state=db)
    b = SpanChecker(stage, state=db)
    try:
        run_1 = world.start(set())
        a.check()
        assert b.check().state is not State.COMPLETE  # followed: A's
        for g in range(2):
            world.tell(run_1, g, "line")
            world.tell(run_1, g, "exit0")
        for _ in range(40):
            if a.check().state is State.COMPLETE:
                break
            time.sleep(0.35)
        assert a.last is not None and a.last.state is State.COMPLETE, a.last
        confirmed = b.check()  # A's complete, confirmed by B's own check with A's memory
        assert confirmed.state is State.COMPLETE, confirmed.reasons
        time.sleep(1.5)
        run_2 = world.start(set())
        world.tell(run_2, 1, "kill")
        world.tell(run_2, 0, "line")
        world.tell(run_2, 0, "exit0")
        a.close()  # the holder stops: B takes the stage over at its next check
        after = _checks(b, 5)
    finally:
        a.close()
        b.close()
        world.stop()
    assert b.persistence is not None and not b.persistence.following
    assert all(v.state is not State.COMPLETE for v in after), _said(after)
