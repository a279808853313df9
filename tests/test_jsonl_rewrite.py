"""A re-run that rewrites its JSONL outputs is a new run's outputs being written: never
``failed`` on a count the rewrite is still growing, never a record counted twice (issue 35,
"a false `failed` that stops a pipeline").

The bug: a watch that knew the earlier run (the state store's memory, restored by a second
``crosscheck wait``) found the re-run's process, set the last run's memory aside in the middle
of the check, and read the file's answer, counted on from the earlier run's end, against the
fresh memory: 0 records before that end, and the same end every check after (the re-run wrote
the same bytes) — ``failed: outputs short: 0/6`` for good, with 6/6 on disk.

Real jobs, the real CLI (``crosscheck wait STAGE --json``), locally and over the test sshd.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from sensors import Says, State
from sensors._base.model import Reading
from sensors._config.stage import PolicySpec
from sensors._verdict import VerdictMemory, decide

CLI = [sys.executable, "-m", "sensors"]
INTERVAL = 0.5

# The job: OUT LOG DIR MODE DELAY --tag TAG. Waits for DIR/go1, rewrites OUT (MODE: truncate,
# in place with the same bytes, or a temp file renamed over it; DELAY seconds before each
# record), says DIR/ready, waits for DIR/go2, writes its completion line and exits.
JOB = """
import json, os, sys, time
out, log, d, mode, delay = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
records = [json.dumps({"i": i, "text": "x" * 20}) + "\\n" for i in range(6)]
def until(name):
    while not os.path.exists(os.path.join(d, name)):
        time.sleep(0.01)
with open(log, "a") as f:
    f.write("starting\\n")
until("go1")
if mode == "rename":
    with open(out + ".tmp", "w") as f:
        for r in records:
            time.sleep(delay); f.write(r); f.flush()
    os.replace(out + ".tmp", out)
else:
    with open(out, "w" if mode == "truncate" else "r+") as f:
        f.flush()
        for r in records:
            time.sleep(delay); f.write(r); f.flush()
open(os.path.join(d, "ready"), "w").close()
until("go2")
with open(log, "a") as f:
    f.write("Extraction complete: 6 records\\n")
