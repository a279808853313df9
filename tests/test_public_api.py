"""The public surface is small, sorted and importable; the core never imports Prefect or paramiko."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sensors

REPO = Path(__file__).resolve().parent.parent


def test_all_is_sorted_and_importable() -> None:
    assert sensors.__all__ == sorted(sensors.__all__)
    for name in sensors.__all__:
        assert getattr(sensors, name) is not None


def test_error_tree() -> None:
    assert issubclass(sensors.HostKeyError, sensors.HostError)
    assert issubclass(sensors.ConnectError, sensors.HostError)
    assert issubclass(sensors.ProbeError, sensors.HostError)
    for err in (sensors.ConfigError, sensors.HostError, sensors.StageFailed, sensors.NotificationError):
        assert issubclass(err, sensors.CrosscheckError)


def test_core_runs_without_prefect_or_paramiko(tmp_path) -> None:
    """A local check imports neither Prefect nor paramiko, and needs no Prefect server
    (PREFECT_API_URL points at nothing that listens)."""
    log = tmp_path / "x.log"
    log.write_text("Extraction complete\n")
    code = f"""
import sys
from sensors import Checker, stage_from_dict
stage = stage_from_dict({{"stage": "s", "host": "local", "log": {{"path": {str(log)!r}, "complete": "^Extraction"}}}})
verdict = Checker(stage, since="1h").check()
print(verdict.readings["log"].says, "prefect" in sys.modules, "paramiko" in sys.modules)
"""
    env = {"PATH": "/usr/bin:/bin", "PREFECT_API_URL": "http://127.0.0.1:9/api", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["done", "False", "False"]
