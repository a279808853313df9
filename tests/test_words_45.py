"""Words a person is shown that were true but misleading, or not true (notes/ml44.md, items
5-8): each rewritten so it says what the watch knows, and no verdict's state changed.

Pure tables at the verdict (or the reading's words) where the words are made; one real
watch over a state store for the verdict an earlier watch decided (item 5)."""

from __future__ import annotations

import datetime as dt
import os
import signal
import time
import uuid
from typing import Any

import pytest

from sensors import Reading, Says, State, Verdict
from sensors._check.checker import _earlier_watch_words

NOW = 1_000_000.0


def _hms(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%H:%M:%S UTC")


# --------------------------------------------------------------------------- item 5: an earlier watch's verdict


def _done(at: float = NOW) -> dict[str, Reading]:
    return {
        "process": Reading(
            "process", Says.DONE, "pid 18208 ended (last seen alive 8s ago, 0.3s CPU)", {}, at
        ),
        "log": Reading("log", Says.DONE, "completion line: Extraction complete", {}, at),
    }


def _complete(streak: int, at: float = NOW) -> Verdict:
    readings = _done(at)
    reasons = (
        "every signal says done",
        f"agreed for {streak} consecutive checks",
        *(r.detail for r in readings.values()),
    )
    return Verdict("extract", State.COMPLETE, reasons, readings, at, "local")


@pytest.mark.parametrize(
    ("streak", "own", "stored", "agreed", "decided"),
    [
        # A wait begun after an earlier watch opened the gate: its one check agrees.
        (3, 1, "complete", "agreed for 3 consecutive checks, 2 of them an earlier watch's", True),
        # The earlier watch was confirming (running): this watch's check completed it.
        (2, 1, "running", "agreed for 2 consecutive checks, 1 of them an earlier watch's", False),
        # Every check of the streak this watch's own: nothing to say of an earlier one.
        (2, 3, "complete", "agreed for 2 consecutive checks", True),
        # No memory from the store: the words as they were.
        (2, 2, None, "agreed for 2 consecutive checks", False),
    ],
    ids=["opened on the stored complete", "stored running", "own streak", "nothing stored"],
)
def test_a_verdict_an_earlier_watch_decided_says_so(
    streak: int, own: int, stored: str | None, agreed: str, decided: bool
) -> None:
    """notes/ml44.md, item 5: a wait begun before a re-run, the state store its default,
    opened on the last run's verdict: 'agreed for 3 consecutive checks' (it made 1) and an
    old PID, nothing saying the verdict was an earlier watch's. Its state is as it was."""
    last = None
    if stored is not None:
        state = State(stored)
        readings = _done(NOW - 60)
        last = Verdict(
            "extract", state, ("x",), readings if state is State.COMPLETE else {}, NOW - 60, "local"
        )
    verdict = _earlier_watch_words(_complete(streak), streak, own, last, latest=True)
    assert verdict.state is State.COMPLETE and verdict.readings == _complete(streak).readings
    assert agreed in verdict.reasons, verdict.reasons
    said = [r for r in verdict.reasons if r.startswith("decided complete by an earlier watch")]
    assert bool(said) is decided, verdict.reasons
    if decided:
        assert verdict.reasons[1] == (
            f"decided complete by an earlier watch at {_hms(NOW - 60)}, of the run it saw (its memory,"
            " from the state store); to gate a run about to start, give its start (--since)"
        ), verdict.reasons
    assert verdict.reasons[0] == "every signal says done"
    # A watch told its run (a launch, --since) is told nothing of how to gate another.
    told = _earlier_watch_words(_complete(streak), streak, own, last)
    assert not [r for r in told.reasons if "--since" in r], told.reasons


def test_a_watch_going_on_from_an_earlier_watchs_memory_says_whose_verdict_it_is(tmp_path) -> None:
    """A real job, a watch that sees it end and completes (its memory kept in the store),
    then a second watch of the same store: complete at its first check, as documented
    (docs/cli.md: begun before a re-run without --since, wait answers for the run before it),
    and now said to be the earlier watch's."""
    from sensors import Checker, stage_from_dict
    from sensors.testing import COMPLETE_LINE
    from tests.test_false_complete_routes import _tagged

    tag = f"w45-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    stage = stage_from_dict(
        {
            "stage": "w45",
            "host": "local",
            "process": {"match": f"--tag {tag}( |$)"},
            "log": {"path": str(log), "complete": f"^{COMPLETE_LINE}"},
            "policy": {"interval": "100ms", "settle": 2, "exit_grace": "1ms"},
        }
    )
    store = str(tmp_path / "state.db")
    first = Checker(stage, state=store)
    try:
        job = _tagged(f"sleep 0.6; printf '{COMPLETE_LINE}\\n' >> {log}", tag)
        time.sleep(0.2)
        assert first.check().readings["process"].says is Says.WORKING
        assert job.wait(10) == 0
        verdicts = []
        for _ in range(6):
            verdicts.append(first.check())
            if verdicts[-1].state is State.COMPLETE:
                break
            time.sleep(0.15)
    finally:
        first.close()
    opened = verdicts[-1]
    assert opened.state is State.COMPLETE, [v.reasons for v in verdicts]
    assert "agreed for 2 consecutive checks" in opened.reasons, opened.reasons  # its own: as it was
    assert not [r for r in opened.reasons if "earlier watch" in r], opened.reasons
    second = Checker(stage, state=store)
    try:
        again = second.check()
    finally:
        second.close()
    assert again.state is State.COMPLETE, again.reasons
    assert "agreed for 3 consecutive checks, 2 of them an earlier watch's" in again.reasons, again.reasons
    assert again.reasons[1].startswith(
        f"decided complete by an earlier watch at {_hms(opened.checked_at)}, of the run it saw"
    ), again.reasons


