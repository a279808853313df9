"""deployments/prefect.yaml end to end, on a real Prefect server with a real process worker.

A server on 127.0.0.1 and a free port (SQLite in a temp PREFECT_HOME), the process work pool,
`prefect deploy --all` of deployments/prefect.yaml, a worker; then the gate deployment runs
against a simulated job, and its `crosscheck.stage.complete` event starts the next stage's
deployment through the deployment trigger. Every process has its own session and is stopped by
PID, the worker (SIGINT) before the server (SIGTERM). Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from sensors.testing import SimulatedJob
from tests.prefect_server import PREFECT, _start, _stop, _wait_for

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent
POOL = "crosscheck-e2e"


def _cli(env: dict[str, str], *args: str, cwd: Path | None = None, timeout: float = 180) -> str:
    done = subprocess.run(
        [PREFECT, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _request(method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    # The server answers 503 when SQLite is busy (seen on this 2-core machine under the
    # worker's polling); Prefect's own client retries those, and so does this one, boundedly.
    for attempt in range(6):
        response = httpx.request(method, url, json=body, timeout=10)
        if response.status_code != 503 or attempt == 5:
            break
        time.sleep(0.5 * (attempt + 1))
    response.raise_for_status()
    return response.json()


def _post(api: str, path: str, body: dict[str, Any]) -> Any:
    return _request("POST", f"{api}{path}", body)


def _flow_runs(api: str, deployment_id: str) -> list[dict[str, Any]]:
    return _post(api, "/flow_runs/filter", {"deployments": {"id": {"any_": [deployment_id]}}, "limit": 20})


def _deployment(api: str, name: str) -> dict[str, Any]:
    return _request("GET", f"{api}/deployments/name/{name}")


def _finished(api: str, flow_run_id: str) -> dict[str, Any] | None:
    run = _request("GET", f"{api}/flow_runs/{flow_run_id}")
    state = (run.get("state") or {}).get("type")
    if state in ("FAILED", "CRASHED", "CANCELLED"):
        raise AssertionError(f"flow run {run['name']} ended {state}: {run['state']}")
    return run if state == "COMPLETED" else None


def test_gate_deployment_and_the_trigger_that_starts_the_next_stage(
    prefect_server: dict[str, Any], tmp_path: Path
) -> None:
    api, env = prefect_server["api"], dict(prefect_server["env"])
    upstream = f"extract-{uuid.uuid4().hex[:6]}"

    extraction = SimulatedJob(tmp_path, scenario="eta0_spin", total=8, step=0.1, spin=1.5)
    training = SimulatedJob(tmp_path, scenario="complete", total=3, step=0.05)
    extraction_file = tmp_path / "extraction.yaml"
    extraction_file.write_text(_yaml({**extraction.stage_dict(name=upstream, interval="500ms")}))
    training_file = tmp_path / "training.yaml"
    training_spec = training.stage_dict(name=f"train-{upstream}", interval="500ms")
    training_spec["launch"] = {"command": training.command, "log": str(training.log_path)}
    training_file.write_text(_yaml(training_spec))

    env.update(
        CROSSCHECK_POOL=POOL,
        CROSSCHECK_UPSTREAM=upstream,
        CROSSCHECK_NEXT_STAGE=str(training_file),
        # One state store for every gate this worker runs: a run is announced once.
        CROSSCHECK_STATE=str(tmp_path / "state.db"),
    )
    _deploy(env, POOL, tmp_path)

    automations = _post(api, "/automations/filter", {})
    by_name = {a["name"]: a for a in automations}
    assert by_name["crosscheck-next-after-complete"]["trigger"]["match"] == {
        "prefect.resource.id": f"crosscheck.stage.{upstream}"
    }
    stall = by_name["crosscheck-no-heartbeat"]["trigger"]
    assert stall["posture"] == "Proactive"
    # A gate's last event closes the window: complete, failed, or timeout (issue 14).
    assert set(stall["expect"]) >= {
        "crosscheck.stage.complete",
        "crosscheck.stage.failed",
        "crosscheck.stage.timeout",
    }

    worker_log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 - closed below
    worker = _start(
        [PREFECT, "worker", "start", "--pool", POOL, "--type", "process"], env, worker_log, tmp_path
    )
    try:
        started = datetime.datetime.now(datetime.UTC).isoformat()
        extraction.start()
        # The job may finish before the worker has started the gate: `since` ties its
        # completion line to this run.
        run = _run_gate(api, extraction_file, started)
        done = _wait_for("the gate flow run", lambda: _finished(api, run["id"]), timeout=240, every=2)
        assert done["parameters"]["stage"] == str(extraction_file)

        nxt = _deployment(api, "crosscheck-start-stage/next")
        triggered = _wait_for(
            "the next stage's flow run, started by crosscheck.stage.complete",
            lambda: _flow_runs(api, nxt["id"]),
            timeout=120,
            every=2,
        )
        assert triggered[0]["parameters"]["after"] == upstream
        assert triggered[0]["parameters"]["stage"] == str(training_file)
        _wait_for(
            "the next stage to complete",
            lambda: _finished(api, triggered[0]["id"]),
            timeout=240,
            every=2,
        )
        assert len(list(training.outputs_dir.glob("*.pt"))) == 3
        assert "Extraction complete" in training.log_path.read_text()

        # The gate run again on the same, completed run: the store knows it was announced,
        # the gate completes at once, and the next stage is not started a second time.
        again = _run_gate(api, extraction_file, started)
        _wait_for("the second gate flow run", lambda: _finished(api, again["id"]), timeout=240, every=2)
        time.sleep(10)  # a second crosscheck.stage.complete would have started `next` by now
        _started_once(api, upstream, len(_flow_runs(api, nxt["id"])))
    except AssertionError as exc:
        tail = (tmp_path / "worker.log").read_text(errors="replace")[-4000:]
        raise AssertionError(f"{exc}\n--- worker log ---\n{tail}") from None
    finally:
        _stop(worker, signal.SIGINT, grace=30)
        worker_log.close()
        extraction.stop()


#: A SimulatedJob's "complete" run whose pace the test sets: a sample each STEP seconds until
#: the file LET_GO exists, then the rest without a pause (its lines and outputs as
#: sensors.testing writes them).
_HELD = """
import os, sys, time
out, total, step, let_go = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
os.makedirs(out, exist_ok=True)
print("Loading model...", flush=True)
for i in range(total):
    with open(os.path.join(out, f"sample_{i:06d}.pt.tmp"), "wb") as f:
        f.write(os.urandom(64))
    os.rename(os.path.join(out, f"sample_{i:06d}.pt.tmp"), os.path.join(out, f"sample_{i:06d}.pt"))
    print(f"[{i + 1}/{total}] {i + 1} extracted", flush=True)
    time.sleep(0.05 if os.path.exists(let_go) else step)
