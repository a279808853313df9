"""Stage files and the `crosscheck` command: bad input is one line and exit 2, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sensors import ConfigError, load_stage
from sensors._cli import main
from sensors.testing import SimulatedJob

GOOD = {
    "stage": "extract",
    "host": "local",
    "process": {"match": "02b_extract"},
    "log": {"path": "/data/x.log", "complete": "^Extraction complete"},
    "outputs": {"files": "/data/hs", "pattern": "*.pt", "expected": 37312},
    "gpu": {"devices": "all", "idle_below": 5},
    "policy": {"interval": "30s", "stall_after": "15m", "settle": 2, "timeout": "48h"},
}


def _write(tmp_path: Path, data: object, name: str = "stage.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_good_stage_parses_durations(tmp_path) -> None:
    stage = load_stage(_write(tmp_path, GOOD))
    assert stage.policy.interval == 30 and stage.policy.stall_after == 900
    assert stage.policy.timeout == 48 * 3600 and stage.signals == ("process", "log", "outputs", "gpu")


def _with(path: str, value: object) -> dict:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    *parents, last = path.split(".")
    node = data
    for p in parents:
        node = node.setdefault(p, {})
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return data


_DELETE = object()

BAD = [
    ("typo in a section name", {**GOOD, "proces": {"match": "x"}}, "proces", "unknown key"),
    ("typo in a field", _with("log.complet", "x"), "log.complet", "unknown key"),
    ("invalid regex", _with("process.match", "([a-"), "process.match", "invalid regular expression"),
    ("invalid complete regex", _with("log.complete", "*oops"), "log.complete", "invalid regular expression"),
    ("bad duration", _with("policy.interval", "soon"), "policy.interval", "not a duration"),
    ("zero duration", _with("policy.stall_after", 0), "policy.stall_after", "greater than 0"),
    ("negative count", _with("outputs.expected", -5), "outputs.expected", "greater than 0"),
    ("zero count", _with("outputs.expected", 0), "outputs.expected", "greater than 0"),
    ("relative log path", _with("log.path", "logs/x.log"), "log.path", "relative path"),
    ("relative outputs path", _with("outputs.files", "hs"), "outputs.files", "relative path"),
    ("both pid and match", _with("process.pid", 4455), "process", "exactly one of match or pid"),
    ("missing stage name", _with("stage", _DELETE), "stage", "required"),
    ("settle zero", _with("policy.settle", 0), "policy.settle", "greater than or equal to 1"),
    ("gpu idle_for shorter than the check interval", _with("gpu.idle_for", "10s"), "", "too short for policy.interval"),
    (
        "no signal at all",
        {"stage": "s", "host": "local"},
        "",
        "no signal configured",
    ),
    ("webhook in clear", {**GOOD, "notify": {"slack_webhook": "https://hooks.slack.com/services/T/B/X"}},
     "notify.slack_webhook", "secret"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "data", "field", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_config_exit_2_one_line(tmp_path, capsys, name, data, field, message) -> None:
    path = _write(tmp_path, data)
    assert main(["status", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(path) in err and message in err
    if field:
        assert f": {field}: " in err
    assert "Traceback" not in err
    assert "hooks.slack.com" not in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("stage: [unclosed\n", "line"),
        ("- a list\n", "expected a mapping"),
        ("", "expected a mapping"),
    ],
)
def test_unreadable_files(tmp_path, capsys, content, message) -> None:
    path = tmp_path / "s.yaml"
    if content is not None:
        path.write_text(content)
    assert main(["status", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(path) in err


def test_config_error_carries_file_and_field(tmp_path) -> None:
    with pytest.raises(ConfigError) as info:
        load_stage(_write(tmp_path, _with("outputs.expected", 0)))
    assert info.value.field == "outputs.expected"


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sensors", *args], capture_output=True, text=True, timeout=timeout,
        cwd=Path(__file__).parent.parent,
    )  # fmt: skip


def test_status_json_schema_and_exit_code(tmp_path) -> None:
    job = SimulatedJob(tmp_path, scenario="stall", total=6, step=0.01)
    job.start()
    try:
        stage = job.write_stage(tmp_path / "s.yaml")
        out = _cli("status", str(stage), "--json")
        assert out.returncode == 1, out.stderr
        data = json.loads(out.stdout)
        assert set(data) >= {"stage", "verdict", "advance", "reasons", "checked_at", "host", "signals"}
        assert data["advance"] is False and data["verdict"] == "running"
        p = data["signals"]["process"]["evidence"]
        assert {"pid", "state", "cpu_seconds", "elapsed_seconds"} <= set(p)
        assert {"count", "expected"} <= set(data["signals"]["outputs"]["evidence"])
        assert {"last_line", "age_seconds"} <= set(data["signals"]["log"]["evidence"])
        human = _cli("status", str(stage))
        assert human.returncode == 1
        assert "RUNNING" in human.stdout and "process" in human.stdout and "outputs" in human.stdout
    finally:
        job.stop()


def test_wait_exit_codes(tmp_path) -> None:
    ok = SimulatedJob(tmp_path, scenario="complete", total=6, step=0.05)
    bad = SimulatedJob(tmp_path, scenario="crash", total=6, step=0.05)
    stuck = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01)
    for job in (ok, bad, stuck):
        job.start()
    try:
        out = _cli("wait", str(ok.write_stage(tmp_path / "ok.yaml")), "--json")
        assert out.returncode == 0, out.stderr
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        assert lines[-1]["verdict"] == "complete" and lines[-1]["advance"] is True
        assert len(lines) >= 2
        out = _cli("wait", str(bad.write_stage(tmp_path / "bad.yaml")))
        assert out.returncode == 3, out.stdout + out.stderr
        assert "FAILED" in out.stdout
        out = _cli(
            "wait", str(stuck.write_stage(tmp_path / "stuck.yaml", stall_after="1h")), "--timeout", "1500ms"
        )
        assert out.returncode == 4
        assert "timed out" in out.stderr
    finally:
        for job in (ok, bad, stuck):
            job.stop()


def test_wait_several_stages_json_lines(tmp_path) -> None:
    a = SimulatedJob(tmp_path, scenario="complete", total=5, step=0.05, tag="stage-a")
    b = SimulatedJob(tmp_path, scenario="complete", total=8, step=0.05, tag="stage-b")
    for job in (a, b):
        job.start()
    try:
        out = _cli(
            "wait", str(a.write_stage(tmp_path / "a.yaml")), str(b.write_stage(tmp_path / "b.yaml")), "--json"
        )
        assert out.returncode == 0, out.stderr
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        assert {line["stage"] for line in lines} == {"stage-a", "stage-b"}
        finals = {line["stage"]: line["verdict"] for line in lines}
        assert finals == {"stage-a": "complete", "stage-b": "complete"}
    finally:
        a.stop()
        b.stop()


def test_help_and_version() -> None:
    out = _cli("--help")
    assert out.returncode == 0 and "examples:" in out.stdout and "exit codes:" in out.stdout
    out = _cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("crosscheck ")


@pytest.mark.parametrize(
    "path",
    sorted((Path(__file__).parent.parent / "deployments" / "stages").glob("*.yaml")),
    ids=lambda p: p.name,
)
def test_example_stage_files_are_valid(path) -> None:
    stage = load_stage(path)
    assert stage.signals and stage.host != "local"


def test_yaml_on_key_is_a_string_not_a_boolean(tmp_path) -> None:
    """YAML 1.1 reads `on:` as True; the notify section's `on:` must still work."""
    path = tmp_path / "n.yaml"
    path.write_text(
        "stage: s\nhost: local\nlog: {path: /tmp/x.log, complete: done}\nnotify:\n  slack_webhook: env:X\n  on: [stalled, failed]\n  unknown_after: 1m\n"
    )
    stage = load_stage(path)
    assert stage.notify is not None and stage.notify.on == ("stalled", "failed")


