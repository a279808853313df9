"""An ML engineer's trial of the real CLI on short real jobs (session user15, brief s15).

Jobs written as users write them, run for real on this machine and gated by the real CLI
(``python -m sensors wait ... --json``, tests/wait_cli.py) with a state store of the test's own:
a ``logging`` RotatingFileHandler that rotates the log mid-run, ``python job.py > job.log``
finished before the watch first looked, and a stage file whose ``outputs.expected`` is edited
after its job ended.

Each test here is a defect found in that trial: a sentence shown to a person that is untrue,
or advice the user had already followed; each failed when found (a strict xfail at a434b7e).
Run alone (real time; slow under load):
``PYTHONPATH=$PWD python -m pytest -v -p no:cacheprovider tests/test_user_s15.py``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml

from tests.wait_cli import WaitCli

ROTATING_JOB = r"""
import logging, logging.handlers, os, sys, time
out, log = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
# 100-byte records, 8 to a file: the log is rotated (job.log -> job.log.1, a new job.log) every
# 3.2 s, while a check every second sees at most 2.5 records of the new file.
h = logging.handlers.RotatingFileHandler(log, maxBytes=800, backupCount=3)
h.setFormatter(logging.Formatter("%(message)s"))
lg = logging.getLogger("job"); lg.addHandler(h); lg.setLevel(logging.INFO)
for i in range(20):
    time.sleep(0.4)
    with open(os.path.join(out, f"shard-{i:03d}.bin"), "wb") as f:
        f.write(b"x" * 64)
    lg.info("step %02d/20 loss=0.1234 %s", i + 1, "." * 72)
lg.info("training finished: wrote 20 shards")
"""

BUFFERED_JOB = r"""
import os, sys, time
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for i in range(6):
    time.sleep(0.3)
    with open(os.path.join(out, f"ckpt-{i:03d}.pt"), "wb") as f:
        f.write(b"x" * 64)
    print(f"epoch {i + 1}/6")
