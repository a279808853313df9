"""The Prefect layer against Prefect's test server and real simulated jobs.

Artifacts and events are read back through the Prefect client, as a user's UI would see them.
Events are written by the server asynchronously, so reading them back polls with a bound.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

# The harness reads these when it starts its server subprocess; set before prefect loads.
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"

import itertools

from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterKey,
)
from prefect.events.filters import (
    EventFilter,
    EventNameFilter,
    EventOccurredFilter,
    EventResourceFilter,
)

from flows.gate import gate
from flows.pipeline import pipeline, with_pid
from sensors._config import Stage, stage_from_dict
from sensors._errors import StageFailed
from sensors._model import State, Verdict
from sensors.prefect import (
    artifact_key,
    check_stage,
    observe_checks,
    progress_percent,
    resource_id,
    wait_for_stage,
)
from sensors.testing import SimulatedJob

pytestmark = [pytest.mark.prefect, pytest.mark.usefixtures("prefect_harness")]


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[Callable[..., SimulatedJob]]:
    started: list[SimulatedJob] = []

    def make(scenario: str, **kwargs: Any) -> SimulatedJob:
        job = SimulatedJob(tmp_path, scenario=scenario, **kwargs)
        started.append(job)
        return job

    yield make
    for job in started:
        job.stop()


_START = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)


def _unique(name: str) -> str:
    # Artifacts and events persist for the session: each test reads back only its own.
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _stage(job: SimulatedJob, name: str, **policy: Any) -> Stage:
    return stage_from_dict(job.stage_dict(name=name, **policy))


def _read_events(name: str, *, want: Callable[[list[Any]], bool], wait: float = 30.0) -> list[Any]:
    """The stage's events, oldest first, polled until ``want`` holds or ``wait`` passes."""
    deadline = time.monotonic() + wait
    while True:
        # A fresh filter each time: `occurred.until` defaults to the moment it is built.
        flt = EventFilter(
            occurred=EventOccurredFilter(since=_START),
            event=EventNameFilter(prefix=["crosscheck.stage."]),
            resource=EventResourceFilter(id=[resource_id(name)]),
        )
        events: list[Any] = []
        with get_client(sync_client=True) as client:
            page = client.read_events(filter=flt, limit=50)  # the server's maximum
            events.extend(page.events)
            while page.next_page and len(events) < 1000:
                page = client.read_events_page(str(page.next_page))
                events.extend(page.events)
        events.sort(key=lambda e: e.occurred)
        if want(events) or time.monotonic() > deadline:
            return events
        time.sleep(0.5)


def _read_artifacts(key: str) -> list[Any]:
    with get_client(sync_client=True) as client:
        return client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))


def _names(events: list[Any]) -> list[str]:
    return [e.event for e in events]


# --- check_stage ------------------------------------------------------------------------------


def test_check_stage_returns_the_verdict_from_a_stage_file(jobs, tmp_path: Path) -> None:
    job = jobs("stall", total=10, step=0.02)
    job.start()
    path = job.write_stage(tmp_path / "stage.yaml")

    @flow
    def once() -> Any:
        return check_stage(str(path))

    verdict = once()
    assert verdict.stage == job.tag
    assert verdict.state in (State.RUNNING, State.STALLED)
    doc = verdict.to_json()
    assert set(doc["signals"]) == {"process", "log", "outputs"}
    assert doc["advance"] is False


# --- wait_for_stage ---------------------------------------------------------------------------