# --------------------------------------------------------------------------- item 6: advice not already taken


def test_advice_for_a_log_born_with_the_watch_offers_only_what_would_tell() -> None:
    """notes/ml44.md, item 6: a wait begun before the job, whose log the job began afresh
    (`> log`), born too near the watch's start to tell which came first: 'To tell: give the
    run's start with --since ..., watch the job from before it writes its completion line,
    launch ... or have each run begin its log afresh (`job > log` ...)'. The watch was there,
    and the log was begun afresh: only a start given, or a launch, would tell."""
    from sensors._run.advice import Fix, Had
    from sensors._signals.log import LogMemory, _log_says, _LogScan

    fixes = (Fix.SINCE, Fix.WATCH_BEFORE_LINE, Fix.CHECK_OFTEN, Fix.LAUNCH, Fix.FRESH_LOG)
    scan = _LogScan(None, None, None, "Extraction complete", True, None, "Extraction complete", False)
    for near, live in ((False, False), (False, True), (True, True)):
        had = Had(born_with_watch=near)
        memory = LogMemory(
            inode=1,
            size=5,
            run_from=5,
            before_uncertain=True,
            bound_by="watch",
            born_near_watch=near,
            holders_read_live=live,
        )
        says, detail, _fix = _log_says(scan, None, False, memory, 1.0, had=had)
        assert says is Says.UNKNOWN, detail
        if near:
            assert detail.endswith(
                "no run start was known when this watch first read the log, and the log was born too"
                " near this watch's start to tell which came first. To tell: give the run's start"
                " with --since TIME|DURATION or launch the job through crosscheck (a launch section:"
                " its exit status is recorded)"
            ), detail
        elif not live:  # read first with no process of the job alive (a watch after its end)
            assert "watch the job from before it writes its completion line" in detail, detail
            assert "`job > log`" not in detail, detail  # its writer's descriptors show it: none read
        else:  # read while it was alive: a log it began afresh would have shown
            assert "watch the job from before it writes its completion line" in detail, detail
            assert "`job > log`" in detail, detail
    from sensors._run.advice import advice

    assert advice(fixes, Had(born_with_watch=True)) == (
        "give the run's start with --since TIME|DURATION or launch the job through crosscheck"
        " (a launch section: its exit status is recorded)"
    )