print(f"Extraction complete: {total} samples", flush=True)
"""


class _HeldJob(SimulatedJob):
    """A SimulatedJob (its stage, start, stop) the test lets go of: :data:`_HELD`."""

    def __init__(self, workdir: Path, *, total: int, step: float) -> None:
        super().__init__(workdir, scenario="complete", total=total, step=step)
        self._let_go = self.workdir / f"{self.tag}.let-go"

    @property
    def command(self) -> list[str]:
        return [self.python, "-u", "-c", _HELD, str(self.outputs_dir), str(self.total), str(self.step),
                str(self._let_go), "--tag", self.tag]  # fmt: skip

    def let_go(self) -> None:
        self._let_go.touch()


def _deploy(env: dict[str, str], pool: str, tmp_path: Path) -> None:
    """The process work pool and `prefect deploy --all` of a copy of deployments/ (so that
    `prefect deploy` cannot leave files in the repository)."""
    _cli(env, "work-pool", "create", pool, "--type", "process")
    project = tmp_path / "deployments"
    shutil.copytree(REPO / "deployments", project)
    _cli(env, "--no-prompt", "deploy", "--all", cwd=project)  # the global flag: every 3.x


def _run_gate(api: str, stage_file: Path, since: str) -> dict[str, Any]:
    """A run of the gate deployment for ``stage_file``; ``since``: when the job was started
    (it may finish before the worker starts the gate)."""
    gate = _deployment(api, "crosscheck-gate/gate")
    return _post(
        api,
        f"/deployments/{gate['id']}/create_flow_run",
        {"parameters": {"stage": str(stage_file), "since": since}},
    )


def _yaml(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)


def _environ_has(pid: str, needle: bytes) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or another user's
        return False


def _processes_of_flow_run(flow_run_id: str) -> list[int]:
    """Every process on this machine whose environment names the flow run: the process
    worker starts a flow run's process with PREFECT__FLOW_RUN_ID=<id>."""
    needle = f"PREFECT__FLOW_RUN_ID={flow_run_id}".encode()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _environ_has(p, needle)]


