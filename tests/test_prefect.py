"""The Prefect layer against Prefect's test server and real simulated jobs.

Artifacts and events are read back through the Prefect client, as a user's UI would see them.
Events are written by the server asynchronously, so reading them back polls with a bound.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The harness reads these when it starts its server subprocess; set before prefect loads.
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"

import itertools
import re

import httpx
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterKey,
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterName,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.events.filters import (
    EventFilter,
    EventNameFilter,
    EventOccurredFilter,
    EventResourceFilter,
)
from prefect.events.schemas.events import ReceivedEvent
from prefect.settings import PREFECT_API_URL

import sensors.prefect
from flows.gate import gate
from flows.pipeline import pipeline, with_pid
from sensors._base.errors import StageFailed
from sensors._base.model import State, Verdict
from sensors._config.stage import Stage, stage_from_dict
from sensors.prefect import (
    TIMEOUT_EVENT,
    Cadence,
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
        # The API itself, not the client's read_events (Prefect 3.6+; make test-compat runs
        # this against the oldest Prefect supported).
        api = PREFECT_API_URL.value().rstrip("/")
        page = httpx.post(f"{api}/events/filter", json={"filter": flt.model_dump(mode="json"), "limit": 50})
        page.raise_for_status()
        data = page.json()  # limit 50: the server's maximum
        events: list[Any] = [ReceivedEvent.model_validate(e) for e in data["events"]]
        while data.get("next_page") and len(events) < 1000:
            page = httpx.get(str(data["next_page"]))
            page.raise_for_status()
            data = page.json()
            events.extend(ReceivedEvent.model_validate(e) for e in data["events"])
        events.sort(key=lambda e: e.occurred)
        if want(events) or time.monotonic() > deadline:
            return events
        time.sleep(0.5)


def _read_artifacts(key: str) -> list[Any]:
    with get_client(sync_client=True) as client:
        return client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))


def _run_artifacts(name: str, what: str) -> list[Any]:
    """The artifacts of kind ``what`` of every run of stage ``name`` (keys are per run)."""
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_=f"crosscheck-{name}-%"))
        )
    return [a for a in found if a.key.endswith(f"-{what}")]


def _read_logs(flow_run_id: Any, *, want: Callable[[list[Any]], bool], wait: float = 20.0) -> list[Any]:
    """The flow run's log records (messages and levels), polled: they arrive in batches."""
    deadline = time.monotonic() + wait
    while True:
        with get_client(sync_client=True) as client:
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
        if want(logs) or time.monotonic() > deadline:
            return logs
        time.sleep(0.5)


#: What a reader must never meet in a Prefect log, message or artifact: a Python dict or
#: list repr, an escaped newline, an epoch timestamp, a ``None`` field.
_UNREADABLE = re.compile(r"\{'|\['|\\n|\b1[6-9]\d{8}(\.\d+)?\b|\bNone\b")


def _names(events: list[Any]) -> list[str]:
    return [e.event for e in events]


_PICTURE = re.compile(r"!\[[^\]\n]*\]\(data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)\)\n?")


def _unescaped(markdown: str) -> str:
    """Markdown text as it reads rendered: backslash escapes (``\\(``) dropped."""
    return re.sub(r"\\(.)", r"\1", markdown)


