"""A large fleet in one watcher: 2,000 stages over 50 loopback SSH hosts plus 500 local ones.

Run: ``python bench/fleet.py [--interval 30] [--ticks 3] [--sizes 100,500,1000,2500]
[--mix idle,busy]`` (``--quick``: smaller sizes, a 3 s interval, for a smoke run). Issue 12's
benchmark; the busy mix is issue 22's.

The hosts: real OpenSSH sshd processes (tests/sshd.py) on 50 ports of 127.0.0.1 (at most 16
each, OpenSSH's MAX_LISTEN_SOCKS: 4 processes); each port is a host of its own (an alias
``fleet-hNN`` in an ssh config file, HostName 127.0.0.1 and its port), so 50 hosts are 50
connections. Each host carries 40 stages, and 500 more are local. A stage is small but real:
a log of a few progress lines, an outputs directory (3 of 100 files), a process pattern.
Every stage is a stage file in one directory, watched by ``sensors._watch.watcher.Watcher`` (the
machinery of ``crosscheck serve``) with a SQLite state store in a temporary file. Two mixes:

- ``idle`` (issue 12's): every tenth stage matches one of 8 live ``sleep`` processes
  (distinct command lines), the others a pattern no process has (a job not started yet:
  ``unknown``); nothing is written while it runs;
- ``busy`` (the fleet a user runs): every stage's job is alive (stage k of each host matches
  the k-th of 40 live jobs, as 40 jobs on a host would be), its log grows by a line every half
  interval and an output is written every interval (by one writer process, spread evenly over
  the interval), toward 1,000,000 expected: each check reads what its log appended and lists
  its changed directory, and every verdict is ``running``.

Each size (a proportional mix: 40 stages per host, hosts and local stages scaled) runs for
``ticks + 1`` intervals; the first tick (loading the files, connecting) is left out. Measured:

- round trips per host per tick: ``run_script`` calls per host object per tick (counted at
  the host seam: every probe of a host passes there), with the real processes beside it:
  sshd's connections and the kept remote shells (``sh`` under sshd) after the run;
- checking-side CPU: this process's own CPU time (``time.process_time``, every thread: the
  watcher, paramiko's transports, parsing, the store; not sshd, not the probes' shells)
  over the measured ticks, per tick and per stage-check;
- check lag: when a stage's check started (its probe was built) minus when the scheduler
  had it due (``Scheduler.due``: the time it was handed out for; each host has a phase in
  the interval, so the hosts' ticks are spread over it), p50 and p99 over the checks due in
  the measured window;
- RSS: peak (``ru_maxrss``) and current (``VmRSS``) after each size;
- side by side, for 40 stages sharing one SSH host (and 40 local ones): the CPU per
  stage-check of the batched path (``check_batch``: one probe for all of them) against
  today's per-stage path (each ``Checker.check()`` its own probe), in alternating rounds;
  first with CPython's garbage-collector settings, then with the watcher's (``crosscheck
  serve`` and ``wait`` set them: ``sensors._watch.gc``), which the fleet runs with too.

Targets (issue 12, both mixes): one round trip per host per tick; batched CPU per
stage-check at most 1/10 of the per-stage path (every SSH row, the watcher's settings); lag
p99 <= 2 s; RSS <= 400 MB; CPU per tick growing no faster than the number of stages (each step
within 1.25x of linear) and lag p99 within target at every size. Exits 1 when one is missed.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sensors._check.batch import check_batch  # noqa: E402 - after the sys.path line above
from sensors._check.checker import Checker  # noqa: E402
from sensors._config.stage import load_stage  # noqa: E402
from sensors._hosts import ssh  # noqa: E402
from sensors._hosts.local import LocalHost  # noqa: E402
from sensors._store import open_store  # noqa: E402
from sensors._watch.gc import tune_for_watching  # noqa: E402
from sensors._watch.schedule import Scheduler  # noqa: E402
from sensors._watch.watcher import Watcher  # noqa: E402
from tests.sshd import SSHD, _children, free_port  # noqa: E402

PER_HOST = 40
FULL_HOSTS, FULL_LOCAL = 50, 500
SLEEPS = 8  # live processes, one command line each
MIXES = ("idle", "busy")
BUSY_EXPECTED = 1_000_000  # outputs a busy stage's job is writing toward
PORTS_PER_SSHD = 16  # OpenSSH's MAX_LISTEN_SOCKS
OUTPUT_FILES, EXPECTED = 3, 100
BIG_LOG = 1_000_000  # bytes: a running job's log (side by side, ssh+grow-1MB)


# --------------------------------------------------------------------------- the fleet


class Fleet:
    """The sshd processes on 50 ports, the ssh config naming them, the stages' data, live jobs.

    OpenSSH listens on at most 16 sockets per server (MAX_LISTEN_SOCKS), so 50 ports are
    served by ceil(50 / 16) = 4 sshd processes of tests/sshd.py, each on up to 16 ports.
    """

    def __init__(
        self,
        root: Path,
        hosts: int,
        local: int,
        *,
        ports_per_sshd: int = PORTS_PER_SSHD,
        wrap: Callable[[int], list[str]] | None = None,
    ) -> None:
        """``ports_per_sshd``: hosts one sshd serves (1: an sshd per host, as bench/span.py
        has); ``wrap``: the command prefix the k-th sshd runs under (``SSHD(wrap=...)``)."""
        self.root = root
        self.hosts, self.local = hosts, local
        self.servers: list[SSHD] = []
        self.host_server: list[SSHD] = []  # host index -> the sshd serving its port
        self.ports: list[int] = []
        per_sshd = min(ports_per_sshd, PORTS_PER_SSHD)
        for first in range(0, hosts, per_sshd):
            k = len(self.servers)
            server = SSHD(root / f"sshd-{k}", wrap=wrap(k) if wrap is not None else None)
            ports = [server.port]
            while len(ports) < min(per_sshd, hosts - first):
                port = free_port()
                if port not in ports and port not in self.ports:
                    ports.append(port)
            config = server.config.read_text()
            line = f"Port {server.port}\n"
            server.config.write_text(config.replace(line, "".join(f"Port {p}\n" for p in ports)))
            self.servers.append(server)
            self.host_server += [server] * len(ports)
            self.ports += ports
        self.known_hosts = root / "known_hosts"
        self.known_hosts.write_text(
            "".join(
                f"[127.0.0.1]:{p} {s.host_pub}" for p, s in zip(self.ports, self.host_server, strict=True)
            )
        )
        self.ssh_config = root / "ssh_config"
        self.ssh_config.write_text(
            "".join(
                f"Host fleet-h{h:02d}\n  HostName 127.0.0.1\n  Port {p}\n" for h, p in enumerate(self.ports)
            )
        )
        self.data = root / "data"
        self.jobs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        self.start_servers()
        for j in range(1, SLEEPS + 1):
            self.jobs.append(subprocess.Popen(["sleep", f"100000.{j}"], start_new_session=True))
        for k in range(1, PER_HOST + 1):  # the busy mix's jobs: the k-th stage of every host
            self.jobs.append(subprocess.Popen(["sleep", f"300000.{k}"], start_new_session=True))

    def start_servers(self) -> None:
        """The sshd processes alone (the fleet's jobs are :meth:`start`'s)."""
        for server in self.servers:
            server.start()

    def stop(self) -> None:
        for job in self.jobs:
            job.kill()
            job.wait()
        for server in self.servers:
            server.cleanup()

    def work(self, name: str, mix: str = "idle") -> Path:
        """A stage's directory: its log and outputs (one per mix: the busy one's grow)."""
        return self.data / name if mix == "idle" else self.data / mix / name

    def stage_yaml(self, name: str, n: int, host: int | None, interval: float, mix: str = "idle") -> str:
        """One stage file; its log and outputs directory are written on first use."""
        work = self.work(name, mix)
        expected = EXPECTED if mix == "idle" else BUSY_EXPECTED
        if not work.exists():
            (work / "out").mkdir(parents=True)
            (work / "job.log").write_text(
                "".join(f"[{k}/{expected}] step {k} loss 0.{k * 3}\n" for k in range(1, OUTPUT_FILES + 1))
            )
            for k in range(OUTPUT_FILES):
                (work / "out" / f"part-{k:03d}.pt").write_bytes(b"x")
        if mix == "busy":
            match = rf"^sleep 300000[.]{n % PER_HOST + 1}$"
        else:
            match = rf"^sleep 100000[.]{n // 10 % SLEEPS + 1}$" if n % 10 == 0 else rf"fleet-job-{name}[.]py"
        if host is None:
            where = "host: local\n"
        else:
            s = self.host_server[host]
            where = (
                f"host:\n  ssh: fleet-h{host:02d}\n  user: {s.user}\n  key: {s.key}\n"
                f"  known_hosts: {self.known_hosts}\n  config: {self.ssh_config}\n"
                "  connect_timeout: 10s\n  check_timeout: 60s\n"
            )
        return (
            f"stage: {name}\n{where}"
            f"process:\n  match: '{match}'\n"
            f"log:\n  path: {work / 'job.log'}\n  complete: '^done$'\n"
            f"  progress: '\\[(?P<done>\\d+)/(?P<total>\\d+)\\]'\n"
            f"outputs:\n  files: {work / 'out'}\n  pattern: '*.pt'\n  expected: {expected}\n"
            f"policy:\n  interval: {interval}s\n  stall_after: 1h\n  timeout: 48h\n"
        )

    def write(
        self, directory: Path, size: int, interval: float, mix: str = "idle"
    ) -> tuple[int, int, list[Path]]:
        """Stage files for ``size`` stages in the full run's proportions; (hosts, local, the
        stages' directories)."""
        hosts = max(1, round(FULL_HOSTS * size / (FULL_HOSTS * PER_HOST + FULL_LOCAL)))
        hosts = min(hosts, self.hosts)
        local = max(0, size - hosts * PER_HOST)
        directory.mkdir(parents=True)
        n, works = 0, []
        for h in range(hosts):
            for k in range(PER_HOST):
                name = f"fleet-h{h:02d}-s{k:02d}"
                (directory / f"{name}.yaml").write_text(self.stage_yaml(name, n, h, interval, mix))
                works.append(self.work(name, mix))
                n += 1
        for k in range(local):
            name = f"fleet-local-s{k:03d}"
            (directory / f"{name}.yaml").write_text(self.stage_yaml(name, n, None, interval, mix))
            works.append(self.work(name, mix))
            n += 1
        return hosts, local, works

    def remote_shells(self) -> tuple[int, int]:
        """sshd's connections and the kept remote shells under it (``/bin/sh -s``; not a
        probe in flight, ``/bin/sh -c`` and its subshells), from /proc."""
        connections = shells = 0
        for server in self.servers:
            if server.proc is None:
                continue
            connections += server.connections()
            for pid in _children(server.proc.pid):
                try:
                    shells += Path(f"/proc/{pid}/cmdline").read_bytes() == b"/bin/sh\0-s\0"
                except OSError:
                    continue
        return connections, shells


