"""``python -m tests.fuzz``: run many histories, or one seed.

    python -m tests.fuzz --histories 10000 --workers 4     # the long run (make fuzz)
    python -m tests.fuzz --seed 123 --print                # the replay script of seed 123
    python -m tests.fuzz --seed 123                        # run it, say what it found
    python -m tests.fuzz --seed 123 --shrink               # and cut it down to the steps that matter
    python -m tests.fuzz --summarize a.jsonl b.jsonl       # report on what --out files hold

Exit status: 0 when no history found a (hard) false complete, a false failed, an
exit-code/advance mismatch or an error (and, with ``--must-share P``, at least P % of the
watches that must complete did so within 3 checks of the evidence settling); 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import signal
import sys
import time
from collections import Counter, defaultdict

from tests.fuzz.generate import generate
from tests.fuzz.history import History, run_history, run_seed, worker_on_stop
from tests.fuzz.report import print_world


class Tally:
    """What a long run's histories found, added one history's summary at a time (as a worker
    hands it back, or as ``--out`` wrote it: ``--summarize`` reads those lines again)."""

    def __init__(self) -> None:
        self.totals: Counter[str] = Counter()
        self.by_class: dict[str, Counter[str]] = defaultdict(Counter)
        self.routes: dict[str, list[int]] = defaultdict(list)
        self.soft_routes: dict[str, list[int]] = defaultdict(list)
        self.problems: list[str] = []
        self.kinds: Counter[str] = Counter()
        self.failing: list[int] = []
        self.hard_histories = 0
        self.outcomes: Counter[str] = Counter()
        self.must_misses: list[str] = []
        self.either_why: Counter[str] = Counter()
        self.seeds: list[int] = []

    def add(self, s: dict) -> None:
        self.seeds.append(s["seed"])
        self.totals.update(
            histories=1,
            steps=s["steps"],
            checks=s["checks"],
            completes=s["completes"],
            hard=s["hard"],
            soft=s["soft"],
            false_failed=s["false_failed"],
        )
        self.hard_histories += 1 if s["hard"] else 0
        self.kinds.update(s.get("by_kind", {}))
        for o in s["obligations"]:
            self.outcomes[o["class"] + ":" + o["outcome"]] += 1
            if o["class"] == "must" and o["outcome"] in ("missed", "late"):
                self.must_misses.append(
                    f"seed {s['seed']} watch {o['watch']} ({o['kind']}) run {o['run']}: {o['outcome']},"
                    f" {o['checks']} checks; said {' | '.join(o['last'] or [])[:300]}"
                )
            if o["class"] == "either" and o.get("why"):
                self.either_why[_shape(o["why"])] += 1
        for f in s["false_failed_findings"]:
            self.routes["false-failed " + f["why"][:60]].append(s["seed"])
        c = self.by_class[s["cls"]]
        c.update(histories=1, hard=s["hard"], soft=s["soft"], failing=1 if s["hard"] else 0)
        for f in s["findings"]:
            self.routes[f["route"]].append(s["seed"])
        for f in s["soft_findings"]:
            self.soft_routes[f["route"]].append(s["seed"])
        if s["hard"] or s["false_failed"] or s["exit_code_errors"] or s["errors"]:
            self.failing.append(s["seed"])
        for e in s["exit_code_errors"]:
            self.problems.append(f"seed {s['seed']}: exit code / advance: {e}")
        for e in s["errors"]:
            self.problems.append(f"seed {s['seed']}: error: {e}")

    def progress(self, count: int, elapsed: float) -> str:
        done = self.totals["histories"]
        return (
            f"[{done}/{count}] {elapsed:.0f}s, {done / elapsed * 60:.1f} histories/min,"
            f" false completes {self.totals['hard']}, false failed {self.totals['false_failed']},"
            f" failing histories {len(set(self.failing))}"
        )

    def share(self) -> tuple[int, int, int, float]:
        """Must-complete (watch, run) pairs, those measured, those completed within 3 checks,
        and that share (%)."""
        must = sum(v for k, v in self.outcomes.items() if k.startswith("must:"))
        measured = must - self.outcomes["must:short"] - self.outcomes["must:followed"]
        within = self.outcomes["must:within3"]
        return must, measured, within, 100.0 * within / measured if measured else 100.0

    def report(self, elapsed: float | None, workers: int | None, must_share: float | None = None) -> int:
        """Print the figures; 1 where a history failed or the must-complete share is below
        ``must_share``."""
        totals = self.totals
        print()
        seeds = sorted(set(self.seeds))
        if seeds:
            print(f"seeds:                 {seeds[0]}..{seeds[-1]} ({len(seeds)} distinct)")
        print(f"histories tried:       {totals['histories']}")
        print(f"steps:                 {totals['steps']}")
        print(f"checks:                {totals['checks']}")
        print(f"true completes:        {totals['completes']} (complete verdicts the truth allowed)")
        print(f"false completes found: {totals['hard']} (in {self.hard_histories} histories)")
        print(
            f"soft false completes:  {totals['soft']} (declared by every configured signal, then died or unseen)"
        )
        if elapsed and workers:
            print(
                f"seconds:               {elapsed:.0f} ({totals['histories'] / elapsed * 60:.1f}"
                f" histories/min, {workers} workers)"
            )
        print(
            "checks by watch:       "
            + ", ".join(
                f"{k} {self.kinds[k]} ({self.kinds[k + ':complete']} true completes)"
                for k in ("checker", "status", "wait", "serve")
            )
        )
        print("\nby class of history:  histories  failing  false completes  soft")
        for cls in sorted(self.by_class):
            c = self.by_class[cls]
            print(f"  {cls:<18} {c['histories']:>9} {c['failing']:>8} {c['hard']:>16} {c['soft']:>5}")
        for title, routes in (("false-complete", self.routes), ("soft", self.soft_routes)):
            if routes:
                print(f"\n{title} routes (count, first seeds):")
                for route, found in sorted(routes.items(), key=lambda kv: -len(kv[1])):
                    print(f"  {len(found):>5}  {route}  seeds {sorted(set(found))[:5]}")
        must, measured, within, share = self.share()
        outcomes = self.outcomes
        print("\nthe other side (two-sided oracle):")
        print(f"  false failed:          {totals['false_failed']} (failed where the run did not fail)")
        print(
            f"  must complete:         {must} (watch, run) pairs; {measured} measured (3 own checks after"
            f" settling, or a complete), {within} completed within 3 checks: {share:.1f} %"
        )
        print(
            f"    late {outcomes['must:late']}, missed {outcomes['must:missed']}, too few checks"
            f" {outcomes['must:short']}, only followed verdicts {outcomes['must:followed']}"
        )
        print(
            f"  either:                {outcomes['either:either']} (watch, run) pairs: complete allowed, not settled"
        )
        for why, n in self.either_why.most_common(8):
            print(f"    {n:>5}  {why}")
        for m in self.must_misses[:40]:
            print("  MUST-COMPLETE NOT MET: " + m)
        for p in self.problems[:50]:
            print(p)
        below = must_share is not None and share < must_share
        if below:
            print(f"\nmust-complete share {share:.1f} % is below --must-share {must_share:g} %")
        return 1 if self.failing or below else 0


def long_run(
    first: int, count: int, workers: int, out: str | None, quiet: bool, must_share: float | None = None
) -> int:
    """Run seeds ``first`` .. ``first + count - 1`` in ``workers`` processes and report. An
    interrupted run (Ctrl-C, SIGTERM) reports on the histories that ended, says so, and
    fails: its figures are not a whole run's."""
    began = time.monotonic()
    tally = Tally()
    seeds = range(first, first + count)
    ctx = multiprocessing.get_context("spawn")
    sink = open(out, "w") if out else None  # noqa: SIM115 (one line per history as it ends)
    stop: list[int] = []  # the signal that asked this run to stop (SIGTERM; Ctrl-C's SIGINT)
    handlers = {sig: signal.signal(sig, lambda signum, frame: stop.append(signum)) for sig in _STOP}
    pool = ctx.Pool(workers, maxtasksperchild=100, initializer=worker_on_stop)
    try:
        results = pool.imap_unordered(run_seed, seeds)
        while tally.totals["histories"] < count and not stop:
            try:
                s = results.next(timeout=0.5)
            except multiprocessing.TimeoutError:
                continue
            tally.add(s)
            if sink is not None:
                sink.write(json.dumps(s) + "\n")
                sink.flush()
            done = tally.totals["histories"]
            if not quiet and (done % 25 == 0 or done == count):
                print(tally.progress(count, time.monotonic() - began), flush=True)
    finally:
        pool.terminate()  # the histories still running (a job reads its steps on stdin: it ends with its worker)
        pool.join()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if sink is not None:
            sink.close()
    rc = tally.report(time.monotonic() - began, workers, must_share)
    if stop:
        print(f"\ninterrupted: {tally.totals['histories']} of {count} histories ended; not a whole run")
        return 1
    return rc


