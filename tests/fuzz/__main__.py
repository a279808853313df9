"""``python -m tests.fuzz``: run many histories, or one seed.

    python -m tests.fuzz --histories 10000 --workers 4     # the long run (make fuzz)
    python -m tests.fuzz --seed 123 --print                # the replay script of seed 123
    python -m tests.fuzz --seed 123                        # run it, say what it found
    python -m tests.fuzz --seed 123 --shrink               # and cut it down to the steps that matter

Exit status: 0 when no history found a (hard) false complete, an exit-code/advance mismatch
or an error; 1 otherwise.
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


def long_run(first: int, count: int, workers: int, out: str | None, quiet: bool) -> int:
    began = time.monotonic()
    totals: Counter[str] = Counter()
    by_class: dict[str, Counter[str]] = defaultdict(Counter)
    routes: dict[str, list[int]] = defaultdict(list)
    soft_routes: dict[str, list[int]] = defaultdict(list)
    problems: list[str] = []
    kinds: Counter[str] = Counter()
    failing: list[int] = []
    records = []
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
            c = by_class[s["cls"]]
            c.update(histories=1, hard=s["hard"], soft=s["soft"], failing=1 if s["hard"] else 0)
            for f in s["findings"]:
                routes[f["route"]].append(s["seed"])
            for f in s["soft_findings"]:
                soft_routes[f["route"]].append(s["seed"])
            if s["hard"] or s["exit_code_errors"] or s["errors"]:
                failing.append(s["seed"])
            for e in s["exit_code_errors"]:
                problems.append(f"seed {s['seed']}: exit code / advance: {e}")
            for e in s["errors"]:
                problems.append(f"seed {s['seed']}: error: {e}")
            if not quiet and (done % 25 == 0 or done == count):
                elapsed = time.monotonic() - began
                print(
                    f"[{done}/{count}] {elapsed:.0f}s, {done / elapsed * 60:.1f} histories/min,"
                    f" false completes {totals['hard']} in {len(set(failing))} histories",
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
    for p in problems[:50]:
        print(p)
    if sink is not None:
        sink.close()
    return 1 if failing else 0


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
        return 1 if (world.findings or world.exit_code_errors or world.errors) else 0
    return long_run(args.first_seed, args.histories, args.workers, args.out, args.quiet)


if __name__ == "__main__":
    sys.exit(main())
