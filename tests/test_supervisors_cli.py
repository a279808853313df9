"""Supervised jobs through the real CLI: ``crosscheck status STAGE --json``, locally and over
the test sshd (issue 36's "Done when": each supervisor's exit 0, non-zero, kill or OOM kill,
a new run under the same name, and a record that cannot be read).

docker and systemd are the stand-ins of tests/supervisors.py (Docker 28.2.2's ``docker
inspect``, systemd 252's ``systemctl show``: no daemon and no systemd here), one ``bin:``
folder per module; Slurm is the real loopback cluster (Debian's 22.05), its jobs run for real
(exit 0, exit 3, scancel, a controller that does not answer). A requeued Slurm job as a new
run is tests/test_supervisors.py's (through the library: a requeue waits on the scheduler,
up to 40 s, too long to pay twice more here).
Each case checks the JSON verdict, its words and ``status``'s exit code (docs/cli.md: 0
complete, 1 not yet or unknown, 3 failed). The state store (``CROSSCHECK_STATE``) carries a
stage's memory from one ``status`` to the next, as it does for a person running it twice.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

import sensors
from tests.supervisors import DOCKER_PERMISSION_DENIED, Stand

# The CLI runs the sensors this test imported (PYTHONPATH decides which checkout).
ROOT = str(Path(sensors.__file__).resolve().parent.parent)
CLI = [sys.executable, "-m", "sensors"]
CID, CID2 = "4f" * 32, "7a" * 32
INV, INV2 = "ab" * 16, "cd" * 16
EXIT = {"complete": 0, "running": 1, "unknown": 1, "failed": 3}


@pytest.fixture(scope="module")
def stand(tmp_path_factory) -> Stand:
    """The stand-ins' one folder for the module (each test its own container or unit name)."""
    root = tmp_path_factory.mktemp("standin")
    root.chmod(0o755)
    return Stand(root)


@pytest.fixture(params=["local", "ssh"])
def where(request) -> Any:
    """The stage's ``host:``: this machine, or the test sshd on 127.0.0.1."""
    return "local" if request.param == "local" else request.getfixturevalue("ssh_spec")


