"""The scheduler behind `crosscheck wait a.yaml b.yaml ...`: every stage checked at its own
interval, however many (there was a cap of 32 threads: the 33rd stage was never checked), and a
slow host delays no stage on another host. Real processes and the real local probe."""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

from sensors import Checker, LocalHost, State, stage_from_dict
from sensors._watch.schedule import watch_all
from sensors.testing import SimulatedJob


class SlowHost(LocalHost):
    """The local host, answering each probe 1.5 s late (a host on a slow link)."""

    def __init__(self) -> None:
        super().__init__("slow-host")
        self._lock = threading.Lock()
        self.in_flight = self.most_at_once = 0

    def run_script(self, script: bytes, *, timeout: float) -> bytes:
        with self._lock:
            self.in_flight += 1
            self.most_at_once = max(self.most_at_once, self.in_flight)
        try:
            time.sleep(1.5)
            return super().run_script(script, timeout=timeout)
        finally:
            with self._lock:
                self.in_flight -= 1


def _stage(job: SimulatedJob, name: str, interval: str = "200ms") -> dict:
    return job.stage_dict(name=name, interval=interval, stall_after="1h", timeout="10m")


def test_forty_stages_are_all_checked_at_their_interval(tmp_path: Path) -> None:
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01)
    job.start()
    try:
        checkers = [Checker(stage_from_dict(_stage(job, f"s{i:02d}"))) for i in range(40)]
        checks: Counter[int] = Counter()
        results = watch_all(checkers, on_verdict=lambda i, v: checks.update([i]), timeout=3.0)
    finally:
        job.stop()
    assert len(checks) == 40  # every stage, the 33rd to the 40th too
    # Each in its turn: none checked fewer times than another but by one (a stage starved
    # behind the others got none). How many turns fit in 3 s is the machine's load: ~10 each
    # when idle, 2 each on a 2-core machine running 4 test workers.
    assert min(checks.values()) >= 2, checks
    assert max(checks.values()) - min(checks.values()) <= 1, checks
    assert all(r.timed_out and r.last is not None for r in results)
    assert {r.last.state for r in results} == {State.RUNNING}


def test_a_slow_host_delays_no_stage_on_another_host(tmp_path: Path) -> None:
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01)
    job.start()
    slow = SlowHost()
    try:
        checkers = [Checker(stage_from_dict(_stage(job, f"slow{i}")), host=slow) for i in range(8)]
        checkers += [Checker(stage_from_dict(_stage(job, f"fast{i}"))) for i in range(4)]
        seen: list[tuple[int, float]] = []
        started = time.monotonic()
        watch_all(
            checkers,
            on_verdict=lambda i, v: seen.append((i, time.monotonic() - started)),
            timeout=3.0,
            workers=8,
            per_host=2,
        )
    finally:
        job.stop()
    fast = Counter(i for i, _ in seen if i >= 8)
    # The slow host gets at most 2 probes at a time (1.5 s each; the stages due there at one
    # tick share one) and every stage there is checked; the local stages go on at their
    # 200 ms interval meanwhile.
    assert 1 <= slow.most_at_once <= 2
    assert {i for i, _ in seen if i < 8} == set(range(8))
    assert all(fast[i] >= 6 for i in range(8, 12)), fast


def test_a_stage_that_completes_stops_being_checked(tmp_path: Path) -> None:
    done = SimulatedJob(tmp_path, scenario="complete", total=4, step=0.05, tag="sched-done")
    stuck = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01, tag="sched-stuck")
    for job in (done, stuck):
        job.start()
    try:
        checkers = [
            Checker(stage_from_dict(done.stage_dict(interval="200ms", exit_grace="200ms"))),
            Checker(stage_from_dict(_stage(stuck, "stuck"))),
        ]
        checks: Counter[int] = Counter()
        results = watch_all(checkers, on_verdict=lambda i, v: checks.update([i]), timeout=6.0)
    finally:
        for job in (done, stuck):
            job.stop()
    assert results[0].last is not None and results[0].last.state is State.COMPLETE
    assert results[0].done and not results[0].timed_out
    assert results[1].timed_out and checks[1] > checks[0]


def test_cli_wait_checks_every_one_of_forty_stages(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01)
    job.start()
    try:
        files = [str(job.write_stage(tmp_path / f"s{i:02d}.yaml", name=f"s{i:02d}", interval="300ms",
                                     stall_after="1h")) for i in range(40)]  # fmt: skip
        out = subprocess.run(
            [sys.executable, "-m", "sensors", "wait", *files, "--json", "--timeout", "3s"],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
        )  # fmt: skip
    finally:
        job.stop()
    assert out.returncode == 4, out.stderr  # timed out: they all still run
    docs = [json.loads(line) for line in out.stdout.splitlines()]
    seen = Counter(d["stage"] for d in docs)
    assert len(seen) == 40 and min(seen.values()) >= 2, seen
    # All forty from the start, not the last eight only once the first 32 ended.
    first: dict[str, datetime] = {}
    for d in docs:
        first.setdefault(d["stage"], datetime.fromisoformat(d["checked_at"]))
    spread = (max(first.values()) - min(first.values())).total_seconds()
    assert spread < 1.5, spread