#: The signals that stop a long run early, with a report on the histories that ended.
_STOP = (signal.SIGINT, signal.SIGTERM)


def summarize(paths: list[str], must_share: float | None) -> int:
    """Report again on the histories that ``--out`` files hold (an interrupted run's, or
    several runs' of one commit)."""
    tally = Tally()
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.strip():
                    tally.add(json.loads(line))
    return tally.report(None, None, must_share)


def _shape(why: str) -> str:
    """A reason with its run numbers taken out, for counting."""
    import re

    return re.sub(r"run \d+", "run N", why)[:100]


def shrink(history: History, route: str | None, rounds: int = 2) -> History:
    """Greedily drop steps while the history still finds a hard false complete (of ``route``)."""

    def reproduces(steps: list) -> bool:
        world = run_history(History(history.seed, history.cls, steps))
        if world.errors:
            return False
        return any(route is None or f.route == route for f in world.findings)

    steps = list(history.steps)
    chunk = max(1, len(steps) // 2)
    while chunk >= 1:
        i = 0
        while i < len(steps):
            candidate = steps[:i] + steps[i + chunk :]
            if candidate and all(reproduces(candidate) for _ in range(rounds)):
                steps = candidate
                print(f"  shrunk to {len(steps)} steps", flush=True)
            else:
                i += chunk
        chunk //= 2
    return History(history.seed, history.cls, steps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--histories", type=int, default=100)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, help="one history: run it (or --print its replay script)")
    ap.add_argument("--print", action="store_true", help="print the seed's replay script, do not run it")
    ap.add_argument("--shrink", action="store_true", help="with --seed: cut the history down to what matters")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--out", help="one JSON line per history")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--summarize", nargs="+", metavar="FILE", help="report on the histories of --out files")
    ap.add_argument(
        "--must-share",
        type=float,
        default=None,
        metavar="P",
        help="fail unless at least P %% of must-complete watches complete within 3 checks (make fuzz: 99)",
    )
    args = ap.parse_args(argv)
    if args.summarize:
        return summarize(args.summarize, args.must_share)
    if args.seed is not None:
        history = generate(args.seed)
        if args.print:
            print(history.script())
            return 0
        world = run_history(history, verbose=args.verbose)
        print_world(world)
        if args.shrink and world.findings:
            small = shrink(history, world.findings[0].route)
            print(small.script())
        return 1 if (world.findings or world.false_failed or world.exit_code_errors or world.errors) else 0
    return long_run(args.first_seed, args.histories, args.workers, args.out, args.quiet, args.must_share)


if __name__ == "__main__":
    sys.exit(main())
