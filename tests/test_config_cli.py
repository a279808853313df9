"""Stage files and the `crosscheck` command: bad input is one line and exit 2, never a traceback."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sensors import ConfigError, Reading, load_stage, stage_from_dict
from sensors._cli.main import main, sample_status
from sensors._verdict import VerdictMemory, decide
from sensors.testing import SimulatedJob, reading

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
    ("exclude glob with a newline", _with("outputs.exclude", ["*.tmp\n"]), "outputs.exclude", "file name pattern"),
    ("exclude glob with a slash", _with("outputs.exclude", ["tmp/*"]), "outputs.exclude", "no '/'"),
    ("empty exclude glob", _with("outputs.exclude", ["*.tmp", ""]), "outputs.exclude", "file name pattern"),
    ("exclude glob longer than a name", _with("outputs.exclude", ["x" * 256]), "outputs.exclude", "file name pattern"),
    ("too many exclude globs", _with("outputs.exclude", [f"*.{i}" for i in range(65)]), "outputs.exclude",
     "at most 64"),
    ("pattern with a carriage return", _with("outputs.pattern", "*.pt\r"), "outputs.pattern", "file name pattern"),
    ("webhook in clear", {**GOOD, "notify": {"slack_webhook": "https://hooks.slack.com/services/T/B/X"}},
     "notify.slack_webhook", "secret"),
    ("interval .nan", _with("policy.interval", float("nan")), "policy.interval", "give a finite one"),
    ("timeout .inf", _with("policy.timeout", float("inf")), "policy.timeout", "give a finite one"),
    ("stall_after in years", _with("policy.stall_after", "99999999d"), "policy.stall_after", "longer than 365d"),
    ("interval of a nanosecond", _with("policy.interval", 1e-9), "policy.interval", "shorter than 1ms"),
    ("interval of a millisecond", _with("policy.interval", "1ms"), "policy.interval", "greater than or equal to 0.1"),
    ("settle beyond reason", _with("policy.settle", 10**12), "policy.settle", "less than or equal to 1000"),
    ("expected beyond a float", _with("outputs.expected", 2**60), "outputs.expected", "less than or equal to"),
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
        (
            "stage: a\nprocess: {match: x}\nstage: b\n",
            "line 3: duplicate key 'stage' (first given on line 1)",
        ),
        (
            "stage: a\noutputs:\n  files: /d\n  expected: 40\n  pattern: '*.pt'\n  expected: 80\n",
            "line 6: duplicate key 'expected' (first given on line 4)",
        ),
        ("stage: a\nprocess: {match: x, match: y}\n", "line 2: duplicate key 'match'"),
        # Not YAMLErrors from PyYAML, each a traceback and exit 1 (and serve ended):
        ("stage: a\nprocess: {match: 2001-13-45}\n", "not a value YAML can hold (month must be in 1..12)"),
        ("stage: a\nprocess: " + "[" * 100000 + "]" * 100000 + "\n", "nested too deeply"),
    ],
)
def test_unreadable_files(tmp_path, capsys, content, message) -> None:
    path = tmp_path / "s.yaml"
    if content is not None:
        path.write_text(content)
    assert main(["status", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(path) in err


def _numeric_fields(model: type, prefix: str = "") -> list[str]:
    """Every int and float field of the stage schema (durations are floats), found by walking
    the models: a field added later is covered without a list kept by hand."""
    import typing

    from pydantic import BaseModel

    found = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        kinds = typing.get_args(info.annotation) or (info.annotation,)
        for kind in kinds:
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                found += _numeric_fields(kind, f"{path}.")
            elif kind in (int, float):
                found.append(path)
    return sorted(set(found))


# Every section present (an SSH host, notify, launch), so every numeric field is reachable.
FULL = {
    **GOOD,
    "host": {"ssh": "gpu-box", "port": 22, "connect_timeout": "10s", "check_timeout": "60s"},
    "log": {**GOOD["log"], "tail_bytes": 65536},
    "notify": {"slack_webhook": "env:HOOK", "unknown_after": "5m", "remind_every": "1h"},
    "gpu": {"devices": "all", "idle_below": 5, "idle_for": "60s"},
    "policy": {**GOOD["policy"], "stuck_in_d_after": "2m", "exit_grace": "60s"},
}


def test_every_number_in_a_stage_file_is_finite_and_bounded() -> None:
    """.nan stopped `serve`, .inf left a stage due never; any number beyond what a clock, a
    heap, a sleep or a count can hold is an error naming its field, whatever the field."""
    from sensors._config.stage import Stage

    fields = [f for f in _numeric_fields(Stage) if not f.startswith("host.material")]
    assert {"policy.interval", "policy.settle", "outputs.expected", "host.port", "gpu.idle_below"} <= set(
        fields
    )
    stage_from_dict(FULL)  # the base is valid
    # A stage over several hosts: its pattern's numbers, with no host: beside it.
    spans = {k: v for k, v in FULL.items() if k != "host"}
    spans["hosts"] = {**FULL["host"], "ssh": "gpu-{n}", "count": 2, "first": 1}
    stage_from_dict(spans)
    for field in fields:
        section, _, key = field.rpartition(".")
        for bad in (float("nan"), float("inf"), float("-inf"), 1e30, 10**30, 10**400, -1):
            data = yaml.safe_load(yaml.safe_dump(spans if field.startswith("hosts.") else FULL))
            node = data
            for part in section.split(".") if section else []:
                node = node.setdefault(part, {})
            if field == "process.pid":
                del node["match"]
            node[key] = bad
            with pytest.raises(ConfigError) as info:
                stage_from_dict(data)
            assert info.value.field == field, (field, bad, str(info.value))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1" + "0" * 400, "policy.interval: "),  # an int past any float: OverflowError, exit 1
        ("1" * 5000, "line 3: "),  # past Python's int string limit: ValueError from the YAML reader
    ],
)
def test_a_huge_integer_in_a_stage_file_is_exit_2_one_line(tmp_path, value, message) -> None:
    """A YAML integer too large for a float (or for Python's digit limit) was a traceback and
    exit 1 from `validate`/`status`, and ended `serve` (every other stage unwatched)."""
    path = tmp_path / "s.yaml"
    path.write_text(f"stage: s\nprocess: {{match: x}}\npolicy: {{interval: {value}}}\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    for command in ("validate", "status"):
        proc = subprocess.run(
            [sys.executable, "-m", "sensors", command, str(path)], capture_output=True, text=True, env=env
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and message in lines[0], proc.stderr


def test_a_file_too_large_for_a_stage_file_is_refused_unread(tmp_path, capsys) -> None:
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as f:
        f.write(b"stage: s\nprocess: {match: x}\n")
        f.truncate(3 << 20)
    assert main(["status", str(path)]) == 2
    assert "larger than 1024 KiB: not a stage file" in capsys.readouterr().err


@pytest.mark.parametrize(("option", "value"), [("--lease", "1ms"), ("--rescan", "1ms"), ("--lease", ".nan")])
def test_a_watchers_cycle_cannot_be_made_to_spin(tmp_path, capsys, option, value) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", str(tmp_path), option, value])
    assert info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_config_error_carries_file_and_field(tmp_path) -> None:
    with pytest.raises(ConfigError) as info:
        load_stage(_write(tmp_path, _with("outputs.expected", 0)))
    assert info.value.field == "outputs.expected"


def _now_iso() -> str:
    """Now, as ``--since`` takes it, a second early (the mtime a log shows is whole seconds)."""
    return datetime.datetime.fromtimestamp(time.time() - 1, datetime.UTC).isoformat()


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sensors", *args], capture_output=True, text=True, timeout=timeout,
        cwd=Path(__file__).parent.parent,
    )  # fmt: skip


def test_exclude_with_a_newline_is_exit_2_naming_the_field(tmp_path) -> None:
    # Through the installed entry point: a newline in an exclude glob once split the probe's
    # grep pattern and made the output count silently 0.
    data = _with("outputs.exclude", [".*", "*.tmp\n"])
    data["outputs"]["files"] = str(tmp_path)
    path = _write(tmp_path, data)
    out = _cli("status", str(path))
    assert out.returncode == 2, out.stdout + out.stderr
    [line] = out.stderr.splitlines()
    assert line.startswith(f"crosscheck: {path}: outputs.exclude: ")
    assert "'*.tmp\\n' is not a file name pattern" in line
    assert out.stdout == ""
    good = _with("outputs.exclude", [".*", "*.tmp", "*.part"])
    assert load_stage(_write(tmp_path, good, "good.yaml")).outputs.exclude == (".*", "*.tmp", "*.part")


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
        # Alive and working: two samples show progress; more could not change "running".
        assert data["sampling"]["checks"] == 2
        assert data["sampling"]["stopped"].startswith("process working")
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
    started = _now_iso()
    for job in (ok, bad, stuck):
        job.start()
    try:
        # The job may end before this CLI's first check (a loaded machine starts Python
        # slowly): the run's start, given, ties its evidence to it either way.
        out = _cli("wait", str(ok.write_stage(tmp_path / "ok.yaml")), "--json", "--since", started)
        assert out.returncode == 0, out.stderr
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        assert lines[-1]["verdict"] == "complete" and lines[-1]["advance"] is True
        assert len(lines) >= 2
        # It crashed before this watch began: only a run start ties its error line to it.
        out = _cli("wait", str(bad.write_stage(tmp_path / "bad.yaml")), "--since", "5m")
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
    started = _now_iso()
    for job in (a, b):
        job.start()
    try:
        out = _cli(
            "wait", str(a.write_stage(tmp_path / "a.yaml")), str(b.write_stage(tmp_path / "b.yaml")), "--json",
            "--since", started,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        assert {line["stage"] for line in lines} == {"stage-a", "stage-b"}
        finals = {line["stage"]: line["verdict"] for line in lines}
        assert finals == {"stage-a": "complete", "stage-b": "complete"}
    finally:
        a.stop()
        b.stop()


# --------------------------------------------------------------------------- status sampling


class _Scripted:
    """A Checker stand-in: each check decides (the real verdict) on the next scripted readings."""

    clock: _Clock | None = None  # advanced by each check's duration

    def __init__(self, steps: list[dict[str, Reading]], settle: int = 2, **policy: object) -> None:
        signals = {
            "log": {"path": "/tmp/x.log", "complete": "done"},
            "outputs": {"files": "/tmp", "expected": 3},
        }
        self.stage = stage_from_dict(
            {"stage": "s", "host": "local", **signals, "policy": {"settle": settle, **policy}}
        )
        self.steps, self.checks, self._memory = steps, 0, VerdictMemory()

    def check(self):
        readings = self.steps[min(self.checks, len(self.steps) - 1)]
        self.checks += 1
        if self.clock is not None:
            self.clock.now += self.clock.per_check
        host_down = any("host_error" in r.evidence for r in readings.values())
        verdict, self._memory = decide(
            "s",
            "local",
            readings,
            self.stage.policy,
            self._memory,
            None if host_down else 100.0 + self.checks,
        )
        return verdict


class _Clock:
    def __init__(self, per_check: float = 0.0) -> None:
        self.now, self.per_check, self.sleeps = 0.0, per_check, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _sample(checker: _Scripted, per_check: float = 0.0, **kw: object):
    clock = _Clock(per_check)
    checker.clock = clock
    return sample_status(checker, sleep=clock.sleep, clock=clock, **kw), clock  # type: ignore[arg-type]


LOG_DONE = reading("log", "done", "completion line", size=10, inode=1)
CONFIRMING = reading("outputs", "working", "3/3 outputs; confirming", count=3, expected=3)
OUT_DONE = reading("outputs", "done", "3/3 outputs, unchanged", count=3, expected=3)
GONE = reading("process", "done", "no process found", seen_alive=True)


@pytest.mark.parametrize("settle", [1, 2, 3, 5])
def test_status_takes_the_samples_a_finished_stage_needs(settle: int) -> None:
    # Outputs' first reading has no previous count ("confirming"), so a finished stage with
    # outputs needs settle + 1 checks; status takes them instead of stopping at settle.
    steps = [{"log": LOG_DONE, "outputs": CONFIRMING}, {"log": LOG_DONE, "outputs": OUT_DONE}]
    checker = _Scripted(steps, settle=settle)
    sampling, clock = _sample(checker)
    assert sampling.verdict.state.value == "complete", sampling.verdict.reasons
    assert sampling.checks == checker.checks == max(2, settle + 1)
    assert sampling.stopped == "complete: final"
    assert clock.sleeps == [0.5] * (sampling.checks - 1)  # min(policy.interval, 0.5 s) apart
    assert sampling.summary().startswith(f"took {sampling.checks} samples over ")


def test_status_stops_at_two_samples_when_more_cannot_change_the_verdict() -> None:
    alive = reading("process", "working", "pid 7 alive", pid=7, state="R", cpu_seconds=1.0)
    cases = [
        ({"process": alive, "log": LOG_DONE, "outputs": CONFIRMING}, "running", "process working"),
        (
            {"process": GONE, "log": reading("log", "failed", "Traceback"), "outputs": OUT_DONE},
            "failed",
            "final",
        ),
        (
            {"process": GONE, "log": reading("log", "working", "no line"), "outputs": OUT_DONE},
            None,
            "log working",
        ),
        (
            {
                n: Reading(n, "unknown", "host unreachable", {"host_error": "refused"})
                for n in ("log", "outputs")
            },
            "unknown",
            "log unknown",
        ),
        (  # every signal done, but the job's PIDs still hold a GPU: a rule, not settling
            {"process": GONE, "log": LOG_DONE, "gpu": reading("gpu", "done", "idle", job_pids_on_gpu=[7])},
            "contradiction",
            "every signal done, verdict contradiction",
        ),
    ]
    for readings, state, stopped in cases:
        sampling, _ = _sample(_Scripted([readings], stall_after="1h"))
        assert sampling.checks == 2, (readings, sampling)
        assert state is None or sampling.verdict.state.value == state, sampling.verdict.reasons
        assert stopped in sampling.stopped, sampling.stopped


def test_status_sampling_is_bounded_and_says_why_it_stopped() -> None:
    # Outputs that keep being rewritten in place never settle: at most settle + 2 checks.
    rewritten = reading("outputs", "working", "3/3 outputs, but 2.pt was modified", count=3, expected=3)
    sampling, _ = _sample(_Scripted([{"log": LOG_DONE, "outputs": rewritten}], settle=3))
    assert sampling.checks == 5 and sampling.stopped == "at the bound of 5 samples (settle 3 + 2)"
    assert sampling.verdict.state.value != "complete"
    # Slow checks (an SSH round trip of 4 s): the time bound comes first.
    sampling, clock = _sample(_Scripted([{"log": LOG_DONE, "outputs": rewritten}], settle=9), per_check=4.0)
    assert sampling.stopped == "at the bound of 10s" and sampling.checks == 2
    assert clock.now == 8.5  # a third check (4 s more) would end past the bound
    # A GPU not yet idle for idle_for: waited for only when idle_for fits the time left.
    gpu = reading(
        "gpu", "working", "idle for 0s of 60s", idle=None, idle_for_seconds=60.0, window_seconds=0.0
    )
    sampling, _ = _sample(_Scripted([{"process": GONE, "log": LOG_DONE, "gpu": gpu}]))
    assert sampling.checks == 2 and sampling.stopped.startswith("gpu working")
    soon = reading(
        "gpu", "working", "idle for 0.5s of 1s", idle=None, idle_for_seconds=1.0, window_seconds=0.5
    )
    idle = reading("gpu", "done", "idle", idle=True, job_pids_on_gpu=[])
    sampling, _ = _sample(
        _Scripted(
            [{"process": GONE, "log": LOG_DONE, "gpu": soon}] * 2
            + [{"process": GONE, "log": LOG_DONE, "gpu": idle}]
        )
    )
    assert sampling.verdict.state.value == "complete" and sampling.checks == 4


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_status_cli_on_a_finished_stage_takes_the_samples_it_needs(tmp_path, request, where) -> None:
    """A job that already finished (completion line, every output, process gone). settle 2:
    outputs need 3 checks to say complete; before, status took 2 and said running. Over SSH
    the same, through the test sshd (each check a round trip)."""
    job = SimulatedJob(tmp_path, scenario="complete", total=4, step=0.01)
    job.start()
    assert job.wait(30) == 0
    data = job.stage_dict(settle=2)
    if where == "ssh":
        data["host"] = request.getfixturevalue("ssh_spec")
    stage = _write(tmp_path, data, "s.yaml")
    # It finished before this status: --since ties its completion line to the run.
    out = _cli("status", str(stage), "--json", "--since", "10m")
    data = json.loads(out.stdout)
    sampling = data["sampling"]
    assert set(sampling) == {"checks", "seconds", "stopped"}
    assert sampling["seconds"] < 10.0
    assert data["verdict"] == "complete", data["reasons"]
    assert out.returncode == 0 and sampling["checks"] == 3, sampling
    assert sampling["stopped"] == "complete: final"
    # The state store remembers the run: a later status needs no --since.
    remembered = json.loads(_cli("status", str(stage), "--json").stdout)
    assert remembered["verdict"] == "complete" and remembered["run"] == data["run"]
    # Without a run start (and no store) it cannot be complete, and status says why it stopped.
    unbound = json.loads(_cli("status", str(stage), "--json", "--state", "none").stdout)
    assert unbound["verdict"] == "unknown" and unbound["sampling"]["stopped"]
    human = _cli("status", str(stage), "--since", "10m", "--state", "none")
    assert f"took {sampling['checks']} samples over " in human.stdout, human.stdout


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
    out = _cli("status", str(stage), "--json", "--since", "1h", timeout=50)
    assert out.returncode == 3, out.stderr
    data = json.loads(out.stdout)
    assert data["verdict"] == "failed"
    assert data["signals"]["log"]["evidence"]["error_line"].endswith("CUDA error: out of memory")
    assert "BacktrackingRegexWarning" not in out.stderr


def test_a_backtracking_pattern_is_named_at_load(tmp_path) -> None:
    log = tmp_path / "x.log"
    log.write_text("Extraction complete\n")
    stage = _log_stage_file(tmp_path, log, error=r"(?<!no )Traceback")
    out = _cli("status", str(stage), "--json", "--since", "1h")
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