def test_many_stages_on_one_ssh_host_cost_one_round_trip_per_tick(tmp_path: Path, ssh_spec) -> None:
    from sensors._config.stage import SSHSpec
    from sensors._hosts.ssh import SSHHost

    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01)
    job.start()
    host = SSHHost(SSHSpec(**ssh_spec))
    probes = Counter()
    carried: list[int] = []
    real = host.run_script

    def counted(script: bytes, *, timeout: float) -> bytes:
        probes["round trips"] += 1
        probes["process tables"] += script.count(b"\nsec stat\n")
        # The stages this probe reads: each one's part begins with its section prefix.
        carried.append(len(set(re.findall(rb"\nP=(\S+)\n", script))))
        return real(script, timeout=timeout)

    host.run_script = counted  # type: ignore[method-assign]
    try:
        stages = [{**_stage(job, f"ssh{i}", interval="500ms"), "host": ssh_spec} for i in range(10)]
        checkers = [Checker(stage_from_dict(s), host=host) for s in stages]
        checks: Counter[int] = Counter()
        verdicts = []
        watch_all(checkers, on_verdict=lambda i, v: (checks.update([i]), verdicts.append(v)), timeout=4.0)
    finally:
        host.close()
        job.stop()
    total = sum(checks.values())
    # Every stage checked more than once (how many times is the machine's: a loaded one is
    # slower, and no count of ticks is asserted), each tick one probe for all ten stages,
    # the process table read once in each.
    assert len(checks) == 10 and min(checks.values()) >= 2, checks
    assert carried and set(carried) == {10}, carried
    # (a probe in flight at the timeout may not have reached its verdicts)
    assert 10 * (len(carried) - 1) <= total <= 10 * len(carried), (probes, total, checks)
    assert probes["process tables"] == probes["round trips"]
    assert {v.readings["process"].says.value for v in verdicts} == {"working"}
    assert {v.readings["process"].evidence["pid"] for v in verdicts} == {job.pid}


class NamedHost(LocalHost):
    """A local host under a name another host also has (one address, two SSH ports)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.probes = 0

    def run_script(self, script: bytes, *, timeout: float) -> bytes:
        self.probes += 1
        return super().run_script(script, timeout=timeout)


def test_two_hosts_of_one_name_are_probed_apart(tmp_path: Path) -> None:
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01)
    job.start()
    a, b = NamedHost("127.0.0.1"), NamedHost("127.0.0.1")
    try:
        checkers = [Checker(stage_from_dict(_stage(job, f"a{i}")), host=a) for i in range(3)]
        checkers += [Checker(stage_from_dict(_stage(job, f"b{i}")), host=b) for i in range(3)]
        checks: Counter[int] = Counter()
        watch_all(checkers, on_verdict=lambda i, v: checks.update([i]), timeout=1.0)
    finally:
        job.stop()
    # Each stage's probe ran on its own host object: stages are batched per host, not per name.
    assert len(checks) == 6
    assert a.probes >= 2 and b.probes >= 2, (a.probes, b.probes)


def test_phased_hosts_are_spread_over_the_interval_and_each_probed_once_a_tick(tmp_path: Path) -> None:
    """`crosscheck serve`'s scheduler: each host has a phase in the interval (a stable hash of
    its identity); its stages are due together there (one probe a tick), a stage added later
    joins its host's phase, and the due time the scheduler used is what the check ran for."""
    from sensors._watch.schedule import Scheduler

    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01)
    hosts = [NamedHost(f"host-{h}") for h in range(6)]
    probes: list[tuple[str, float, set[float | None]]] = []
    scheduler: Scheduler

    def batch(checkers: list[Checker]) -> list[None]:
        dues = {scheduler.due(f"{c.host.name}/{c.stage.stage}") for c in checkers}
        probes.append((checkers[0].host.name, time.monotonic(), dues))
        return [None] * len(checkers)  # nothing to say: due again an interval on

    scheduler = Scheduler(batch=batch, phased=True)
    for host in hosts:
        for i in range(3):
            stage = stage_from_dict(_stage(job, f"s{i}", interval="1s"))
            scheduler.add(f"{host.name}/s{i}", Checker(stage, host=host))
    keys = scheduler.keys()
    first = {key: scheduler.due(key) for key in keys}
    now = time.monotonic()
    for host in hosts:
        dues = {first[f"{host.name}/s{i}"] for i in range(3)}
        assert len(dues) == 1, dues  # a host's stages: due at one instant
        assert now - 1.0 < dues.pop() <= now + 1.0  # its next phase point
    assert len(set(first.values())) > 1  # hosts: spread, not all due at once
    # A stage added later joins its host's phase.
    late = stage_from_dict(_stage(job, "s9", interval="1s"))
    scheduler.add("host-0/s9", Checker(late, host=hosts[0]))
    assert scheduler.due("host-0/s9") == first["host-0/s0"]

    stop = threading.Event()
    timer = threading.Timer(3.6, stop.set)
    timer.start()
    scheduler.run(stop, on_verdict=lambda key, verdict, began: began + 1.0)
    timer.cancel()
    for host in hosts:
        mine = [(at, dues) for name, at, dues in probes if name == host.name]
        assert len(mine) >= 3, (host.name, mine)
        starts = [due for _, dues in mine for due in dues]
        assert len(starts) == len(mine)  # every probe: its stages were due at one instant
        for (at, dues), later in itertools.pairwise(mine):
            (due,) = dues
            assert 0 <= at - due < 0.5  # the check ran for the due the scheduler says
            assert abs(next(iter(later[1])) - due - 1.0) < 1e-6  # then every interval, no drift