@pytest.mark.parametrize(
    ("born_before", "near"),
    [(0.005, True), (0.06, True), (5.0, False)],
    ids=["5 ms before the watch", "60 ms before", "5 s before"],
)
def test_a_log_born_within_the_watch_starts_precision_is_said_born_with_it(
    born_before: float, near: bool
) -> None:
    """The binding (no run start): a log born before the watch's start, by less than that
    start's precision (a /proc start, 50 ms) and a file time's lag (20 ms), was born with the
    watch; its bytes still are not taken for this run's (what binds them is unchanged)."""
    from sensors._signals.log import LogMemory, _bound, _LogStat

    began = 1000.0
    st = _LogStat(
        inode=7, size=20, mtime=int(began), birth=began - born_before, written=began - 0.001,
        resolution=1e-9, stamp="s", changed=began - 0.001,
    )  # fmt: skip
    memory, _ = _bound(LogMemory(), st, None, None, began + 3.0, latest=began + 3.0, watch_began=began)
    assert memory.run_from == 20 and memory.before_uncertain and memory.bound_by == "watch"
    assert memory.born_near_watch is near


def _local_stage(tmp_path, tag: str, log) -> Any:
    from sensors import stage_from_dict
    from sensors.testing import COMPLETE_LINE

    return stage_from_dict(
        {
            "stage": "w45",
            "host": "local",
            "process": {"match": f"--tag {tag}( |$)"},
            "log": {"path": str(log), "complete": f"^{COMPLETE_LINE}"},
            "policy": {"interval": "100ms", "settle": 2, "exit_grace": "1ms"},
        }
    )


def test_a_job_over_before_the_first_check_whose_log_was_born_with_the_watch(tmp_path) -> None:
    """The shell's `crosscheck wait x.yaml & job > log`: the job's log born a few ms before
    the watch's start (its start tick rounded up), the job over before the first check. The
    line's run cannot be told (unknown, as before); the advice is what would have told."""
    from sensors import Checker
    from sensors.testing import COMPLETE_LINE

    tag = f"w45-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    log.write_text(f"step 1\n{COMPLETE_LINE}\n")
    began = time.time()
    checker = Checker(_local_stage(tmp_path, tag, log), began=began)
    try:
        verdict = checker.check()
    finally:
        checker.close()
    lg = verdict.readings["log"]
    assert verdict.state is State.UNKNOWN and lg.says is Says.UNKNOWN, (verdict.reasons, lg.detail)
    assert "born too near this watch's start" in lg.detail, lg.detail
    assert lg.detail.endswith(
        "To tell: give the run's start with --since TIME|DURATION or launch the job through crosscheck"
        " (a launch section: its exit status is recorded)"
    ), lg.detail


def test_no_advice_while_the_run_is_at_work_in_view(tmp_path) -> None:
    """notes/ml44.md, item 6: a re-run appending to the last run's log (`>>`), watched while
    at work: 'the log was written both before and after the run began, and more since. To
    tell: watch the job from before it writes its completion line, ...'. The watch sees the
    run at work; its line, once written, tells: no advice. Unknown, as before."""
    from sensors import Checker
    from sensors.testing import COMPLETE_LINE
    from tests.test_false_complete_routes import _tagged

    tag = f"w45-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    log.write_text(f"step 1\n{COMPLETE_LINE}\n")  # run 1's
    time.sleep(1.2)
    run2 = _tagged(f"sleep 0.3; echo 'step 1' >> {log}; sleep 30", tag)
    checker = Checker(_local_stage(tmp_path, tag, log))
    try:
        time.sleep(0.8)
        verdicts = [checker.check() for _ in range(2)]
    finally:
        os.killpg(run2.pid, signal.SIGKILL)
        run2.wait(5)
        checker.close()
    lg = verdicts[-1].readings["log"]
    assert verdicts[-1].readings["process"].says is Says.WORKING, verdicts[-1].reasons
    assert lg.says is Says.UNKNOWN and "may be an earlier run's" in lg.detail, lg.detail
    assert "To tell" not in lg.detail, lg.detail
    assert lg.detail.endswith(
        ". This run is at work: a completion line it writes from now on is read as its own"
    ), lg.detail
    assert verdicts[-1].state is not State.COMPLETE


