"""Blocks on a real Prefect API: registered with ``prefect block register -m prefect_crosscheck``,
saved, and a gate started with nothing but ``block:NAME`` reaches ``complete`` for a job on the
test sshd. HOME is an empty directory: no stage file, no key and no known_hosts on disk for
the gate — the SSH key and the host keys to trust come from the SSH host block."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from prefect import flow
from prefect.settings import PREFECT_API_URL

from sensors.blocks import CrosscheckSSHHost, CrosscheckStage
from sensors.prefect import check_stage, wait_for_stage
from sensors.testing import SimulatedJob
from tests.sshd import SSHD, sshd_server

__all__ = ["sshd_server"]  # fixture, used by name

pytestmark = [pytest.mark.prefect, pytest.mark.usefixtures("prefect_harness"), pytest.mark.timeout(180)]

PREFECT = str(Path(sys.executable).with_name("prefect"))


def test_a_gate_with_only_block_references_completes_on_the_test_sshd(
    sshd_server: SSHD, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = PREFECT_API_URL.value()
    # The form Prefect's docs give for every integration: the package's import name.
    registered = subprocess.run(
        [PREFECT, "block", "register", "-m", "prefect_crosscheck"],
        env={**os.environ, "PREFECT_API_URL": api},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert registered.returncode == 0, registered.stdout + registered.stderr
    assert "Successfully registered 3 blocks" in registered.stdout, registered.stdout
    types = httpx.post(f"{api}/block_types/filter", json={}, timeout=30).json()
    assert {"crosscheck-stage", "crosscheck-ssh-host", "crosscheck-notifications"} <= {
        t["slug"] for t in types
    }

    job = SimulatedJob(tmp_path, scenario="complete", total=6, step=0.1)
    name = f"extract-{uuid.uuid4().hex[:8]}"
    definition = job.stage_dict(name=name, interval="300ms", exit_grace="300ms", timeout="60s")
    del definition["host"]  # the SSH host block says where
    host = CrosscheckSSHHost(
        hostname="127.0.0.1",
        port=sshd_server.port,
        user=sshd_server.user,
        private_key=sshd_server.key.read_text(),
        known_hosts=sshd_server.known_hosts_line(),
        connect_timeout=5.0,
    )
    host.save(f"{name}-host", overwrite=True)
    CrosscheckStage(definition=definition, ssh_host=CrosscheckSSHHost.load(f"{name}-host")).save(
        name, overwrite=True
    )

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # nothing on disk to fall back on

    @flow
    def gate_from_blocks() -> tuple[str, str]:
        first = check_stage(f"block:{name}", since=since)
        return first.host, wait_for_stage(f"block:{name}", timeout="60s", since=since).state.value

    since = time.time() - 1  # the job may end before the flow's first check (a loaded machine)
    job.start()
    try:
        where, final = gate_from_blocks()
    finally:
        job.stop()
    assert where == "127.0.0.1"  # checked over SSH, not locally
    assert final == "complete"
    assert not (home / ".ssh").exists()
