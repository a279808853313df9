"""An ML engineer's trial of the real CLI on short real jobs (session user35, brief s14).

Each job is a real ``python job.py --out DIR ...`` process, its stdout and stderr redirected to
its log as ``nohup python job.py > job.log 2>&1 &`` does (``>>`` for a re-run): tqdm-like
progress on stderr, one ``part-*.npy`` file per sample, ``Extraction complete``, then a
post-processing line from ``logging`` and a second of work, exit 0. The real CLI
(``python -m sensors wait|serve ... --json``) gates it, with a state store of the test's own.

Each test here is a defect found in that trial: the gate never opens on a run that did finish,
or it tells the user to do what they already did; each failed when found. Run alone (real time; slow under load):
``PYTHONPATH=$PWD python -m pytest -v -p no:cacheprovider tests/test_user_s14.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.wait_cli import WaitCli

REPO = Path(__file__).resolve().parent.parent

JOB = r"""
import argparse, logging, os, sys, time
p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--num-samples", type=int, default=10)
p.add_argument("--step", type=float, default=0.3)
p.add_argument("--post", type=float, default=1.0)
a = p.parse_args()
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
os.makedirs(a.out, exist_ok=True)
for i in range(a.num_samples):
    time.sleep(a.step)
    with open(os.path.join(a.out, f"part-{i:05d}.npy"), "wb") as f:
        f.write(b"x" * 100)
    print(f"extract: {i + 1}/{a.num_samples} [{(i + 1) * a.step:.1f}s]", file=sys.stderr, flush=True)