def _unchecked(stage: dict, **policy: object):
    """A stage whose policy numbers skipped validation (a Stage built in Python with
    ``model_construct``): the scheduler's own guard is what is tested."""
    from sensors._config.stage import PolicySpec

    valid = stage_from_dict(stage)
    return valid.model_copy(
        update={"policy": PolicySpec.model_construct(**{**valid.policy.model_dump(), **policy})}
    )


def test_one_stage_with_a_nan_or_infinite_interval_stalls_no_other(tmp_path: Path) -> None:
    from sensors._watch.schedule import Scheduler

    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01)
    job.start()
    try:
        for bad in (float("nan"), float("inf"), -1.0):
            checkers = {
                "bad": Checker(_unchecked(_stage(job, "bad"), interval=bad)),
                **{f"ok{i}": Checker(stage_from_dict(_stage(job, f"ok{i}"))) for i in range(3)},
            }
            for phased in (False, True):
                scheduler = Scheduler(workers=4, phased=phased)
                checks: Counter[str] = Counter()
                for key, checker in checkers.items():
                    scheduler.add(key, checker)
                stop = threading.Event()

                def record(key: str, verdict, began: float, checks=checks, checkers=checkers) -> float:
                    checks[key] += 1
                    return began + checkers[key].stage.policy.interval  # NaN for the bad one

                timer = threading.Timer(2.5, stop.set)
                timer.start()
                scheduler.run(stop, on_verdict=record)  # no exception: the loop went on
                # Phased, a stage is first due at its host's phase point (within 200 ms).
                assert all(checks[f"ok{i}"] >= 5 for i in range(3)), (bad, phased, checks)
    finally:
        job.stop()


def test_wait_with_a_timeout_returns_whatever_the_stages_numbers(tmp_path: Path) -> None:
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01)
    job.start()
    nan, inf = float("nan"), float("inf")
    try:
        # (policy.interval, policy.timeout, the --timeout given)
        for interval, policy_timeout, given in (
            (nan, 2.0, None),
            (inf, 2.0, None),
            (0.2, nan, 2.0),
            (nan, inf, 2.0),
        ):
            stage = _unchecked(_stage(job, "odd"), interval=interval, timeout=policy_timeout)
            started = time.monotonic()
            stop = threading.Event()
            timer = threading.Timer(20, stop.set)  # the test's own bound, if the wait had none
            timer.start()
            results = watch_all([Checker(stage)], on_verdict=lambda i, v: None, timeout=given, stop=stop)
            timer.cancel()
            assert time.monotonic() - started < 6, (interval, policy_timeout, given)
            assert results[0].timed_out, (interval, policy_timeout, given)
    finally:
        job.stop()


def test_a_stage_hurried_while_its_check_runs_is_checked_again_as_soon_as_it_is_back(tmp_path: Path) -> None:
    """A watcher that takes a stage over while following it (a check in flight) checks it at
    once when that check is back, not an interval later."""
    from sensors._watch.schedule import Scheduler

    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01)
    checker = Checker(stage_from_dict(_stage(job, "hurried", interval="30s")))
    began: list[float] = []
    in_flight = threading.Event()

    def batch(checkers: list) -> list:
        began.append(time.monotonic())
        in_flight.set()
        time.sleep(0.3)
        return [None] * len(checkers)

    scheduler = Scheduler(batch=batch)
    scheduler.add("s", checker)
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,), kwargs={"on_verdict": lambda *a: None})
    thread.start()
    try:
        assert in_flight.wait(5)
        scheduler.hurry("s")  # while the first check runs
        deadline = time.monotonic() + 5
        while len(began) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(began) == 2 and began[1] - began[0] < 1.0, began  # not 30 s later
    finally:
        stop.set()
        thread.join(10)
