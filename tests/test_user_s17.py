"""An ML engineer's trial of the real CLI on short real jobs (session user17, brief s17, at
debfa0b: which processes count as a completion line's writers).

Jobs written as users write them (progress, a completion line, then a ``wandb: Synced``-like
summary line, exit 0), run for real on this machine and gated by the real CLI (``python -m
sensors wait ... --json``, tests/wait_cli.py).

Each test here is a defect found in that trial: a gate that should open and does not, or
advice the user had already followed (a strict xfail where it is still open). Run alone (real time;
slow under load): ``PYTHONPATH=$PWD python -m pytest -v -p no:cacheprovider
tests/test_user_s17.py``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tests.wait_cli import WaitCli

# Progress, a quiet spell (the watch's first check lands in it), the completion line, then a
# summary line after it (as wandb prints at exit), exit 0.
QUIET_JOB = r"""
import sys, time
print("starting training s17quietjob", flush=True)
time.sleep(6)
print("Training complete: wrote model.pt", flush=True)
time.sleep(0.2)
print("wandb: Synced 5 W&B file(s), 0 media file(s), 0 artifact file(s) and 0 other file(s)", flush=True)
"""

# A job of a few ms (a cached step): done long before a watch begun just before it first looks
# (its first check comes after its imports: 0.6 to 2.9 s after the command here, under load).
TINY_JOB = (
    ": s17tinyjob; echo 'epoch 1/1 loss=0.1'; echo 'Training complete: wrote model.pt';"
    " echo 'wandb: Synced 5 W&B file(s), 0 media file(s)'"
)


def _stage(folder: Path, name: str, match: str, **policy: str) -> Path:
    doc: dict[str, Any] = {
        "stage": name,
        "host": "local",
        "process": {"match": match},
        "log": {"path": str(folder / "job.log"), "complete": "^Training complete"},
        "policy": {"interval": "200ms", **policy},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_restarted_wait_that_missed_the_jobs_end_says_so_and_asks_for_what_it_lacked(
    tmp_path: Path,
) -> None:
    """Trial (case 3b): ``wait --state S`` saw the job alive and read its log (``starting
    training``), was SIGKILLed, and was started again on the same store before the job's line.
    Where the restarted wait's first check came after the job's exit (its imports took longer
    than the job had left: trials c3b-3, c3b-4, restart 0.4 to 0.9 s before the exit), it said
    *"log unknown: a completion line (...) is followed by other text ('wandb: Synced ...') that no
    process known to have written the completion line can have written ..."* (its evidence:
    ``"complete_writers": [PID]``, the one process the stage matches) and, after ``exit_grace``,
    ended stuck (exit 5) with the fix *"match every process that writes the log with
    process.match ..."*: it does. A single watch whose one sighting is followed by a check after
    the exit (``interval: 5s``, trials c6-int5, c6-q5) opened in 5 s; so did a wait restarted
    in time to see the job alive once more (c3b-1, c3b-2). A watch frozen by SIGSTOP across the
    end (c3b-stop*) ends the same as the restarted one. Here the restart comes after the exit, so
    that the first check after it is surely later than the job's end.

    What the restarted watch has fits two histories: the job wrote its line and the summary
    and ended, or it wrote its line and ended and a later run (unseen: it came and went
    between the watches) appended the summary. Only the job's end, seen, tells them apart (a
    watch that kept running sees it: the control above). So it stays shut, stuck, and says
    so with what it lacked: one watch kept across the end (or a launch), never the
    ``process.match`` the stage already has (it offered that: the trial's defect)."""
    stage = _stage(tmp_path, "s17-restart-gate", "s17quietjob", exit_grace="3s", timeout="40s")
    state = str(tmp_path / "state.db")
    first = WaitCli(stage, "--state", state)
    with open(tmp_path / "job.log", "wb") as log:
        job = subprocess.Popen([sys.executable, "-c", QUIET_JOB], stdout=log, stderr=log)
    try:
        seen = first.until(lambda v: v["signals"]["process"]["evidence"].get("alive") == 1, 30)
        first.proc.send_signal(signal.SIGKILL)
        first.end(10)
        assert job.poll() is None, "the job ended before the first watch saw it: no trial"
        assert "s17quietjob" in seen["signals"]["log"]["evidence"]["last_line"], seen["reasons"]
        assert job.wait(30) == 0
        again = WaitCli(stage, "--state", state)
        rc = again.end(60)
    finally:
        job.kill()
    assert rc == 5, (rc, again.story(), again.stderr)  # stuck: told at once, not at the timeout
    said = again.stderr + repr(again.story())
    assert "keep one watch running across the job's end" in said, said
    assert "match every process that writes the log" not in said, said


def test_a_wait_begun_before_a_tiny_job_is_not_told_to_watch_from_before_it(tmp_path: Path) -> None:
    """Trial (case 2): ``crosscheck wait stage.yaml --since @NOW`` started, then a job of under
    a second (``python job.py > job.log``: progress, its completion line, a ``wandb: Synced``
    line, exit 0) 0.06 s later; the wait's first check came after the job's end. It said
    *"... that no process known to have written the completion line can have written: ... To
    tell: watch the job from before it writes its completion line, match every process that
    writes the log with process.match (...), launch the job through crosscheck (...) or have the
    job write its completion line last (after closing its outputs)"*, until its timeout. The
    wait was begun before the job (and its --since is before it too): that advice was followed.
    docs/cli.md: "The fix never repeats what the watch already did: ... no 'watch from before it
    ends' to one that saw the job end or was there before it (that one is told to check more
    often than the job runs: what it lacked is a check inside the job's life)". (Without
    --since the same wait is told to check more often, "a policy.interval shorter than its
    life": at 200 ms it was, 0/5 trials opened; what it lacked was a first check before the
    end.) The log's birth, on the host's clock, after the command's start (or within its
    precision) says the watch was there before the job, whatever bound the run."""
    stage = _stage(tmp_path, "s17-tiny-gate", "s17tinyjob", timeout="5s")
    since = time.time()
    waiting = WaitCli(stage, "--since", f"@{since:.3f}", "--state", "none")
    with open(tmp_path / "job.log", "wb") as log:
        assert subprocess.run(["sh", "-c", TINY_JOB], stdout=log, stderr=log).returncode == 0
    rc = waiting.end(60)
    assert waiting.verdicts, (rc, waiting.stderr)
    first = waiting.verdicts[0]["signals"]["process"]["evidence"]
    assert first["alive"] == 0, "the wait's first check saw the job alive: no trial"
    assert rc == 4, (rc, waiting.story())
    doubt = [r for r in waiting.verdicts[-1]["reasons"] if r.startswith("log unknown")]
    assert doubt, waiting.story()
    assert "watch the job from before it writes its completion line" not in doubt[0], doubt[0]