# --------------------------------------------------------------------------- the busy mix's writes

#: The busy mix's jobs at work, in one process of their own (its CPU is not the watcher's):
#: each stage's log gets a line every half interval and its outputs a file every interval
#: (written under a temp name, then renamed, as jobs do), the stages taken in turn so that
#: the writes are spread evenly over the interval.
_WRITER = """
import os, sys, time
works = open(sys.argv[1]).read().split("\\n")
step = float(sys.argv[2]) / 2 / len(works)
k, at = 4, time.monotonic()
while True:
    for work in works:
        with open(work + "/job.log", "a") as log:
            log.write(f"[{k}/1000000] step {k} loss 0.{k * 3} lr 3e-4 tokens/s 51234\\n")
        if k % 2 == 0:
            tmp = f"{work}/out/part-{k:06d}.pt.tmp"
            with open(tmp, "wb") as out:
                out.write(b"x" * 64)
            os.rename(tmp, tmp[:-4])
        at += step
        time.sleep(max(0.0, at - time.monotonic()))
    k += 1
"""


def start_writer(works: list[Path], interval: float, root: Path) -> subprocess.Popen[bytes]:
    listing = root / f"busy-works-{len(works)}.txt"
    listing.write_text("\n".join(str(w) for w in works))
    argv = [sys.executable, "-c", _WRITER, str(listing), repr(interval)]
    return subprocess.Popen(argv, start_new_session=True)