def _events(api: str, resource: str) -> list[dict[str, Any]]:
    found = _post(
        api,
        "/events/filter",
        {"filter": {"resource": {"id": [resource]}, "order": "ASC"}, "limit": 50},
    )
    return found["events"]


def _completions(api: str, stage: str) -> int:
    """How many times crosscheck announced the stage complete (its crosscheck.stage.complete events)."""
    found = _post(
        api,
        "/events/filter",
        {"filter": {"resource": {"id": [f"crosscheck.stage.{stage}"]},
                    "event": {"name": ["crosscheck.stage.complete"]}}, "limit": 50},
    )  # fmt: skip
    return len(found["events"])


def _started_once(api: str, stage: str, runs: int) -> None:
    """The next stage was started once for the one completion crosscheck announced.

    Announcing once is crosscheck's part (asserted). A run per event is the Prefect server's:
    at the range's floor (3.1.12, make test-compat) its trigger service has now and then run
    the action twice or three times for one event (the newest never, here); that is an xfail
    naming it, not a pass. crosscheck's launch record keeps the stage from being launched twice.
    """
    assert _completions(api, stage) == 1, "crosscheck announced the completion more than once"
    if runs != 1:
        import prefect

        pytest.xfail(
            f"Prefect {prefect.__version__}'s server ran the trigger's action {runs} times for one event"
        )


