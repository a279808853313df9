"""Seeing a process end (issue 35, "See the end"): on the local host the watch learns when
the job's process ended (a pidfd), so text its log got before that end is its own run's, and
text written after it is not.

Real processes and files; checks driven by hand, a few hundred ms apart.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from sensors import Checker, stage_from_dict

JOB = textwrap.dedent(
    """
    import logging, sys, time
    logging.basicConfig(filename=sys.argv[1], level=logging.INFO, format="%(asctime)s %(message)s")
    for i in range(3):
        logging.info("step %d", i)
        time.sleep(0.3)
    logging.info("Extraction complete")
    time.sleep(float(sys.argv[3]))
    logging.info("wandb: Synced run abc (%s)", sys.argv[2])
    """
)


def _stage(tmp_path: Path, tag: str) -> Checker:
    doc = {
        "stage": "end",
        "host": "local",
        "process": {"match": f"--tag {tag}$"},
        "log": {"path": str(tmp_path / "job.log"), "complete": "Extraction complete"},
        "policy": {"interval": "300ms", "exit_grace": "300ms"},
    }
    return Checker(stage_from_dict(doc))


def _job(tmp_path: Path, tag: str, after: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", JOB, str(tmp_path / "job.log"), "x", str(after), "--tag", tag]
    )


def test_text_after_the_completion_line_is_the_jobs_own_when_its_end_was_seen(tmp_path: Path) -> None:
    """The job writes its completion line, then a `wandb: Synced` line, then exits 0; the
    watch saw it from its start. Before: `unknown` for good ("followed by other text that no
    process known to have written the completion line can have written"). Now: complete
    within 3 checks of the exit."""
    tag = f"see-end-{time.time_ns()}"
    job = _job(tmp_path, tag, 0.15)
    checker = _stage(tmp_path, tag)
    time.sleep(0.2)
    states = [checker.check().state.value]
    job.wait(20)
    exited = time.monotonic()
    checks = 0
    while states[-1] != "complete" and checks < 12:
        time.sleep(0.3)
        states.append(checker.check().state.value)
        checks += 1
    assert states[-1] == "complete", (states, checker.last.reasons if checker.last else None)
    assert checks <= 4, (checks, states)  # exit grace and settle: within 3 checks of the grace
    assert time.monotonic() - exited < 3.0


def test_text_written_after_the_writers_end_is_not_theirs(tmp_path: Path) -> None:
    """The job writes its completion line and exits; after its end (seen), another process
    (a later run, begun and over between two checks, never seen) appends a banner. That text
    is not the job's: the completion line is not its run's last word, never complete."""
    tag = f"see-end-{time.time_ns()}"
    job = _job(tmp_path, tag, 0.0)
    checker = _stage(tmp_path, tag)
    time.sleep(0.2)
    checker.check()
    # Watched alive at every check until its line is there, so the line's writer is known.
    while b"Extraction complete" not in (tmp_path / "job.log").read_bytes():
        checker.check()
        time.sleep(0.05)
    job.wait(20)
    time.sleep(0.3)  # its end seen, well before the banner
    with open(tmp_path / "job.log", "a") as log:
        log.write("starting run 2 (banner)\n")
    states = []
    for _ in range(8):
        time.sleep(0.3)
        verdict = checker.check()
        states.append(verdict.state.value)
    assert "complete" not in states, (states, verdict.reasons)
