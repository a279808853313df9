"""``crosscheck check``: a Nagios/Icinga check (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; one
status line with perfdata on stdout, then detail).

The codes through the installed console script, on real jobs (sensors.testing.SimulatedJob),
a real unreachable host and a host that never answers; the mapping and the output format on
built verdicts.
"""

from __future__ import annotations

import datetime
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sensors._base.model import State, Verdict
from sensors._cli.nagios import CRITICAL, OK, PLUGIN_STATE, UNKNOWN, WARNING, report, worst
from sensors.testing import SimulatedJob, reading

CROSSCHECK = str(Path(sys.executable).with_name("crosscheck"))

#: A plugin's first line: ``SERVICE STATE - text | perfdata`` (perfdata: label=value[uom];...).
_STATUS_LINE = re.compile(r"^CROSSCHECK (OK|WARNING|CRITICAL|UNKNOWN) - ([^|]*)(?: \| (.*))?$")
_PERF = re.compile(r"^[A-Za-z0-9_.-]+=(U|-?[0-9.]+)(s|%|)?(;[-0-9.]*){0,4}$")
_NAME = {OK: "OK", WARNING: "WARNING", CRITICAL: "CRITICAL", UNKNOWN: "UNKNOWN"}


def check(*args: str, timeout: float = 120) -> tuple[int, str, dict[str, str], str]:
    """Run ``crosscheck check``: its code, its status line's text, its perfdata, stderr."""
    out = subprocess.run(
        [CROSSCHECK, "check", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    first = out.stdout.splitlines()[0] if out.stdout else ""
    m = _STATUS_LINE.match(first)
    assert m, (out.stdout, out.stderr)
    assert m[1] == _NAME[out.returncode], out.stdout
    perf = {}
    for item in (m[3] or "").split():
        assert _PERF.match(item), item
        label, value = item.split("=", 1)
        perf[label] = value
    return out.returncode, m[2], perf, out.stderr


def _since_now() -> str:
    return datetime.datetime.fromtimestamp(time.time() - 1, datetime.UTC).isoformat()


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[dict[str, SimulatedJob]]:
    started = {
        "complete": SimulatedJob(tmp_path, scenario="complete", total=4, step=0.05, tag="nagios-complete"),
        "crash": SimulatedJob(tmp_path, scenario="crash", total=4, step=0.05, tag="nagios-crash"),
        "stall": SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01, tag="nagios-stall"),
    }
    for job in started.values():
        job.start()
    yield started
    for job in started.values():
        job.stop()


def test_check_codes_on_real_jobs(jobs: dict[str, SimulatedJob], tmp_path: Path) -> None:
    since = _since_now()
    state = str(tmp_path / "state.db")
    # running: OK, with the job's CPU seconds, the log's age and the outputs so far
    stall = jobs["stall"].write_stage(tmp_path / "stall.yaml", stall_after="1s")
    code, text, perf, _ = check(str(stall), "--state", state)
    assert code == OK and text.startswith("nagios-stall running: process alive"), text
    assert re.fullmatch(r"[0-9.]+s;;;0", perf["cpu_time"]) and re.fullmatch(r"[0-9.]+s;;;0", perf["log_age"])
    assert perf["outputs"] == "2;;;0;4" and re.fullmatch(r"[0-9.]+s;;;0", perf["time"])
    # the same job, no progress for stall_after (the state store remembers the last check): WARNING
    time.sleep(1.5)
    code, text, _, _ = check(str(stall), "--state", state)
    assert code == WARNING and text.startswith("nagios-stall stalled"), text
    # failed: CRITICAL (status says 3, which Nagios reads as UNKNOWN)
    jobs["crash"].wait(30)
    crash = jobs["crash"].write_stage(tmp_path / "crash.yaml")
    code, text, _, _ = check(str(crash), "--since", "5m", "--state", state)
    assert code == CRITICAL and text.startswith("nagios-crash failed"), text
    # complete: OK
    jobs["complete"].wait(30)
    done = jobs["complete"].write_stage(tmp_path / "done.yaml")
    code, text, perf, _ = check(str(done), "--since", since, "--state", state)
    assert code == OK and text.startswith("nagios-complete complete"), text
    assert perf["outputs"] == "4;;;0;4" and perf["cpu_time"] == "U;;;0"  # gone: no CPU to read
    # several stages: the worst, each verdict on the line, metrics named by stage
    code, text, perf, _ = check(str(done), str(crash), str(stall), "--since", "5m", "--state", "none")
    assert code == CRITICAL, text
    assert "nagios-crash failed" in text and "nagios-complete" in text
    assert {"nagios-crash.outputs", "nagios-stall.cpu_time", "time"} <= set(perf)


def test_a_host_that_cannot_be_read_is_unknown_not_running(tmp_path: Path) -> None:
    """The issue's case: an SSH host that refuses the connection. ``status`` says 1 (as for
    running); ``check`` says UNKNOWN."""
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stage = tmp_path / "down.yaml"
    host = {"ssh": "127.0.0.1", "port": port, "known_hosts": str(known_hosts), "connect_timeout": "2s"}
    stage.write_text(json.dumps({"stage": "down", "host": host, "process": {"match": "x"}}))
    code, text, perf, _ = check(str(stage), "--state", "none")
    assert code == UNKNOWN and "down unknown: could not read the host" in text, text
    assert "Connection refused" in text and perf["cpu_time"] == "U;;;0"
    status = subprocess.run(
        [CROSSCHECK, "status", str(stage), "--state", "none"], capture_output=True, timeout=60
    )
    assert status.returncode == 1


def test_a_host_that_never_answers_is_unknown_at_the_timeout(tmp_path: Path) -> None:
    """A host that accepts the connection and never speaks (no SSH banner): the plugin answers
    UNKNOWN at ``--timeout``, not after the connection's own 30 s."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        known_hosts = tmp_path / "known_hosts"
        known_hosts.write_text("")
        host = {"ssh": "127.0.0.1", "port": listener.getsockname()[1], "known_hosts": str(known_hosts),
                "connect_timeout": "30s"}  # fmt: skip
        stage = tmp_path / "silent.yaml"
        stage.write_text(json.dumps({"stage": "silent", "host": host, "process": {"match": "x"}}))
        began = time.monotonic()
        code, text, perf, _ = check(str(stage), "--state", "none", "-t", "2s", timeout=60)
        assert code == UNKNOWN and text == "no verdict within 2s (--timeout)"
        assert time.monotonic() - began < 15 and perf == {}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["/nonexistent/stage.yaml"], "/nonexistent/stage.yaml: cannot read: No such file or directory"),
        ([], "crosscheck check: the following arguments are required: STAGE.yaml"),
        (
            ["--timeout", "soon", "x.yaml"],
            "crosscheck check: argument -t/--timeout: 'soon' is not a duration",
        ),
    ],
)
def test_a_check_that_cannot_be_made_is_unknown_on_stdout(argv: list[str], says: str) -> None:
    """Not status's exit 2 (CRITICAL to Nagios): UNKNOWN, with the reason as the status line
    on stdout, where monitors read it."""
    code, text, perf, _ = check(*argv)
    assert code == UNKNOWN and text.startswith(says) and perf == {}, text


def test_a_bad_stage_file_is_unknown_naming_the_field(tmp_path: Path) -> None:
    stage = tmp_path / "bad.yaml"
    stage.write_text("stage: bad\nlog: {path: /x.log, complete: done}\noutputs: {files: /x, expected: 0}\n")
    code, text, _, _ = check(str(stage))
    assert code == UNKNOWN and text == f"{stage}: outputs.expected: Input should be greater than 0"


# --------------------------------------------------------------------------- the mapping


def _verdict(state: str, *reasons: str, stage: str = "extract", **readings: object) -> Verdict:
    return Verdict(
        stage=stage,
        state=State(state),
        reasons=reasons or (f"{state}: because",),
        readings=dict(readings),  # type: ignore[arg-type]
        checked_at=time.time(),
        host="gpu-box",
    )


def test_every_verdict_has_a_plugin_state() -> None:
    assert PLUGIN_STATE == {
        State.COMPLETE: OK,
        State.RUNNING: OK,
        State.STALLED: WARNING,
        State.CONTRADICTION: WARNING,
        State.FAILED: CRITICAL,
        State.UNKNOWN: UNKNOWN,
    }


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([OK, OK], OK),
        ([OK, UNKNOWN], UNKNOWN),  # an unknown stage is not hidden behind an OK one
        ([UNKNOWN, WARNING], WARNING),
        ([WARNING, CRITICAL, UNKNOWN], CRITICAL),
        ([], UNKNOWN),
    ],
)
def test_several_stages_report_the_worst(codes: list[int], expected: int) -> None:
    assert worst(codes) == expected


def test_contradiction_is_a_warning_with_its_reasons_below() -> None:
    v = _verdict(
        "contradiction",
        "process gone, outputs complete, no completion line",
        "log: last line 'Epoch 3 | loss 0.2'",  # job text with a pipe: not perfdata
        outputs=reading("outputs", "done", count=8, expected=8),
        log=reading("log", "working", age_seconds=12.5),
        process=reading("process", "done", cpu_seconds=None),
        gpu=reading("gpu", "done", devices=[{"utilization_pct": 3.0}, {"utilization_pct": 41.5}, {}]),
    )
    code, text = report([v], 1.2345)
    first, *rest = text.splitlines()
    assert code == WARNING
    assert first == (
        "CROSSCHECK WARNING - extract contradiction: process gone, outputs complete, no completion line"
        " | outputs=8;;;0;8 log_age=12.5s;;;0 cpu_time=U;;;0 gpu_util=41.5%;;;0;100 time=1.234s;;;0"
    )
    assert rest == [
        "- process gone, outputs complete, no completion line",
        "- log: last line 'Epoch 3 ¦ loss 0.2'",
    ]


def test_a_stage_over_several_hosts_reports_each_hosts_metrics() -> None:
    """A span's readings are per host (``process@gpu-01``): its CPU time and GPU use were left
    out of the performance data, as if the stage had no process or GPU signal."""
    v = Verdict(
        "train",
        State.RUNNING,
        ("gpu-01 (node 0): running",),
        {
            "outputs": reading("outputs", "working", count=3, expected=8),
            "process@gpu-01": reading("process", "working", cpu_seconds=50.0),
            "gpu@gpu-01": reading("gpu", "working", devices=[{"utilization_pct": 97.0}]),
            "process@gpu-02": reading("process", "working", cpu_seconds=7.5),
            "gpu@gpu-02": reading("gpu", "working", devices=[{"utilization_pct": 100.0}]),
            "log#rank1@gpu-02": reading("log", "working", age_seconds=3.0),
        },
        time.time(),
        "gpu-01, gpu-02",
    )
    code, text = report([v], 1.0)
    assert code == OK
    assert text.splitlines()[0].split(" | ")[1] == (
        "outputs=3;;;0;8 cpu_time@gpu-01=50s;;;0 cpu_time@gpu-02=7.5s;;;0"
        " gpu_util@gpu-01=97%;;;0;100 gpu_util@gpu-02=100%;;;0;100 time=1s;;;0"
    )
