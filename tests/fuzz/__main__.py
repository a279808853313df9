"""``python -m tests.fuzz``: run many histories, or one seed.

    python -m tests.fuzz --histories 10000 --workers 4     # the long run (make fuzz)
    python -m tests.fuzz --seed 123 --print                # the replay script of seed 123
    python -m tests.fuzz --seed 123                        # run it, say what it found
    python -m tests.fuzz --seed 123 --shrink               # and cut it down to the steps that matter

Exit status: 0 when no history found a (hard) false complete, a false failed, an
exit-code/advance mismatch or an error (and, with ``--must-share P``, at least P % of the
watches that must complete did so within 3 checks of the evidence settling); 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections import Counter, defaultdict

from tests.fuzz.generate import generate
from tests.fuzz.history import History, run_history, run_seed
from tests.fuzz.report import print_world


def long_run(
    first: int, count: int, workers: int, out: str | None, quiet: bool, must_share: float | None = None
) -> int:
    began = time.monotonic()
    totals: Counter[str] = Counter()
    by_class: dict[str, Counter[str]] = defaultdict(Counter)
    routes: dict[str, list[int]] = defaultdict(list)
    soft_routes: dict[str, list[int]] = defaultdict(list)
    problems: list[str] = []
    kinds: Counter[str] = Counter()
    failing: list[int] = []
    records = []
    outcomes: Counter[str] = Counter()
    must_misses: list[str] = []
    either_why: Counter[str] = Counter()
    seeds = range(first, first + count)
    ctx = multiprocessing.get_context("spawn")
    sink = open(out, "w") if out else None  # noqa: SIM115 (one line per history as it ends)
    with ctx.Pool(workers, maxtasksperchild=100) as pool:
        for done, s in enumerate(pool.imap_unordered(run_seed, seeds), 1):
            records.append(s)
            if sink is not None:
                sink.write(json.dumps(s) + "\n")
                sink.flush()
            totals.update(
                histories=1,
                steps=s["steps"],
                checks=s["checks"],
                completes=s["completes"],
                hard=s["hard"],
                soft=s["soft"],
            )
            kinds.update(s.get("by_kind", {}))
            totals.update(false_failed=s["false_failed"])
            for o in s["obligations"]:
                outcomes[o["class"] + ":" + o["outcome"]] += 1
                if o["class"] == "must" and o["outcome"] in ("missed", "late"):
                    must_misses.append(
                        f"seed {s['seed']} watch {o['watch']} ({o['kind']}) run {o['run']}: {o['outcome']},"
                        f" {o['checks']} checks; said {' | '.join(o['last'] or [])[:300]}"
                    )
                if o["class"] == "either" and o.get("why"):
                    either_why[_shape(o["why"])] += 1
            for f in s["false_failed_findings"]:
                routes["false-failed " + f["why"][:60]].append(s["seed"])
            c = by_class[s["cls"]]
            c.update(histories=1, hard=s["hard"], soft=s["soft"], failing=1 if s["hard"] else 0)
            for f in s["findings"]:
                routes[f["route"]].append(s["seed"])
            for f in s["soft_findings"]:
                soft_routes[f["route"]].append(s["seed"])
            if s["hard"] or s["false_failed"] or s["exit_code_errors"] or s["errors"]:
                failing.append(s["seed"])
            for e in s["exit_code_errors"]:
                problems.append(f"seed {s['seed']}: exit code / advance: {e}")
            for e in s["errors"]:
                problems.append(f"seed {s['seed']}: error: {e}")
            if not quiet and (done % 25 == 0 or done == count):
                elapsed = time.monotonic() - began
                print(
                    f"[{done}/{count}] {elapsed:.0f}s, {done / elapsed * 60:.1f} histories/min,"
                    f" false completes {totals['hard']}, false failed {totals['false_failed']},"
                    f" failing histories {len(set(failing))}",
                    flush=True,
                )
    elapsed = time.monotonic() - began
    print()
    print(f"histories tried:       {totals['histories']}")
    print(f"steps:                 {totals['steps']}")
    print(f"checks:                {totals['checks']}")
    print(f"true completes:        {totals['completes']} (complete verdicts the truth allowed)")
    print(f"false completes found: {totals['hard']} (in {sum(1 for r in records if r['hard'])} histories)")
    print(
        f"soft false completes:  {totals['soft']} (declared by every configured signal, then died or unseen)"
    )
    print(
        f"seconds:               {elapsed:.0f} ({totals['histories'] / elapsed * 60:.1f} histories/min, {workers} workers)"
    )
    print(
        "checks by watch:       "
        + ", ".join(
            f"{k} {kinds[k]} ({kinds[k + ':complete']} true completes)"
            for k in ("checker", "status", "wait", "serve")
        )
    )
    print("\nby class of history:  histories  failing  false completes  soft")
    for cls in sorted(by_class):
        c = by_class[cls]
        print(f"  {cls:<18} {c['histories']:>9} {c['failing']:>8} {c['hard']:>16} {c['soft']:>5}")
    if routes:
        print("\nfalse-complete routes (count, first seeds):")
        for route, found in sorted(routes.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(found):>5}  {route}  seeds {sorted(set(found))[:5]}")
    if soft_routes:
        print("\nsoft routes (count, first seeds):")
        for route, found in sorted(soft_routes.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(found):>5}  {route}  seeds {sorted(set(found))[:5]}")
    must = sum(v for k, v in outcomes.items() if k.startswith("must:"))
    measured = must - outcomes["must:short"] - outcomes["must:followed"]
    within = outcomes["must:within3"]
    share = 100.0 * within / measured if measured else 100.0
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
    for why, n in either_why.most_common(8):
        print(f"    {n:>5}  {why}")
    for m in must_misses[:40]:
        print("  MUST-COMPLETE NOT MET: " + m)
    for p in problems[:50]:
        print(p)
    if sink is not None:
        sink.close()
    below = must_share is not None and share < must_share
    if below:
        print(f"\nmust-complete share {share:.1f} % is below --must-share {must_share:g} %")
    return 1 if failing or below else 0


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
    ap.add_argument(
        "--must-share",
        type=float,
        default=None,
        metavar="P",
        help="fail unless at least P %% of must-complete watches complete within 3 checks (make fuzz: 99)",
    )
    args = ap.parse_args(argv)
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
