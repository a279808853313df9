"""Adversary of issue 35's run-binding rules, second round (at fe859df): histories that
abuse the rules added that day. Real processes and files; ``Checker`` checks driven by hand,
or the real CLI.

Found (each an xfail with its diagnosis; none has a clear local fix; rule 2's not strict: it
holds when the exit watch falls behind under load):

- rule 2 (an exit watch's end, END_WINDOW): a relaunch's banner written within a millisecond
  after the job's seen end is stamped before the moment the exit thread found it gone, and
  counts as the job's: false complete, locally 3 of 3 (over SSH it held here: the remote
  poll's window is wider than END_WINDOW on this loaded machine, so the end falls back to
  the last sighting alive);
- rule 6 (the watch begins at the CLI process's start): `exec crosscheck wait` at the end of
  a script backdates the watch to the script's start; an earlier run's log reborn between
  the two is bound as this run's: false complete on the real CLI;
- rule 4 (an error first found while only an earlier run's processes were at work is that
  run's): a re-run that crashes before the first check has its traceback hidden; the watch
  says 'running' and never fails.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sensors import Checker, stage_from_dict

# The job: steps, its completion line, a short wait (a check sees the line with the job alive,
# so its writer is known), then its exit.
_JOB = textwrap.dedent(
    """
    import sys, time
    f = open(sys.argv[1], "a")
    for i in range(4):
        f.write(f"step {i}\\n"); f.flush(); time.sleep(0.3)
    f.write("Extraction complete\\n"); f.flush()
    time.sleep(float(sys.argv[2]))
    """
)


#: Route 2's diagnosis (see the module's docstring).
_BANNER_IN_THE_END_WINDOW = pytest.mark.xfail(
    strict=False,
    reason="END_WINDOW: a change stamped up to the moment the exit thread found the writer gone "
    "(checker._owned_by: end.gone where gone - alive <= END_WINDOW) counts as the writer's; a banner "
    "written within a millisecond after the end, its mtime on the coarse clock, is stamped before "
    "`gone` (3/3 here). The writer's last output closed just before its exit and a relaunch's first "
    "write just after it read alike: a design trade-off (3ae328b), not a local fix",
)


def _checks(checker: Checker, n: int, every: float = 0.3) -> list[str]:
    states = []
    for _ in range(n):
        time.sleep(every)
        states.append(checker.check().state.value)
    return states


def test_a_later_runs_banner_written_the_moment_the_job_ends_is_not_the_jobs(
    tmp_path: Path, host, request: pytest.FixtureRequest
) -> None:
    """Rule 2 (an exit watch's end). Run 1 writes its completion line and exits; its launcher
    (a retry loop, a SLURM script: `job; echo 'starting run 2' >> log; job2`) starts run 2 the
    moment run 1 ends, and run 2's banner is in the log within a millisecond of that end. Run 2
    then dies (killed: no traceback, no completion line) before the next check. The watch saw
    run 1 alive at every check and saw its end. The banner was written after that end: it is
    not run 1's, and run 1's line is not the last run's word. Never complete."""
    # The end is seen within END_WINDOW (0.25 s) whenever the exit watch keeps up (locally its
    # thread, over SSH the host's 50 ms poll): the trade-off. Under load it is seen wider and
    # the case holds (a full run beside helpers' tests: it passed locally too): not strict.
    request.applymarker(_BANNER_IN_THE_END_WINDOW)
    tag = f"relaunch-{time.time_ns()}"
    log = tmp_path / "job.log"
    job = " ".join(shlex.quote(a) for a in [sys.executable, "-c", _JOB, str(log), "0.6", "--tag", tag])
    script = f"{job}; echo 'starting run 2' >> {shlex.quote(str(log))}; kill -9 $$"
    launcher = subprocess.Popen(["sh", "-c", script])
    doc = {
        "stage": "relaunch",
        "host": "local",
        "process": {"match": f"--tag {tag}$"},
        "log": {"path": str(log), "complete": "^Extraction complete"},
        "policy": {"interval": "300ms", "exit_grace": "300ms"},
    }
    checker = Checker(stage_from_dict(doc), host=host)
    try:
        time.sleep(0.2)
        states = [checker.check().state.value]
        states += _checks(checker, 14)
        launcher.wait(10)
        assert b"starting run 2" in log.read_bytes()
        assert "complete" not in states, (states, checker.last.reasons if checker.last else None)
    finally:
        launcher.kill()
        launcher.wait()


# An earlier run, begun long before: its logger rotates at the end (a RotatingFileHandler's
# rollover, logrotate's `create`): the old log becomes job.log.1, a fresh job.log is born,
# and the run writes its last lines there, then exits.
_ROTATES_AT_THE_END = textwrap.dedent(
    """
    import os, sys, time
    log = sys.argv[1]
    f = open(log, "a")
    for i in range(3):
        f.write(f"step {i}\\n"); f.flush(); time.sleep(0.3)
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.01)
    time.sleep(0.5)
    f.close(); os.rename(log, log + ".1"); f = open(log, "a")
    f.write("Extraction complete\\n"); f.flush()
    """
)


def test_a_wait_execd_by_a_script_begins_when_the_command_did_not_when_the_script_did(tmp_path: Path) -> None:
    """Rule 6 (the watch begins at the CLI process's start). A step script starts (its own
    work first: a sync, a sleep), then `exec crosscheck wait STAGE`: exec keeps the script's
    PID and its start, so the watch is placed at the script's start, seconds before the
    command began. Meanwhile an earlier run (begun before the script) rotates its log, writes
    its completion line in the fresh file and exits: all before `crosscheck` runs. No run the
    watch is for has been seen: the log, born after the script began but before the command
    did, is no proof of one. Never complete (the real start of the command: 'no run start is
    known')."""
    import os

    import yaml

    import sensors

    tag = f"exec-{time.time_ns()}"
    log, go = tmp_path / "job.log", tmp_path / "go"
    stage = tmp_path / "stage.yaml"
    doc = {
        "stage": "extract",
        "host": "local",
        "process": {"match": f"--tag {tag}$"},
        "log": {"path": str(log), "complete": "^Extraction complete"},
        "policy": {"interval": "300ms", "exit_grace": "300ms"},
    }
    stage.write_text(yaml.safe_dump(doc))
    old = subprocess.Popen([sys.executable, "-c", _ROTATES_AT_THE_END, str(log), str(go), "--tag", tag])
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(sensors.__file__).resolve().parent.parent),
        "CROSSCHECK_STATE": str(tmp_path / "state.db"),
    }
    cli = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "sensors", "wait", str(stage), "--json"])
    try:
        time.sleep(1.2)
        # The step script: its own work first (here: it marks its start and sleeps 2.5 s).
        script = f"touch {shlex.quote(str(go))}; sleep 2.5; exec {cli} --timeout 4s"
        done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, timeout=60)
        old.wait(10)
        assert log.with_name("job.log.1").exists()
        assert '"complete"' not in done.stdout, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    finally:
        old.kill()
        old.wait()


