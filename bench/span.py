"""A stage over several hosts checked in one tick: 16 loopback SSH hosts, 8 ranks a host.

Run: ``python bench/span.py [--hosts 16] [--ranks 8] [--ticks 10]``. Issue 25's benchmark.

The hosts: real OpenSSH sshd on 127.0.0.1, one per host, each on a port of its own and an
alias ``fleet-hNN`` in an ssh config file (bench/fleet.py's ``Fleet``, one port per sshd).
Run as root with ``unshare``, each sshd runs in a mount namespace of its own whose
/usr/local/sbin (first on the probe's PATH) holds the tests' fake ``nvidia-smi`` with that
host's GPU state (as tests/test_span.py does), and the stage reads ``gpu:`` too; otherwise
the stage has no ``gpu:`` section. /proc is this machine's, so every host's ranks are in every
host's process table: a host's 8 ranks are ``sleep`` processes whose command line reads
``train.py --tag TAG --node N --rank R`` (argv[0]), and ``process.match`` names ``{node}``.

The stage: ``hosts:`` (16 entries), ``process.per_host: 8``, a log per host
(``node{node}.log``), outputs on shared storage (read on node 0), and the GPUs. Checked by
``SpanChecker`` (what ``crosscheck status`` and the Prefect gate use for it; ``wait`` and
``serve`` put each host's probe in that host's batch), with the watcher's
garbage-collector settings (``wait`` sets them). Side by side, in alternating rounds: one
tick of the span (``SpanChecker.check()``: each host's probe — ``check_batch`` of its node's
``Checker`` — in parallel threads, one verdict across hosts), then today's per-stage path on
the same hosts: the 16 one-host stages the span is made of (``Stage.nodes``, each its own
``Checker``), checked one after another. The first rounds (connecting, the first values of
every memory) are left out. Measured:

- round trips per tick: ``run_script`` calls per host object (the host seam every probe
  passes), and how many host objects;
- wall per tick (``SpanChecker.check()``) against the slowest host's check in that tick (its
  ``check_batch``) and the slowest probe round trip (``run_script``) in it;
- this process's CPU (``time.process_time``: every thread; not sshd, not the probes' shells)
  per host-check: the tick's CPU over its hosts, against the same per one-host check of the
  per-stage path (all 16, and host 0 alone: the node with outputs).

On loopback every "remote" probe runs on this machine's own CPUs: the span's 16 probes at
once contend for them, so a probe in a tick takes longer than one alone; the wall is
compared with the slowest probe of its own tick, and with one host checked alone beside it.

Targets (issue 25): 16 round trips per tick, one per host; wall per tick at most 1.25x the
slowest node's check in it (median over the ticks); CPU per host-check at most 1.25x the
per-stage path's. Exits 1 when one is missed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fleet import Fleet, machine  # noqa: E402 - after the sys.path line above
from sensors._check import span as span_module  # noqa: E402
from sensors._check.checker import Checker  # noqa: E402
from sensors._check.span import SpanChecker  # noqa: E402
from sensors._config.stage import load_stage  # noqa: E402
from sensors._hosts import ssh  # noqa: E402
from sensors._watch.gc import tune_for_watching  # noqa: E402
from tests.fake_nvml import install_fake_smi  # noqa: E402
from tests.sshd import _children  # noqa: E402

GPU_UUID = "GPU-5a1e7c3d-0b2f-4e6a-9c11-2d3e4f5a{:04d}"
WARM = 2  # rounds left out: connecting, the memories' first values
WALL_TARGET = 1.25  # wall per tick / the slowest node's check in it (median)
CPU_TARGET = 1.25  # CPU per host-check, span / per-stage


# --------------------------------------------------------------------------- the hosts and ranks


def gpu_wrap(bins: list[Path]) -> Callable[[int], list[str]]:
    """The k-th sshd in a mount namespace whose /usr/local/sbin is ``bins[k]``."""

    def wrap(k: int) -> list[str]:
        return [
            "unshare", "-m", "--propagation", "private", "sh", "-c",
            f'mount --bind {bins[k]} /usr/local/sbin && exec "$@"', "sh",
        ]  # fmt: skip

    return wrap


def start_ranks(tag: str, hosts: int, ranks: int) -> list[list[subprocess.Popen[bytes]]]:
    """``ranks`` processes per host: ``sleep`` with argv[0] ``train.py --tag T --node N --rank R``
    (one small process each; its command line is what ``process.match`` reads)."""
    return [
        [
            subprocess.Popen(
                [f"train.py --tag {tag} --node {node} --rank {rank}", "100000"],
                executable="/bin/sleep",
                start_new_session=True,
            )
            for rank in range(ranks)
        ]
        for node in range(hosts)
    ]


def write_gpus(states: list[Path], ranks: list[list[subprocess.Popen[bytes]]]) -> None:
    """Each host's fake GPU: busy, its ranks on it, its clock now (not measured)."""
    at = time.strftime("%Y/%m/%d %H:%M:%S.000", time.gmtime())
    for k, state in enumerate(states):
        uuid_ = GPU_UUID.format(k)
        (state / "gpu.csv").write_text(f"{at}, 0, {uuid_}, NVIDIA H200, 100, 40000, 143771, 580.82.07\n")
        (state / "apps.csv").write_text("".join(f"{uuid_}, {p.pid}, python3, 20000\n" for p in ranks[k]))


