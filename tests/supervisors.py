"""Stand-ins for docker and systemctl, and a real Slurm on loopback, for tests/test_supervisors.py.

No docker daemon runs here (and none can), and systemd is not PID 1: the stand-ins are one
small program (tests/supervisor_standin.py) under three names in a folder a stage names with
``supervisor.bin`` (the probe sets its own PATH: a folder first on the test's PATH would never
be seen by it). Each prints what the test, or a launch through it, last wrote for it, byte for
byte the real tool's format:

- ``docker``: ``docker inspect``'s JSON array as Docker 28.2.2 (API 1.50) prints it (Go's
  ``json.Indent`` with four spaces: ``json.dumps(indent=4)`` writes the same), and its error
  texts: ``Error: No such container: NAME`` (exit 1), the socket's ``permission denied ...``
  (exit 1).
- ``systemctl``: ``systemctl show -p ...`` as systemd 252 (Debian 12) prints it, ``Key=value``
  a line, timestamps as ``Thu 2026-12-05 18:43:40 UTC`` under ``TZ=UTC``.
- ``docker run -d --name``, ``systemd-run --unit``: start the job for real, detached, and
  record it running, then its exit, as the real supervisor would (see the program's docstring).

Slurm 22.05.8 (Debian 12's ``slurmctld``/``slurmd``) runs for real: :func:`slurm_cluster`
starts both on 127.0.0.1 from a temporary folder (auth/none, proctrack/linuxproc, task/none, no
cgroups, no accounting: ``sacct`` answers "Slurm accounting storage is disabled", as it does
on a cluster without slurmdbd, and squeue tells the state). Its ``bin`` folder holds wrappers
that run the real tools with that cluster's ``SLURM_CONF``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.supervisor_standin import container_json, unit_name, unit_text, write_state

DOCKER_PERMISSION_DENIED = (
    "permission denied while trying to connect to the Docker daemon socket at"
    ' unix:///var/run/docker.sock: Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.50/containers/{name}/json":'
    " dial unix /var/run/docker.sock: connect: permission denied"
)

#: The stand-ins' one program (docker, systemctl, systemd-run), told apart by its name.
STANDIN = Path(__file__).with_name("supervisor_standin.py")


class Stand:
    """The stand-ins' folder (``bin``) and the state the test writes for them."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        (self.bin / "state").mkdir(parents=True)
        text = f"#!{sys.executable}\n" + STANDIN.read_text()
        for name in ("docker", "systemctl", "systemd-run"):
            path = self.bin / name
            path.write_text(text)
            path.chmod(0o755)

    # ------------------------------------------------------------------ docker

    def container(self, name: str, **kw: Any) -> None:
        """Write what ``docker inspect NAME`` prints (see ``container_json``)."""
        self._write(f"docker-{name}", 0, container_json(name, **kw))

    def docker_error(self, name: str, text: str) -> None:
        self._write(f"docker-{name}", 1, "[]\n" + text.format(name=name))

    # ------------------------------------------------------------------ systemd

    def unit(self, name: str, **kw: Any) -> None:
        """Write what ``systemctl show UNIT`` prints (see ``unit_text``)."""
        self._write(f"systemd-{unit_name(name)}", 0, unit_text(**kw))

    def systemd_error(self, name: str, text: str) -> None:
        self._write(f"systemd-{unit_name(name)}", 1, text)

    def _write(self, name: str, rc: int, body: str) -> None:
        write_state(self.bin / "state", name, rc, body)

    def record(self, name: str) -> str:
        """What the stand-in prints for ``name`` now (``docker-NAME``, ``systemd-UNIT``)."""
        return (self.bin / "state" / name).read_text().partition("\n")[2]

    def wait(self, name: str, word: str, timeout: float = 15.0) -> str:
        """The record of ``name`` once it holds ``word`` (a launched job's exit, say)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            path = self.bin / "state" / name
            if path.exists() and word in (text := self.record(name)):
                return text
            time.sleep(0.05)
        raise TimeoutError(f"{name} never said {word!r}")


# --------------------------------------------------------------------------- Slurm


def slurm_installed() -> str | None:
    """Why Slurm cannot run here (None: it can)."""
    for tool in ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} is not installed (apt-get install slurmctld slurmd slurm-client)"
    if os.geteuid() != 0:
        return "slurmd runs as root here (SlurmdUser=root)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Slurm:
    """A running slurmctld + slurmd on loopback; ``bin``: wrappers of the real tools."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.conf = root / "slurm.conf"

    def tool(self, *argv: str, check: bool = True) -> str:
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            raise RuntimeError(f"{argv}: {done.stdout}{done.stderr}")
        return done.stdout

    def submit(self, script: str) -> str:
        return self.tool("sbatch", "--parsable", "-o", "/dev/null", "--wrap", script).strip().split(";")[0]

    def state(self, job: str) -> str:
        return self.tool("squeue", "-h", "-t", "all", "-j", job, "-o", "%T", check=False).strip()

    def wait_state(self, job: str, *states: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = self.state(job)
            if now in states:
                return now
            time.sleep(0.2)
        raise TimeoutError(f"job {job} never reached {states} (last {self.state(job)!r})")


@contextmanager
def slurm_cluster(root: Path) -> Iterator[Slurm]:
    """slurmctld and slurmd of Debian's Slurm 22.05 on 127.0.0.1, from ``root``."""
    slurm = Slurm(root)
    for d in ("state", "spool", "log"):
        (root / d).mkdir(parents=True, exist_ok=True)
    node = socket.gethostname()
    slurm.conf.write_text(
        f"""ClusterName=cc
SlurmctldHost={node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/ctld.pid
SlurmdPidFile={root}/d.pid
SlurmctldLogFile={root}/log/ctld.log
SlurmdLogFile={root}/log/d.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
MpiDefault=none
ReturnToService=2
MinJobAge=600
NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""
    )
    slurm.bin.mkdir()
    for tool in ("sacct", "squeue", "scontrol", "sbatch"):
        path = slurm.bin / tool
        real = shutil.which(tool) or f"/usr/bin/{tool}"
        path.write_text(f'#!/bin/sh\nSLURM_CONF={slurm.conf}; export SLURM_CONF\nexec {real} "$@"\n')
        path.chmod(0o755)
    env = {**os.environ, "SLURM_CONF": str(slurm.conf)}
    procs = [
        subprocess.Popen(
            ["slurmctld", "-D", "-i"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
    ]
    try:
        time.sleep(1.0)
        procs.append(
            subprocess.Popen(["slurmd", "-D"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        )
        deadline = time.monotonic() + 30
        while "idle" not in slurm.tool("sinfo", "-h", "-o", "%t", check=False):
            if time.monotonic() > deadline:
                raise RuntimeError("slurmd never came up: " + (root / "log" / "d.log").read_text()[-500:])
            time.sleep(0.3)
        yield slurm
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
