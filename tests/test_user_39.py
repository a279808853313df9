"""User 39: a job started by a wrapper script, ``nohup bash run.sh > log 2>&1 &``, watched
late (its completion line in the log, the job post-processing).

run.sh begins with the common ``cd "$(dirname "$0")"``: the command substitution is a child
the wrapper waits for before it runs the job, so the job is not the wrapper's next PID and
the wrapper has reaped a child. ``opened_in_run`` refused the wrapper's ``> log`` and the
watch stayed ``unknown`` for good after the job exited 0 with every output (seen: 3 of 3 runs,
each to the wait's timeout). A child that used less than a clock tick of CPU is no run of a
job: both complete within 3 checks.
"""

from __future__ import annotations

import shlex
import time
import uuid
from pathlib import Path

import pytest

from tests.test_scenarios_35 import (
    COMPLETE,
    Watch,
    _checked_at,
    _job_argv,
    _never_completes,
    _q,
    _shell,
    _stage,
    _stage_file,
    _watched_late,
)


@pytest.mark.parametrize("cd", ["plain", "dirname"])
def test_a_run_sh_wrapper_watched_late_during_post_processing_completes(tmp_path: Path, cd: str) -> None:
    tag = f"runsh-{cd}-{uuid.uuid4().hex[:8]}"
    stage = _stage_file(tmp_path, _stage(tmp_path, tag))
    log = tmp_path / "job.log"
    argv = _job_argv(tmp_path, tag, "stdout", after="postproc", post=2.0)
    first = 'cd "$(dirname "$0")"' if cd == "dirname" else f"cd {shlex.quote(str(tmp_path))}"
    (tmp_path / "run.sh").write_text(f"#!/bin/bash\n{first}\n{_q(argv)}\n")
    job = _shell(f"cd {shlex.quote(str(tmp_path))} && nohup bash run.sh > job.log 2>&1 &", tag)
    _watched_late(stage, tmp_path, log, job, f"run.sh/{cd}")


def test_a_rerun_truncating_the_last_runs_log_watched_late_completes(tmp_path: Path) -> None:
    """Run 1 completes. Run 2, started the same way (`nohup job > job.log`: the shell truncates
    the last run's log, which keeps its inode and its birth), is first watched during its
    post-processing, after its own completion line. The kernel shows run 2's description
    began the log and wrote every byte of it: the line is run 2's (user 39: unknown for good,
    the log's birth being run 1's)."""
    tag = f"rerun-gt-{uuid.uuid4().hex[:8]}"
    stage = _stage_file(tmp_path, _stage(tmp_path, tag))
    log = tmp_path / "job.log"
    argv = _q(_job_argv(tmp_path, tag, "stdout", after="postproc", post=0.2))
    run1 = _shell(f"nohup {argv} > {shlex.quote(str(log))} 2>&1 &", tag)
    run1.wait()
    argv2 = _q(_job_argv(tmp_path, tag, "stdout", after="postproc", post=2.0))
    run2 = _shell(f"nohup {argv2} > {shlex.quote(str(log))} 2>&1 &", tag)
    _watched_late(stage, tmp_path, log, run2, "re-run/> log")


def test_a_rerun_appending_to_the_last_runs_log_watched_late_does_not_complete_on_its_line(
    tmp_path: Path,
) -> None:
    """The same re-run appending (`>> job.log`): the log holds run 1's completion line, then
    run 2's, and nothing the kernel shows tells where run 2's bytes begin (an appending
    description tells nothing of what was there before). The watch begun after run 2's line
    cannot tell it from run 1's: never complete on it (honest `unknown`)."""
    tag = f"rerun-gtgt-{uuid.uuid4().hex[:8]}"
    stage = _stage_file(tmp_path, _stage(tmp_path, tag))
    log = tmp_path / "job.log"
    argv = _q(_job_argv(tmp_path, tag, "stdout", after="postproc", post=0.2))
    _shell(f"nohup {argv} > {shlex.quote(str(log))} 2>&1 &", tag).wait()
    argv2 = _q(_job_argv(tmp_path, tag, "stdout", after="postproc", post=2.0))
    run2 = _shell(f"nohup {argv2} >> {shlex.quote(str(log))} 2>&1 &", tag)
    deadline = time.monotonic() + 20
    while log.read_bytes().count(COMPLETE.encode()) < 2:
        assert time.monotonic() < deadline and run2.at is None
        time.sleep(0.05)
    watch = Watch(stage, tmp_path, timeout="30s")
    watch.first()
    exited = run2.wait()
    _never_completes(watch)
    rc = watch.proc.returncode
    # Run 2 gone past exit_grace (300 ms), its line still in doubt: nothing of this run can
    # tell any more. The wait ends at once with its own exit code and the fix, not at its
    # timeout, and the fix is none the watch already had (it saw the job at work, after the
    # line: watching from before the line would have told).
    last = watch.lines[-1][1]
    assert rc == 5 and last["stuck"] is not None, (rc, watch.story())
    assert _checked_at(last) - exited < 3.0, (_checked_at(last) - exited, watch.story())
    fix = last["stuck"]["fix"]
    assert "from before it writes its completion line" in fix and "`job > log`" in fix, fix
    assert "--since" not in fix, fix  # the run's start was known: another would not tell


def test_a_wrappers_truncating_rerun_watched_late_is_not_told_to_truncate(tmp_path: Path) -> None:
    """Run 2 of a wrapper that does real work before the job (`bash run.sh > job.log`, run.sh
    preparing for over a tick of CPU, then the job): its `> job.log` did begin the log, but
    the wrapper ran work before the job, so the kernel cannot tell it from one that ran a
    whole earlier run. Watched late, the line stays in doubt; the stuck fix must not tell the
    user to do what the wrapper already does (`job > log`, not `>> log`) (adversary 6)."""
    tag = f"rerun-wrap-{uuid.uuid4().hex[:8]}"
    stage = _stage_file(tmp_path, _stage(tmp_path, tag))
    log = tmp_path / "job.log"
    burn = "python3 -c 'sum(i * i for i in range(3000000))'"
    for k, post in enumerate((0.2, 2.0)):
        argv = _q(_job_argv(tmp_path, tag, "stdout", after="postproc", post=post))
        (tmp_path / "run.sh").write_text(f"#!/bin/bash\n{burn}\n{argv}\n")
        run = _shell(f"cd {shlex.quote(str(tmp_path))} && nohup bash run.sh > job.log 2>&1 &", tag)
        if k == 0:
            run.wait()
    deadline = time.monotonic() + 20
    while b"building sample_lengths" not in (log.read_bytes() if log.exists() else b""):
        assert time.monotonic() < deadline and run.at is None
        time.sleep(0.05)
    watch = Watch(stage, tmp_path, timeout="30s")
    watch.first()
    run.wait()
    watch.end()
    last = watch.lines[-1][1]
    assert "complete" not in watch.states(), watch.story()
    stuck = last.get("stuck")
    assert stuck is not None, watch.story()  # gone past exit_grace, the line in doubt
    assert "`job > log`" not in stuck["fix"] and "from before it writes" in stuck["fix"], stuck