def stage_file(fleet: Fleet, work: Path, tag: str, ranks: int, gpu: bool) -> Path:
    """The span stage: one entry per host of ``fleet``."""
    (work / "out").mkdir()
    for k in range(3):
        (work / "out" / f"part-{k:03d}.pt").write_bytes(b"x")
    for node in range(fleet.hosts):
        lines = "".join(f"[{k}/1000] step {k} loss 0.{k * 3}\n" for k in range(1, 4))
        (work / f"node{node}.log").write_text(lines)
    hosts = [
        {
            "ssh": f"fleet-h{h:02d}",
            "user": server.user,
            "key": str(server.key),
            "known_hosts": str(fleet.known_hosts),
            "config": str(fleet.ssh_config),
            "connect_timeout": "10s",
            "check_timeout": "60s",
        }
        for h, server in enumerate(fleet.host_server)
    ]
    stage: dict[str, Any] = {
        "stage": "train",
        "hosts": hosts,
        "process": {"match": f"^train[.]py --tag {tag} --node {{node}} --rank ", "per_host": ranks},
        "log": {
            "path": str(work / "node{node}.log"),
            "complete": "^training finished",
            "error": "NCCL error|CUDA out of memory",
            "progress": r"\[(?P<done>\d+)/(?P<total>\d+)\]",
        },
        "outputs": {"files": str(work / "out"), "pattern": "*.pt", "expected": 100},
        "policy": {"interval": "30s", "stall_after": "1h", "timeout": "48h"},
    }
    if gpu:
        stage["gpu"] = {"idle_below": 5}
    path = work / "train.yaml"
    path.write_text(yaml.safe_dump(stage, sort_keys=False))
    return path


# --------------------------------------------------------------------------- what is timed

_TICK = os.sysconf("SC_CLK_TCK")


def remote_cpu(fleet: Fleet) -> float:
    """CPU seconds the "remote" side has used on this machine so far: every sshd's live
    descendants (the connections' sshd, the kept remote shells), each with its reaped
    children (the probes' commands). Read between ticks, never inside one (a /proc scan)."""
    total = 0
    for server in fleet.servers:
        if server.proc is None:
            continue
        for pid in _children(server.proc.pid):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / _TICK