# --------------------------------------------------------------------------- probes seen


class Seen:
    """Every probe (host seam) and every check start (its probe being built), timestamped,
    each with the time the scheduler had it due."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.on = False
        self.probes: list[tuple[int, str, float, float | None]] = []  # id(host), name, when, due
        self.starts: dict[str, list[tuple[float, float | None]]] = defaultdict(list)  # (when, due)
        # id(checker) -> (its scheduler, its key): where the scheduler's due time is read.
        self.keys: dict[int, tuple[Scheduler, str]] = {}
        self.due_here = threading.local()  # the due of the batch this thread is building

    def install(self) -> None:
        seen = self

        def wrap_run(cls: type) -> None:
            original = cls.run_script

            def run_script(self, script: bytes, *, timeout: float) -> bytes:
                if seen.on:
                    due = getattr(seen.due_here, "due", None)
                    with seen.lock:
                        seen.probes.append((id(self), self.name, time.monotonic(), due))
                return original(self, script, timeout=timeout)

            cls.run_script = run_script

        wrap_run(ssh.SSHHost)
        wrap_run(LocalHost)
        snippets = Checker.snippets

        def timed_snippets(self: Checker, nonce: str, **kw: bool) -> list[list[str]]:
            if seen.on:
                at = time.monotonic()
                where = seen.keys.get(id(self))
                due = where[0].due(where[1]) if where is not None else None
                seen.due_here.due = due
                with seen.lock:
                    seen.starts[self.stage.stage].append((at, due))
            return snippets(self, nonce, **kw)

        Checker.snippets = timed_snippets  # type: ignore[method-assign]
        add = Scheduler.add

        def keyed_add(self: Scheduler, key: str, checker: Checker, **kw: object) -> None:
            seen.keys[id(checker)] = (self, key)
            add(self, key, checker, **kw)  # type: ignore[arg-type]

        Scheduler.add = keyed_add  # type: ignore[method-assign]

    def reset(self) -> None:
        with self.lock:
            self.probes.clear()
            self.starts.clear()
            self.keys.clear()


# --------------------------------------------------------------------------- one size


def rss_mb() -> tuple[float, float]:
    """(peak, current) resident set of this process, MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    current = 0.0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            current = int(line.split()[1]) / 1024
    return peak, current


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def run_size(
    fleet: Fleet, seen: Seen, size: int, interval: float, ticks: int, work: Path, mix: str = "idle"
) -> dict:
    directory = work / f"stages-{mix}-{size}"
    hosts, local, works = fleet.write(directory, size, interval, mix)
    writer = start_writer(works, interval, work) if mix == "busy" else None
    try:
        row = _run_size(fleet, seen, size, interval, ticks, work, mix, directory)
        return {**row, "hosts": hosts, "local": local}
    finally:
        if writer is not None:
            writer.kill()
            writer.wait()


