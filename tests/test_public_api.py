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


def test_prefect_crosscheck_is_the_same_api_under_the_name_prefect_users_import() -> None:
    """``prefect_crosscheck`` (what ``prefect block register -m`` and the README import) re-exports
    the core, the blocks, the tasks and the flows: the same objects, not copies."""
    import prefect_crosscheck
    import sensors.blocks
    import sensors.flows
    import sensors.prefect

    assert prefect_crosscheck.__all__ == sorted(prefect_crosscheck.__all__)
    assert set(sensors.__all__) <= set(prefect_crosscheck.__all__)
    for name in prefect_crosscheck.__all__:
        value = getattr(prefect_crosscheck, name)
        home = next(
            (m for m in (sensors, sensors.blocks, sensors.prefect, sensors.flows) if hasattr(m, name)), None
        )
        assert home is not None and getattr(home, name) is value, name
    # What `prefect block register -m prefect_crosscheck` finds: the three block types.
    from prefect.blocks.core import Block

    blocks = {n for n in dir(prefect_crosscheck) if Block.is_block_class(getattr(prefect_crosscheck, n))}
    assert blocks == {"CrosscheckStage", "CrosscheckSSHHost", "CrosscheckNotifications"}


def test_the_version_is_written_in_one_place() -> None:
    import prefect_crosscheck
    from sensors._version import __version__

    assert sensors.__version__ == prefect_crosscheck.__version__ == __version__
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "sensors._version.__version__" in pyproject
    assert "\nversion =" not in pyproject.split("[tool.", 1)[0]  # no second copy in [project]
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert f"## {__version__}" in changelog


def test_prefect_finds_the_blocks_through_the_collection_entry_point() -> None:
    from importlib.metadata import entry_points

    (point,) = [p for p in entry_points(group="prefect.collections") if p.name == "prefect_crosscheck"]
    assert point.value == "prefect_crosscheck.blocks"
    module = point.load()
    assert {"CrosscheckStage", "CrosscheckSSHHost", "CrosscheckNotifications"} <= set(module.__all__)
