"""Three `crosscheck serve` processes on one real PostgreSQL store split one directory of
stages: each checks its share, no stage is probed by two of them at once, and when one is
SIGKILLed the others take its stages over and then hold them all."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from sensors.testing import SimulatedJob

REPO = Path(__file__).resolve().parent.parent
STAGES = 12
LEASE = 3.0


def _probes(out: Path) -> list[tuple[float, str]]:
    """(checked_at, stage) of each check this watcher made itself (not a followed verdict)."""
    found = []
    # Whole lines only: the watcher is still writing, and its last line may be half there.
    for line in out.read_text().split("\n")[:-1]:
        if not line.startswith("{"):
            continue
        doc = json.loads(line)
        if not doc["reasons"][0].startswith("watched elsewhere"):
            found.append((datetime.fromisoformat(doc["checked_at"]).timestamp(), doc["stage"]))
    return found


def _followed(out: Path) -> int:
    return sum(1 for line in out.read_text().splitlines() if "watched elsewhere" in line)


def _probed_between(outs: list[Path], start: float, end: float) -> list[dict[str, set[int]]]:
    """Per watcher: stage → the watchers that probed it between start and end."""
    by_stage: dict[str, set[int]] = defaultdict(set)
    for n, out in enumerate(outs):
        for at, stage in _probes(out):
            if start <= at <= end:
                by_stage[stage].add(n)
    return [by_stage]


def _until(what: str, ok, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ok():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_three_serve_processes_split_the_stages_and_take_over_a_killed_ones(tmp_path, postgres_url) -> None:
    stages = tmp_path / "stages"
    stages.mkdir()
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01, tag="split-job")
    job.start()
    names = [f"split{i:02d}" for i in range(STAGES)]
    for name in names:
        job.write_stage(stages / f"{name}.yaml", name=name, interval="1s", stall_after="1h", timeout="10m")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    outs = [tmp_path / f"out{n}.jsonl" for n in range(3)]
    errs = [tmp_path / f"err{n}.log" for n in range(3)]
    procs = []
    try:
        for out, err in zip(outs, errs, strict=True):
            with open(out, "w") as fo, open(err, "w") as fe:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "sensors",
                            "serve",
                            str(stages),
                            "--json",
                            "--state",
                            postgres_url,
                            "--lease",
                            f"{LEASE}s",
                            "--rescan",
                            "1s",
                        ],
                        stdout=fo,
                        stderr=fe,
                        env=env,
                    )
                )

        # The split: every watcher probes some stages, in a window where nobody starts or stops.
        def settled() -> bool:
            now = time.time()
            (window,) = _probed_between(outs, now - 2.5, now)
            return (
                len(window) == STAGES
                and all(len(w) == 1 for w in window.values())
                and {n for w in window.values() for n in w} == {0, 1, 2}
            )

        _until("the three watchers to split the stages", settled, timeout=30)
        time.sleep(2.0)
        now = time.time()
        (window,) = _probed_between(outs, now - 3.0, now)
        assert set(window) == set(names)
        assert all(len(w) == 1 for w in window.values()), window  # one prober per stage
        shares = [sorted(s for s, w in window.items() if n in w) for n in range(3)]
        assert all(3 <= len(share) <= 5 for share in shares), shares  # ceil(12 / 3) = 4 each, near
        assert all(_followed(out) > 0 for out in outs)  # the stages of others: followed, said so
        # Never two watchers probing one stage at once, the start included.
        for stage in names:
            probes = sorted((at, n) for n, out in enumerate(outs) for at, s in _probes(out) if s == stage)
            for (a, na), (b, nb) in itertools.pairwise(probes):
                assert na == nb or b - a > 0.3, (stage, probes)

        # One watcher dies: its stages are probed by the others within the lease time.
        victim = 0
        orphaned = set(shares[victim])
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait(10)
        killed_at = time.time()

        def taken_over() -> bool:
            (after,) = _probed_between(outs[1:], killed_at, time.time())
            return orphaned <= set(after)

        _until("the survivors to take the killed watcher's stages over", taken_over, timeout=LEASE + 4)
        first = {
            stage: min(at for out in outs[1:] for at, s in _probes(out) if s == stage and at >= killed_at)
            for stage in orphaned
        }
        assert max(first.values()) - killed_at <= LEASE + 1.0, first
        time.sleep(2.5)
        now = time.time()
        (window,) = _probed_between(outs, now - 2.5, now)
        assert set(window) == set(names)  # the survivors hold them all
        assert all(len(w) == 1 and w <= {1, 2} for w in window.values()), window
        for proc in procs[1:]:
            proc.send_signal(signal.SIGTERM)
        assert [proc.wait(15) for proc in procs[1:]] == [0, 0]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        job.stop()
