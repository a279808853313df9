"""Adversary review 41: run binding, the SSH exit watch, the blind probe, the holders scan,
supervisor records, set-back mtimes (MTIME_SET_BACK) and the probe's own table readers
(5a9e195..2be13cd), on real processes and the real ``Checker``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sensors import Checker, State, stage_from_dict

# ----------------------------------------------------------------- set-back mtimes

#: A job that resumes from a checkpoint: a first line, then the checkpoint's log restored the
#: way `cp -p`, `rsync -t` or shutil.copy2 do (its bytes and its mtime: the log of the run that
#: made the checkpoint, an hour old by its mtime), in place or renamed into place, then it dies
#: (OOM, a crash) before it writes a word.
_RESUMER = """
import os, shutil, sys, time
pause, saved, log, how = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
print("resuming from checkpoint", flush=True)
time.sleep(pause)
if how == "renamed":
    shutil.copy2(saved, log + ".tmp")
    os.rename(log + ".tmp", log)
else:
    shutil.copy2(saved, log)
time.sleep(pause)
sys.exit(1)
"""


@pytest.mark.parametrize("how", ["in-place", "renamed", "appeared"])
def test_a_log_restored_with_its_old_mtime_after_a_check_is_not_this_runs(tmp_path: Path, how: str) -> None:
    """The log was found at a check (or found absent), then replaced by a copy dated an hour
    back (its ctime now), and the job died without a word. A file replaced or rewritten after
    a check, or one that appeared after it, was taken as wholly this run's: the copied log's
    completion line completed the stage (5a9e195..2be13cd: `complete`, 'pid N ended',
    'completion line: DONE'). Its mtime, set before the check that saw the path without it,
    dates nothing (MTIME_SET_BACK): whose run wrote those bytes cannot be told."""
    tag = f"resume-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "train.log"
    saved = tmp_path / "ckpt" / "train.log"
    saved.parent.mkdir()
    saved.write_text("epoch 1\nepoch 2\nDONE\n")
    old = time.time() - 3600
    os.utime(saved, (old, old))
    argv = [sys.executable, "-c", _RESUMER, "1.5", str(saved), str(log), how, "--tag", tag]
    if how == "appeared":  # its stdout elsewhere: the log is absent at the first check
        job = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        with log.open("w") as out:
            job = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    stage = stage_from_dict(
        {
            "stage": "resume",
            "host": "local",
            "process": {"match": f"--tag {tag}$"},
            "log": {"path": str(log), "complete": "^DONE$"},
            "policy": {"interval": "200ms", "settle": 2, "exit_grace": "500ms", "timeout": "20s"},
        }
    )
    verdicts = []
    try:
        with Checker(stage) as checker:
            verdicts.append(checker.check())
            assert verdicts[0].state is State.RUNNING, verdicts[0].reasons
            deadline = time.monotonic() + 30
            while job.poll() is None and time.monotonic() < deadline:
                verdicts.append(checker.check())
                time.sleep(0.2)
            for _ in range(6):  # the job gone: past exit_grace and settle
                verdicts.append(checker.check())
                time.sleep(0.2)
    finally:
        job.kill()
        job.wait()
    assert job.returncode == 1
    states = [v.state.value for v in verdicts]
    assert State.COMPLETE not in [v.state for v in verdicts], (states, verdicts[-1].reasons)
    last = verdicts[-1]
    assert last.state is State.UNKNOWN, (states, last.reasons)
    assert "ctime is later than its mtime" in last.readings["log"].detail, last.readings["log"].detail


#: A job that writes its log elsewhere and moves it into place at its end, over a second after
#: its last write (the rename moves the ctime, not the mtime), then exits 0.
_MOVER = """
import os, sys, time
log = sys.argv[1]
time.sleep(0.5)
with open(log + ".part", "w") as f:
    f.write("epoch 1\\nDONE\\n")
time.sleep(1.6)
os.rename(log + ".part", log)
time.sleep(0.3)
"""


def test_a_log_written_in_the_run_and_moved_into_place_after_a_check_completes(tmp_path: Path) -> None:
    """The other side of the restored log: one written during the run (clearly after its
    start, by the mtime) elsewhere and moved into place after a check that found no log. Its
    ctime is later than its mtime too, and its mtime before that check: dated by its times,
    it is the run's, and the stage completes."""
    tag = f"mover-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "train.log"
    job = subprocess.Popen([sys.executable, "-c", _MOVER, str(log), "--tag", tag])
    stage = stage_from_dict(
        {
            "stage": "mover",
            "host": "local",
            "process": {"match": f"--tag {tag}$"},
            "log": {"path": str(log), "complete": "^DONE$"},
            "policy": {"interval": "200ms", "settle": 2, "exit_grace": "300ms", "timeout": "20s"},
        }
    )
    verdicts = []
    try:
        with Checker(stage) as checker:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                verdicts.append(checker.check())
                if verdicts[-1].state is not State.RUNNING and job.poll() is not None:
                    break
                time.sleep(0.2)
    finally:
        job.kill()
        job.wait()
    assert job.returncode == 0
    assert verdicts[-1].state is State.COMPLETE, (
        [v.state.value for v in verdicts],
        verdicts[-1].reasons,
    )