def _log_stage_file(tmp_path: Path, log: Path, **log_keys: object) -> Path:
    return _write(tmp_path, {"stage": "cli-log", "host": "local",
                             "log": {"path": str(log), "complete": "^Extraction complete", **log_keys}})  # fmt: skip


@pytest.mark.timeout(60)  # Python's re alone spends minutes on this line, every check
def test_status_on_a_long_log_line_is_linear_time(tmp_path) -> None:
    log = tmp_path / "long.log"
    log.write_bytes(b"x" * (256 * 1024) + b" CUDA error: out of memory\n")
    stage = _log_stage_file(tmp_path, log, error=r".*(Traceback|CUDA error)", tail_bytes=1024 * 1024)
    out = _cli("status", str(stage), "--json", timeout=50)
    assert out.returncode == 3, out.stderr
    data = json.loads(out.stdout)
    assert data["verdict"] == "failed"
    assert data["signals"]["log"]["evidence"]["error_line"].endswith("CUDA error: out of memory")
    assert "BacktrackingRegexWarning" not in out.stderr


def test_a_backtracking_pattern_is_named_at_load(tmp_path) -> None:
    log = tmp_path / "x.log"
    log.write_text("Extraction complete\n")
    stage = _log_stage_file(tmp_path, log, error=r"(?<!no )Traceback")
    out = _cli("status", str(stage), "--json")
    assert out.returncode == 0, out.stderr
    assert "BacktrackingRegexWarning: log.error: '(?<!no )Traceback' uses lookbehind" in out.stderr
    assert str(stage) in out.stderr


@pytest.mark.timeout(40)  # before: two tails blocked on the FIFO until the 60 s deadline
def test_status_on_a_fifo_log_is_unknown_at_once(tmp_path) -> None:
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    out = _cli("status", str(_log_stage_file(tmp_path, fifo)), "--json", timeout=30)
    assert out.returncode == 1, out.stderr
    log = json.loads(out.stdout)["signals"]["log"]
    assert log["says"] == "unknown" and "not a regular file: fifo" in log["detail"]