print("Finished training.")
"""


def _stage(
    folder: Path, name: str, job: str, complete: str, pattern: str, expected: int, **policy: str
) -> Path:
    doc: dict[str, Any] = {
        "stage": name,
        "host": "local",
        "process": {"match": f"{job} {folder / 'out'}"},
        "log": {"path": str(folder / "job.log"), "complete": complete, "error": "^Traceback"},
        "outputs": {"files": str(folder / "out"), "pattern": pattern, "expected": expected},
        "policy": {"interval": "1s", **policy},
    }
    path = folder / f"{name}-{expected}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _script(folder: Path, text: str) -> Path:
    script = folder / "job.py"
    script.write_text(text)
    return script


def _job_to_log(folder: Path, script: Path) -> int:
    """``python job.py OUT > job.log 2>&1``, to its end: its exit status."""
    with open(folder / "job.log", "wb") as log:
        argv = [sys.executable, str(script), str(folder / "out")]
        return subprocess.run(argv, stdout=log, stderr=log).returncode


def test_a_rotated_log_is_not_said_to_have_grown(tmp_path: Path) -> None:
    """``logging.handlers.RotatingFileHandler`` rotates job.log mid-run (job.log -> job.log.1,
    a new job.log). At the checks where the new file is smaller than the one the check before
    read, the progress reason said ``progress: I/O +1110 bytes, log grew, outputs 5 -> 7``
    (trial: 258 -> 172 bytes, a new inode, ``"rotated": true`` in the same reading's evidence).
    The gate opened (2.6 s after the exit): only the sentence is untrue."""
    script = _script(tmp_path, ROTATING_JOB)
    stage = _stage(
        tmp_path, "s15rotate", "job\\.py", "training finished: wrote \\d+ shards$", "shard-*.bin", 20
    )
    waiting = WaitCli(stage, "--state", str(tmp_path / "state.db"), "--timeout", "90s")
    time.sleep(0.5)
    job = subprocess.Popen([sys.executable, str(script), str(tmp_path / "out"), str(tmp_path / "job.log")])
    try:
        assert job.wait(90) == 0
        assert waiting.end(90) == 0, waiting.story()
    finally:
        job.kill()
    shrunk: list[tuple[int, int, object, list[str]]] = []
    for before, now in pairwise(waiting.verdicts):
        b, n = before["signals"]["log"]["evidence"], now["signals"]["log"]["evidence"]
        if isinstance(b.get("size"), int) and isinstance(n.get("size"), int) and n["size"] < b["size"]:
            shrunk.append(
                (b["size"], n["size"], n.get("rotated"), [r for r in now["reasons"] if "progress" in r])
            )
    assert shrunk, "no check found the log smaller than the check before: the trial did not rotate it"
    assert all(r[2] for r in shrunk), shrunk  # each smaller log was a rotation, and its reading says so
    said = [r for r in shrunk if any("log grew" in line for line in r[3])]
    assert not said, said


def test_a_watch_after_the_end_is_not_told_to_begin_the_log_afresh(tmp_path: Path) -> None:
    """``python job.py > job.log`` (the log begun afresh, as the advice asks), block-buffered
    (its lines land at exit), finished before the watch first looked (trial: the Python API's
    first check came after ``import prefect_crosscheck`` took 6.9 s, longer than the job).
    The gate stays ``unknown`` (no run start: right) and says *"To tell: give the run's start
    with --since ..., watch the job from before it writes its completion line, launch the job
    through crosscheck ... or have each run begin its log afresh (`job > log`, not `>> log`;
    ...)"*. The run did begin its log afresh; it did not tell, and could not: which process
    began a log is read from its writer's /proc/PID/fd, and no writer is left to read."""
    script = _script(tmp_path, BUFFERED_JOB)
    assert _job_to_log(tmp_path, script) == 0
    stage = _stage(tmp_path, "s15afresh", "job\\.py", "^Finished training\\.$", "ckpt-*.pt", 6)
    waiting = WaitCli(stage, "--state", "none", "--timeout", "4s")
    assert waiting.end(60) == 4, waiting.story()
    last = waiting.verdicts[-1]
    assert last["verdict"] == "unknown", waiting.story()
    doubt = [r for r in last["reasons"] if "may be an earlier run's" in r]
    assert doubt and "--since" in doubt[0], last["reasons"]  # the fix that does tell is offered
    assert "begin its log afresh" not in doubt[0], doubt[0]


def test_an_edited_expected_count_does_not_restart_the_wait_after_the_exit(tmp_path: Path) -> None:
    """A stage completes (6/6); 5 s after, with its job long gone and ``exit_grace`` (3 s)
    over, the user edits ``outputs.expected`` to 7 and runs ``wait`` again. The first verdict
    said *"waiting up to 3s after the exit for writes to land (0s so far)"*, *"process gone:
    pid N ended (last seen alive 9s ago, ...)"*, and only ``exit_grace`` later ``failed``
    (outputs short). Under ``serve`` (default ``exit_grace``, 60 s) the same edit said
    *"waiting up to 60s after the exit for writes to land (1s so far)"* beside *"ended (last
    seen alive 829s ago"*: a minute's wait for writes of a job 14 minutes gone."""
    state = str(tmp_path / "state.db")
    script = _script(tmp_path, BUFFERED_JOB)
    six = _stage(tmp_path, "s15edit", "job\\.py", "^Finished training\\.$", "ckpt-*.pt", 6, exit_grace="3s")
    first = WaitCli(six, "--state", state, "--timeout", "60s")
    time.sleep(0.5)
    assert _job_to_log(tmp_path, script) == 0
    assert first.end(60) == 0, first.story()
    time.sleep(5)  # the job's exit is now longer ago than exit_grace
    seven = _stage(tmp_path, "s15edit", "job\\.py", "^Finished training\\.$", "ckpt-*.pt", 7, exit_grace="3s")
    again = WaitCli(seven, "--state", state, "--timeout", "30s")
    assert again.end(60) == 3, again.story()
    head = again.verdicts[0]["reasons"]
    assert any("ended (last seen alive" in r for r in head), head
    assert not any("after the exit for writes to land" in r for r in head), head
