"""Screenshots of what a person on call sees in the Prefect UI: a stalled, a failed and a
complete gate, on a real ``prefect server`` (with its UI) on 127.0.0.1, in headless Chromium.

    python bench/screenshots.py [--out docs/screenshots] [--chromium chromium]

Starts the server on a free port with a temporary ``PREFECT_HOME`` (SQLite), runs three gates
against simulated jobs (``sensors.testing``) as separate processes pointed at it, and while the
stalled one still waits takes the pictures: the runs list, each flow run's page (logs), its
evidence artifact, the picture of its wait, and the event feed. Every process it starts has its
own session and is stopped by PID; nothing but 127.0.0.1 is contacted (Chromium runs with its
background networking off). Needs Debian's ``chromium`` (``apt-get install chromium``).

A fourth gate watches a stage over two hosts: two real OpenSSH sshd on 127.0.0.1 (the tests'
``tests/sshd.py``; needs ``sshd``), two ranks on each (the tests' ``tests/span_job.py``), a log
per rank. Once every rank is seen at work the ranks are told to block in a collective and
global rank 3 is killed: the gate fails on the hung collective, and its flow run, evidence and
picture name the lost rank (``hung-*.png``). ``--only hung`` takes those pictures alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PREFECT = str(Path(sys.executable).with_name("prefect"))

#: One gate per situation: scenario, stage name, policy, gate timeout (seconds).
GATES = {
    "stalled": ("stall", "extract-stalled", {"stall_after": "3s", "interval": "1s"}, 240),
    "failed": ("crash", "extract-failed", {"interval": "500ms"}, 60),
    "complete": ("eta0_spin", "extract-complete", {"interval": "500ms"}, 90),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(base: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        base + path, data=data, method="POST" if data else "GET", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


def _wait_for(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            if result := check():
                return result
        time.sleep(1)
    raise SystemExit(f"timed out after {timeout:g}s waiting for {what}")


def _stop(proc: subprocess.Popen[bytes], first: signal.Signals = signal.SIGTERM) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, first)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@contextlib.contextmanager
def _server(home: Path) -> Iterator[tuple[str, dict[str, str]]]:
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_API_URL=api,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_LOGGING_LEVEL="WARNING",
        PREFECT_SERVER_LOGGING_LEVEL="WARNING",
        PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY="false",
        DO_NOT_TRACK="1",
        PYTHONPATH=str(REPO),
    )
    log = open(home / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for("the Prefect server", lambda: proc.poll() is None and _api(api, "/health"), 180)
        yield api, env
    finally:
        _stop(proc)
        log.close()


_GATE_SCRIPT = textwrap.dedent(
    """
    import sys
    from flows.gate import gate
    from sensors._base.errors import StageFailed
    try:
        gate(sys.argv[1], timeout=float(sys.argv[2]), since="10m")
    except StageFailed:
        pass
    """
)


def _start_gate(work: Path, env: dict[str, str], situation: str) -> tuple[subprocess.Popen[bytes], Any]:
    from sensors.testing import SimulatedJob

    scenario, name, policy, timeout = GATES[situation]
    job = SimulatedJob(work, scenario=scenario, total=8, step=0.3, spin=12.0)
    job.start()
    stage = job.write_stage(work / f"{name}.yaml", name=name, **policy)
    log = open(work / f"gate-{situation}.log", "wb")  # noqa: SIM115 - lives as long as the gate
    proc = subprocess.Popen(
        [sys.executable, "-c", _GATE_SCRIPT, str(stage), str(timeout)],
        # Prefect's default level: the run log shows the INFO lines (running, complete,
        # incident 2's "still working") as a default install would.
        env={**env, "PREFECT_LOGGING_LEVEL": "INFO"},
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    return proc, job


HUNG = "train-hung"  # the stage over two hosts


@contextlib.contextmanager
def _hung_collective(work: Path, env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[bytes], Any]]:
    """A gate on a job over two loopback sshd hosts, 2 ranks each, a log per rank; yields the
    gate's process and the ranks (``tests.test_span._Ranks``)."""
    import yaml

    from tests.sshd import SSHD
    from tests.test_span import _Ranks

    servers = [SSHD(), SSHD()]
    ranks = None
    proc = None
    try:
        for server in servers:
            server.start()
        ranks = _Ranks(work / "job", nodes=2, per_host=2, rank_logs=True)
        stage = {
            "stage": HUNG,
            "hosts": [server.spec() for server in servers],
            "process": {"match": ranks.match, "per_host": 2},
            "log": {
                "path": str(ranks.folder / "rank{rank}.log"),
                "complete": r"rank \d+ done",
                "error": r"^ERROR",
                "progress": r"^step",
            },
            "outputs": {"files": str(ranks.folder / "out"), "expected": 2},
            "policy": {"interval": "1s", "settle": 1, "stall_after": "4s"},
        }
        path = work / f"{HUNG}.yaml"
        path.write_text(yaml.safe_dump(stage, sort_keys=False))
        log = open(work / "gate-hung.log", "wb")  # noqa: SIM115 - lives as long as the gate
        proc = subprocess.Popen(
            [sys.executable, "-c", _GATE_SCRIPT, str(path), "180"],
            env={**env, "PREFECT_LOGGING_LEVEL": "INFO"},
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        yield proc, ranks
    finally:
        if proc is not None:
            _stop(proc, signal.SIGINT)
        if ranks is not None:
            ranks.stop()
        for server in servers:
            server.cleanup()


def _hang_and_kill(api: str, ranks: Any) -> None:
    """Once the gate's evidence shows every rank at work, block the ranks in a collective and
    kill global rank 3 (node 1's second): the others wait for it for good."""

    def all_at_work() -> bool:
        run = _flow_run(api, HUNG)
        found = _artifact(api, run["id"], "-evidence") if run else None
        return bool(found) and str(found.get("data")).count("ranks 2/2") >= 2

    _wait_for("every rank at work", all_at_work, 120)
    (ranks.folder / "hang").touch()
    time.sleep(0.5)
    os.kill(ranks.procs[(1, 1)].pid, signal.SIGKILL)


def _flow_run(api: str, name: str) -> dict[str, Any] | None:
    runs = _api(api, "/flow_runs/filter", {"flow_runs": {"name": {"any_": [f"gate-{name}"]}}, "limit": 1})
    return runs[0] if runs else None


def _artifact(api: str, flow_run_id: str, suffix: str) -> dict[str, Any] | None:
    found = _api(api, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}})
    return next((a for a in found if (a.get("key") or "").endswith(suffix)), None)


