"""An adversary's review of the supervisors (issue 36): routes to a false ``complete``, a false
``failed`` or a gate that never opens, found against the supervisor change, each a test of the
real probe (the stand-ins of tests/supervisors.py, the real Slurm on loopback) or of the pure
parser where the logic is pure. Each failed on the code it was found on.
"""

from __future__ import annotations

import json
import time

import pytest

from sensors import Checker, Says, State, stage_from_dict
from sensors._hosts.local import LocalHost
from sensors._run.supervisor import parse_docker, parse_slurm, parse_systemd
from tests.supervisor_standin import systemd_time
from tests.supervisors import Stand

CID = "4f" * 32


@pytest.fixture
def stand(tmp_path) -> Stand:
    return Stand(tmp_path)


def _docker_stage(stand: Stand, **extra) -> dict:
    return {"stage": "web", "supervisor": {"docker": "web", "bin": str(stand.bin)}, **extra}


def _unit_stage(stand: Stand, **extra) -> dict:
    return {"stage": "job", "supervisor": {"systemd": "job.service", "bin": str(stand.bin)}, **extra}


def _last(stage: dict, host, checks: int = 3, **kw):
    checker = Checker(stage_from_dict(stage), host=host, **kw)
    return [checker.check() for _ in range(checks)][-1]


# --------------------------------------------------------------------------- another run
#
# A --since is exact (docs/run-binding.md, rule 11: a match begun before it is an earlier
# run's, its exit no evidence). The supervisor's record of a container that ran and exited an
# hour before the given start was taken as this run's exit: exit 0 completed the stage (and
# an earlier attempt's exit 1 failed it) before the run the operator named had even begun.


@pytest.mark.parametrize("code, not_state", [(0, State.COMPLETE), (1, State.FAILED)])
def test_an_exit_recorded_before_since_is_an_earlier_runs(stand, host, code, not_state) -> None:
    now = time.time()
    stand.container("web", status="exited", cid=CID, started=now - 3600, finished=now - 3500, exit_code=code)
    verdict = _last(_docker_stage(stand), host, since=now - 60)
    assert verdict.state is not not_state, verdict.reasons
    sup = verdict.readings["supervisor"]
    assert sup.says is Says.UNKNOWN and "earlier run" in sup.detail, sup.detail
    # The record of a run begun since the given start still decides.
    stand.container("web", status="exited", cid=CID, started=now - 30, finished=now - 5, exit_code=code)
    verdict = _last(_docker_stage(stand), host, since=now - 60)
    assert verdict.state is (State.COMPLETE if code == 0 else State.FAILED), verdict.reasons


# --------------------------------------------------------------------------- systemd restarting
#
# While systemd starts a unit again (an auto-restart under Restart=, or ExecStartPre of a
# `systemctl restart`), ActiveState is "activating" and the ExecMain* properties are still the
# last exit's. The parser read the last exit first: Restart=always after an exit 0 was
# `complete`, Restart=on-failure after a failure `failed`, while systemd was starting the job
# again (docs/supervisors.md's own table: activating is working).


def _restarting(stand: Stand, *, sub: str, status: int, result: str, invocation: str) -> None:
    now = time.time()
    stand.unit(
        "job.service",
        active="activating",
        sub=sub,
        invocation=invocation,
        started=now - 60,
        exited=now - 2,
        code=1,
        status=status,
        result=result,
    )


@pytest.mark.parametrize(
    "sub, status, result",
    [
        ("auto-restart", 0, "success"),  # Restart=always: not complete
        ("auto-restart", 1, "exit-code"),  # Restart=on-failure: being retried, not failed
        ("start-pre", 0, "success"),  # systemctl restart: a new invocation, the old exit shown
    ],
)
def test_a_unit_being_started_again_is_not_its_last_exit(stand, host, sub, status, result) -> None:
    _restarting(stand, sub=sub, status=status, result=result, invocation="cd" * 16)
    verdict = _last(_unit_stage(stand), host, checks=2)
    assert verdict.state is State.RUNNING, verdict.reasons
    assert verdict.readings["supervisor"].says is Says.WORKING