class CLIStage:
    """A stage file and its own state store, checked by ``crosscheck status --json``."""

    def __init__(self, tmp: Path, doc: dict[str, Any]) -> None:
        self.tmp = tmp
        self.path = tmp / "stage.yaml"
        self.path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def status(self, *args: str) -> tuple[int, dict[str, Any]]:
        env = {**os.environ, "PYTHONPATH": ROOT, "CROSSCHECK_STATE": str(self.tmp / "state.db")}
        done = subprocess.run(
            [*CLI, "status", str(self.path), "--json", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.stdout, done.stderr
        return done.returncode, json.loads(done.stdout)


def _said(code: int, out: dict[str, Any], verdict: str, words: str = "") -> None:
    """The verdict, its exit code, and (where given) the supervisor's words for it."""
    sup = out["signals"]["supervisor"]
    assert (out["verdict"], code) == (verdict, EXIT[verdict]), (out["reasons"], out["run"])
    assert words in sup["detail"], sup["detail"]
    if words:
        assert any(words in reason for reason in out["reasons"]), out["reasons"]


def _name(request) -> str:
    """A container or unit name of this test's own in the module's one stand-in folder."""
    return f"j-{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------------- docker, systemd: the ends


def _docker(stand: Stand, name: str, kw: dict[str, Any], began: float) -> None:
    stand.container(name, status="exited", cid=CID, started=began, finished=began + 9, **kw)


def _systemd(stand: Stand, name: str, kw: dict[str, Any], began: float) -> None:
    stand.unit(name, invocation=INV, started=began, exited=began + 9, **kw)


ENDS = [
    # kind, the record's end, verdict, the words said for it
    ("docker", {"exit_code": 0}, "complete", "exited with status 0"),
    ("docker", {"exit_code": 3}, "failed", "exited with status 3"),
    ("docker", {"exit_code": 137}, "failed", "SIGKILL"),
    ("docker", {"exit_code": 137, "oom": True}, "failed", "OOM"),
    ("systemd", {"active": "active", "sub": "exited", "code": 1, "status": 0}, "complete", "status 0"),
    (
        "systemd",
        {"active": "failed", "sub": "failed", "code": 1, "status": 3, "result": "exit-code"},
        "failed",
        "exited with status 3",
    ),
    (
        "systemd",
        {"active": "failed", "sub": "failed", "code": 2, "status": 9, "result": "signal"},
        "failed",
        "SIGKILL",
    ),
    (
        "systemd",
        {"active": "failed", "sub": "failed", "code": 2, "status": 9, "result": "oom-kill"},
        "failed",
        "OOM",
    ),
]


#: Every end locally; over SSH one of each kind, the two exit codes (the record's text is the
#: same on either host: tests/test_supervisors.py reads every end through the library on both).
RECORDED = [("local", *row) for row in ENDS] + [("ssh", *ENDS[0]), ("ssh", *ENDS[5])]


@pytest.mark.parametrize("where, kind, end, verdict, words", RECORDED, indirect=["where"])
def test_a_recorded_end(stand, where, tmp_path, request, kind, end, verdict, words) -> None:
    name = _name(request)
    (_docker if kind == "docker" else _systemd)(stand, name, end, time.time() - 30)
    stage = CLIStage(
        tmp_path, {"stage": "s", "host": where, "supervisor": {kind: name, "bin": str(stand.bin)}}
    )
    code, out = stage.status()
    _said(code, out, verdict, words)
    identity = out["run"]["supervised"]
    assert identity.startswith(CID) if kind == "docker" else identity == INV


# --------------------------------------------------------------------------- a new run under the same name


#: Every kind with every binding locally; over SSH each kind and each binding once. The record
#: read over SSH is the text read locally (tests/test_supervisors.py reads docker's and
#: systemd's new runs through the library on both hosts); what this module adds, the CLI's
#: state store and its ``--since``, is the same code on either host. Each case is three CLI
#: runs (~10 s under load): all eight were 80 s.
NEW_RUN = [("local", kind, how) for kind in ("docker", "systemd") for how in ("state", "since")] + [
    ("ssh", "docker", "since"),
    ("ssh", "systemd", "state"),
]


@pytest.mark.parametrize("where, kind, how", NEW_RUN, indirect=["where"])
def test_a_new_run_under_the_same_name(stand, where, tmp_path, request, kind, how) -> None:
    """Run 1 exited 0; run 2 (a new container or invocation, the same name) starts, then
    fails: the second and third ``status`` read run 2's record, never run 1's exit 0. With
    ``--since`` between the two starts, run 1's exit 0 is no evidence of the watched run."""
    name = _name(request)
    stage = CLIStage(
        tmp_path, {"stage": "s", "host": where, "supervisor": {kind: name, "bin": str(stand.bin)}}
    )
    now = time.time()
    began1, began2 = now - 60, now - 5  # whole seconds apart: systemd's precision
    args = ("--since", f"@{now - 30:.3f}") if how == "since" else ()

    def record(run: int, **end: Any) -> None:
        if kind == "docker":
            cid, began = (CID, began1) if run == 1 else (CID2, began2)
            if end:
                stand.container(name, status="exited", cid=cid, started=began, finished=began + 3, **end)
            else:
                stand.container(name, status="running", cid=cid, started=began, pid=job.pid)
        else:
            inv, began = (INV, began1) if run == 1 else (INV2, began2)
            if end.get("exit_code") == 0:
                stand.unit(
                    name,
                    invocation=inv,
                    started=began,
                    exited=began + 3,
                    active="active",
                    sub="exited",
                    code=1,
                )
            elif end:
                stand.unit(
                    name,
                    invocation=inv,
                    started=began,
                    exited=began + 3,
                    active="failed",
                    sub="failed",
                    code=1,
                    status=end["exit_code"],
                    result="exit-code",
                )
            else:
                stand.unit(name, invocation=inv, started=began, active="active", sub="running", pid=job.pid)

    first, second = (CID, CID2) if kind == "docker" else (INV, INV2)

    def read_is(out: dict[str, Any], identity: str) -> None:
        """The record read is run 2's; a watch without --since is bound to it (with --since
        the run is the one begun since that time, ``"source": "since"``)."""
        assert out["signals"]["supervisor"]["evidence"]["supervisor_identity"].startswith(identity)
        if how == "state":
            assert out["run"]["supervised"].startswith(identity), out["run"]

    # run 2's main process while it is at work (systemd's running unit always has one)
    job = subprocess.Popen(["sleep", "60"])
    request.addfinalizer(lambda: (job.kill(), job.wait()))
    record(1, exit_code=0)
    code, out = stage.status(*args)
    assert out["signals"]["supervisor"]["evidence"]["supervisor_identity"].startswith(first)
    if how == "since":  # begun and ended before --since: an earlier run's exit, no run bound
        _said(code, out, "unknown", "an earlier run's end")
        assert out["run"]["source"] == "since", out["run"]
    else:
        _said(code, out, "complete", "status 0")
        assert out["run"]["supervised"].startswith(first), out["run"]
    record(2)
    code, out = stage.status(*args)
    _said(code, out, "running")
    read_is(out, second)
    job.kill()
    job.wait()
    record(2, exit_code=4)
    code, out = stage.status(*args)
    _said(code, out, "failed", "exited with status 4")
    read_is(out, second)


# --------------------------------------------------------------------------- a record that cannot be read


@pytest.mark.parametrize(
    "kind, text, words",
    [
        ("docker", DOCKER_PERMISSION_DENIED, "permission denied"),
        ("systemd", "Failed to connect to bus: No medium found", "No medium found"),
    ],
)
def test_a_record_that_cannot_be_read(stand, where, tmp_path, request, kind, text, words) -> None:
    name = _name(request)
    if kind == "docker":
        stand.docker_error(name, text)
        sup = {"docker": name}
    else:
        stand.systemd_error(name, text)
        sup = {"systemd": name, "user": True}
    stage = CLIStage(tmp_path, {"stage": "s", "host": where, "supervisor": {**sup, "bin": str(stand.bin)}})
    code, out = stage.status()
    _said(code, out, "unknown", words)
    assert out["signals"]["supervisor"]["says"] == "unknown"


# --------------------------------------------------------------------------- Slurm, for real


@pytest.mark.parametrize(
    "script, final, verdict, words",
    [
        ("sleep 0.5; exit 0", "COMPLETED", "complete", "exited with status 0"),
        ("sleep 0.5; exit 3", "FAILED", "failed", "exited with status 3"),
    ],
)
def test_a_slurm_job_ends(slurm, where, tmp_path, script, final, verdict, words) -> None:
    job = slurm.submit(script)
    slurm.wait_state(job, final)
    stage = CLIStage(
        tmp_path, {"stage": "sb", "host": where, "supervisor": {"slurm": job, "bin": str(slurm.bin)}}
    )
    code, out = stage.status()
    _said(code, out, verdict, words)
    assert out["run"]["supervised"].startswith(f"{job}@")


def test_a_slurm_job_scancelled(slurm, where, tmp_path) -> None:
    job = slurm.submit("sleep 60")
    try:
        slurm.wait_state(job, "RUNNING")
        stage = CLIStage(
            tmp_path, {"stage": "sb", "host": where, "supervisor": {"slurm": job, "bin": str(slurm.bin)}}
        )
        code, out = stage.status()
        _said(code, out, "running")
    finally:
        slurm.tool("scancel", job)
    slurm.wait_state(job, "CANCELLED")
    code, out = stage.status()
    _said(code, out, "failed", "CANCELLED")
    assert out["run"]["supervised"].startswith(f"{job}@")


def test_a_slurm_record_that_cannot_be_read(slurm, where, tmp_path) -> None:
    # The real tools asking a controller that does not answer (its port: nobody listens).
    tmp_path.chmod(0o755)
    bad = tmp_path / "bin"
    bad.mkdir()
    conf = tmp_path / "slurm.conf"
    # MessageTimeout=1: the client gives up at once (at its default, 10 s, each tool the probe
    # runs waits that long before it says so: ~20 s a check).
    text = re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=1", slurm.conf.read_text())
    conf.write_text(text + "MessageTimeout=1\n")
    for tool in ("sacct", "squeue", "scontrol"):
        (bad / tool).write_text(f'#!/bin/sh\nSLURM_CONF={conf}; export SLURM_CONF\nexec {tool} "$@"\n')
        (bad / tool).chmod(0o755)
    stage = CLIStage(tmp_path, {"stage": "sb", "host": where, "supervisor": {"slurm": "1", "bin": str(bad)}})
    code, out = stage.status()
    _said(code, out, "unknown", "Unable to contact slurm controller")
    assert out["signals"]["supervisor"]["says"] == "unknown"
