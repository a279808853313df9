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
# Leases are written for --lease minus one cycle (a fifth of it here): 4 s keeps the 2.4 s a
# busy watcher had to renew its leases before another may take them.
LEASE = 4.0


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


def _start_watchers(
    tmp_path, stages, postgres_url, lease: float, env: dict[str, str]
) -> tuple[list, list[Path]]:
    outs = [tmp_path / f"out{n}.jsonl" for n in range(3)]
    procs = []
    for n, out in enumerate(outs):
        with open(out, "w") as fo, open(tmp_path / f"err{n}.log", "w") as fe:
            argv = [sys.executable, "-m", "sensors", "serve", str(stages), "--json", "--state", postgres_url,
                    "--lease", f"{lease:g}s", "--rescan", "1s"]  # fmt: skip
            procs.append(subprocess.Popen(argv, stdout=fo, stderr=fe, env=env))
    return procs, outs


def _end(procs: list) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()


def test_three_watchers_send_each_piece_of_news_once(tmp_path, postgres_url) -> None:
    """Every stage stalls: one Slack message per stage, sent by its holder — the followers
    ("watched elsewhere by ...") sent one too."""
    import yaml

    from tests.webhook_server import WebhookServer

    interval = 1.0
    stages = tmp_path / "stages"
    stages.mkdir()
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01, tag="news-job")
    job.start()
    names = [f"news{i:02d}" for i in range(6)]
    procs: list = []
    with WebhookServer() as hook:
        for name in names:
            data = job.stage_dict(name=name, interval=f"{interval:g}s", stall_after="3s", timeout="10m")
            data["notify"] = {"slack_webhook": "env:CROSSCHECK_TEST_HOOK", "on": ["stalled"]}
            (stages / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        env = {**os.environ, "PYTHONPATH": str(REPO), "CROSSCHECK_TEST_HOOK": hook.url}
        try:
            procs, outs = _start_watchers(tmp_path, stages, postgres_url, 6.0, env)

            def notified() -> dict[str, int]:
                counts: dict[str, int] = defaultdict(int)
                for request in hook.requests:
                    text = json.dumps(request.json())
                    for name in names:
                        if name in text:
                            counts[name] += 1
                return counts

            _until("every stage's stall to be notified", lambda: set(notified()) == set(names), timeout=60)
            _until(
                "followers to have followed the stall", lambda: all(_followed(out) > 0 for out in outs), 30
            )
            time.sleep(4 * interval)  # every watcher has seen the stall meanwhile
            assert notified() == dict.fromkeys(names, 1), notified()
            for out in outs:  # and each watcher did see it
                docs = [json.loads(line) for line in out.read_text().split("\n")[:-1] if line.startswith("{")]
                assert any(d["verdict"] == "stalled" for d in docs)
        finally:
            _end(procs)
            job.stop()


def test_a_frozen_watchers_stages_are_checked_by_the_others_within_the_lease(tmp_path, postgres_url) -> None:
    """One watcher is frozen (SIGSTOP: alive to this machine, as a watcher on another machine
    that hangs or is cut off looks to the others): its stages are checked by the others
    within --lease, whatever their interval (a stage's own rule, three intervals and at
    least 30 s, took 46 s at a 15 s interval)."""
    lease, interval = 6.0, 3.0
    stages = tmp_path / "stages"
    stages.mkdir()
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01, tag="frozen-job")
    job.start()
    names = [f"frozen{i:02d}" for i in range(9)]
    for name in names:
        job.write_stage(stages / f"{name}.yaml", name=name, interval=f"{interval:g}s", stall_after="1h")
    procs: list = []
    try:
        procs, outs = _start_watchers(
            tmp_path, stages, postgres_url, lease, {**os.environ, "PYTHONPATH": str(REPO)}
        )

        def split() -> bool:
            now = time.time()
            (window,) = _probed_between(outs, now - 2 * interval, now)
            return set(window) == set(names) and len({n for w in window.values() for n in w}) == 3

        _until("the three watchers to split the stages", split, timeout=60)
        now = time.time()
        (window,) = _probed_between(outs, now - 2 * interval, now)
        victim = max(range(3), key=lambda n: sum(n in w for w in window.values()))
        orphaned = {s for s, w in window.items() if victim in w}
        procs[victim].send_signal(signal.SIGSTOP)
        frozen_at = time.time()
        others = [out for n, out in enumerate(outs) if n != victim]

        def taken_over() -> bool:
            (after,) = _probed_between(others, frozen_at, time.time())
            return orphaned <= set(after)

        _until("the others to take the frozen watcher's stages over", taken_over, timeout=lease + 30)
        first = {
            stage: min(at for out in others for at, s in _probes(out) if s == stage and at >= frozen_at)
            for stage in orphaned
        }
        assert max(first.values()) - frozen_at <= lease + 1.5, (first, frozen_at)
    finally:
        _end(procs)
        job.stop()