def test_systemd_activating_parses_as_waiting() -> None:
    body = "\n".join(
        [
            "LoadState=loaded",
            "ActiveState=activating",
            "SubState=auto-restart",
            "Result=success",
            "ExecMainStatus=0",
            "ExecMainCode=1",
            "ExecMainPID=0",
            "InvocationID=" + "ab" * 16,
            "ExecMainStartTimestamp=" + systemd_time(1_796_104_800),
            "ExecMainExitTimestamp=" + systemd_time(1_796_104_860),
            "ExecMainStartTimestampMonotonic=100",
            "ExecMainExitTimestampMonotonic=200",
            "ControlGroup=/system.slice/job.service",
        ]
    )
    record = parse_systemd("job.service", 0, body)
    assert record.phase == "waiting" and not record.success


# --------------------------------------------------------------------------- docker: a start that failed
#
# `docker run -d IMAGE no-such-command`: the runtime cannot exec it; docker leaves the container
# "created" (StartedAt zero) with ExitCode 127 and the runtime's Error. That read as "has not
# started its job yet" for good: `running` for a job that can never run.


def test_a_container_whose_start_failed_is_failed(stand, host) -> None:
    error = (
        "failed to create task for container: failed to create shim task: OCI runtime create failed:"
        ' runc create failed: unable to start container process: exec: "extract": executable file'
        " not found in $PATH: unknown"
    )
    stand.container("web", status="created", cid=CID, started=None, exit_code=127, error=error)
    verdict = _last(_docker_stage(stand), host, checks=1)
    assert verdict.state is State.FAILED, verdict.reasons
    assert "127" in verdict.reasons[0] and "executable file not found" in verdict.reasons[0]


def test_a_created_container_without_error_still_waits(stand) -> None:
    stand.container("web", status="created", cid=CID, started=None)
    body = (stand.bin / "state" / "docker-web").read_text().split("\n", 1)[1]
    assert parse_docker("web", 0, body).phase == "waiting"


# --------------------------------------------------------------------------- docker: the CLI's warnings
#
# The probe reads the CLI's stdout and stderr together. docker writes warnings to stderr
# ("WARNING: Error loading config file: ...": a ~/.docker/config.json the probe's user cannot
# read, as after a `sudo docker login`): the JSON was then no JSON, and the record unreadable
# for good (a gate that never opens on a container docker says exited 0).


def test_docker_warnings_on_stderr_do_not_hide_the_record(stand, host) -> None:
    now = time.time()
    stand.container("web", status="exited", cid=CID, started=now - 60, finished=now - 5, exit_code=0)
    real = stand.bin / "docker"
    # The stand-in is one program that acts as the tool its name says (argv[0]): kept as
    # `docker` in a folder of its own, behind a wrapper that warns first.
    inner = stand.bin / "real"
    inner.mkdir()
    real.rename(inner / "docker")
    (stand.bin / "state").rename(inner / "state")
    real.write_text(
        "#!/bin/sh\n"
        "echo 'WARNING: Error loading config file: /root/.docker/config.json: open"
        " /root/.docker/config.json: permission denied' >&2\n"
        'exec "$(dirname "$0")/real/docker" "$@"\n'
    )
    real.chmod(0o755)
    verdict = _last(_docker_stage(stand), host)
    assert verdict.state is State.COMPLETE, verdict.reasons


def test_docker_json_after_a_warning_parses(stand) -> None:
    stand.container("web", status="exited", cid=CID, started=1_796_104_800, finished=1_796_104_860)
    body = (stand.bin / "state" / "docker-web").read_text().split("\n", 1)[1]
    warned = "WARNING: Error loading config file: x: permission denied\n" + body
    assert parse_docker("web", 0, warned).success
    # Not an array at all is still no record.
    assert parse_docker("web", 0, "WARNING: something\n{}").phase == "unreadable"
    assert parse_docker("web", 0, json.dumps({"State": {}})).phase == "unreadable"


