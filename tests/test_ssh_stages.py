"""Stages on an SSH host, end to end through the `crosscheck` command and a real sshd."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from sensors import Checker, ConfigError, Says, stage_from_dict
from sensors._config.stage import SSHSpec
from sensors._hosts.ssh import SSHHost
from sensors.testing import SimulatedJob
from tests.test_ssh import PAYLOADS as SSH_PAYLOADS

REPO = Path(__file__).resolve().parent.parent


def test_sshd_down_during_wait_is_unknown_then_the_same_wait_completes(tmp_path, sshd_private) -> None:
    """A failed connection is not a dead process: no advance while sshd is down, and the
    same `crosscheck wait` reconnects and goes on to complete when it is back."""
    job = SimulatedJob(tmp_path, scenario="complete", total=40, step=0.15)
    stage = job.stage_dict(interval="300ms", stall_after="1h", exit_grace="1s")
    stage["host"] = sshd_private.spec(connect_timeout=1.0, check_timeout=5.0)
    path = tmp_path / "remote.yaml"
    path.write_text(yaml.safe_dump(stage))
    job.start()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sensors", "wait", str(path), "--json", "--timeout", "90s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    lines: list[dict] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        _until(lambda: any(v["verdict"] == "running" for v in lines), 30)
        sshd_private.stop()
        _until(lambda: any(v["verdict"] == "unknown" for v in lines), 30)
        time.sleep(1.5)
        down = [v for v in lines if v["verdict"] == "unknown"]
        sshd_private.start()
        assert proc.wait(90) == 0, proc.stderr.read() if proc.stderr else ""
        reader.join(5)
    finally:
        proc.kill()
        job.stop()
    assert lines[-1]["verdict"] == "complete" and lines[-1]["advance"] is True
    for v in down:
        assert v["advance"] is False
        assert all(s["says"] == "unknown" for s in v["signals"].values())
        assert "host_error" in v["signals"]["process"]["evidence"]
    first_unknown = next(i for i, v in enumerate(lines) if v["verdict"] == "unknown")
    assert all(v["verdict"] != "complete" for v in lines[:first_unknown])


def _until(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


PAYLOADS = [*SSH_PAYLOADS, "| touch {m}", "&& touch {m}"]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_injection_in_every_string_field_leaves_nothing_behind(tmp_path, ssh_spec, payload) -> None:
    marker = tmp_path / "pwned"
    p = payload.format(m=marker)
    stage = {
        "stage": "inject",
        "host": ssh_spec,
        "process": {"match": p},
        "log": {"path": f"/tmp/x{p}", "complete": p, "error": p, "progress": p},
        "outputs": {
            "files": f"/tmp/d{p}",
            "pattern": p.replace("/", "_"),
            "exclude": [p.replace("/", "_")],
            "expected": 3,
        },
        "gpu": {"devices": [p]},
    }
    lines_stage = {"stage": "inject2", "host": ssh_spec, "outputs": {"lines": f"/tmp/l{p}", "expected": 1}}
    with SSHHost(SSHSpec(**ssh_spec)) as host:
        for data in (stage, lines_stage):
            try:
                checked = stage_from_dict(data)
            except ConfigError as exc:
                # Newlines in paths and patterns are refused before anything runs.
                assert "newline" in str(exc) or "pattern" in str(exc)
                continue
            assert not Checker(checked, host=host).check().advance
    assert not marker.exists()
    assert not Path(str(marker).replace("/", "_")).exists()


def test_status_over_ssh_json(tmp_path, ssh_spec) -> None:
    job = SimulatedJob(tmp_path, scenario="stall", total=6, step=0.01)
    stage = job.stage_dict()
    stage["host"] = ssh_spec
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(stage))
    job.start()
    try:
        time.sleep(0.5)
        out = subprocess.run([sys.executable, "-m", "sensors", "status", str(path), "--json"],
                             capture_output=True, text=True, timeout=120, cwd=REPO)  # fmt: skip
        assert out.returncode == 1, out.stderr
        data = json.loads(out.stdout)
        assert data["host"] == "127.0.0.1"
        assert data["signals"]["process"]["says"] == "working"
        assert data["signals"]["process"]["evidence"]["pid"] == job.pid
        assert data["signals"]["outputs"]["evidence"]["count"] == 3
    finally:
        job.stop()


def test_wrong_host_key_is_exit_2_with_the_fingerprint(tmp_path, sshd_server) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    stage = {
        "stage": "k",
        "host": sshd_server.spec(known_hosts=str(known)),
        "log": {"path": "/tmp/x", "complete": "x"},
    }
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump(stage))
    out = subprocess.run([sys.executable, "-m", "sensors", "status", str(path)],
                         capture_output=True, text=True, timeout=60, cwd=REPO)  # fmt: skip
    assert out.returncode == 2
    assert "host key" in out.stderr and "SHA256:" in out.stderr and "ssh-keyscan" in out.stderr
    assert known.read_text() == ""


def test_a_login_shell_that_is_not_sh(tmp_path, sshd_server) -> None:
    from tests.sshd import ensure_tcsh_user

    try:
        user = ensure_tcsh_user(sshd_server)
    except Exception as exc:  # pragma: no cover - needs root and tcsh
        pytest.skip(f"cannot create a tcsh user: {exc}")
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="crosscheck-tcsh-"))  # pytest's tmp is root-only
    shared.chmod(0o755)
    log = shared / "t.log"
    log.write_text("step 1\nExtraction complete\n")
    log.chmod(0o644)
    stage = {
        "stage": "t",
        "host": sshd_server.spec(user=user),
        "log": {"path": str(log), "complete": "^Extraction complete"},
    }
    with SSHHost(SSHSpec(**stage["host"])) as host:
        reading = Checker(stage_from_dict(stage), host=host, since="1h").check().readings["log"]
    assert reading.says is Says.DONE, reading.detail


def test_wait_on_several_stages_ends_at_the_first_error(tmp_path, sshd_server) -> None:
    """A stage listed second whose host key does not verify ends `crosscheck wait` at once
    (exit 2), not after the first stage's long wait (its timeout is 10 minutes here)."""
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01)
    job.start()
    try:
        first = job.write_stage(tmp_path / "first.yaml", stall_after="1h", timeout="10m")
        empty = tmp_path / "known_hosts"
        empty.write_text("")
        second = tmp_path / "second.yaml"
        second.write_text(
            yaml.safe_dump(
                {
                    "stage": "remote",
                    "host": sshd_server.spec(known_hosts=str(empty)),
                    "log": {"path": "/tmp/x", "complete": "x"},
                }
            )
        )
        out = subprocess.run(
            [sys.executable, "-m", "sensors", "wait", str(first), str(second)],
            capture_output=True, text=True, timeout=60, cwd=REPO,
        )  # fmt: skip
        assert out.returncode == 2, out.stdout + out.stderr
        assert "host key" in out.stderr
    finally:
        job.stop()


