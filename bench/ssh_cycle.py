"""How long a check over SSH takes, against a loopback sshd (tests/sshd.py).

Run: ``python bench/ssh_cycle.py [--reps N] [--hosts 5,50]``. Measured side by side:

a. crosscheck: one ``Checker.check()`` (probe + parsing + verdict) on a reused connection;
b. naive: a new SSH connection per signal per check (4 connections, one command each), as an
   Airflow SSH sensor does. Each naive connection is an ``SSHHost`` too, so it has
   TCP_NODELAY; the real naive way also pays Nagle stalls, so this baseline is flattering;
c. floor: ``true`` on a reused connection, plus the same check run locally (/bin/sh);
d. 5 vs 50 hosts (separate connections to the one sshd) checked concurrently by a thread
   pool. On loopback, the "remote" probes of all hosts run on this machine's own CPUs, so a
   second row uses a probe whose remote side only waits (``sleep 0.2``): that shows what the
   checking side costs when each host does its work on its own CPUs.

Each figure is the median of N repetitions. Rows are repeated for each account: the
current user (whose login shell's rc files run on every exec: sshd starts commands through
the login shell, and Debian's bash sources ~/.bashrc for sshd) and, when run as root, a user
whose login shell is /bin/sh, which isolates crosscheck's own cost.
"""

from __future__ import annotations

import argparse
import os
import pwd
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sensors._check.checker import Checker  # noqa: E402 - after the sys.path line above
from sensors._config.stage import SSHSpec, Stage, stage_from_dict  # noqa: E402
from sensors._hosts import LocalHost  # noqa: E402
from sensors._hosts.ssh import SSHHost  # noqa: E402
from tests.sshd import SSHD, running_sshd  # noqa: E402

SH_USER = "crosscheck-sh"
TIMEOUT = 30.0


def make_workdir() -> Path:
    """A log (1 MB) and an output directory (500 files) for the probe to read."""
    work = Path(tempfile.mkdtemp(prefix="crosscheck-bench-"))
    work.chmod(0o755)
    (work / "train.log").write_text("".join(f"step {i} loss 0.{i % 97}\n" for i in range(50_000)))
    out = work / "out"
    out.mkdir()
    for i in range(500):
        (out / f"shard-{i:04d}.pt").write_bytes(b"x")
    return work


def naive_commands(work: Path) -> list[bytes]:
    """One command per signal, as a sensor per signal would run them."""
    log, out = work / "train.log", work / "out"
    return [
        b"ps -eo pid,etimes,stat,args\n",
        f"stat -c '%s %Y' '{log}'; tail -c 65536 '{log}'\n".encode(),
        f"find '{out}' -mindepth 1 -maxdepth 1 -name '*.pt' | wc -l\n".encode(),
        b"nvidia-smi --query-gpu=utilization.gpu --format=csv 2>/dev/null; true\n",
    ]


def bench_stage(work: Path) -> Stage:
    """The stage every side checks: process, log and outputs signals."""
    return stage_from_dict(
        {
            "stage": "bench",
            "host": "local",
            "process": {"match": "train[.]py"},
            "log": {"path": str(work / "train.log"), "complete": "^done$"},
            "outputs": {"files": str(work / "out"), "pattern": "*.pt", "expected": 500},
        }
    )


def median_ms(fn: Callable[[], object], reps: int) -> float:
    fn()  # warm-up (connect, page cache)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def ensure_sh_user(server: SSHD) -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SH_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--create-home", "--shell", "/bin/sh", SH_USER],
            check=True,
            capture_output=True,
        )
    subprocess.run(["usermod", "-p", "*", SH_USER], check=True, capture_output=True)
    server.authorize(SH_USER)
    return SH_USER


def check_all(pool: ThreadPoolExecutor, checkers: list[Checker]) -> None:
    """One check of every host at once, as a multi-stage ``crosscheck status`` does."""
    list(pool.map(lambda checker: checker.check(), checkers))


