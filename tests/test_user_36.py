"""What an ML engineer met running jobs under a supervisor through the CLI (issue 36)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sensors import stage_from_dict
from sensors._cli.validate import describe


@pytest.mark.parametrize(
    "supervisor, says",
    [
        ({"slurm": 81234}, "Slurm's record of job '81234' (squeue, sacct, scontrol listpids)"),
        ({"docker": "extract"}, "docker's record of container 'extract' (docker inspect)"),
        ({"systemd": "extract", "user": True}, "systemd's record of user unit 'extract' (systemctl show)"),
    ],
)
def test_validate_says_what_the_supervisor_section_reads(supervisor, says) -> None:
    stage = stage_from_dict({"stage": "s", "supervisor": supervisor})
    parts = dict(describe(stage))
    assert parts["supervisor"].startswith(says)
    assert "failed at any other end" in parts["supervisor"]


def test_validate_cli_names_the_supervisor(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("stage: s\nsupervisor: {slurm: 7, bin: /opt/slurm/bin}\n")
    out = subprocess.run(
        [sys.executable, "-m", "sensors", "validate", str(f)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "  supervisor Slurm's record of job '7'" in out.stdout
    assert "its commands from '/opt/slurm/bin'" in out.stdout