def _cmdlines(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        with contextlib.suppress(OSError):
            out.append(
                Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
    return out


def _state(api: str, flow_run_id: str) -> dict[str, Any]:
    return _request("GET", f"{api}/flow_runs/{flow_run_id}")["state"] or {}


def _the_whole_story_is_told(api: str, flow_run_id: str, waiting_before: dict[str, Any]) -> None:
    """Issue 22: what a handed-off gate leaves is the watcher's whole wait, and true after
    the end. Before: a picture of one point "(1 checks)", evidence "1 check · 0 s in this
    state" beside "agreed for 2 consecutive checks", and a waiting artifact that still said
    "Suspended … resumes this flow run when …" after the run had completed."""
    import base64
    import re

    def rendered(markdown: str) -> str:
        return re.sub(r"\\(.)", r"\1", markdown)

    artifacts = {
        (a.get("key") or "").rsplit("-", 1)[-1]: a
        for a in _post(api, "/artifacts/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}})
    }
    waiting = rendered(artifacts["waiting"]["data"])
    assert waiting.startswith("**Done: complete.**"), waiting[:400]
    assert "Suspended" not in waiting and "resumes this flow run when" not in waiting, waiting[:400]
    checks = int(re.search(r"(\d+) checks over ", waiting).group(1))  # type: ignore[union-attr]
    assert checks > 20, waiting[:400]  # ~100 s at one check a second
    assert int(re.search(r"\((\d+) checks", rendered(waiting_before["data"])).group(1)) <= checks  # type: ignore[union-attr]

    facts = rendered(artifacts["evidence"]["data"]).split("\n")[2]
    assert f"{checks} checks over " in facts and "by crosscheck serve on " in facts, facts
    assert "1 check " not in facts and "0 s in this state" not in facts, facts
    picture = artifacts["picture"]
    assert picture["type"] == "markdown" and picture["data"].startswith("![")
    svg = base64.b64decode(picture["data"].split("base64,", 1)[1].split(")", 1)[0]).decode()
    points = max(len(p.split()) for p in re.findall(r'<polyline points="([^"]+)"', svg))
    assert points == checks, (points, checks)
    assert f"({checks} checks by crosscheck serve on " in rendered(picture["description"])


def test_a_gate_handed_to_the_watcher_holds_no_worker_while_its_stage_runs(
    prefect_server: dict[str, Any], tmp_path: Path
) -> None:
    """The gate hands its stage to `crosscheck serve` and suspends: for the minutes the stage
    runs, no process of that flow run exists on the worker machine; the watcher resumes it
    when every signal agrees, the gate ends Completed with the verdict, and its
    crosscheck.stage.complete event starts the next stage once."""
    api, env = prefect_server["api"], dict(prefect_server["env"])
    upstream = f"handed-{uuid.uuid4().hex[:6]}"
    pool = f"{POOL}-handoff"
    # Up to 70 s of work, at one sample each 2 s until the test lets it go (then the rest at
    # once): long enough to see the gate gone from the worker for 20 s and more whatever the
    # worker took to start it, and for a heartbeat of the resumed gate within a minute of the
    # watcher's to show; no longer (it was a fixed 70 s: half of it waited for nothing).
    extraction = _HeldJob(tmp_path, total=35, step=2.0)
    training = SimulatedJob(tmp_path / "training", scenario="complete", total=3, step=0.05)
    training.workdir.mkdir()
    extraction_file = tmp_path / "extraction.yaml"
    extraction_file.write_text(
        _yaml(extraction.stage_dict(name=upstream, interval="1s", stall_after="30s", timeout="10m"))
    )
    training_file = tmp_path / "training.yaml"
    training_spec = training.stage_dict(name=f"train-{upstream}", interval="500ms")
    training_spec["launch"] = {"command": training.command, "log": str(training.log_path)}
    training_file.write_text(_yaml(training_spec))
    state = tmp_path / "state.db"
    env.update(
        CROSSCHECK_POOL=pool,
        CROSSCHECK_UPSTREAM=upstream,
        CROSSCHECK_NEXT_STAGE=str(training_file),
        CROSSCHECK_STATE=str(state),
    )
    _deploy(env, pool, tmp_path)

    stages_dir = tmp_path / "watched"  # the watcher's own stage files: none, only handoffs
    stages_dir.mkdir()
    logs = {name: open(tmp_path / f"{name}.log", "wb") for name in ("worker", "watcher")}  # noqa: SIM115
    crosscheck = str(Path(sys.executable).with_name("crosscheck"))
    watcher = _start(
        [crosscheck, "serve", str(stages_dir), "--state", str(state), "--rescan", "1s", "--prefect"],
        env,
        logs["watcher"],
    )
    worker = _start(
        [PREFECT, "worker", "start", "--pool", pool, "--type", "process"], env, logs["worker"], tmp_path
    )
    try:
        started = datetime.datetime.now(datetime.UTC).isoformat()
        extraction.start()
        run = _run_gate(api, extraction_file, started)
        _wait_for(
            "the gate to suspend",
            lambda: _state(api, run["id"]).get("type") == "PAUSED" or _finished(api, run["id"]),
            timeout=120,
            every=1,
        )
        assert extraction.running, "the stage ended before the gate let go: too short a test"
        suspended = _state(api, run["id"])
        assert suspended["name"] == "Suspended", suspended
        # The flow run's process exits just after proposing the Suspended state.
        _wait_for(
            "the suspended gate's process to exit",
            lambda: not _processes_of_flow_run(run["id"]),
            timeout=60,
            every=0.5,
        )
        # While the stage runs: the flow run stays suspended and has no process anywhere here.
        # 12 looks (2 s apart: ~25 s suspended), then the job is let go to finish.
        looked, artifact = 0, None
        while extraction.running and looked < 12:
            pids = _processes_of_flow_run(run["id"])
            assert not pids, f"a process of the suspended gate exists: {_cmdlines(pids)}"
            state_now = _state(api, run["id"])
            if state_now.get("type") != "PAUSED":
                break  # resumed: the stage is done
            artifacts = _post(api, "/artifacts/filter", {"flow_runs": {"id": {"any_": [run["id"]]}}})
            artifact = next((a for a in artifacts if (a.get("key") or "").endswith("-waiting")), artifact)
            looked += 1
            time.sleep(2)
        extraction.let_go()
        assert looked >= 10, f"the gate was suspended for only {looked} looks"
        assert artifact is not None, "the watcher wrote no waiting artifact on the suspended run"
        assert "no worker is held" in artifact["data"]
        assert "Latest verdict: **running**" in artifact["data"]

        done = _wait_for("the gate flow run", lambda: _finished(api, run["id"]), timeout=240, every=2)
        assert len(list(extraction.outputs_dir.glob("*.pt"))) == 35
        names = [s["name"] for s in _request("GET", f"{api}/flow_run_states/?flow_run_id={run['id']}")]
        assert "Suspended" in names and names[-1] == "Completed", names
        assert done["state"]["type"] == "COMPLETED"
        _the_whole_story_is_told(api, run["id"], artifact)
        # One name: the stage's (`stage:`), not the stage file's stem ("gate-extraction").
        assert done["name"] == f"gate-{upstream}", done["name"]

        # The stage's events while it was handed off: the watcher's heartbeats (at most one
        # a minute), and one complete, the resumed gate's.
        # Events reach the server's store a little after they are sent.
        def with_complete() -> list[dict[str, Any]] | None:
            found = _events(api, f"crosscheck.stage.{upstream}")
            return found if any(e["event"] == "crosscheck.stage.complete" for e in found) else None

        events = _wait_for("the complete event", with_complete, timeout=60)
        beats = [
            e
            for e in events
            if e["event"] == "crosscheck.stage.heartbeat" and e["payload"].get("by") == "crosscheck serve"
        ]
        assert beats, events
        assert len(beats) <= 3, [e["occurred"] for e in beats]  # ~70 s: at most one a minute
        assert any(r["prefect.resource.id"] == f"prefect.flow-run.{run['id']}" for r in beats[0]["related"])
        assert [e["event"] for e in events].count("crosscheck.stage.complete") == 1
        # One cadence across watcher and gate: the resumed gate sent none within a minute
        # of the watcher's last (it did, 18 s after).
        every = [
            datetime.datetime.fromisoformat(e["occurred"])
            for e in events
            if e["event"].endswith(".heartbeat")
        ]
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(every)]
        assert all(gap >= 55 for gap in gaps), gaps

        nxt = _deployment(api, "crosscheck-start-stage/next")

        # The deployment is the first test's too (deployed again under the same name): only
        # the runs this stage's completion started count.
        def ours() -> list[dict[str, Any]]:
            return [r for r in _flow_runs(api, nxt["id"]) if r["parameters"].get("after") == upstream]

        triggered = _wait_for("the next stage's flow run", ours, timeout=120, every=2)
        assert triggered[0]["parameters"]["after"] == upstream
        _wait_for("the next stage", lambda: _finished(api, triggered[0]["id"]), timeout=240, every=2)
        # The next stage's gate handed off too (a watcher is alive): launched once, though
        # its flow run ran its body twice (before suspending and after resuming).
        assert len(list(training.outputs_dir.glob("*.pt"))) == 3
        assert training.log_path.read_text().count("Extraction complete") == 1
        next_states = [
            s["name"] for s in _request("GET", f"{api}/flow_run_states/?flow_run_id={triggered[0]['id']}")
        ]
        assert "Suspended" in next_states, next_states
        time.sleep(5)
        _started_once(api, upstream, len(ours()))
    except AssertionError as exc:
        tails = {n: (tmp_path / f"{n}.log").read_text(errors="replace")[-3000:] for n in logs}
        raise AssertionError(
            f"{exc}\n--- worker log ---\n{tails['worker']}\n--- watcher log ---\n{tails['watcher']}"
        ) from None
    finally:
        _stop(worker, signal.SIGINT, grace=30)
        _stop(watcher, signal.SIGTERM, grace=30)
        for f in logs.values():
            f.close()
        extraction.stop()