def _run_size(
    fleet: Fleet, seen: Seen, size: int, interval: float, ticks: int, work: Path, mix: str, directory: Path
) -> dict:
    ssh.close_all()  # each size connects afresh (its first tick, not measured, pays it)
    store = open_store(work / f"state-{mix}-{size}.db")
    verdicts: Counter[str] = Counter()
    watcher = Watcher(
        directory, store=store, rescan_every=5.0, emit=lambda v: verdicts.update([v.state.value])
    )
    stop = threading.Event()
    seen.reset()
    seen.on = True
    t0 = time.monotonic()
    thread = threading.Thread(target=watcher.run, args=(stop,), name="fleet-watcher")
    thread.start()
    # The window of the measured ticks: ``ticks`` intervals after the first (every stage's
    # first check is due within the first interval, at its host's phase point; then one due
    # per interval). Checks due in the window are measured; the watcher runs on a little
    # (``grace``) so that a check due just before the window's end has started.
    edge = min(0.5, interval / 10)
    time.sleep(max(0.0, t0 + interval - edge - time.monotonic()))
    cpu_a, wall_a = time.process_time(), time.monotonic()
    time.sleep(max(0.0, t0 + (ticks + 1) * interval - edge - time.monotonic()))
    cpu_b, wall_b = time.process_time(), time.monotonic()
    connections, shells = fleet.remote_shells()
    time.sleep(min(10.0, interval / 2))  # grace: no measure taken from here on
    stop.set()
    thread.join()
    seen.on = False
    store.close()
    peak, current = rss_mb()

    starts = {stage: list(checks) for stage, checks in seen.starts.items()}
    first_tick = max(checks[0][0] for checks in starts.values()) - t0 if starts else float("nan")

    def tick_of(due: float | None) -> int | None:
        """Which measured tick a check due then belongs to (None: outside the window)."""
        if due is None or not wall_a <= due < wall_b:
            return None
        return min(ticks - 1, int((due - wall_a) // interval))

    lags: list[float] = []
    checks_in_window = 0
    checked_each_tick = 0
    for checks in starts.values():
        checks_in_window += sum(1 for t, _ in checks if wall_a <= t < wall_b)
        measured = [(t, due) for t, due in checks if tick_of(due) is not None]
        checked_each_tick += len({tick_of(due) for _, due in measured}) == ticks
        lags += [t - due for t, due in measured if due is not None]
    # Round trips per host per tick: each host's probes, by the measured tick they were due in.
    per_host: dict[int, Counter[int]] = defaultdict(Counter)
    names: dict[int, str] = {}
    for key, name, _, due in seen.probes:
        names[key] = name
        k = tick_of(due)
        per_host[key].update([] if k is None else [k])
    trips: list[int] = []
    for counts in per_host.values():
        trips += [counts.get(k, 0) for k in range(ticks)]
    cpu = cpu_b - cpu_a
    return {
        "mix": mix,
        "size": size,
        "stages_seen": len(starts),
        "checked_each_tick": checked_each_tick,
        "first_tick_s": first_tick,
        "cpu_per_tick_s": cpu / ticks,
        "cpu_per_check_ms": cpu / max(1, checks_in_window) * 1000,
        "checks_in_window": checks_in_window,
        "cpu_share": cpu / (wall_b - wall_a),
        "lag_p50": pct(lags, 50),
        "lag_p99": pct(lags, 99),
        "lag_max": max(lags, default=float("nan")),
        "trips_min": min(trips, default=0),
        "trips_max": max(trips, default=0),
        "host_objects": len(per_host),
        "host_names": len(set(names.values())),
        "connections": connections,
        "shells": shells,
        "peak_mb": peak,
        "rss_mb": current,
        "verdicts": dict(verdicts),
    }


# --------------------------------------------------------------------------- side by side


def side_by_side(
    fleet: Fleet, work: Path, rounds: int, label: str, stages: int = PER_HOST
) -> dict[str, tuple[float, float]]:
    """CPU ms per stage-check: (batched, per-stage), for 40 stages on one SSH host and 40 local
    (``stages``: fewer, for the test suite's smoke run, where only that it runs counts).

    The fleet's logs are idle (each check finds it as the last one did, and reads only its
    stat); ``ssh+grow`` is the same SSH host with every log appended to before each check
    (the append is not measured), and ``ssh+grow-1MB`` the same with logs of a running job's
    size (1 MB: more than the 256 KiB tail a check once read whole every time). ``label``
    names this run's stages and their files (each run starts from new logs).
    """
    directory = work / f"side-by-side-{label}"
    directory.mkdir()
    placed = (("ssh", 0), ("local", None), ("ssh+grow", 0), ("ssh+grow-1MB", 0))
    groups: dict[str, list] = {group: [] for group, _ in placed}
    for k in range(stages):
        for group, host in placed:
            name = f"side-{label}-{group.replace('+', '-')}-s{k:02d}"
            path = directory / f"{name}.yaml"
            path.write_text(fleet.stage_yaml(name, k, host, 30.0))
            groups[group].append(load_stage(path))
    for stage in groups["ssh+grow-1MB"]:
        log = Path(stage.log.path)
        line = "[0/100] step 0 loss 0.000 lr 3e-4 grad-norm 1.02 tokens/s 51234 mem 71.2 GB\n"
        log.write_text(line * (BIG_LOG // len(line)) + log.read_text())
    result = {}
    for group, stages in groups.items():
        batched = [Checker(s) for s in stages]
        single = [Checker(s) for s in stages]
        for _ in range(2):  # warm: connect, the static facts, the memories' first values
            check_batch(batched)
            for c in single:
                c.check()
        cpu = {"batched": 0.0, "single": 0.0}
        shells = {"batched": 0.0, "single": 0.0}  # the local probes' own processes (reaped children)
        grow = _appender(stages) if group.startswith("ssh+grow") else (lambda: None)
        for _ in range(rounds):
            grow()
            a, ka = time.process_time(), _children_cpu()
            check_batch(batched)
            b, kb = time.process_time(), _children_cpu()
            grow()
            c0, kc = time.process_time(), _children_cpu()
            for c in single:
                c.check()
            cpu["batched"] += b - a
            cpu["single"] += time.process_time() - c0
            shells["batched"] += kb - ka
            shells["single"] += _children_cpu() - kc
        n = rounds * len(stages)
        result[group] = (cpu["batched"] / n * 1000, cpu["single"] / n * 1000)
        if group == "local":
            # A local probe runs on the watcher's machine: its shell's CPU is checking-side too.
            result["local+sh"] = (
                (cpu["batched"] + shells["batched"]) / n * 1000,
                (cpu["single"] + shells["single"]) / n * 1000,
            )
    return result


def _appender(stages: list) -> Callable[[], None]:
    """Appends one progress line to each stage's log (a job still writing)."""
    count = itertools.count(OUTPUT_FILES + 1)

    def grow() -> None:
        k = next(count)
        for stage in stages:
            with open(stage.log.path, "a") as log:
                log.write(f"[{k}/{EXPECTED}] step {k} loss 0.{k * 3}\n")

    return grow


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


# --------------------------------------------------------------------------- report


def machine() -> str:
    model = platform.processor() or "?"
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in lscpu.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    mem = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) // 1024 // 1024
    return f"{os.cpu_count()} CPUs ({model}), {mem} GiB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, help="each stage's policy.interval, seconds (30)")
    ap.add_argument("--ticks", type=int, help="measured ticks per size, after the first (3)")
    ap.add_argument("--sizes", help="stage counts, comma-separated (100,500,1000,2500)")
    ap.add_argument("--rounds", type=int, help="side-by-side rounds (24)")
    ap.add_argument("--mix", default=",".join(MIXES), help="the mixes, comma-separated (idle,busy)")
    ap.add_argument(
        "--side-stages", type=int, default=PER_HOST, help=f"stages a group side by side ({PER_HOST})"
    )
    ap.add_argument("--quick", action="store_true", help="a smoke run: 100,250 stages, 3 s, 2 ticks")
    args = ap.parse_args(argv)
    quick = {"interval": 3.0, "ticks": 2, "sizes": "100,250", "rounds": 2}
    # 24 rounds: on this shared machine a ratio moves by ~7% between runs of 12.
    full = {"interval": 30.0, "ticks": 3, "sizes": "100,500,1000,2500", "rounds": 24}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    sizes = [int(x) for x in args.sizes.split(",")]
    mixes = [m for m in args.mix.split(",") if m]
    if not mixes or any(m not in MIXES for m in mixes):
        ap.error(f"--mix: one or more of {', '.join(MIXES)}")
    need_hosts = min(FULL_HOSTS, max(max(1, round(FULL_HOSTS * s / 2500)) for s in sizes))

    work = Path(tempfile.mkdtemp(prefix="crosscheck-fleet-"))
    work.chmod(0o755)
    fleet = Fleet(work, need_hosts, FULL_LOCAL)
    seen = Seen()
    seen.install()
    fleet.start()
    load = os.getloadavg()
    try:
        print(f"machine: {machine()}; interval {args.interval:g} s, {args.ticks} measured ticks per size")
        print(
            f"{len(fleet.servers)} sshd on {need_hosts} ports of 127.0.0.1 (a host each),"
            f" {SLEEPS} + {PER_HOST} live jobs;"
            f" load average at the start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
        )
        side_default = side_by_side(fleet, work, args.rounds, "default-gc", args.side_stages)
        tune_for_watching()  # as crosscheck serve does, before its stages load
        side = side_by_side(fleet, work, args.rounds, "watcher-gc", args.side_stages)
        rows: dict[str, list[dict]] = {}
        for mix in mixes:
            print(f"{mix} mix:", flush=True)
            for size in sizes:
                row = run_size(fleet, seen, size, args.interval, args.ticks, work, mix)
                rows.setdefault(mix, []).append(row)
                print(
                    f"  {size:>5} stages ({row['hosts']} hosts, {row['local']} local): "
                    f"cpu/tick {row['cpu_per_tick_s']:.2f} s, lag p99 {row['lag_p99']:.3f} s, "
                    f"round trips/host/tick {row['trips_min']}..{row['trips_max']}, "
                    f"peak RSS {row['peak_mb']:.0f} MB, load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    finally:
        ssh.close_all()
        fleet.stop()
        shutil.rmtree(work, ignore_errors=True)

    head = (
        f"{'mix':>4} {'stages':>6} {'hosts':>5} {'local':>5} {'1st tick s':>10} {'cpu/tick s':>10}"
        f" {'cpu %':>6}"
        f" {'ms/check':>8} {'lag p50':>8} {'lag p99':>8} {'lag max':>8} {'trips/host/tick':>15}"
        f" {'conns':>5} {'shells':>6} {'RSS MB':>7} {'peak MB':>7}"
    )
    print()
    print(head)
    for mix, mixed in rows.items():
        for r in mixed:
            print(
                f"{mix:>4} {r['size']:>6} {r['hosts']:>5} {r['local']:>5} {r['first_tick_s']:>10.1f}"
                f" {r['cpu_per_tick_s']:>10.2f} {r['cpu_share'] * 100:>5.1f}% {r['cpu_per_check_ms']:>8.2f}"
                f" {r['lag_p50']:>8.3f} {r['lag_p99']:>8.3f} {r['lag_max']:>8.3f}"
                f" {str(r['trips_min']) + '..' + str(r['trips_max']):>15}"
                f" {r['connections']:>5} {r['shells']:>6}"
                f" {r['rss_mb']:>7.0f} {r['peak_mb']:>7.0f}"
            )
    for mix, mixed in rows.items():
        for r in mixed:
            every = f"{r['checked_each_tick']}/{r['size']}"
            print(f"  {mix} {r['size']}: verdicts {r['verdicts']}; stages checked every measured tick", every)
    if len(rows) > 1:
        print("\nside by side, CPU per tick (s) and lag p99 (s) by size:")
        print(f"{'stages':>6} " + " ".join(f"{m + ' cpu':>10} {m + ' p99':>10}" for m in rows))
        for k, size in enumerate(sizes):
            cells = " ".join(
                f"{rows[m][k]['cpu_per_tick_s']:>10.2f} {rows[m][k]['lag_p99']:>10.3f}" for m in rows
            )
            print(f"{size:>6} {cells}")

    print(f"\nCPU per stage-check, {args.side_stages} stages on one host, side by side (ms):")
    print(f"{'host':>12} {'batched':>8} {'per-stage':>10} {'ratio':>6}   with CPython's GC settings")
    for group, (b, s) in side.items():
        bd, sd = side_default[group]
        print(f"{group:>12} {b:>8.2f} {s:>10.2f} {b / s:>6.3f}   {bd:>8.2f} {sd:>10.2f} {bd / sd:>6.3f}")

    every_row = [r for mixed in rows.values() for r in mixed]
    checks = [
        (
            "round trips per host per tick = 1 (every mix, size, host and measured tick)",
            all(r["trips_min"] == r["trips_max"] == 1 for r in every_row)
            and all(r["host_objects"] == r["host_names"] == r["hosts"] + (r["local"] > 0) for r in every_row),
        ),
        (
            "every stage checked every measured tick",
            all(r["checked_each_tick"] == r["size"] for r in every_row),
        ),
        (
            "batched CPU per stage-check <= 1/10 of the per-stage path (every SSH row)",
            all(b <= s / 10 for group, (b, s) in side.items() if group.startswith("ssh")),
        ),
        ("check lag p99 <= 2 s (every mix and size)", all(r["lag_p99"] <= 2.0 for r in every_row)),
        ("RSS <= 400 MB (peak)", max(r["peak_mb"] for r in every_row) <= 400),
    ]
    for mix, mixed in rows.items():
        growth_ok = all(
            (b["cpu_per_tick_s"] / a["cpu_per_tick_s"]) <= 1.25 * (b["size"] / a["size"])
            for a, b in itertools.pairwise(mixed)
        )
        label = f"{mix}: CPU per tick grows at most linearly (each step within 1.25x of linear)"
        checks.append((label, growth_ok))
    if "busy" in rows:
        checks.append(
            (
                "busy: every verdict running (every job alive and at work)",
                all(set(r["verdicts"]) == {"running"} for r in rows["busy"]),
            )
        )
    print()
    for label, ok in checks:
        print(f"{'ok  ' if ok else 'MISS'} {label}")
    print()
    for mix, mixed in rows.items():
        big, small = mixed[-1], mixed[0]
        print(
            f"{mix}: growth {small['size']} -> {big['size']} stages ({big['size'] / small['size']:.1f}x): "
            f"CPU per tick {big['cpu_per_tick_s'] / small['cpu_per_tick_s']:.1f}x, "
            f"lag p99 {small['lag_p99']:.3f} -> {big['lag_p99']:.3f} s"
        )
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("client, sshd, the busy mix's writer and every 'remote' probe share this machine's CPUs")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