def _svg_of(picture: Any) -> str:
    """The SVG a picture artifact shows. A markdown artifact that is one embedded image and
    nothing else: Prefect's UI prints an image artifact's URL under the picture, and a data:
    URL is the whole picture in base64, running into the sidebar (issue 22)."""
    import base64

    assert picture.type == "markdown", picture.type
    whole = _PICTURE.fullmatch(picture.data)
    assert whole is not None, picture.data[:200]
    return base64.b64decode(whole.group(1)).decode()


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
        # A run start, given: a loaded machine can start the flow after the job ended, and a
        # job never seen alive is otherwise not tied to this run (unknown, rightly).
        return wait_for_stage(stage, timeout=60, since="1m")

    verdict = waits()
    assert verdict.state is State.COMPLETE and verdict.advance
    assert progress_percent(verdict) == 100.0

    # One artifact of each kind for this run, updated in place, keyed by the run.
    progress = _run_artifacts(name, "progress")
    assert len(progress) == 1
    assert progress[0].type == "progress" and float(progress[0].data) == 100.0
    assert "last checked" in progress[0].description

    (evidence,) = _run_artifacts(name, "evidence")
    assert evidence.key == artifact_key(name, "evidence", run=sensors.prefect.run_slug(verdict.run))
    assert evidence.type == "markdown" and f"# {name}: complete" in evidence.data
    assert "final verdict at" in evidence.data and f"{name}: complete at" in evidence.description
    assert r"8 of 8 \(100.00 %\)" in evidence.data
    assert not _UNREADABLE.search(evidence.data), evidence.data

    (picture,) = _run_artifacts(name, "picture")
    _svg_of(picture)  # the picture alone: no URL printed under it

    events = _read_events(name, want=lambda ev: "crosscheck.stage.complete" in _names(ev))
    names = _names(events)
    assert "crosscheck.stage.running" in names
    assert names.count("crosscheck.stage.complete") == 1
    # The first check's heartbeat, then at most one a minute: none more in a short wait.
    assert names.count("crosscheck.stage.heartbeat") == 1
    complete = next(e for e in events if e.event == "crosscheck.stage.complete")
    assert complete.resource.id == resource_id(name)
    assert complete.resource["prefect.resource.name"] == name
    assert complete.payload["verdict"] == "complete"
    assert complete.payload["signals"]["outputs"]["evidence"]["count"] == 8
    # One event per verdict change, not per check.
    changes = [n for n in names if n != "crosscheck.stage.heartbeat"]
    # Per change, not per check: no verdict event repeats the one before it.
    assert all(a != b for a, b in itertools.pairwise(changes)), changes


def test_a_failed_gate_fails_with_one_readable_message_and_the_evidence_artifact(jobs) -> None:
    """What the failed flow run shows: one line with the verdict and the reasons in words (no
    reprs, no epochs, no escaped newlines), the verdict line at ERROR, the evidence in the
    run's artifact."""
    from prefect.runtime import flow_run

    name = _unique("crash")
    job = jobs("crash", total=10, step=0.02)
    job.start()
    stage = _stage(job, name)
    run_ids: list[Any] = []

    @flow
    def waits() -> Any:
        run_ids.append(flow_run.id)
        # The job crashes within half a second; the flow may start later (CI's did, once): a
        # run start, given, ties the crash to this run (never seen alive, it is unknown).
        return wait_for_stage(stage, timeout=60, since="1m")

    with pytest.raises(StageFailed) as info:
        waits()
    assert info.value.verdict is not None
    assert info.value.verdict.state is State.FAILED
    assert info.value.timed_out is False
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"stage {name}: failed — ")
    assert "CUDA error" in message  # the reason, in words
    assert not _UNREADABLE.search(message), message
    assert len(message) < 1000

    events = _read_events(name, want=lambda ev: "crosscheck.stage.failed" in _names(ev))
    failed = [e for e in events if e.event == "crosscheck.stage.failed"]
    assert len(failed) == 1
    assert failed[0].payload["verdict"] == "failed"
    # Shown on the event's card: why it failed (the error line), not "process gone".
    assert failed[0].resource["crosscheck.reason"].startswith("log: "), failed[0].resource
    assert "CUDA error" in failed[0].resource["crosscheck.reason"]
    (verdict_resource,) = [r for r in failed[0].related if r.role == "verdict"]
    assert verdict_resource.name.startswith("failed: ")

    (evidence,) = _run_artifacts(name, "evidence")
    assert f"# {name}: failed" in evidence.data and "CUDA error" in evidence.data
    assert "| process |" in evidence.data and "| log |" in evidence.data
    assert not _UNREADABLE.search(evidence.data), evidence.data

    logs = _read_logs(run_ids[0], want=lambda ls: any(message in log.message for log in ls))
    ours = [log for log in logs if message in log.message or f"{name}: failed" in log.message]
    assert any(log.level >= logging.ERROR and log.message.startswith(f"{name}: failed") for log in ours)
    for log in logs:
        first_line = log.message.split("\n", 1)[0]  # Prefect appends its traceback below
        assert not _UNREADABLE.search(first_line), first_line


