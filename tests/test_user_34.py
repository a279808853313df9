"""An ML engineer's look at issue 34 (the reworked probe: escaped job text, trust on disk,
process.user): do real jobs that finish still complete, and soon?

Real jobs (Python with ``logging``, odd but ordinary log and argv text), real launches, real
CLI runs; locally and over the test sshd. The failing tests here are regressions found by
running crosscheck as a user would:

- a launched job never completes for a user whose umask is 002 (RHEL/Fedora's default for a
  user with a group of their own, and pam_umask's ``usergroups``): the launch wrapper writes
  its exit record 0664 and the probe then refuses crosscheck's own record;
- ``crosscheck status`` exits 2 on a fresh HOME under umask 002: the default state store's
  directories are made 0775 by crosscheck itself, which then refuses them;
- on a BusyBox host, a log with a NUL byte followed by ``@`` or ``\\`` is ``unknown`` for ever
  and says "the log changed while it was read" (it did not): BusyBox's sed starts a line after
  a NUL, so the escaping adds bytes the parser does not take off.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

import sensors
from sensors import Checker, LocalHost, State, stage_from_dict
from sensors._run.run import Run, launch_mark_script, parse_launch_mark

PYTHON = sys.executable
ROOT = str(Path(sensors.__file__).resolve().parent.parent)

# Odd but ordinary text a training job prints: decorators, mentions, Windows paths, head's
# and tail's banners, look-alike section headers, non-UTF-8 bytes, a long line, tqdm's \r.
_ODD_LOG = (
    b"@@ epoch 0 starting\n"
    b"@property\n@dataclass(frozen=True)\n"
    b"thanks @alice for the data\n"
    b"loading C:\\data\\x\\shard_0.bin\n\\\\server\\share\\ckpt\n"
    b"==> /data/other.log <==\n"
    b"@@crosscheck 000000000000000000000000 end\n"
    b"bytes: \xff\xfe latin1: caf\xe9\n"
    b"long: " + b"x" * 100_000 + b"\n"
    b"\r 10%|#         | 1/10\r 50%|#####     | 5/10\r100%|##########| 10/10\n"
)
_COMPLETE_LINE = "@@ Extraction complete C:\\out\\final \\o/"

_JOB = textwrap.dedent(
    """
    import logging, os, sys, time
    out, log, odd, exitf = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    logging.basicConfig(filename=log, level=logging.INFO, format="%(message)s")
    os.makedirs(out, exist_ok=True)
    with open(log, "ab") as f:
        f.write(open(odd, "rb").read())
    for i in range(10):
        time.sleep(0.15)
        with open(f"{out}/part_{i:03d}.npy", "wb") as f:
            f.write(b"\\x93NUMPY" + os.urandom(64))
        logging.info("@@ wrote part %d/10 to C:\\\\out", i + 1)
    logging.info(sys.argv[5])
    logging.shutdown()
    with open(exitf + ".tmp", "w") as f:
        f.write(repr(time.time()))
    os.rename(exitf + ".tmp", exitf)
    """
)


def _watch(checker: Checker, exited: Callable[[], bool], limit: float = 60) -> tuple[list, int]:
    """Check until complete or failed; the verdicts, and how many checks came after the exit."""
    seen, after = [], 0
    end = time.monotonic() + limit
    while time.monotonic() < end:
        gone = exited()
        verdict = checker.check()
        seen.append(verdict)
        after += gone
        if verdict.state in (State.COMPLETE, State.FAILED) or after > 12:
            break
        time.sleep(0.3)
    return seen, after


def _ended(pid: int) -> bool:
    """The process is gone or a zombie (its end, not the file it writes just before it: under
    load the interpreter's teardown after that file took a check, counted as one after the
    exit: 4 checks where 3 were asked for)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def _story(seen: list) -> list:
    return [(v.state.value, [r[:160] for r in v.reasons[:2]]) for v in seen[-4:]]