def _check(stage: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return subprocess.run(
        [sys.executable, "-m", "sensors", "check", str(stage), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def _log_stage(tmp_path: Path, log: Path) -> Path:
    stage = tmp_path / "stage.yaml"
    stage.write_text(f'stage: late\nhost: local\nlog: {{path: "{log}", complete: "^DONE$"}}\n')
    return stage


def test_a_log_chmodded_after_its_last_write_is_still_dated_by_it(tmp_path: Path) -> None:
    """A finished job's log, made readable to others (chmod) a few seconds after its last
    write: its ctime moved, its mtime did not. Checked with a since well before it, it read
    as an mtime set back ('touch -d, cp -p, rsync -t'), dating nothing: unknown for good, in
    words that were not true (5a9e195..2be13cd). A set-back mtime is never later than the
    write it stands for: clearly after the since, the last write was too."""
    log = tmp_path / "job.log"
    log.write_text("epoch 1\nepoch 2\nDONE\n")
    time.sleep(1.6)  # past MTIME_SET_BACK
    log.chmod(0o644)
    done = _check(_log_stage(tmp_path, log), "--since", "5m")
    assert done.returncode == 0 and "complete" in done.stdout, done.stdout + done.stderr


def test_a_checkpoints_log_restored_after_the_since_is_not_this_runs(tmp_path: Path) -> None:
    """The other side: a copy put there after the since (born after it), dated an hour back
    by the copy (cp -p), holds an earlier run's line: not this run's, by its birth or else."""
    saved = tmp_path / "saved.log"
    saved.write_text("epoch 1\nepoch 2\nDONE\n")
    old = time.time() - 3600
    os.utime(saved, (old, old))
    time.sleep(1.2)
    log = tmp_path / "job.log"
    subprocess.run(["cp", "-p", str(saved), str(log)], check=True)
    said = _check(_log_stage(tmp_path, log), "--since", "1m")
    assert "complete" not in said.stdout.split("\n")[0], said.stdout
    assert "UNKNOWN" in said.stdout and "ctime is later than its mtime" in said.stdout, said.stdout


# ----------------------------------------------------------------- the blind probe, a launch

#: crosscheck in a container (a PID namespace of its own) launching a job on its own host, as
#: ``launch_stage`` does, then watching it: the job, and all it forks, run in that namespace.
_IN_A_CONTAINER = """
import json, os, sys, time, uuid
from sensors import Checker, stage_from_dict
from sensors._hosts.local import LocalHost
from sensors._run.run import Run, launch_mark_script, parse_launch_mark

tmp, worker = sys.argv[1], sys.argv[2] == "worker"
host = LocalHost()
log = os.path.join(tmp, "job.log")
tag = f"in-ns-{uuid.uuid4().hex[:8]}"
job = (
    "import os, sys, time\\n"
    + ("if os.fork() == 0:\\n os.setsid()\\n if os.fork() == 0: time.sleep(4); os._exit(0)\\n os._exit(0)\\n"
       if worker else "")
    + "print('Done', flush=True)\\n"
)
mark = parse_launch_mark(host.run_script(launch_mark_script(log), timeout=30))
pid, exit_file = host.launch([sys.executable, "-c", job, tag], log_path=log, name=tag)
run = Run("launch", mark.started_at, mark.log_inode, mark.log_offset, mark.log_fingerprint, pid, exit_file,
          pidns=mark.pidns)
time.sleep(1.0)  # a quick stage: over before the first check
spec = {"stage": "quick", "process": {"match": tag}, "log": {"path": log, "complete": "^Done"},
        "policy": {"interval": "200ms", "settle": 1, "exit_grace": "300ms", "timeout": "30s"}}
said = []
with Checker(stage_from_dict(spec), host=host, run=run) as checker:
    for _ in range(3):
        v = checker.check()
        said.append([v.state.value, v.readings["process"].detail, v.stuck is not None])
        time.sleep(0.3)
print(json.dumps({"pidns": mark.pidns, "said": said}))
"""


@pytest.mark.parametrize("worker", ["alone", "worker"])
def test_a_job_launched_in_the_probes_own_pid_namespace_is_in_its_sight(tmp_path: Path, worker: str) -> None:
    """crosscheck in a container (its own PID namespace) launches a quick job on its own host
    and watches it: the job's exit 0 is recorded before the first check. Since 202f7b7 such a
    probe "cannot see every process", and a launched job it never saw alive was unknown and
    stuck for good (5a9e195..2be13cd), though the job and all it can fork run in the probe's
    own namespace. The mark reads the namespace the launch runs in; a probe in it sees the
    job's every process: complete, and a worker left at work is seen (never complete)."""
    import json
    import shutil

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (a PID namespace of its own)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            "-c",
            _IN_A_CONTAINER,
            str(tmp_path),
            worker,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    said = answer["said"]
    assert answer["pidns"] and answer["pidns"] != "pid:[4026531836]", answer
    states = [s[0] for s in said]
    if worker == "alone":
        assert states[-1] == "complete" and not said[-1][2], said
        assert "launched in this probe's own PID namespace" in said[-1][1], said[-1][1]
    else:
        # Seen at work (rule 10: a match neither the wrapper nor a descendant of it): never
        # complete.
        assert "complete" not in states, said
        assert "pid" in said[-1][1], said