def _shoot(chromium: str, url: str, out: Path, *, size: str = "1400,1000") -> None:
    profile = tempfile.mkdtemp(prefix="crosscheck-chromium-")
    try:
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--screenshot={out}",
                f"--window-size={size}",
                "--virtual-time-budget=15000",
                url,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    print(f"{out.name}: {url} ({out.stat().st_size // 1024} KiB)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "screenshots"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--only", choices=("hung",), help="take only these pictures (the others stay)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory(prefix="crosscheck-shots-") as tmp:
        work = Path(tmp)
        (work / "home").mkdir()
        with _server(work / "home") as (api, env):
            ui = api.removesuffix("/api")
            with _hung_collective(work, env) as (proc, ranks):
                _hang_and_kill(api, ranks)
                proc.wait(180)  # the gate fails on the hung collective
                run = _wait_for("the hung gate's flow run", lambda: _flow_run(api, HUNG), 60)
                _shoot(args.chromium, f"{ui}/runs/flow-run/{run['id']}", out / "hung-flow-run.png")
                for kind in ("evidence", "picture"):
                    artifact = _artifact(api, run["id"], f"-{kind}")
                    if artifact is not None:
                        page = f"{ui}/artifacts/artifact/{artifact['id']}"
                        _shoot(args.chromium, page, out / f"hung-{kind}.png")
            if args.only == "hung":
                return 0
            gates = {s: _start_gate(work, env, s) for s in GATES}
            try:
                runs: dict[str, dict[str, Any]] = {}
                for situation in ("failed", "complete"):
                    proc, _ = gates[situation]
                    proc.wait(180)
                for situation in GATES:
                    name = GATES[situation][1]
                    runs[situation] = _wait_for(
                        f"the {situation} gate's flow run", lambda n=name: _flow_run(api, n), 60
                    )
                # The stalled gate waits on: take its pictures once its run is named Stalled.
                _wait_for(
                    "the stalled gate's state name",
                    lambda: (_flow_run(api, GATES["stalled"][1]) or {}).get("state_name") == "Stalled",
                    120,
                )
                time.sleep(15)  # a few checks into the stall: evidence updated, picture drawn
                _shoot(args.chromium, f"{ui}/runs", out / "runs-list.png")
                for situation, run in runs.items():
                    page = f"{ui}/runs/flow-run/{run['id']}"
                    _shoot(args.chromium, page, out / f"{situation}-flow-run.png")
                    for kind in ("evidence", "picture"):
                        artifact = _artifact(api, run["id"], f"-{kind}")
                        if artifact is not None:
                            _shoot(
                                args.chromium,
                                f"{ui}/artifacts/artifact/{artifact['id']}",
                                out / f"{situation}-{kind}.png",
                            )
                _shoot(args.chromium, f"{ui}/events", out / "events.png")
                event = _api(
                    api,
                    "/events/filter",
                    {"filter": {"event": {"name": ["crosscheck.stage.stalled"]}}, "limit": 1},
                )["events"]
                if event:
                    day = event[0]["occurred"][:10]
                    page = f"{ui}/events/event/{day}/{event[0]['id']}"
                    _shoot(args.chromium, page, out / "stalled-event.png")
            finally:
                for proc, job in gates.values():
                    _stop(proc, signal.SIGINT)
                    job.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