def test_wait_for_stage_times_out_with_the_last_verdict_and_a_final_event(jobs) -> None:
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
    events = _read_events(name, want=lambda ev: TIMEOUT_EVENT in _names(ev))
    names = _names(events)
    assert names[-1] == TIMEOUT_EVENT, names  # the gate's last word for automations
    assert events[-1].payload["verdict"] == "running"
    assert "not complete after 1.5s" in events[-1].payload["reason"]


def test_a_stalled_gate_shows_its_state_evidence_and_bounded_heartbeats(jobs, monkeypatch) -> None:
    """A stall read back through the API as the UI shows it, over four minutes of the gate's
    clock (run 30 times faster than the wall clock, so the test takes seconds): the flow run's
    state is named ``Stalled`` while it waits, the evidence artifact changes between checks,
    heartbeats stay at about one a minute, "still stalled" lines keep the log from going
    silent, and the timeout ends with a final event."""
    from prefect.runtime import flow_run

    real = time.monotonic
    origin = real()
    monkeypatch.setattr(sensors._prefect.gate, "_clock", lambda: origin + 30 * (real() - origin))
    monkeypatch.setattr(sensors.prefect, "DEFAULT_CADENCE", Cadence(heartbeat=60, still=120, refresh=10))
    name = _unique("stall")
    job = jobs("stall", total=10, step=0.02)
    job.start()
    stage = _stage(job, name, stall_after="1s", interval="200ms")
    run_ids: list[Any] = []
    seen: list[tuple[State, str | None, str | None]] = []  # verdict, run state name, evidence

    def look(verdict: Verdict) -> None:
        # What the UI would show right after this check (observers run after the report).
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(flow_run.id)
        evidence = _run_artifacts(name, "evidence")
        seen.append(
            (verdict.state, run.state.name if run.state else None, evidence[0].data if evidence else None)
        )

    @flow
    def waits_through_stall() -> Any:
        run_ids.append(flow_run.id)
        return wait_for_stage(stage, timeout=8)

    with observe_checks(look), pytest.raises(StageFailed) as info:
        waits_through_stall()
    assert info.value.timed_out is True  # stalled did not end the wait
    stalled = [s for s in seen if s[0] is State.STALLED]
    assert len(stalled) >= 5, seen
    assert {s[1] for s in stalled[1:]} == {"Stalled"}, seen  # the runs list says "Stalled"
    documents = [s[2] for s in stalled]
    assert len(set(documents)) >= 2, "the evidence artifact is updated in place between checks"
    assert all(f"# {name}: stalled" in d for d in documents if d)
    assert len(_run_artifacts(name, "evidence")) == 1  # one per run, not one per change

    events = _read_events(name, want=lambda ev: TIMEOUT_EVENT in _names(ev))
    names = _names(events)
    heartbeats = names.count("crosscheck.stage.heartbeat")
    # 8 s of wall clock is 240 s of the gate's: at most one heartbeat a minute (and the first).
    assert 2 <= heartbeats <= 6, names
    assert heartbeats * 4 < len(seen), (heartbeats, len(seen))
    assert names[-1] == TIMEOUT_EVENT
    stall_event = next(e for e in events if e.event == "crosscheck.stage.stalled")
    assert stall_event.resource["crosscheck.verdict"] == "stalled"
    assert any(r.role == "verdict" and r.name.startswith("stalled: ") for r in stall_event.related)

    logs = _read_logs(run_ids[0], want=lambda ls: any("still stalled after" in log.message for log in ls))
    mine = [log for log in logs if log.message.startswith(f"{name}:")]
    assert any(log.level == logging.WARNING and "still stalled after" in log.message for log in mine), [
        log.message for log in mine
    ]
    # Per change and per "still" period, never one line per check.
    assert len(mine) < len(seen) / 3, [log.message for log in mine]
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(run_ids[0]).state.type.value == "FAILED"