class Seen:
    """Every probe (host seam) and every host's check (a span's ``check_batch``), timed,
    while ``on``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.on = False
        self.probes: list[tuple[int, float]] = []  # id(host), seconds
        self.checks: list[float] = []  # seconds of each host's check

    def install(self) -> None:
        seen = self
        run = ssh.SSHHost.run_script

        def run_script(self: ssh.SSHHost, script: bytes, *, timeout: float) -> bytes:
            t = time.monotonic()
            try:
                return run(self, script, timeout=timeout)
            finally:
                if seen.on:
                    with seen.lock:
                        seen.probes.append((id(self), time.monotonic() - t))

        ssh.SSHHost.run_script = run_script  # type: ignore[method-assign]
        check = span_module.check_batch

        def timed_check(checkers: Any) -> Any:
            t = time.monotonic()
            try:
                return check(checkers)
            finally:
                if seen.on:
                    with seen.lock:
                        seen.checks.append(time.monotonic() - t)

        span_module.check_batch = timed_check  # the name SpanChecker calls

    def take(self) -> tuple[list[tuple[int, float]], list[float]]:
        with self.lock:
            probes, checks = list(self.probes), list(self.checks)
            self.probes.clear()
            self.checks.clear()
        return probes, checks


# --------------------------------------------------------------------------- the rounds


def run(args: argparse.Namespace, work: Path) -> int:
    gpu = os.geteuid() == 0 and shutil.which("unshare") is not None
    bins = [work / f"bin{k}" for k in range(args.hosts)]
    states = [install_fake_smi(b) for b in bins] if gpu else []
    fleet = Fleet(work / "fleet", args.hosts, 0, ports_per_sshd=1, wrap=gpu_wrap(bins) if gpu else None)
    tag = f"span-{os.getpid()}"
    ranks: list[list[subprocess.Popen[bytes]]] = []
    seen = Seen()
    seen.install()
    tune_for_watching()  # as crosscheck wait does
    try:
        fleet.start_servers()
        ranks = start_ranks(tag, args.hosts, args.ranks)
        stage = load_stage(stage_file(fleet, work, tag, args.ranks, gpu))
        load = os.getloadavg()
        print(f"machine: {machine()}; load average at the start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        print(
            f"{len(fleet.servers)} sshd on {args.hosts} ports of 127.0.0.1 (a host each), {args.ranks} ranks"
            f" a host; stage reads process, log, outputs{', gpu (fake nvidia-smi per host)' if gpu else ''}",
            flush=True,
        )
        span = SpanChecker(stage)
        singles = [Checker(node) for node in stage.nodes]
        ticks: list[dict[str, Any]] = []
        last = None
        for r in range(WARM + args.ticks):
            if gpu:
                write_gpus(states, ranks)
            seen.take()
            r0 = remote_cpu(fleet)
            seen.on = True
            c0, w0 = time.process_time(), time.monotonic()
            last = span.check()
            c1, w1 = time.process_time(), time.monotonic()
            seen.on = False
            r1 = remote_cpu(fleet)
            probes, checks = seen.take()
            one_cpu: list[float] = []
            one_wall: list[float] = []
            one_trips = 0
            for single in singles:
                seen.on = True
                a, b = time.process_time(), time.monotonic()
                single.check()
                one_cpu.append(time.process_time() - a)
                one_wall.append(time.monotonic() - b)
                seen.on = False
                one_trips += len(seen.take()[0])
            r2 = remote_cpu(fleet)
            if r < WARM:
                continue
            per_host = Counter(h for h, _ in probes)
            ticks.append(
                {
                    "wall": w1 - w0,
                    "cpu": c1 - c0,
                    "trips": len(probes),
                    "hosts": len(per_host),
                    "per_host": (min(per_host.values()), max(per_host.values())),
                    "slowest_check": max(checks),
                    "median_check": statistics.median(checks),
                    "slowest_probe": max(d for _, d in probes),
                    "one_cpu": one_cpu,
                    "one_wall": one_wall,
                    "one_trips": one_trips,
                    "remote": r1 - r0,
                    "one_remote": r2 - r1,
                }
            )
        span.close()
        for single in singles:
            single.close()
    finally:
        ssh.close_all()
        for host in ranks:
            for proc in host:
                proc.kill()
                proc.wait()
        fleet.stop()
    return report(args, ticks, last)


def report(args: argparse.Namespace, ticks: list[dict[str, Any]], last: Any) -> int:
    n = args.hosts
    med = statistics.median
    cpus = os.cpu_count() or 1
    print(
        f"\n{'tick':>4} {'trips':>5} {'per host':>8} {'wall ms':>8} {'slowest check':>13}"
        f" {'slowest probe':>13} {'wall/check':>10} {'probes CPU ms':>13}"
        f" {'CPU/host-check ms':>17} {'per-stage ms':>12} {'ratio':>6}"
    )
    for k, t in enumerate(ticks):
        cpu_host = t["cpu"] / n * 1000
        one = sum(t["one_cpu"]) / n * 1000
        print(
            f"{k + 1:>4} {t['trips']:>5} {'{}..{}'.format(*t['per_host']):>8} {t['wall'] * 1000:>8.1f}"
            f" {t['slowest_check'] * 1000:>13.1f} {t['slowest_probe'] * 1000:>13.1f}"
            f" {t['wall'] / t['slowest_check']:>10.3f} {t['remote'] * 1000:>13.0f}"
            f" {cpu_host:>17.2f} {one:>12.2f} {cpu_host / one:>6.3f}"
        )
    span_cpu = sum(t["cpu"] for t in ticks) / (len(ticks) * n) * 1000
    one_cpu = sum(sum(t["one_cpu"]) for t in ticks) / (len(ticks) * n) * 1000
    host0_cpu = sum(t["one_cpu"][0] for t in ticks) / len(ticks) * 1000
    wall = med([t["wall"] for t in ticks]) * 1000
    wall_ratio = med([t["wall"] / t["slowest_check"] for t in ticks])
    probe_ratio = med([t["wall"] / t["slowest_probe"] for t in ticks])
    alone = med([w for t in ticks for w in t["one_wall"]]) * 1000
    in_turn = med([sum(t["one_wall"]) for t in ticks]) * 1000
    remote = med([t["remote"] for t in ticks]) * 1000
    one_remote = med([t["one_remote"] for t in ticks]) * 1000 / n
    trips_ok = all(t["trips"] == n and t["hosts"] == n and t["per_host"] == (1, 1) for t in ticks)
    one_trips_ok = all(t["one_trips"] == n for t in ticks)

    def span_of(key: str) -> str:
        return f"{min(t[key] for t in ticks)}..{max(t[key] for t in ticks)}"

    print(f"\nover {len(ticks)} ticks ({n} hosts, {args.ranks} ranks a host; ms are medians):")
    rows = [
        ("round trips per tick", span_of("trips"), ""),
        ("host objects probed per tick", span_of("hosts"), ""),
        ("wall per tick", f"{wall:.1f} ms", ""),
        (
            "slowest node's check in the tick",
            f"{med([t['slowest_check'] for t in ticks]) * 1000:.1f} ms",
            f"wall / it {wall_ratio:.3f}x",
        ),
        (
            "slowest probe round trip in the tick",
            f"{med([t['slowest_probe'] for t in ticks]) * 1000:.1f} ms",
            f"wall / it {probe_ratio:.3f}x",
        ),
        (
            "probes' CPU on this machine per tick",
            f"{remote:.0f} ms",
            f"/ {cpus} CPUs = {remote / cpus:.0f} ms, wall / it {wall / (remote / cpus):.2f}x",
        ),
        (
            "one host checked alone (per-stage path)",
            f"{alone:.1f} ms",
            f"wall / it {wall / alone:.2f}x; its probe's CPU {one_remote:.0f} ms",
        ),
        (
            f"the {n} one-host stages one after another",
            f"{in_turn:.1f} ms",
            f"wall / it {wall / in_turn:.3f}x",
        ),
        ("CPU per host-check, span", f"{span_cpu:.2f} ms", ""),
        (
            f"CPU per check, per-stage path ({n} hosts)",
            f"{one_cpu:.2f} ms",
            f"span / it {span_cpu / one_cpu:.3f}x",
        ),
        (
            "CPU per check, per-stage path (host 0)",
            f"{host0_cpu:.2f} ms",
            f"span / it {span_cpu / host0_cpu:.3f}x",
        ),
    ]
    for label, value, ratio in rows:
        print(f"  {label:<42} {value:>10}   {ratio}")
    if last is not None:
        alive = [r.evidence.get("alive") for key, r in last.readings.items() if key.startswith("process@")]
        counts = Counter(alive).most_common()
        print(f"  last verdict: {last.state.value}; ranks alive per host (count, hosts): {counts}")
    checks = [
        (f"round trips per tick = {n}, one per host (every tick)", trips_ok),
        ("per-stage path: one round trip per one-host check", one_trips_ok),
        (
            f"wall per tick <= {WALL_TARGET}x the slowest node's check in it (median)",
            wall_ratio <= WALL_TARGET,
        ),
        (f"CPU per host-check <= {CPU_TARGET}x the per-stage path's", span_cpu <= CPU_TARGET * one_cpu),
    ]
    print()
    for label, ok in checks:
        print(f"{'ok  ' if ok else 'MISS'} {label}")
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"client, the {n} sshd and every 'remote' probe share this machine's CPUs")
    return 0 if all(ok for _, ok in checks) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=16, help="hosts of the stage (16)")
    ap.add_argument("--ranks", type=int, default=8, help="ranks a host (8)")
    ap.add_argument("--ticks", type=int, default=10, help="measured ticks, after the first 2 (10)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="crosscheck-span-"))
    work.chmod(0o755)
    try:
        return run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