# --------------------------------------------------------------------------- Slurm: the time format
#
# sacct and squeue print times in the format SLURM_TIME_FORMAT names ("relative", "%s", any
# strftime), which sites set in their users' environment (a login's rc files: what an SSH
# probe's shell inherits). The parser reads ISO 8601 only: a COMPLETED job's start read as
# none, and a COMPLETED job with no start was "waiting" for good.


def test_slurm_completed_with_a_start_not_parsed_is_not_waiting() -> None:
    off = (1, "Slurm accounting storage is disabled")
    record = parse_slurm("5", off, (0, "5|COMPLETED|0|19:00:29|19:00:31"))
    assert record.phase == "exited" and record.success


class _SiteEnvHost(LocalHost):
    """The probe's shell with the environment a site's login gives its users (as an SSH
    probe's shell inherits it from rc files)."""

    shell = ("/usr/bin/env", "SLURM_TIME_FORMAT=relative", "/bin/sh", "-s")


@pytest.mark.parametrize("script, state", [("exit 0", State.COMPLETE), ("sleep 60", State.RUNNING)])
def test_slurm_with_the_sites_time_format(slurm, script, state) -> None:
    job = slurm.submit(script)
    if state is State.COMPLETE:
        slurm.wait_state(job, "COMPLETED")
    else:
        slurm.wait_state(job, "RUNNING")
    try:
        verdict = _last({"stage": "sb", "supervisor": {"slurm": job, "bin": str(slurm.bin)}}, _SiteEnvHost())
        assert verdict.state is state, verdict.reasons
        # The identity is the job and its start, read as the probe asks (ISO 8601, UTC).
        assert verdict.run["supervised"].startswith(f"{job}@20"), verdict.run
    finally:
        slurm.tool("scancel", job, check=False)


# --------------------------------------------------------------------------- trust: supervisor.bin
#
# The probe ran whatever `docker` (systemctl, sacct...) it found in the stage's supervisor.bin.
# A folder (or a command in it) another user can write is one where they can put a `docker`
# that prints an exit 0 for a job that failed or still runs (and that runs as the probe's
# user). An exit record in such a place is refused (docs/security.md); the tools that print
# the record are trusted the same way.


@pytest.mark.parametrize("what", ["folder", "command"])
def test_a_bin_others_can_write_is_not_run(stand, host, what) -> None:
    now = time.time()
    stand.container("web", status="exited", cid=CID, started=now - 60, finished=now - 5, exit_code=0)
    (stand.bin if what == "folder" else stand.bin / "docker").chmod(0o777)
    verdict = _last(_docker_stage(stand), host, checks=2)
    sup = verdict.readings["supervisor"]
    assert verdict.state is State.UNKNOWN and sup.says is Says.UNKNOWN, verdict.reasons
    assert "not trusted" in sup.detail and "writable by" in sup.detail, sup.detail


def test_a_bin_of_the_users_own_is_run(stand, host) -> None:
    now = time.time()
    stand.container("web", status="exited", cid=CID, started=now - 60, finished=now - 5, exit_code=0)
    stand.bin.chmod(0o755)
    assert _last(_docker_stage(stand), host).state is State.COMPLETE


def test_an_untrusted_slurm_bin_is_not_run(slurm, tmp_path) -> None:
    bad = tmp_path / "bin"
    bad.mkdir()
    for tool in ("sacct", "squeue", "scontrol"):
        (bad / tool).write_text((slurm.bin / tool).read_text())
        (bad / tool).chmod(0o755)
    bad.chmod(0o777)
    job = slurm.submit("exit 0")
    slurm.wait_state(job, "COMPLETED")
    verdict = _last({"stage": "sb", "supervisor": {"slurm": job, "bin": str(bad)}}, LocalHost(), checks=1)
    assert verdict.state is State.UNKNOWN, verdict.reasons
    assert "not trusted" in verdict.readings["supervisor"].detail
