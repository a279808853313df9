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
        assert "\ncrosscheck_stages 2.0\n" in metrics and "\ncrosscheck_stages_held 2.0\n" in metrics
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


def test_a_watcher_renews_its_share_of_leases_in_one_store_call(tmp_path: Path) -> None:
    """Once it holds its stages, a watcher renews their leases together at each balance (one
    store call) and its checks ask the store for no lease of their own."""
    import threading
    from collections import Counter

    from sensors._serve import Watcher
    from sensors._store import open_store

    jobs = [SimulatedJob(tmp_path / f"j{k}", scenario="stall", total=4, step=0.01) for k in range(6)]
    directory = tmp_path / "stages"
    directory.mkdir()
    for k, job in enumerate(jobs):
        job.start()
        job.write_stage(directory / f"s{k}.yaml", interval="300ms", stall_after="1h")
    calls: Counter[str] = Counter()
    with open_store(tmp_path / "state.db") as store:
        for name in ("acquire", "renew_leases"):
            real = getattr(store, name)

            def counted(*args, _real=real, _name=name, **kwargs):
                calls[_name] += 1
                return _real(*args, **kwargs)

            setattr(store, name, counted)
        verdicts: list = []
        watcher = Watcher(directory, store=store, rescan_every=60.0, lease=4.0, emit=verdicts.append)
        stop = threading.Event()
        thread = threading.Thread(target=watcher.run, args=(stop,))
        thread.start()
        try:
            _until("every stage checked", lambda: len({v.stage for v in verdicts}) == len(jobs))
            time.sleep(1.0)  # every stage held, its first lease renewed once
            calls.clear()
            checks = len(verdicts)
            time.sleep(3.0)  # ~four balances (a fifth of the lease each), ten checks a stage
            held = [e.checker.persistence.held for e in watcher.entries.values()]
        finally:
            stop.set()
            thread.join(30)
            for job in jobs:
                job.stop()
        assert len(verdicts) - checks >= 5 * len(jobs)
        assert held == [True] * len(jobs)
        assert 2 <= calls["renew_leases"] <= 6, calls
        # Before: each held stage claimed alone at every balance (~24 here). A tick late on a
        # loaded machine may leave a check to renew its own.
        assert calls["acquire"] <= 2, calls


def test_a_directory_source_offers_the_stage_files_it_always_did(tmp_path: Path) -> None:
    """Visible *.yaml and *.yml regular files (or links to one), loaded again when changed,
    dropped when gone; hidden files (an editor's copies), other names, directories and
    dangling links are not stages; a bad file is left out."""
    from sensors._serve import DirectorySource

    job = SimulatedJob(tmp_path / "job", scenario="stall", total=2)
    directory = tmp_path / "stages"
    directory.mkdir()
    job.write_stage(directory / "b.yaml")
    job.write_stage(directory / "a.yml")
    job.write_stage(directory / ".hidden.yaml")
    job.write_stage(directory / "notes.txt")
    (directory / "dir.yaml").mkdir()
    (directory / "link.yaml").symlink_to(directory / "b.yaml")
    (directory / "dangling.yaml").symlink_to(directory / "nothing.yaml")
    (directory / "bad.yaml").write_text("stage: [")
    source = DirectorySource(directory)
    found = source.scan()
    assert list(found) == [f"file:{directory / n}" for n in ("a.yml", "b.yaml", "link.yaml")]
    first = found[f"file:{directory / 'b.yaml'}"]
    assert source.scan()[f"file:{directory / 'b.yaml'}"] is first  # not loaded again
    os.utime(directory / "b.yaml", (1, 1))
    assert source.scan()[f"file:{directory / 'b.yaml'}"] is not first  # changed: loaded again
    (directory / "a.yml").unlink()
    assert f"file:{directory / 'a.yml'}" not in source.scan()
    assert DirectorySource(tmp_path / "missing").scan() == {}