# --------------------------------------------------------------------------- item 7: a job not started yet


def _decided(*steps: dict[str, Reading], since: float = 1.0, **policy: Any) -> Verdict:
    from sensors._config.stage import PolicySpec
    from sensors._verdict import VerdictMemory, decide

    memory, verdict = VerdictMemory(), None
    for k, readings in enumerate(steps):
        verdict, memory = decide("extract", "local", readings, PolicySpec(**policy), memory, NOW + k * since)
    assert verdict is not None
    return verdict


def _never_found(match: str = "job\\.py ml44 ") -> Reading:
    return Reading("process", Says.DONE, f"no process found (match '{match}')", {"seen_alive": False}, NOW)


def test_a_job_not_started_yet_says_so_plainly() -> None:
    """notes/ml44.md, item 7: a wait begun first, the log missing, no process: 'log unknown:
    log unreadable: stat: cannot statx ...: No such file or directory' (read as a permission
    problem), then 'and no process found and none seen alive during this watch: no process
    found (match ...)'. Unknown, as before; said once, plainly."""
    log = Reading(
        "log", Says.UNKNOWN, "the log is not there yet (no such file: /j/extract.log)", {"absent": True}, NOW
    )
    outputs = Reading("outputs", Says.WORKING, "0/24 outputs", {"count": 0, "expected": 24}, NOW)
    verdict = _decided({"process": _never_found(), "log": log, "outputs": outputs})
    assert verdict.state is State.UNKNOWN, verdict.reasons
    assert verdict.reasons[0] == (
        "the log is not there yet (no such file: /j/extract.log) and no process of the job found"
        " (match 'job\\.py ml44 '), nor seen alive during this watch: not started yet, or log.path"
        " or process.match/pid is wrong"
    ), verdict.reasons
    assert not [r for r in verdict.reasons if r.startswith("and ")], verdict.reasons
    assert " ".join(verdict.reasons).count("no process") == 1, verdict.reasons
    # A log that is there and cannot tell leads still; the process is said once, not with "and".
    doubt = Reading("log", Says.UNKNOWN, "a completion line is followed by other text", {}, NOW)
    verdict = _decided({"process": _never_found(), "log": doubt})
    assert verdict.reasons[:2] == (
        "log unknown: a completion line is followed by other text",
        "process: no process of the job found (match 'job\\.py ml44 '), nor seen alive during this watch",
    ), verdict.reasons


def test_a_wait_begun_before_its_job_first_says_the_log_is_not_there_yet(tmp_path) -> None:
    """The same through a real check: no log file, no process of the job."""
    from sensors import Checker

    tag = f"w45-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    checker = Checker(_local_stage(tmp_path, tag, log))
    try:
        verdict = checker.check()
    finally:
        checker.close()
    assert verdict.state is State.UNKNOWN, verdict.reasons
    assert verdict.readings["log"].detail == f"the log is not there yet (no such file: {log})"
    assert verdict.reasons[0] == (
        f"the log is not there yet (no such file: {log}) and no process of the job found (match"
        f" '--tag {tag}( |$)'), nor seen alive during this watch: not started yet, or log.path or"
        " process.match/pid is wrong"
    ), verdict.reasons


# --------------------------------------------------------------------------- item 8: the small ones


def _alive(cpu: float) -> Reading:
    return Reading(
        "process", Says.WORKING, "pid 4455 R", {"pid": 4455, "state": "R", "cpu_seconds": cpu}, NOW
    )