def test_a_stall_is_explained_where_it_is_read_the_event_card_and_the_evidence_table(jobs) -> None:
    """Issue 22: a stalled gate's evidence table showed every signal "working", and its
    event's ``crosscheck.reason`` was "process alive: ...". The reason that decided is what a
    person reads first: on the event's card, and as the first row of the evidence table."""
    name = _unique("stuck")
    job = jobs("stall", total=10, step=0.02)
    job.start()
    stage = _stage(job, name, stall_after="1s", interval="200ms")

    @flow
    def waits() -> Any:
        return wait_for_stage(stage, timeout=3)

    with pytest.raises(StageFailed) as info:
        waits()
    assert info.value.verdict is not None and info.value.verdict.state is State.STALLED
    events = _read_events(name, want=lambda ev: TIMEOUT_EVENT in _names(ev))
    stalled = next(e for e in events if e.event == "crosscheck.stage.stalled")
    reason = stalled.resource["crosscheck.reason"]
    assert reason.startswith("no progress for "), stalled.resource
    assert "CPU time, I/O, log size, output count unchanged" in reason
    assert any(r.role == "reason" and r.name == reason for r in stalled.related)
    assert any(r.role == "verdict" and r.name == f"stalled: {reason}" for r in stalled.related)
    heartbeat = next(e for e in events if e.event == "crosscheck.stage.heartbeat")
    assert heartbeat.resource["crosscheck.reason"] == heartbeat.payload["reasons"][0]

    (evidence,) = _run_artifacts(name, "evidence")
    table = evidence.data.split("## Signals", 1)[1]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0] == "| signal | says | facts |"
    assert rows[1].startswith("| **verdict** | **stalled** | no progress for "), rows
    assert [row.split(" | ")[1] for row in rows[2:]] == ["working"] * 3  # why alone is not the story


def test_still_working_is_said_only_when_cpu_time_was_measured_rising(jobs, caplog) -> None:
    """Issue 22: incident 2's line ("... but pid N is in state S with CPU 0.0 s and rising:
    still working") was logged for a job asleep, at the first check, with nothing to
    compare. It claims progress, so only CPU time seen rising between two checks backs it."""
    from prefect.runtime import flow_run

    # The line is INFO; the tests' runs send WARNING and above to the API unless told.
    caplog.set_level(logging.INFO, logger="prefect.task_runs")

    asleep = jobs("stall", total=2, step=0.01)  # writes 1 of 2 outputs, then sleeps
    spinning = jobs("eta0_spin", total=4, step=0.01, spin=60)  # "ETA 0", then spins on the CPU
    asleep.start()
    spinning.start()
    run_ids: dict[str, Any] = {}

    @flow
    def waits(stage: Stage) -> Any:
        run_ids[stage.stage] = flow_run.id
        return wait_for_stage(stage, timeout="2500ms")

    stages = {}
    for what, job, written in (("asleep", asleep, 1), ("spinning", spinning, 3)):
        job_stage = _stage(job, _unique(what), stall_after="30s", interval="300ms")
        stages[what] = job_stage
        # What it writes is there before the gate's first check: 1 of 2 (nearly done), or
        # 3 of 4 and "ETA 0".
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(list(job.outputs_dir.glob("*.pt"))) < written:
            time.sleep(0.05)
        with pytest.raises(StageFailed):
            waits(job_stage)

    def lines(what: str, want: Callable[[list[Any]], bool]) -> list[str]:
        logs = _read_logs(run_ids[stages[what].stage], want=want, wait=10)
        return [log.message for log in logs if "still working" in log.message]

    assert lines("asleep", want=lambda ls: any("not complete after" in log.message for log in ls)) == []
    said = lines("spinning", want=lambda ls: any("still working" in log.message for log in ls))
    assert said, "incident 2's line, for a job that spins on the CPU after 'ETA 0'"
    for line in said:
        assert re.search(
            r"in state \w+ with CPU [\d.,]+ s, up [\d.,]+ s since the last check: still", line
        ), line


def test_a_run_is_named_after_its_stage_not_its_file(jobs, tmp_path: Path) -> None:
    """Issue 22: runs were named after the stage file's stem (``gate-stuck``) while events and
    artifacts carry the ``stage:`` name. One name: the stage's."""
    job = jobs("complete", total=3, step=0.02)
    job.start()
    name = _unique("extract-v2")
    path = job.write_stage(tmp_path / "stuck.yaml", name=name)
    doc = gate(str(path), timeout=60, since="1h")
    assert doc["stage"] == name
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[f"gate-{name}", "gate-stuck"]))
        )
        (run,) = runs
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))
    assert run.name == f"gate-{name}"
    assert {t.name for t in tasks} == {f"wait-for-{name}"}


