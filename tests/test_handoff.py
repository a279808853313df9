"""Handoffs without Prefect: a stage written into the store by a gate is watched by the real
watcher (``sensors._watch.watcher.Watcher``) on a real SQLite store, settled once when final or past
its deadline, with the outcome a resumed gate reads; requests that cannot be honoured are
skipped with a reason, and a secret never reaches the store."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from sensors import ConfigError, stage_from_dict
from sensors._base.model import State
from sensors._store import Handoff, open_store
from sensors._watch.handoff import Desk, new_handoff, read_outcome, request_for
from sensors._watch.watcher import Watcher
from sensors.testing import SimulatedJob


def _run(watcher: Watcher, until, timeout: float = 30.0) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        end = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < end, "timed out"
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(30)


def _hand_off(store, stage, flow_run_id: str, *, timeout: float) -> None:
    """What a gate's hand-off task writes for a local stage (ticket: flow run and stage).

    The job starts after it, and may end before the watcher's first look on a loaded
    machine: the run's start, given, ties its evidence to it either way.
    """
    since = time.time() - 1
    request = {**request_for(stage, reference=None, since=since, run=None), "flow_run_id": flow_run_id}
    store.hand_off(new_handoff(f"{flow_run_id}:{stage.stage}", stage, "local", request, timeout=timeout))


def _watcher(tmp_path: Path, store, resumed: list) -> Watcher:
    empty = tmp_path / "stages"
    empty.mkdir(exist_ok=True)
    desk = Desk(store, by="test-watcher", resume=lambda run, stage: resumed.append((run, stage)) or "resumed")
    return Watcher(empty, store=store, rescan_every=0.2, desk=desk)


def test_a_handed_off_stage_is_watched_settled_once_and_its_gate_resumed(tmp_path: Path) -> None:
    job = SimulatedJob(tmp_path, scenario="complete", total=4, step=0.1)
    stage = stage_from_dict(job.stage_dict(name="extract", interval="200ms", exit_grace="300ms"))
    resumed: list = []
    with open_store(tmp_path / "state.db") as store:
        _hand_off(store, stage, "run-1", timeout=60)
        job.start()
        try:
            _run(_watcher(tmp_path, store, resumed), lambda: bool(resumed))
        finally:
            job.stop()
        handoff = store.handoff("run-1:extract")
        outcome = read_outcome(handoff)
        assert outcome is not None and outcome.verdict.state is State.COMPLETE
        assert not outcome.timed_out and outcome.by == "test-watcher"
        assert outcome.run is not None  # the run it belongs to, for "announced once"
        assert {r.signal for r in outcome.verdict.readings.values()} >= {"process", "log", "outputs"}
        assert resumed[0] == ("run-1", "extract")
        # Settled once: a second watcher (or a restart) does not write another outcome.
        assert store.record_outcome("run-1:extract", {"verdict": "failed"}) is False


def test_a_deadline_that_passes_settles_as_timed_out(tmp_path: Path) -> None:
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.05)
    stage = stage_from_dict(job.stage_dict(name="stuck", interval="200ms", stall_after="1h"))
    resumed: list = []
    with open_store(tmp_path / "state.db") as store:
        _hand_off(store, stage, "run-2", timeout=1.5)
        job.start()
        try:
            _run(_watcher(tmp_path, store, resumed), lambda: bool(resumed))
        finally:
            job.stop()
        outcome = read_outcome(store.handoff("run-2:stuck"))
        assert outcome is not None and outcome.timed_out
        assert outcome.verdict.state not in (State.COMPLETE, State.FAILED)


def test_requests_that_cannot_be_honoured(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    material = {"source": "block crosscheck-ssh-host/gpu", "known_hosts": "", "private_key": "KEY"}
    secret = stage_from_dict(
        {
            "stage": "remote",
            "host": {"ssh": "127.0.0.1", "material": material},
            "log": {"path": "/tmp/x.log", "complete": "done"},
        }
    )
    with pytest.raises(ConfigError, match="not written to the state store"):
        request_for(secret, reference=None, since=None, run=None)
    assert "block" in request_for(secret, reference="block:remote", since=None, run=None)
    with open_store(tmp_path / "state.db") as store:
        # A block needs the Prefect API to be resolved: without it, skipped with the reason.
        store.hand_off(
            Handoff("run-3:remote", "remote", "127.0.0.1", {"block": "block:remote", "flow_run_id": "run-3"},
                    deadline=time.time() + 60, created_at=time.time())
        )  # fmt: skip
        watcher = _watcher(tmp_path, store, [])
        with caplog.at_level("ERROR", logger="crosscheck.serve"):
            _run(watcher, lambda: "needs the Prefect API" in caplog.text)
        assert store.handoff("run-3:remote").outcome is None  # nothing guessed


def test_an_unusable_stored_outcome_is_replaced_not_left_to_loop(tmp_path: Path) -> None:
    """An outcome whose seal fails reads as none (the stage is watched again); the watcher's
    next outcome replaces it, so the resumed gate finds one instead of suspending forever."""
    import sqlite3

    job = SimulatedJob(tmp_path, scenario="complete", total=3, step=0.05)
    stage = stage_from_dict(job.stage_dict(name="damaged", interval="200ms", exit_grace="300ms"))
    path = tmp_path / "state.db"
    resumed: list = []
    with open_store(path) as store:
        _hand_off(store, stage, "run-4", timeout=60)
        assert store.record_outcome("run-4:damaged", {"verdict": "x"})
        with sqlite3.connect(path) as raw:  # damage the stored outcome where SQLite cannot see it
            raw.execute('UPDATE crosscheck_handoff SET outcome = \'{"verdict": "forged"}\'')
        assert store.handoff("run-4:damaged").outcome is None  # the seal fails: no outcome
        job.start()
        try:
            _run(_watcher(tmp_path, store, resumed), lambda: bool(resumed))
        finally:
            job.stop()
        outcome = read_outcome(store.handoff("run-4:damaged"))
        assert outcome is not None and outcome.verdict.state is State.COMPLETE
