"""Adversary of four rule changes (rule 8's recorded exit, progress past an error line, a
--since watch moving to a new supervisor identity, the unphased scheduler's host cycles).

Each test is a route to a false ``complete``, a false ``failed`` or a gate that never opens;
what held is tested too, so it keeps holding.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from sensors import Checker, Says, State, stage_from_dict
from sensors._hosts import LocalHost
from sensors._run.run import Run, launch_mark_script, parse_launch_mark

# --------------------------------------------------- 2: progress after an error line


def _log_stage(log: Path, **extra: object) -> dict:
    return {
        "stage": "bar", "host": "local",
        "log": {"path": str(log), "complete": "^done$", "error": "^Traceback|Error:",
                "progress": r"(?P<done>\d+)/(?P<total>\d+)"},
        "policy": {"interval": "1s", "stall_after": "2s", "exit_grace": "1s"},
        **extra,
    }  # fmt: skip


_BAR = "".join(f"\r {k * 10:3d}%|##  | {k}/10 [00:0{k}<00:05]" for k in range(1, 6))
_CRASH = 'Traceback (most recent call last):\n  File "train.py", line 3\nRuntimeError: CUDA out of memory\n'
#: tqdm's close() at interpreter shutdown, after the traceback: the same count redrawn.
_REDRAW = "\r  50%|##  | 5/10 [00:06<00:05]\n"

# Found: any progress line after an error line cleared it, a redraw of the very count seen
# before the error too: a crashed log-only job was running, then stalled, never failed. Only
# progress to a count not seen before the error clears it since.


def _append(log: Path, text: str) -> None:
    with log.open("a") as f:
        f.write(text)


def test_a_bar_redrawn_at_shutdown_after_a_traceback_does_not_clear_it(tmp_path) -> None:
    """A log-only stage: a job that crashed (traceback, then tqdm's last redraw of the same
    count at interpreter shutdown) said ``running`` and then ``stalled`` for ever, never
    ``failed``: the redraw read as work going on past the error."""
    log = tmp_path / "job.log"
    log.write_text("")
    checker = Checker(stage_from_dict(_log_stage(log)), host=LocalHost("local"), since="1m")
    checker.check()
    _append(log, _BAR + _CRASH + _REDRAW)
    verdict = checker.check()
    assert verdict.state is State.FAILED, verdict.reasons
    assert "CUDA out of memory" in verdict.reasons[0]


def test_the_redraw_in_a_later_check_than_the_traceback_does_not_clear_it(tmp_path) -> None:
    log = tmp_path / "job.log"
    log.write_text("")
    checker = Checker(stage_from_dict(_log_stage(log)), host=LocalHost("local"), since="1m")
    _append(log, _BAR)
    assert checker.check().readings["log"].says is Says.WORKING
    _append(log, _CRASH)
    assert checker.check().readings["log"].says is Says.FAILED
    _append(log, _REDRAW)
    again = checker.check()
    assert again.readings["log"].says is Says.FAILED, again.readings["log"].detail


def test_progress_that_moved_past_the_error_still_clears_it(tmp_path) -> None:
    """What held: a caught error, then the count moving on, is work going on past it."""
    log = tmp_path / "job.log"
    log.write_text("")
    checker = Checker(stage_from_dict(_log_stage(log)), host=LocalHost("local"), since="1m")
    _append(log, _BAR + _CRASH)
    assert checker.check().readings["log"].says is Says.FAILED
    _append(log, "\r  60%|###  | 6/10 [00:07<00:04]")
    went_on = checker.check()
    assert went_on.readings["log"].says is Says.WORKING, went_on.readings["log"].detail


def test_a_crashed_job_with_a_process_section_still_fails_on_its_error_line(tmp_path) -> None:
    """With a process section the crash ended ``failed`` before the fix too, but only after
    ``exit_grace`` and for "no completion line": the error line is the reason again."""
    log = tmp_path / "job.log"
    log.write_text("")
    tag = f"advbar{uuid.uuid4().hex[:8]}"
    job = tmp_path / "job.py"
    job.write_text(
        "import sys, time\n"
        f"sys.stdout.write({_BAR!r}); sys.stdout.flush(); time.sleep(0.5)\n"
        f"sys.stdout.write({_CRASH + _REDRAW!r}); sys.exit(1)\n"
    )
    checker = Checker(
        stage_from_dict(_log_stage(log, process={"match": tag})), host=LocalHost("local"), since="1m"
    )
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, str(job), tag], stdout=out, stderr=subprocess.STDOUT)
    time.sleep(0.2)
    checker.check()
    proc.wait(timeout=30)
    verdict = checker.check()
    assert verdict.state is State.FAILED, verdict.reasons
    assert "CUDA out of memory" in verdict.reasons[0]


# --------------------------------------------------- 1: rule 8, a recorded exit read after it


def test_a_wrapper_that_recorded_0_while_its_job_daemonized_a_match_is_not_complete(tmp_path) -> None:
    """What held: a watch given the launch record after the wrapper recorded status 0, the
    job's daemonized child (setsid: no descendant any more) still alive under the match: no
    ``complete`` on the recorded exit (the process reading is ``unknown``)."""
    host = LocalHost("local")
    log = tmp_path / "job.log"
    tag = f"advdaemon{uuid.uuid4().hex[:8]}"
    mark = parse_launch_mark(host.run_script(launch_mark_script(str(log)), timeout=30))
    script = f"setsid sh -c 'sleep 30; : {tag}' </dev/null >/dev/null 2>&1 & exit 0"
    pid, exit_file = host.launch(["sh", "-c", script], log_path=str(log), name=f"d-{tag}")
    run = Run(
        source="launch", started_at=mark.started_at, log_inode=mark.log_inode,
        log_offset=mark.log_offset, log_fingerprint=mark.log_fingerprint, pid=pid, exit_file=exit_file,
    )  # fmt: skip
    deadline = time.time() + 10
    while not (os.path.exists(exit_file) and os.path.getsize(exit_file)) and time.time() < deadline:
        time.sleep(0.05)
    assert Path(exit_file).read_text().split()[0] == "0"
    daemon = subprocess.run(["pgrep", "-f", f"sleep 30; : {tag}"], capture_output=True, text=True)
    assert daemon.stdout.split(), "the daemon is alive"
    try:
        stage = stage_from_dict(
            {"stage": "d", "host": "local", "process": {"match": tag},
             "policy": {"interval": "1s", "settle": 2, "exit_grace": "1s"}}
        )  # fmt: skip
        checker = Checker(stage, host=host, run=run)
        for _ in range(3):
            verdict = checker.check()
            assert verdict.state is not State.COMPLETE, verdict.reasons
            time.sleep(0.3)
    finally:
        for p in daemon.stdout.split():
            subprocess.run(["kill", p], check=False)


def test_a_read_of_the_same_bytes_again_does_not_bring_a_cleared_error_back(tmp_path) -> None:
    """Multi-host fuzzer seed 50587: an error line with no progress before it, then progress
    (work went on past it: ``working``). A later read that scans the log from its start again
    (a log shorter than the bytes a resumed read keeps is read whole, with the last scan's
    memory) took the last check's progress, the one *after* the error, for the count before
    it, read that same progress as a redraw, and the cleared error failed the run again."""
    log = tmp_path / "job.log"
    log.write_text("")
    checker = Checker(stage_from_dict(_log_stage(log)), host=LocalHost("local"), since="1m")
    checker.check()
    _append(log, "Error: rank 1 lost its peer\n")
    assert checker.check().readings["log"].says is Says.FAILED
    _append(log, " 1/10 steps\n")
    assert checker.check().readings["log"].says is Says.WORKING
    _append(log, "checkpoint saved\n")
    again = checker.check()
    assert again.readings["log"].says is Says.WORKING, again.readings["log"].detail
