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
import uuid
from pathlib import Path

import pytest

from tests.test_scenarios_35 import _job_argv, _q, _shell, _stage, _stage_file, _watched_late


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