def wait_all(pool: ThreadPoolExecutor, hosts: list[SSHHost]) -> None:
    list(pool.map(lambda host: host.run_script(b"sleep 0.2\n", timeout=TIMEOUT), hosts))


def bench_account(
    server: SSHD, user: str, stage: Stage, work: Path, reps: int, fleet: list[int]
) -> dict[str, float]:
    spec = SSHSpec(**server.spec(user=user))
    res: dict[str, float] = {}
    with SSHHost(spec) as host:
        checker = Checker(stage, host=host)
        assert checker.check().readings["outputs"].evidence["count"] == 500
        res["a"] = median_ms(checker.check, reps)
        res["true"] = median_ms(lambda: host.run_script(b"true\n", timeout=TIMEOUT), reps)
    res["local"] = median_ms(Checker(stage, host=LocalHost()).check, reps)
    res["c"] = res["true"] + res["local"]

    def naive() -> None:
        for cmd in naive_commands(work):
            with SSHHost(spec) as h:
                h.run_script(cmd, timeout=TIMEOUT)

    res["b"] = median_ms(naive, max(3, reps // 3))

    for n in fleet:
        hosts = [SSHHost(spec, name=f"host-{i}") for i in range(n)]
        try:
            with ThreadPoolExecutor(max_workers=n) as pool:
                checkers = [Checker(stage, host=h) for h in hosts]
                res[f"d{n}"] = median_ms(lambda p=pool, cs=checkers: check_all(p, cs), max(3, reps // 3))
                res[f"w{n}"] = median_ms(lambda p=pool, hs=hosts: wait_all(p, hs), max(3, reps // 3))
        finally:
            for h in hosts:
                h.close()
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--hosts", default="5,50", help="fleet sizes, comma-separated")
    args = ap.parse_args(argv)
    fleet = [int(x) for x in args.hosts.split(",")]
    work = make_workdir()
    stage = bench_stage(work)
    print(f"a full Checker.check() per check; median of {args.reps} (fleet: fewer)")
    with running_sshd() as server:
        accounts = [server.user]
        if (sh_user := ensure_sh_user(server)) is not None:
            accounts.append(sh_user)
        results = {u: bench_account(server, u, stage, work, args.reps, fleet) for u in accounts}
    subprocess.run(["rm", "-rf", str(work)], check=False)

    rows = [
        ("a  crosscheck: a check on a reused connection", "a"),
        ("b  naive: 4 new connections, 1 command each", "b"),
        ("c  floor: true (reused) + the check run locally", "c"),
        ("     true on a reused connection", "true"),
        ("     the check on the local host", "local"),
    ]
    for n in fleet:
        rows.append((f"d  {n} hosts concurrently, probe", f"d{n}"))
    for n in fleet:
        rows.append((f"d' {n} hosts concurrently, remote waits 0.2 s", f"w{n}"))
    width = max(len(r[0]) for r in rows)
    print(f"\n{'ms (median)':<{width}}" + "".join(f"{u:>16}" for u in accounts))
    for label, key in rows:
        print(f"{label:<{width}}" + "".join(f"{results[u][key]:>16.1f}" for u in accounts))
    lo, hi = fleet[0], fleet[-1]
    ratios = [
        ("naive / crosscheck  (target >= 15x)", lambda r: r["b"] / r["a"]),
        ("crosscheck / floor  (target <= 1.3x)", lambda r: r["a"] / r["c"]),
        (f"t({hi}) / t({lo}) probe  (target <= 1.5x)", lambda r: r[f"d{hi}"] / r[f"d{lo}"]),
        (f"t({hi}) / t({lo}) remote waits", lambda r: r[f"w{hi}"] / r[f"w{lo}"]),
    ]
    print()
    for label, fn in ratios:
        print(f"{label:<{width}}" + "".join(f"{fn(results[u]):>15.2f}x" for u in accounts))
    print(f"\nmachine: {os.cpu_count()} CPUs; client, sshd and every 'remote' probe share them")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
