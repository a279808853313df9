"""A long watch runs with the garbage collector of sensors._watch.gc: what startup made is frozen,
the young generation is collected every 50,000 allocations, not 700. Checked in a fresh
interpreter each time: the settings are process-wide (this test process keeps its own)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _run(code: str, tmp_path: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "CROSSCHECK_STATE": "none"},
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tuning_freezes_what_exists_and_raises_the_thresholds(tmp_path: Path) -> None:
    code = """
import gc, json
from sensors._watch.gc import THRESHOLDS, tune_for_watching
before = {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}
tune_for_watching()
print(json.dumps({"before": before, "threshold": gc.get_threshold(), "frozen": gc.get_freeze_count(),
                  "expected": THRESHOLDS}))
"""
    got = _run(code, tmp_path)
    assert got["before"]["frozen"] == 0 and got["before"]["threshold"] != got["expected"]
    assert got["threshold"] == got["expected"] == [50_000, 20, 10]
    assert isinstance(got["frozen"], int) and got["frozen"] > 1000  # the imports, at least


def test_crosscheck_wait_runs_with_the_watchers_settings(tmp_path: Path) -> None:
    """``crosscheck wait`` (the CLI's long watch) sets them before it watches; ``status`` (one
    check) does not."""
    stage = tmp_path / "s.yaml"
    stage.write_text(
        f"stage: s\nhost: local\nlog:\n  path: {tmp_path / 'missing.log'}\n  complete: '^done$'\n"
        "policy:\n  interval: 1s\n"
    )
    code = f"""
import contextlib, gc, io, json
from sensors._cli.main import main
default = gc.get_threshold()
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    status_rc = main(["status", {str(stage)!r}])
    after_status = gc.get_threshold()
    wait_rc = main(["wait", "--timeout", "1s", {str(stage)!r}])
print(json.dumps({{"default": default, "status": [status_rc, after_status],
                  "wait": [wait_rc, gc.get_threshold()]}}))
"""
    got = _run(code, tmp_path)
    assert got["status"][1] == got["default"] != [50_000, 20, 10]  # this interpreter's own
    assert got["wait"][1] == [50_000, 20, 10]
    assert got["wait"][0] != 0  # timed out: the log never appeared