def _python_job(tmp_path: Path, extra_argv: list[str]) -> tuple[dict, int, Path]:
    job_py = tmp_path / "job.py"
    job_py.write_text(_JOB)
    odd = tmp_path / "odd.bin"
    odd.write_bytes(_ODD_LOG)
    out, log, exitf = tmp_path / "out", tmp_path / "run.log", tmp_path / "exited"
    marker = f"job-{uuid.uuid4().hex[:8]}"
    argv = [
        PYTHON,
        str(job_py),
        str(out),
        str(log),
        str(odd),
        str(exitf),
        _COMPLETE_LINE,
        marker,
        *extra_argv,
    ]
    stage = {
        "stage": "user34",
        "host": "local",
        "process": {"match": f"{marker}"},
        "log": {"path": str(log), "complete": "^@@ Extraction complete", "error": "Traceback"},
        "outputs": {"files": str(out), "pattern": "*.npy", "expected": 10},
        "policy": {"interval": "300ms"},
    }
    # nohup ... > log 2>&1 &, as a person starts it: the job is no child of this test.
    wrapper = subprocess.run(
        ["sh", "-c", 'nohup "$@" >/dev/null 2>&1 & echo $!', "sh", *argv],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(wrapper.stdout.split()[0])
    return stage, pid, exitf


# ----------------------------------------------------------------- regressions that pass


@pytest.mark.parametrize("user", [None, "self"])
def test_a_python_job_with_odd_text_completes_within_three_checks_of_its_exit(
    host, tmp_path, user, request: pytest.FixtureRequest
) -> None:
    """A job started with nohup, its log full of @-lines, backslashes, head's banners,
    non-UTF-8, a 100 KB line and tqdm's \\r, its argv with a newline and @: complete within
    three checks of its exit, locally and over SSH, with process.user as the job's own."""
    argv = ["--tag", "@exp-7", "first\nsecond", "C:\\data\\x", "==> file <=="]
    # A short folder: the evidence keeps a command line's first 512 bytes, and under pytest's
    # workers tmp_path alone is a hundred (the argv's odd tail must fit to be looked at).
    short = Path(tempfile.mkdtemp(prefix="u34-"))
    request.addfinalizer(lambda: shutil.rmtree(short, ignore_errors=True))
    stage, pid, exitf = _python_job(short, argv)
    stage["process"]["match"] += r" --tag @exp-7 first\nsecond C:\\data"
    if user:
        stage["process"]["user"] = os.getuid()
    checker = Checker(stage_from_dict(stage), host=host)
    try:
        seen, after = _watch(checker, lambda: exitf.exists() and _ended(pid))
    finally:
        checker.close()
    last = seen[-1]
    assert last.state is State.COMPLETE, _story(seen)
    assert after <= 3, (after, _story(seen))
    alive = [v for v in seen if v.readings["process"].evidence.get("processes")]
    assert alive, "the job was seen at work"
    cmdline = alive[0].readings["process"].evidence["processes"][0]["cmdline"]
    assert "--tag @exp-7 first\nsecond C:\\data\\x ==> file <==" in cmdline, cmdline
    log = last.readings["log"].evidence
    assert log["complete_line"] == _COMPLETE_LINE  # no stray backslash, none taken off
    assert log["last_line"] == _COMPLETE_LINE


@pytest.mark.parametrize(
    "last",
    [
        b"@@ epoch 3 done",
        b"\\\\server\\share\\x",
        b"C:\\data\\x",
        b"==> /x/y.log <==",
        b"@@crosscheck 0123456789abcdef01234567 end",
    ],
)
def test_the_last_line_is_shown_as_the_job_wrote_it(host, tmp_path, last) -> None:
    log = tmp_path / "run.log"
    log.write_bytes(b"start\n\\first\n" + last + b"\n")
    stage = stage_from_dict(
        {"stage": "u34", "host": "local", "log": {"path": str(log), "complete": "^DONE$"}}
    )
    with Checker(stage, host=host) as checker:
        reading = checker.check().readings["log"]
    assert reading.evidence["last_line"] == last.decode(), reading.evidence
    assert reading.evidence["size"] == log.stat().st_size


def test_a_launched_job_completes_on_its_exit_record_with_a_private_state_home(tmp_path, monkeypatch) -> None:
    """launch_stage's path (mark, launch under the wrapper, checks given the run), umask 022,
    XDG_STATE_HOME a private 0755 directory: the exit record is trusted, two checks after it."""
    state_home = tmp_path / "state"
    state_home.mkdir(mode=0o755)
    monkeypatch.setenv("XDG_STATE_HOME", str(state_home))
    old = os.umask(0o022)
    try:
        seen, after, _ = _launch_and_watch(tmp_path)
    finally:
        os.umask(old)
    assert seen[-1].state is State.COMPLETE, _story(seen)
    assert seen[-1].readings["process"].evidence.get("exit_status") == 0
    assert after <= 3, (after, _story(seen))


# ----------------------------------------------------------------- regressions that fail


def _launch_and_watch(tmp_path: Path) -> tuple[list, int, Checker]:
    log = tmp_path / "launched.log"
    marker = f"launched-{uuid.uuid4().hex[:8]}"
    stage = stage_from_dict(
        {
            "stage": "u34-launch",
            "host": "local",
            "process": {"match": marker},
            "log": {"path": str(log), "complete": "^DONE$"},
            "launch": {"command": ["sh", "-c", "echo start; sleep 1; echo DONE", marker], "log": str(log)},
            "policy": {"interval": "300ms"},
        }
    )
    host = LocalHost()
    mark = parse_launch_mark(host.run_script(launch_mark_script(str(log)), timeout=30))
    pid, exit_file = host.launch(list(stage.launch.command), log_path=str(log), name=marker)
    run = Run(
        source="launch",
        started_at=mark.started_at,
        log_inode=mark.log_inode,
        log_offset=mark.log_offset,
        log_fingerprint=mark.log_fingerprint,
        pid=pid,
        exit_file=exit_file,
    )
    checker = Checker(stage, host=host, run=run)
    seen, after = _watch(checker, lambda: os.path.exists(exit_file), limit=30)
    checker.close()
    return seen, after, checker


def test_a_launched_job_completes_for_a_user_whose_umask_is_002(tmp_path, monkeypatch) -> None:
    """umask 002 is the default for a user with a group of their own on RHEL/Fedora (and
    pam_umask's usergroups): the wrapper's exit record comes out 0664 in crosscheck's own
    0700 directory, and the probe refused it ("writable by group ... another user controls
    can forge a job's exit"): a launched job that exited 0 stayed unknown for ever. Before
    issue 34 it completed two checks after its exit."""
    state_home = tmp_path / "state"
    state_home.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_STATE_HOME", str(state_home))
    old = os.umask(0o002)
    try:
        seen, after, _ = _launch_and_watch(tmp_path)
    finally:
        os.umask(old)
    process = seen[-1].readings["process"].evidence
    assert seen[-1].state is State.COMPLETE, (process.get("exit_record_untrusted"), _story(seen))
    assert process.get("exit_status") == 0
    assert after <= 3, (after, _story(seen))


_SINCE = ("--since", "1h", "--json")


def test_status_on_a_fresh_home_with_umask_002_uses_the_store_it_makes(tmp_path) -> None:
    """``crosscheck status`` with no --state on a fresh HOME under umask 002: crosscheck makes
    ~/.local and ~/.local/state 0775 itself, then refused them as the state store's directory
    (exit 2, "refusing it as the state store"). Before issue 34: exit 0, complete."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    log = tmp_path / "done.log"
    log.write_text("working\nDONE\n")
    stage = tmp_path / "stage.yaml"
    stage.write_text(yaml.safe_dump({"stage": "u34-store", "log": {"path": str(log), "complete": "^DONE$"}}))
    env = {k: v for k, v in os.environ.items() if k not in ("CROSSCHECK_STATE", "XDG_STATE_HOME")}
    env.update(HOME=str(home), PYTHONPATH=ROOT)
    done = subprocess.run(
        ["sh", "-c", 'umask 002 && exec "$@"', "sh", PYTHON, "-m", "sensors", "status", str(stage), *_SINCE],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, (done.returncode, done.stderr.strip()[-600:])
    assert json.loads(done.stdout)["verdict"] == "complete"


def test_a_log_with_a_nul_before_an_at_completes_under_busybox(tmp_path) -> None:
    """A log with ``\\0@`` or ``\\0\\\\`` in its tail (binary junk printed by a job, a log
    truncated under its writer and padded with NULs): BusyBox's sed escapes after a NUL too,
    so the tail came back longer than the file and the log was "changed while it was read"
    at every check (untrue: it had not changed). GNU's tools complete it; so did BusyBox's
    before issue 34."""
    from tests.test_true_readings import _applets, _BusyBoxHost

    busybox = _BusyBoxHost(_applets(tmp_path / "bb"))
    log = tmp_path / "run.log"
    log.write_bytes(b"start\nbinary:\x00@x\x00\\y\nDONE\n")
    stage = stage_from_dict(
        {"stage": "u34-bb", "host": "local", "log": {"path": str(log), "complete": "^DONE$"}}
    )
    readings = {}
    for name, host in (("gnu", None), ("busybox", busybox)):
        with Checker(stage, host=host, since=time.time() - 3600) as checker:
            readings[name] = checker.check().readings["log"]
    assert readings["gnu"].evidence.get("complete_line") == "DONE", readings["gnu"].detail
    assert "changed while it was read" not in readings["busybox"].detail, readings["busybox"].detail
    assert readings["busybox"].evidence.get("complete_line") == "DONE", readings["busybox"].detail


def test_busybox_shows_the_log_bytes_as_written(tmp_path) -> None:
    """The same bytes read by BusyBox's tools and by GNU's give the same reading."""
    from tests.test_true_readings import _applets, _BusyBoxHost

    busybox = _BusyBoxHost(_applets(tmp_path / "bb"))
    log = tmp_path / "run.log"
    log.write_bytes(b"start\n" + _ODD_LOG + b"DONE\n")
    stage = stage_from_dict(
        {"stage": "u34-bb2", "host": "local", "log": {"path": str(log), "complete": "^DONE$"}}
    )
    says = {}
    for name, host in (("gnu", None), ("busybox", busybox)):
        with Checker(stage, host=host, since=time.time() - 3600) as checker:
            r = checker.check().readings["log"]
            says[name] = (r.says, r.evidence.get("last_line"), r.evidence.get("complete_line"))
    assert says["gnu"] == says["busybox"], says