"""


class Run:
    """One run of the job: its process, and when it exited (a thread waits on it)."""

    def __init__(self, tmp: Path, name: str, tag: str, mode: str, delay: float) -> None:
        self.dir = tmp / name
        self.dir.mkdir()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", JOB, str(tmp / "out.jsonl"), str(tmp / "log"), str(self.dir), mode,
             str(delay), "--tag", tag]
        )  # fmt: skip
        self.started_at = time.monotonic()
        self.exited_at: float | None = None
        self.exited_wall: float | None = None  # the same moment on the wall clock (the probe's)
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self) -> None:
        self.proc.wait()
        self.exited_at, self.exited_wall = time.monotonic(), time.time()

    def go(self, step: str) -> None:
        (self.dir / step).touch()

    def ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not (self.dir / "ready").exists():
            assert time.monotonic() < deadline, "the job did not rewrite its outputs"
            time.sleep(0.01)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Wait:
    """``crosscheck wait STAGE --json``: its lines as they come, each with when it came."""

    def __init__(self, stage: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        self.proc = subprocess.Popen(
            [*CLI, "wait", str(stage), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[tuple[float, dict]] = []

    def next(self) -> dict | None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            return None
        obj = json.loads(line)
        self.lines.append((time.monotonic(), obj))
        return obj

    def until_alive(self) -> None:
        """Lines until one finds the job alive (the watch has seen the re-run)."""
        while (obj := self.next()) is not None:
            assert obj["verdict"] != "failed", obj["reasons"]
            if obj["signals"]["process"]["says"] == "working":
                return
        pytest.fail(
            f"the watch ended before it saw the job: {self.proc.stderr.read() if self.proc.stderr else ''}"
        )

    def finish(self, timeout: float = 30.0) -> int:
        while self.next() is not None:
            pass
        return self.proc.wait(timeout)


def _stage(tmp: Path, tag: str, host, request) -> Path:
    stage = {
        "stage": "jsonl-rerun",
        "host": "local" if host.name == "local" else request.getfixturevalue("ssh_spec"),
        "process": {"match": f"--tag {tag}( |$)"},
        "log": {"path": str(tmp / "log"), "complete": "^Extraction complete"},
        "outputs": {"lines": str(tmp / "out.jsonl"), "expected": 6},
        "policy": {"interval": f"{INTERVAL}s", "settle": 2, "exit_grace": "1s", "timeout": "40s"},
    }
    path = tmp / "stage.yaml"
    path.write_text(yaml.safe_dump(stage, sort_keys=False))
    return path


def _first_run(tmp: Path, tag: str, stage: Path) -> Run:
    """Run 1 writes its 6 records and its completion line, watched to ``complete`` (the state
    store keeps what the watch knew of it)."""
    run = Run(tmp, "run1", tag, "truncate", 0.0)
    try:
        wait = Wait(stage)
        wait.until_alive()
        run.go("go1")
        run.ready()
        run.go("go2")
        assert wait.finish() == 0, wait.lines[-1][1]["reasons"]
        assert wait.lines[-1][1]["verdict"] == "complete"
        assert wait.lines[-1][1]["signals"]["outputs"]["evidence"]["count"] == 6
    finally:
        run.stop()
    return run


@pytest.mark.parametrize(
    ("mode", "delay", "order"),
    [
        # Truncated and rewritten slowly (a record each 0.3 s), the watch begun after the rewrite.
        ("truncate", 0.3, "rewrite-then-watch"),
        # The watch sees the re-run first; it truncates to 0 and regrows within one interval.
        ("truncate", 0.0, "watch-then-rewrite"),
        # Rewritten in place with the same records (same inode, same size): counted once.
        ("inplace", 0.0, "watch-then-rewrite"),
        ("inplace", 0.3, "rewrite-then-watch"),
        # Written to a temp file and renamed over the old one (a new inode).
        ("rename", 0.3, "watch-then-rewrite"),
        ("rename", 0.0, "rewrite-then-watch"),
    ],
)
def test_a_rerun_that_rewrites_its_jsonl_outputs_completes_and_is_never_failed(
    tmp_path, host, request, mode, delay, order
) -> None:
    tag = f"jsonl-{uuid.uuid4().hex[:8]}"
    stage = _stage(tmp_path, tag, host, request)
    first = _first_run(tmp_path, tag, stage)
    # A process started within 2 s of the run the watch knew is that run (a start read from
    # /proc has slack): a re-run is one started later, a new run to the watch.
    time.sleep(max(0.0, first.started_at + 3.0 - time.monotonic()))
    rerun = Run(tmp_path, "run2", tag, mode, delay)  # the same command line
    wait = None
    try:
        if order == "rewrite-then-watch":
            rerun.go("go1")
            rerun.ready()
            wait = Wait(stage)
            wait.until_alive()
        else:
            wait = Wait(stage)
            wait.until_alive()
            rerun.go("go1")
            rerun.ready()
        for _ in range(2):  # the re-run seen at work with its outputs rewritten
            assert wait.next() is not None
        rerun.go("go2")
        rc = wait.finish()
    finally:
        rerun.stop()
        if wait is not None and wait.proc.poll() is None:
            wait.proc.kill()
    verdicts = [obj["verdict"] for _, obj in wait.lines]
    counts = [obj["signals"]["outputs"]["evidence"].get("count") for _, obj in wait.lines]
    assert "failed" not in verdicts, [obj["reasons"] for _, obj in wait.lines if obj["verdict"] == "failed"]
    assert all(c is None or c <= 6 for c in counts), counts  # no record counted twice
    assert rc == 0 and verdicts[-1] == "complete", (verdicts, counts, wait.lines[-1][1]["reasons"])
    assert counts[-1] == 6
    assert rerun.exited_at is not None
    # Checks that read the host after the exit (this machine's clock: local, or the test
    # sshd on 127.0.0.1): one whose probe ran before it and answered after is not one.
    assert rerun.exited_wall is not None
    after_exit = [
        at
        for at, obj in wait.lines
        if datetime.datetime.fromisoformat(obj["checked_at"]).timestamp() > rerun.exited_wall
    ]
    seconds = wait.lines[-1][0] - rerun.exited_at
    print(
        f"{mode}/{order} on {host.name}: complete {seconds:.2f} s after the re-run's exit, {len(after_exit)} checks"
    )
    assert len(after_exit) <= 3, (seconds, verdicts, counts)


# ----------------------------------------------------------------- the verdict: settled only


def _reading(signal: str, says: Says, **evidence) -> Reading:
    return Reading(signal, says, f"{signal} {says.value}", evidence, 1000.0, "local")


_GONE = _reading("process", Says.DONE, seen_alive=True)
_LOG = _reading("log", Says.WORKING)


@pytest.mark.parametrize(
    ("count", "previous", "rewritten", "state"),
    [
        (0, 6, False, State.UNKNOWN),  # truncated since the last check: a writer at work
        (2, 0, False, State.UNKNOWN),  # growing again
        (3, 3, True, State.UNKNOWN),  # rewritten in place since the last check
        (3, 3, False, State.FAILED),  # short and unchanged: settled
        (3, None, False, State.FAILED),  # short, nothing seen change
        (6, 6, False, State.CONTRADICTION),  # all there, the log has no completion line
    ],
)
def test_outputs_short_fail_a_gone_job_only_once_they_stopped_changing(
    count, previous, rewritten, state
) -> None:
    """Rule 10 past exit_grace: outputs short fail only when nothing rewrote or moved them
    since the last check (a check that read the process table before a re-run started and
    its file after the re-run truncated it is no settled count)."""
    evidence: dict = {"count": count, "expected": 6, "previous_count": previous}
    if rewritten:
        evidence["rewritten"] = True
    outputs = _reading("outputs", Says.DONE if count >= 6 and count == previous else Says.WORKING, **evidence)
    policy = PolicySpec(interval=1, exit_grace=1)
    # Gone since an earlier check that had seen it run (a count taken now is after its end).
    memory = VerdictMemory(gone_since=900.0, previous={"process": _GONE, "log": _LOG})
    verdict, _ = decide(
        "s", "local", {"process": _GONE, "log": _LOG, "outputs": outputs}, policy, memory, 1000.0
    )
    assert verdict.state is state, verdict.reasons
