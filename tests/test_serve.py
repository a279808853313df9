"""`crosscheck serve DIR`: the real watcher process, stage files added, changed, broken and
removed while it runs; its /metrics and /healthz; SIGTERM ends it cleanly."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from sensors.testing import SimulatedJob

REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _until(what: str, ok: Callable[[], bool], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ok():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_serve_picks_up_stage_files_as_they_come_and_go(tmp_path: Path) -> None:
    stages = tmp_path / "stages"
    stages.mkdir()
    out, err = tmp_path / "out.jsonl", tmp_path / "err.log"
    port = _free_port()
    stuck = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01, tag="serve-stuck")
    done = SimulatedJob(tmp_path, scenario="complete", total=6, step=0.3, tag="serve-done")
    stuck.start()
    stuck.write_stage(stages / "stuck.yaml", interval="300ms", stall_after="1h")
    env = {**os.environ, "PYTHONPATH": str(REPO), "CROSSCHECK_STATE": str(tmp_path / "state.db")}
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sensors", "serve", str(stages), "--json", "--rescan", "300ms",
             "--metrics-port", str(port)],
            stdout=fo, stderr=fe, env=env,
        )  # fmt: skip

    def seen(stage: str, verdict: str | None = None) -> list[dict]:
        docs = [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]
        return [d for d in docs if d["stage"] == stage and (verdict is None or d["verdict"] == verdict)]

    try:
        _until("the first stage", lambda: len(seen("serve-stuck")) >= 2)
        # Added while it runs: a job that completes, and a file that does not load.
        (stages / "broken.yaml").write_text("stage: [not, a, name]\n")
        done.start()
        done.write_stage(stages / "done.yaml", interval="300ms", exit_grace="300ms")
        _until("the added stage to complete", lambda: bool(seen("serve-done", "complete")))
        assert "broken.yaml: skipped" in err.read_text()
        assert proc.poll() is None  # a bad file stops nothing
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert 'crosscheck_stage_verdict{host="local",stage="serve-done",verdict="complete"} 1.0' in metrics
        assert "crosscheck_check_duration_seconds_bucket" in metrics
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()["stages"] == 2
        # Removed while it runs: no more checks of it.
        (stages / "stuck.yaml").unlink()
        _until("the removal", lambda: "stuck.yaml: stage file removed" in err.read_text())
        count = len(seen("serve-stuck"))
        time.sleep(1.5)
        assert len(seen("serve-stuck")) <= count + 1  # at most a check already in flight
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert "stopped" in err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stuck.stop()
        done.stop()