@pytest.mark.xfail(
    strict=True,
    reason="read_log's earlier_error: the re-run's traceback, first found while only the old run's "
    "process is at work and no process of this run was ever seen (job.previous empty), is taken for "
    "the old run's; the watch says 'running' on the old run's steps and never fails. The old run "
    "kept writing after the traceback (no sign it was its own), but the rule reads no order: a "
    "trade-off with fuzzer seed 61's false failed, not a local fix",
)
def test_this_runs_crash_found_while_an_earlier_run_still_works_fails_the_run(tmp_path: Path) -> None:
    """Rule 4 (an error line first found while only an earlier run's processes were at work
    is that run's). The user relaunches with `--since now` while the old run is still
    finishing; the re-run crashes on start (a traceback, then exit 1) before the watch's first
    check. At that check only the old run's process is at work, so the traceback, the only
    error in the log, is taken for the old run's. The re-run failed: the watch must say so,
    not run to its timeout."""
    tag = f"crash-{time.time_ns()}"
    log = tmp_path / "job.log"
    old_code = (
        "import sys, time\nf = open(sys.argv[1], 'a')\n"
        "for i in range(40):\n    f.write(f'old step {i}\\n'); f.flush(); time.sleep(0.25)\n"
    )
    old = subprocess.Popen([sys.executable, "-c", old_code, str(log), "--tag", tag])
    doc = {
        "stage": "crash",
        "host": "local",
        "process": {"match": f"--tag {tag}$"},
        "log": {"path": str(log), "complete": "^Extraction complete", "error": "^RuntimeError"},
        "policy": {"interval": "300ms", "exit_grace": "300ms"},
    }
    try:
        time.sleep(1.0)
        since = time.time()
        time.sleep(0.1)
        crash = (
            "import sys\nf = open(sys.argv[1], 'a')\n"
            "f.write('Traceback (most recent call last):\\nRuntimeError: CUDA out of memory\\n')\n"
            "f.flush(); sys.exit(1)\n"
        )
        subprocess.run([sys.executable, "-c", crash, str(log), "--tag", tag], check=False)
        checker = Checker(stage_from_dict(doc), since=since)
        states = [checker.check().state.value]
        states += _checks(checker, 10)
        assert "complete" not in states
        assert "failed" in states, (states, checker.last.reasons if checker.last else None)
    finally:
        old.kill()
        old.wait()
