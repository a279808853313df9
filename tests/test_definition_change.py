"""A stage definition edited between two runs: the log added to a process-only stage.

The memory of the process signal is kept across the edit (the same processes are the job),
the log's starts afresh (``sensors._check.persist._without``). A process seen alive at the
check before is a writer of a line found now only where that check read the log (of this
memory) and found no line there: under the old definition no check read it. The rule is
table-tested in tests/test_run_model.py (``at_read``). The tests here are its real-process
neighbours, both sides, and hold with or without that rule: an earlier run's line, followed
by text no known writer wrote, is never the run's; a line written while the new definition
watches opens the gate; a completion regex edited mid-run keeps both.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

from sensors import Checker, State, Verdict, stage_from_dict
from sensors._store import open_store

_JOB = "import sys, time; time.sleep(float(sys.argv[1]))"


def _job(tag: str, seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", _JOB, str(seconds), "--tag", tag])


def _stage(tag: str, log: Path | None) -> dict[str, object]:
    doc: dict[str, object] = {
        "stage": "edited",
        "process": {"match": f"--tag {tag}( |$)"},
        "policy": {"settle": 1, "exit_grace": "0.1s"},
    }
    if log is not None:
        doc["log"] = {"path": str(log), "complete": "^Extraction complete"}
    return doc


def _wait_seen(checker: Checker) -> None:
    deadline = time.time() + 10
    while time.time() < deadline:
        if checker.check().readings["process"].evidence.get("alive"):
            return
        time.sleep(0.05)
    raise AssertionError("the job was never seen alive")


def test_a_line_an_earlier_run_wrote_before_the_log_was_added_to_the_stage_is_not_the_runs(
    tmp_path: Path,
) -> None:
    """Run 1 writes the line and exits; run 2 begins, appends text and no line, and is seen
    alive by the process-only watch; the stage then gains its log. The new definition's
    watch never saw the log without the line: run 2 is no known writer of it, and the text
    after it is no known writer's. Never complete."""
    tag = f"dc-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    store = open_store(tmp_path / "state.db")
    try:
        with Checker(stage_from_dict(_stage(tag, None)), state=store) as old:
            run1 = _job(tag, 0.4)
            _wait_seen(old)
            log.write_text("Extraction complete\n")
            run1.wait()
            run2 = _job(tag, 0.6)
            with log.open("a") as f:
                f.write("[6/6]\n")
            _wait_seen(old)  # run 2 at work: the old definition's memory has it alive
            run2.wait()
            time.sleep(0.1)
            old.check()  # finds it gone, its end seen by the old watch's exit watch
        with Checker(stage_from_dict(_stage(tag, log)), state=store) as new:
            verdicts = [new.check() for _ in range(4)]
    finally:
        store.close()
    states = [(v.state.value, v.reasons[:2]) for v in verdicts]
    assert all(v.state is not State.COMPLETE for v in verdicts), states


def test_a_line_written_while_the_new_definition_watches_completes(tmp_path: Path) -> None:
    """The gate's side: the log added while the job is at work; the new definition's watch
    reads the log without the line, then the job writes it and exits: complete within 3
    checks of the exit."""
    tag = f"dc-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    log.write_text("step 1\n")
    store = open_store(tmp_path / "state.db")
    try:
        with Checker(stage_from_dict(_stage(tag, None)), state=store) as old:
            job = _job(tag, 1.0)
            _wait_seen(old)
        with Checker(stage_from_dict(_stage(tag, log)), state=store) as new:
            first = new.check()
            with log.open("a") as f:
                f.write("Extraction complete\n")
            job.wait()
            after = [new.check() for _ in range(3)]
    finally:
        store.close()
    assert first.state is not State.COMPLETE, first.reasons
    assert after[-1].state is State.COMPLETE, [(v.state.value, v.reasons[:2]) for v in after]


def _regex_edited(tmp_path: Path, line: bool) -> tuple[Verdict, list[Verdict]]:
    """An appending log (an earlier run's lines in it, and its completion line); the job at
    work, watched, appends a step; its completion regex is then edited (the stage file fixed
    while the job runs: a new definition, the store's memory restored less the log's). The
    new definition's first check, then (``line``: after the job appends its own completion
    line) the checks after the job's exit."""
    tag = f"dc-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    log.write_text("run 1 step 9\nTraining complete\n")
    old = {**_stage(tag, log), "log": {"path": str(log), "complete": "^Extraction done"}}
    new = {**old, "log": {"path": str(log), "complete": "^(Training|Extraction) complete"}}
    store = open_store(tmp_path / "state.db")
    try:
        job = _job(tag, 1.5)
        with Checker(stage_from_dict(old), state=store) as watch:
            _wait_seen(watch)
            with log.open("a") as f:
                f.write("run 2 step 1\n")
            watch.check()
        with Checker(stage_from_dict(new), state=store) as edited:
            first = edited.check()
            if line:
                with log.open("a") as f:
                    f.write("Training complete\n")
            job.wait()
            return first, [edited.check() for _ in range(3)]
    finally:
        store.close()


def test_a_completion_regex_edited_while_the_job_runs_completes_on_the_line_written_after(
    tmp_path: Path,
) -> None:
    """The log, written before and after the run began, cannot be bound whole again, but
    what is written after the new definition's first read is the run's: the job's line,
    written then, completes it within 3 checks of the exit. (A line written before the edit,
    text after it, stays ``unknown``: the new definition never read the log without it, and
    its writers cannot be named; fuzzer seeds 8500115, 8600405, timing-dependent.)"""
    first, after = _regex_edited(tmp_path, line=True)
    said = [(v.state.value, v.reasons[:2]) for v in (first, *after)]
    assert first.state is not State.COMPLETE, said
    assert after[-1].state is State.COMPLETE, said


def test_an_earlier_runs_line_that_the_edited_regex_matches_is_still_not_the_runs(tmp_path: Path) -> None:
    """The other side: the edit makes an earlier run's line, before this run's bytes, match;
    the job then exits without a line of its own. Never complete."""
    first, after = _regex_edited(tmp_path, line=False)
    said = [(v.state.value, v.reasons[:2]) for v in (first, *after)]
    assert all(v.state is not State.COMPLETE for v in (first, *after)), said