def test_wait_for_stage_returns_complete_with_artifacts_and_events(jobs) -> None:
    name = _unique("extract")
    job = jobs("eta0_spin", total=8, step=0.05, spin=1.5)
    job.start()
    stage = _stage(job, name)

    @flow
    def waits() -> Any:
        return wait_for_stage(stage, timeout=60)

    verdict = waits()
    assert verdict.state is State.COMPLETE and verdict.advance
    assert progress_percent(verdict) == 100.0

    progress = _read_artifacts(artifact_key(name, "progress"))
    assert len(progress) == 1  # created once, then updated in place
    assert progress[0].type == "progress" and float(progress[0].data) == 100.0

    tables = _read_artifacts(artifact_key(name, "evidence"))
    assert tables, "a table artifact per verdict change"
    latest = max(tables, key=lambda a: a.created)
    rows = latest.data if isinstance(latest.data, list) else yaml.safe_load(latest.data)
    assert {row["signal"] for row in rows} == {"process", "log", "outputs"}
    assert all(row["says"] == "done" for row in rows)
    assert any("count=8" in row["evidence"] for row in rows)

    summary = _read_artifacts(artifact_key(name, "verdict"))
    assert len(summary) == 1 and summary[0].type == "markdown"
    assert f"# {name}: complete" in summary[0].data

    events = _read_events(name, want=lambda ev: "crosscheck.stage.complete" in _names(ev))
    names = _names(events)
    assert "crosscheck.stage.running" in names
    assert names.count("crosscheck.stage.complete") == 1
    assert names.count("crosscheck.stage.heartbeat") >= 2
    complete = next(e for e in events if e.event == "crosscheck.stage.complete")
    assert complete.resource.id == resource_id(name)
    assert complete.resource["prefect.resource.name"] == name
    assert complete.payload["verdict"] == "complete"
    assert complete.payload["signals"]["outputs"]["evidence"]["count"] == 8
    # One event per verdict change, not per check.
    changes = [n for n in names if n != "crosscheck.stage.heartbeat"]
    assert len(changes) < names.count("crosscheck.stage.heartbeat")
    # Per change, not per check: no verdict event repeats the one before it.
    assert all(a != b for a, b in itertools.pairwise(changes)), changes


def test_wait_for_stage_raises_stage_failed_with_evidence_on_crash(jobs) -> None:
    name = _unique("crash")
    job = jobs("crash", total=10, step=0.02)
    job.start()
    stage = _stage(job, name)

    @flow
    def waits() -> Any:
        return wait_for_stage(stage, timeout=60)

    with pytest.raises(StageFailed) as info:
        waits()
    assert info.value.verdict is not None
    assert info.value.verdict.state is State.FAILED
    assert info.value.timed_out is False
    assert "CUDA error" in str(info.value)  # the evidence, not just "failed"

    events = _read_events(name, want=lambda ev: "crosscheck.stage.failed" in _names(ev))
    failed = [e for e in events if e.event == "crosscheck.stage.failed"]
    assert len(failed) == 1
    assert failed[0].payload["verdict"] == "failed"
    summary = _read_artifacts(artifact_key(name, "verdict"))
    assert summary and f"# {name}: failed" in summary[0].data


def test_wait_for_stage_times_out_with_the_last_verdict(jobs) -> None:
    name = _unique("stuck")
    job = jobs("stall", total=10, step=0.02)
    job.start()
    stage = _stage(job, name, stall_after="30s")

    @flow
    def waits_briefly() -> Any:
        return wait_for_stage(stage, timeout="1500ms")

    with pytest.raises(StageFailed) as info:
        waits_briefly()
    assert info.value.timed_out is True
    assert info.value.verdict is not None
    assert info.value.verdict.state is State.RUNNING
    assert "not complete after 1.5s" in str(info.value)


def test_stalled_without_notify_keeps_waiting_until_the_timeout(jobs) -> None:
    name = _unique("stall")
    job = jobs("stall", total=10, step=0.02)
    job.start()
    stage = _stage(job, name, stall_after="1s")

    @flow
    def waits_through_stall() -> Any:
        return wait_for_stage(stage, timeout=6)

    with pytest.raises(StageFailed) as info:
        waits_through_stall()
    assert info.value.timed_out is True  # stalled did not end the wait
    events = _read_events(name, want=lambda ev: "crosscheck.stage.stalled" in _names(ev))
    assert "crosscheck.stage.stalled" in _names(events)


def test_stall_notifies_slack_with_the_evidence_and_the_url_stays_secret(
    jobs, monkeypatch, caplog, capsys
) -> None:
    """Through the Prefect task: one Slack message for the stall (not one per check), with
    the evidence; the webhook URL appears in no log, artifact or event."""
    from tests.webhook_server import WebhookServer

    name = _unique("notify")
    job = jobs("stall", total=10, step=0.02)
    job.start()
    with WebhookServer() as hook:
        secret_url = hook.url + "/services/T000/B000/" + uuid.uuid4().hex
        monkeypatch.setenv("CROSSCHECK_TEST_WEBHOOK", secret_url)
        spec = job.stage_dict(name=name, stall_after="1s")
        spec["notify"] = {"slack_webhook": "env:CROSSCHECK_TEST_WEBHOOK", "on": ["stalled", "failed"]}
        stage = stage_from_dict(spec)

        @flow
        def waits() -> Any:
            return wait_for_stage(stage, timeout=5)

        with caplog.at_level(logging.DEBUG), pytest.raises(StageFailed):
            waits()
        bodies = [r.json() for r in hook.requests]
    stalled = [b for b in bodies if "STALLED" in json.dumps(b).upper()]
    assert len(stalled) == 1, bodies  # a transition, not every check
    text = json.dumps(stalled[0])
    assert name in text and str(job.pid) in text
    token = secret_url.rsplit("/", 1)[-1]
    out = capsys.readouterr()
    assert token not in out.out + out.err
    assert token not in caplog.text
    for what in ("evidence", "progress", "verdict"):
        for artifact in _read_artifacts(artifact_key(name, what)):
            assert token not in json.dumps(artifact.model_dump(mode="json"))
    events = _read_events(name, want=lambda ev: "crosscheck.stage.stalled" in _names(ev))
    assert events and all(token not in json.dumps(e.model_dump(mode="json")) for e in events)