def test_a_host_with_hundreds_of_stages_is_read_in_one_probe(tmp_path, host) -> None:
    """One probe for 150 stages is a script of more than 128 KiB — more than one argument
    may be on Linux (MAX_ARG_STRLEN): it reaches the shell as input, and every stage is read."""
    from sensors import Checker, Says, stage_from_dict
    from sensors._check.batch import check_batch

    checkers = []
    for k in range(150):
        work = tmp_path / f"stage-{k:03d}" / ("x" * 150) / ("x" * 150)  # long paths: a script past 128 KiB
        (work / "out").mkdir(parents=True)
        (work / "job.log").write_text(f"[{k}/150] working\n")
        stage = stage_from_dict({
            "stage": f"many-{k:03d}", "host": "local",
            "process": {"match": f"no-such-job-{k:03d}-{'y' * 40}[.]py"},
            "log": {"path": str(work / "job.log"), "complete": "^done$", "progress": r"\[(?P<done>\d+)/"},
            "outputs": {"files": str(work / "out"), "pattern": "*.pt", "expected": 3},
        })  # fmt: skip
        checkers.append(Checker(stage, host=host))
    scripts: list[int] = []
    run_script = host.run_script

    def measured(script: bytes, *, timeout: float) -> bytes:
        scripts.append(len(script))
        return run_script(script, timeout=timeout)

    host.run_script = measured  # type: ignore[method-assign]
    try:
        for _ in range(2):  # the second with each log's remembered stat
            verdicts = check_batch(checkers)
    finally:
        del host.run_script
    assert len(scripts) == 2 and scripts[0] > 128 * 1024, scripts
    for k, verdict in enumerate(verdicts):
        log = verdict.readings["log"]
        assert log.says is Says.WORKING, (k, log.detail)
        assert log.evidence["progress"]["done"] == k
        assert verdict.readings["outputs"].evidence["count"] == 0