def test_a_resumed_gate_reports_the_watchers_whole_wait(jobs, tmp_path: Path) -> None:
    """Issue 22: a gate handed to the watcher ended with a picture of its own single check
    ("(1 checks)", one point) and "1 check · 0 s in this state" beside "agreed for 2
    consecutive checks"; its waiting artifact still said "Suspended ... resumes this flow run
    when ..." after the run completed; and it sent a heartbeat seconds after the watcher's.

    The watcher's half here is serve's own pieces (Desk, PrefectBridge, a Checker) driven
    inside the gate's flow run against the test server; the real serve, worker and
    suspension: tests/test_deployments_e2e.py."""
    from prefect.runtime import flow_run

    from sensors._check.checker import Checker
    from sensors._prefect.artifacts import waiting_key
    from sensors._prefect.bridge import PrefectBridge
    from sensors._prefect.suspend import finish_handed_off, ticket_for
    from sensors._store import open_store
    from sensors._watch.handoff import Desk, new_handoff, request_for

    name = _unique("handed")
    job = jobs("complete", total=6, step=0.3)
    stage = _stage(job, name, interval="200ms")
    state = str(tmp_path / "state.db")
    checks: list[Verdict] = []

    @flow
    def handed() -> Any:
        store = open_store(state)
        ticket = ticket_for(stage)
        request = {
            **request_for(stage, reference=None, since=None, run=None),
            "flow_run_id": str(flow_run.id),
        }
        handoff = store.hand_off(new_handoff(ticket, stage, "local", request, 60))
        desk = Desk(store, by="testbox:4242:abcdef+gates")
        bridge = PrefectBridge(by="crosscheck serve on testbox (pid 4242)")
        job.start()
        with Checker(stage, state=store) as checker:
            while True:
                verdict = checker.check()
                checks.append(verdict)
                watched = desk.saw(handoff, verdict)
                bridge.observe(
                    verdict,
                    flow_run_id=str(flow_run.id),
                    announce=checker.announce,
                    waiting_for=f"stage {name} on local",
                    watched=watched,
                )
                if desk.after(handoff, verdict, checker.run):
                    break
                time.sleep(0.2)
        store.close()
        return flow_run.id, finish_handed_off(stage, ticket, 60, state)

    flow_run_id, doc = handed()
    assert doc["verdict"] == "complete"
    n = len(checks)
    assert n >= 5 and checks[-1].state is State.COMPLETE

    (evidence,) = _run_artifacts(name, "evidence")
    facts = _unescaped(evidence.data.split("\n")[2])
    assert f"{n} checks over " in facts and "by crosscheck serve on testbox (pid 4242)" in facts, facts
    assert "1 check" not in facts.replace(f"{n} checks", "") and "0 s in this state" not in facts, facts
    assert "complete from this check on" in facts, facts

    (picture,) = _run_artifacts(name, "picture")
    assert f"({n} checks by crosscheck serve on testbox (pid 4242))" in _unescaped(picture.description)
    svg = _svg_of(picture)
    lines = re.findall(r'<polyline points="([^"]+)"', svg)
    assert max(len(points.split()) for points in lines) == n  # every check a point (the log's age)

    (waiting,) = _read_artifacts(waiting_key(name, str(flow_run_id)))
    said = _unescaped(waiting.data)
    assert said.startswith("**Done: complete.**"), said[:300]
    assert "Suspended" not in said and "resumes this flow run when" not in said
    assert f"({n} checks over " in said and "crosscheck serve on testbox (pid 4242) watched" in said, said

    events = _read_events(name, want=lambda ev: "crosscheck.stage.complete" in _names(ev))
    assert _names(events).count("crosscheck.stage.complete") == 1
    beats = [e for e in events if e.event == "crosscheck.stage.heartbeat"]
    # One cadence across watcher and gate: the watcher's first check sent one, and nobody
    # another within the minute (the whole wait took seconds).
    assert len(beats) == 1 and beats[0].payload["by"] == "crosscheck serve", [
        (e.occurred, e.payload) for e in beats
    ]


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
    for what in ("evidence", "progress", "picture"):
        for artifact in _run_artifacts(name, what):
            assert token not in json.dumps(artifact.model_dump(mode="json"))
    events = _read_events(name, want=lambda ev: "crosscheck.stage.stalled" in _names(ev))
    assert events and all(token not in json.dumps(e.model_dump(mode="json")) for e in events)