def test_no_progress_is_said_only_where_it_was_measured() -> None:
    """'no progress seen for 0s (stall after 900s)' at a wait's first check: nothing compared."""
    log = Reading("log", Says.DONE, "completion line: Extraction complete", {"size": 10, "inode": 7}, NOW)
    first = _decided({"process": _alive(5.0), "log": log}, stall_after=900)
    assert first.state is State.RUNNING, first.reasons
    assert "progress not measured yet: no earlier check to compare with (stall after 900s)" in first.reasons
    assert not [r for r in first.reasons if r.startswith("no progress seen")], first.reasons
    later = _decided(
        {"process": _alive(5.0), "log": log}, {"process": _alive(5.0), "log": log}, since=4.0, stall_after=900
    )
    assert later.state is State.RUNNING and "no progress seen for 4s (stall after 900s)" in later.reasons, (
        later.reasons
    )


@pytest.mark.parametrize(
    ("record", "words"),
    [
        (("docker", "exited", 0), "exited with status 0 (success)"),
        (("docker", "exited", 1), "exited with status 1"),
        (("slurm", "COMPLETED", 0), "exited with status 0 (success; COMPLETED)"),
        (("slurm", "FAILED", 3), "exited with status 3 (FAILED)"),
    ],
)
def test_a_recorded_exit_is_said_in_one_parenthesis(record: tuple[str, str, int], words: str) -> None:
    """'docker extract-c66c3fe3 exited with status 0 (success) (exited)'."""
    from sensors._run.supervisor import Record

    kind, state, code = record
    assert Record(kind, "x", "exited", state=state, exit_code=code).how_it_ended() == words


@pytest.mark.parametrize("seen", [False, True], ids=["never seen", "seen at work"])
def test_a_process_this_watch_never_saw_is_not_said_gone(seen: bool) -> None:
    """notes/ml44.md, item 8: bound by --since, the job over before the first check: 'process
    gone: no process found (match ...)'. Gone is inferred, not seen. Running (the outputs
    confirming they stopped changing), as before."""
    process = Reading(
        "process", Says.DONE, "no process found (match 'job\\.py ml44 ')", {"seen_alive": seen}, NOW
    )
    log = Reading("log", Says.DONE, "completion line: Extraction complete", {}, NOW)
    outputs = Reading(
        "outputs",
        Says.WORKING,
        "24/24 outputs; confirming they stopped changing",
        {"count": 24, "expected": 24},
        NOW,
    )
    verdict = _decided({"process": process, "log": log, "outputs": outputs})
    assert verdict.state is State.RUNNING, verdict.reasons
    if seen:
        assert verdict.reasons[-1] == "process gone: no process found (match 'job\\.py ml44 ')", (
            verdict.reasons
        )
    else:
        assert verdict.reasons[-1] == (
            "process: no process of the job found (match 'job\\.py ml44 '), nor seen alive during this watch"
        ), verdict.reasons
        assert not [r for r in verdict.reasons if "gone" in r], verdict.reasons


def test_a_hosts_own_verdict_is_said_with_its_first_reason() -> None:
    """Over two nodes a host's verdict was shown bare: '127.0.0.1:59207: running'."""
    from sensors._config.stage import PolicySpec
    from sensors._verdict.across import AcrossMemory, NodeCheck, decide_across

    error = "error line: torch.distributed.DistBackendError: NCCL error"
    a = NodeCheck(
        "a",
        Verdict("t", State.FAILED, (error,), {"log": Reading("log", Says.FAILED, error, {}, NOW)}, NOW, "a"),
    )
    alive = Reading("process", Says.WORKING, "pid 201 S", {"alive": 1, "processes": []}, NOW)
    b = NodeCheck(
        "b", Verdict("t", State.RUNNING, ("process alive: pid 201 S",), {"process": alive}, NOW, "b")
    )
    verdict, _ = decide_across("t", [a, b], PolicySpec(), None, AcrossMemory(), NOW)
    assert verdict.state is State.FAILED, verdict.reasons
    assert "b: running: process alive: pid 201 S" in verdict.reasons, verdict.reasons
    assert "b: running" not in verdict.reasons, verdict.reasons