# --- flows ------------------------------------------------------------------------------------


def test_gate_flow_takes_a_stage_file_path(jobs, tmp_path: Path) -> None:
    job = jobs("complete", total=5, step=0.02)
    job.start()
    path = job.write_stage(tmp_path / "stage.yaml")
    doc = gate(str(path), timeout=60)
    assert doc["verdict"] == "complete" and doc["advance"] is True
    assert doc["stage"] == job.tag


def test_observe_checks_sees_every_check_only_inside_the_block(jobs, tmp_path: Path) -> None:
    job = jobs("complete", total=5, step=0.02)
    job.start()
    path = job.write_stage(tmp_path / "stage.yaml")
    seen: list[Verdict] = []
    with observe_checks(seen.append):
        doc = gate(str(path), timeout=60, since="1h")  # the job may be done before the first check
    assert doc["verdict"] == "complete"
    assert seen and seen[-1].state is State.COMPLETE and seen[-1].stage == doc["stage"]
    checks = len(seen)
    with pytest.raises(RuntimeError, match="inside"), observe_checks(seen.append):
        raise RuntimeError("inside")
    gate(str(path), timeout=60, since="1h")  # no observer any more, also after a raise
    assert len(seen) == checks


def test_pipeline_launches_training_only_after_complete(jobs, tmp_path: Path) -> None:
    extraction_job = jobs("complete", total=5, step=0.05)
    training_job = jobs("complete", total=3, step=0.02)
    specs = []
    for name, job in ((_unique("ext"), extraction_job), (_unique("train"), training_job)):
        spec = job.stage_dict(name=name)
        spec["launch"] = {"command": job.command, "log": str(job.log_path)}
        specs.append(spec)
    specs[0].pop("process")  # the pipeline watches the PID it launched

    result = pipeline(stage_from_dict(specs[0]), stage_from_dict(specs[1]))

    ext, train = result["extraction"], result["training"]
    assert ext["verdict"]["verdict"] == "complete"
    assert ext["launched"]["pid"] > 0 and ext["launched"]["log"] == str(extraction_job.log_path)
    assert ext["verdict"]["signals"]["process"]["says"] == "done"
    assert train["launched"]["pid"] > 0 and train["verdict"]["verdict"] == "complete"
    # Training started after extraction was complete: its first output is younger than
    # extraction's complete verdict (file times and the verdict both use this host's clock).
    first_training_output = min(p.stat().st_mtime for p in training_job.outputs_dir.iterdir())
    extraction_done = _parse_iso(ext["verdict"]["checked_at"])
    assert first_training_output >= extraction_done
    launch = _read_artifacts(artifact_key(specs[0]["stage"], "launch"))
    assert launch and str(ext["launched"]["pid"]) in str(launch[0].data)


def test_pipeline_fails_with_the_evidence_when_extraction_fails(jobs) -> None:
    extraction_job = jobs("crash", total=6, step=0.02)
    training_job = jobs("complete", total=2, step=0.02)
    specs = []
    for name, job in ((_unique("ext"), extraction_job), (_unique("train"), training_job)):
        spec = job.stage_dict(name=name)
        spec["launch"] = {"command": job.command, "log": str(job.log_path)}
        specs.append(spec)

    with pytest.raises(StageFailed, match="CUDA error"):
        pipeline(stage_from_dict(specs[0]), stage_from_dict(specs[1]))
    assert not training_job.outputs_dir.exists()  # training never launched


def test_with_pid_fills_only_a_missing_process_section(jobs) -> None:
    job = jobs("complete")
    spec = job.stage_dict(name="x")
    assert with_pid(stage_from_dict(spec), 4455).process.match == spec["process"]["match"]
    spec.pop("process")
    assert with_pid(stage_from_dict(spec), 4455).process.pid == 4455


def _parse_iso(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()