# --- flows ------------------------------------------------------------------------------------


def test_gate_flow_takes_a_stage_file_path(jobs, tmp_path: Path) -> None:
    job = jobs("complete", total=5, step=0.02)
    job.start()
    path = job.write_stage(tmp_path / "stage.yaml")
    doc = gate(str(path), timeout=60, since="1h")  # the job may be done before the first check
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
    launch = _run_artifacts(specs[0]["stage"], "launch")
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


def test_launch_stage_does_not_start_a_recorded_live_run_twice(jobs, tmp_path: Path) -> None:
    """A second launch of a stage whose launched run still runs returns that run's record
    (the state store keeps it), unless forced."""
    from sensors.flows import launch_stage

    stuck = jobs("stall", total=4, step=0.01)
    spec = stuck.stage_dict(name=_unique("launch"))
    spec.pop("process")
    spec["launch"] = {"command": stuck.command, "log": str(stuck.log_path)}
    stage = stage_from_dict(spec)

    @flow
    def twice() -> tuple[dict, dict, dict]:
        return launch_stage(stage), launch_stage(stage), launch_stage(stage, force=True)

    first, second, forced = twice()
    pids = [first["pid"], forced["pid"]]
    try:
        assert second["existing"] is True and second["pid"] == first["pid"]
        assert second["run"]["log_offset"] == first["run"]["log_offset"]
        assert "existing" not in forced and forced["pid"] != first["pid"]
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def test_a_launch_under_an_edited_command_is_not_the_old_runs(jobs, tmp_path: Path) -> None:
    """The session's adversary: the launched run still runs and the stage's launch command
    was edited since. Handing the old run's record back under the new command let a gate
    complete on the old command's exit 0; nor may a second job start beside it unasked."""
    from sensors._base.errors import ConfigError
    from sensors.flows import launch_stage

    stuck = jobs("stall", total=4, step=0.01)
    spec = stuck.stage_dict(name=_unique("relaunch"))
    spec.pop("process")
    spec["launch"] = {"command": stuck.command, "log": str(stuck.log_path)}
    edited = {**spec, "launch": {**spec["launch"], "command": [*stuck.command, "--edited"]}}

    @flow
    def first_then_edited() -> tuple[dict, str]:
        first = launch_stage(stage_from_dict(spec))
        try:
            launch_stage(stage_from_dict(edited))
        except ConfigError as exc:
            return first, str(exc)
        return first, ""

    first, refused = first_then_edited()
    try:
        assert "another launch section" in refused, refused
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first["pid"], signal.SIGKILL)


def test_a_stuck_gate_raises_stage_stuck_at_once_not_at_its_timeout(tmp_path: Path) -> None:
    """A job watched by its process alone, seen at work and then gone: nothing tells a success
    from a crash, now or later. The gate ends within seconds of the end with StageStuck (a
    StageFailed), its message the fix, not at its 10-minute timeout."""
    import subprocess

    from sensors._base.errors import StageStuck

    script = tmp_path / "stuck-gate.sh"
    script.write_text("#!/bin/sh\nsleep 4\nexit 0\n")
    script.chmod(0o755)
    job = subprocess.Popen([str(script)], start_new_session=True)
    stage = stage_from_dict(
        {
            "stage": _unique("stuck-gate"),
            "host": "local",
            "process": {"match": str(script)},
            "policy": {"interval": "300ms", "exit_grace": "1s"},
        }
    )

    @flow
    def waits() -> Any:
        return wait_for_stage(stage, timeout="10m")

    began = time.monotonic()
    try:
        with pytest.raises(StageStuck) as info:
            waits()
    finally:
        job.kill()
        job.wait()
    assert time.monotonic() - began < 60
    assert isinstance(info.value, StageFailed) and info.value.timed_out is False
    verdict = info.value.verdict
    assert verdict is not None and verdict.state is State.UNKNOWN and verdict.stuck is not None
    message = str(info.value)
    assert "\n" not in message and "stuck, unknown for good" in message
    assert "the fix: add a log section" in message