def _three_checks(stage: Any, began: float) -> list[Any]:
    """Three checks 0.1 s apart by a watch begun at ``began``."""
    from sensors import Checker

    checker = Checker(stage, began=began)
    try:
        states = []
        for _ in range(3):
            states.append(checker.check())
            time.sleep(0.1)
    finally:
        checker.close()
    return states


def test_a_job_over_before_the_first_check_whose_line_was_written_after_the_watch_began(tmp_path) -> None:
    """The other side: the job began just before `wait` (its log born before the watch), and
    wrote its completion line, the log's last, after the watch began; it was over before the
    first check (a loaded machine: make test's four workers). Its writer was at work after the
    watch began, the run the watch's first check would have seen: complete. Unknown for good
    before."""
    from sensors.testing import COMPLETE_LINE

    tag = f"w45-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    log.write_text("step 1\n")
    time.sleep(0.05)
    began = time.time()
    time.sleep(0.05)
    with log.open("a") as f:
        f.write(f"step 2\n{COMPLETE_LINE}\n")
    states = _three_checks(_local_stage(tmp_path, tag, log), began)
    assert states[-1].state is State.COMPLETE, [(v.state, v.reasons) for v in states]


def test_a_line_written_after_the_watch_began_is_no_runs_word_once_text_follows_it(tmp_path) -> None:
    """Its refusal: the same log with a later run's bytes after the line (written after the
    watch began too) leaves the line's run untold: unknown, never complete."""
    from sensors.testing import COMPLETE_LINE

    tag = f"w45-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    log.write_text(f"step 1\n{COMPLETE_LINE}\n")
    time.sleep(0.05)
    began = time.time()
    time.sleep(0.05)
    with log.open("a") as f:
        f.write("loading shard 1\n")
    states = _three_checks(_local_stage(tmp_path, tag, log), began)
    assert all(v.state is not State.COMPLETE for v in states), [(v.state, v.reasons) for v in states]
    assert states[-1].state is State.UNKNOWN, [(v.state, v.reasons) for v in states]


def test_an_empty_log_is_said_empty_not_a_blank_last_line() -> None:
    """A job whose stdout is block-buffered writes nothing to its log until it exits: the gate
    said ``last: '', 5s ago`` (user s15), as if '' were a line it wrote."""
    from sensors._signals.log import LogMemory, _log_says, _LogScan

    def said(size: int, last: str) -> str:
        scan = _LogScan(None, None, None, None, False, None, last, False)
        return _log_says(scan, None, False, LogMemory(inode=1, size=size), 5.0, size=size)[1]

    assert said(0, "").endswith("; the log is empty, last written 5s ago"), said(0, "")
    assert said(12, "step 1").endswith("; last: 'step 1', 5s ago"), said(12, "step 1")


def test_an_error_line_after_the_completion_line_is_said_to_come_after_it() -> None:
    """A completion line, then a traceback from an ``atexit`` hook: failed, and the reason was
    'error line: ConnectionError: ...' alone; a person could not tell a crash at exit from a
    crash mid-run (user s15)."""
    from sensors._signals.log import LogMemory, _log_says, _LogScan

    def said(complete: str | None) -> str:
        scan = _LogScan(complete, None, "ConnectionError: tracker went away", None, False, None, "x", False)
        says, detail, _ = _log_says(scan, complete, False, LogMemory(inode=1, size=99), 1.0)
        assert says is Says.FAILED
        return detail

    assert said("Finished training.") == (
        "error line after the completion line (Finished training.): ConnectionError: tracker went away"
    )
    assert said(None) == "error line: ConnectionError: tracker went away"