print("Extraction complete", flush=True)
logging.info("post-processing: writing index")
time.sleep(a.post)
"""


def _stage(folder: Path, name: str) -> Path:
    """The stage file a user writes from the README's example: interval 1s."""
    out = folder / "out"
    doc: dict[str, Any] = {
        "stage": name,
        "host": "local",
        "process": {"match": f"job\\.py --out {out}"},
        "log": {
            "path": str(folder / "job.log"),
            "complete": "^Extraction complete",
            "error": r"^Traceback \(most recent call last\)|^[A-Za-z_][\w.]*(Error|Exception): ",
        },
        "outputs": {"files": str(out), "pattern": "part-*.npy", "expected": 10},
        "policy": {"interval": "1s"},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _start_job(folder: Path, mode: str = "w", **args: float) -> subprocess.Popen[bytes]:
    """``nohup python job.py --out DIR ... > job.log 2>&1 &`` (mode "a": ``>>``)."""
    script = folder / "job.py"
    script.write_text(JOB)
    argv = [sys.executable, str(script), "--out", str(folder / "out")]
    for key, value in args.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    with open(folder / "job.log", mode + "b") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def test_a_wait_given_the_runs_start_follows_a_watch_whose_since_is_later(tmp_path: Path) -> None:
    """Two gates on one stage. ``date +%s.%N`` is kept before the job starts (T1); a first gate
    is started 1.5 s into the job with a later ``--since`` (a slip: the job began before it);
    then the right gate, ``--since @T1``, is started while the job still runs.

    Alone, that right gate says ``complete`` about 1.3 s after the job's exit (run in this
    trial: c4mid). Beside the other, it follows the other's verdicts ("watched elsewhere by
    ...": its since is later than T1, so its run is taken for this one) although that watch's
    own evidence says the job began before its run ("pid N started before this run began"),
    and it stays ``unknown`` until its timeout: the gate of a finished run never opens."""
    state = str(tmp_path / "state.db")
    stage = _stage(tmp_path, "s14follow")
    t1 = time.time()
    job = _start_job(tmp_path, num_samples=10, step=0.4, post=1.0)
    time.sleep(1.5)
    slip = WaitCli(stage, "--state", state, "--timeout", "40s", "--since", f"@{time.time():.6f}")
    try:
        # the slipped gate holds the stage (its first check saved) before the right one starts
        first = slip.until(lambda v: True, timeout=30)
        assert "started before this run began" in " ".join(first["reasons"]), slip.story()
        right = WaitCli(stage, "--state", state, "--timeout", "40s", "--since", f"@{t1:.6f}")
        try:
            assert job.wait(60) == 0
            exited = time.monotonic()
            rc = right.end(60)
        finally:
            if right.proc.poll() is None:
                right.proc.kill()
    finally:
        slip.proc.kill()
        slip.end(10)
    story = right.story()
    assert rc == 0 and right.verdicts[-1]["verdict"] == "complete", story
    opened = right.times[-1] - exited
    assert opened < 10, (opened, story)


def _serve(folder: Path, state: str) -> tuple[subprocess.Popen[str], list[tuple[float, dict[str, Any]]]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "sensors", "serve", str(folder), "--json", "--rescan", "1s", "--state", state],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    lines: list[tuple[float, dict[str, Any]]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                lines.append((time.monotonic(), json.loads(line)))

    threading.Thread(target=read, daemon=True).start()
    return proc, lines


def _until(
    lines: list[tuple[float, dict[str, Any]]], test: Any, timeout: float
) -> tuple[float, dict[str, Any]]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for at, verdict in list(lines):
            if test(at, verdict):
                return at, verdict
        time.sleep(0.05)
    raise AssertionError([(v["verdict"], v["reasons"][:1]) for _, v in lines[-5:]])


@pytest.fixture(scope="module")
def quick_rerun_under_serve(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``crosscheck serve`` on a folder with one stage (interval 1s). Run 1 completes and serve
    says so; the same job is run again at once (``>>`` into the same log, the same outputs),
    about 4 s long: it begins and ends before serve's next look at the finished stage (ten
    times less often: 10 s). What serve says in the 20 s after run 2's exit."""
    folder = tmp_path_factory.mktemp("s14serve")
    stages = folder / "stages"
    stages.mkdir()
    work = folder / "job"
    work.mkdir()
    stage = _stage(work, "s14serve")
    stage.rename(stages / stage.name)
    proc, lines = _serve(stages, str(folder / "state.db"))
    try:
        _until(lines, lambda at, v: True, 60)  # serve is up and has checked the stage once
        run1 = _start_job(work, num_samples=10, step=0.3, post=1.0)
        assert run1.wait(60) == 0
        complete1, _ = _until(lines, lambda at, v: v["verdict"] == "complete", 30)
        began = time.monotonic()
        run2 = _start_job(work, mode="a", num_samples=10, step=0.3, post=1.0)
        assert run2.wait(60) == 0
        exited = time.monotonic()
        time.sleep(20)
        after = [(at - exited, v) for at, v in lines if at > exited]
        return {"run2_seconds": exited - complete1, "run2_life": exited - began, "after": after}
    finally:
        proc.terminate()
        proc.wait(30)


def test_serve_opens_on_a_quick_rerun_of_a_finished_stage(quick_rerun_under_serve: dict[str, Any]) -> None:
    after = quick_rerun_under_serve["after"]
    seen = [(round(t, 1), v["verdict"], v["reasons"][0][:160]) for t, v in after]
    # Run 2 began and ended within the ten looks at the stage's interval that follow a finish
    # (then ten times less often: it came and went between two looks, never seen alive, and its
    # post-processing line after 'Extraction complete' left it unknown for good).
    assert quick_rerun_under_serve["run2_seconds"] < 9, seen
    assert any(v["verdict"] == "complete" for _, v in after), seen[-3:]


def test_serve_gives_no_advice_the_stage_already_follows(quick_rerun_under_serve: dict[str, Any]) -> None:
    after = quick_rerun_under_serve["after"]
    assert after, "serve printed nothing after run 2"
    assert quick_rerun_under_serve["run2_life"] > 2.0  # the stage's policy.interval (1s) is far shorter
    # The advice named only the interval, already short: what spaced the checks was serve's
    # tenfold slower look at a finished stage, which it now names.
    said = {r for _, v in after for r in v["reasons"]}
    bare = [
        r for r in said if "a policy.interval shorter than its life" in r and "ten times less often" not in r
    ]
    assert not bare, sorted(said)
