"""What the durable memory adds to a check, beside a local check.

Measured in this one process: ``Checker.check()`` on a small local log stage (``since="1h"``),
then what a check adds to it when a store keeps the stage's memory: one ``store.save(...)``
of a memory the size of a real one, which also renews the watch's lease in the same round
trip (``renew=``; the check after it then skips its own renewal: ``Persistence.hold``). For
SQLite and (when Debian's postgresql package is installed) a throwaway PostgreSQL cluster with
its durable defaults (fsync on). Each with 1 and with 100,000 history entries for the stage
(retention 100,000, so every changed save also prunes one: the steady state). Two kinds:
``unchanged`` (most checks) and ``changed`` (a verdict change: history append + prune). The
load a watch does once, when it starts, is shown beside them but is not a per-check cost.

Target (issue 11): what a check adds costs under 5 % of a local check (p50).
Run: ``python bench/store.py [--repeat 300] [--history 100000]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sensors import Checker, stage_from_dict
from sensors._store import StageKey, open_store
from sensors._store.base import dumps, history_seal

KEY = StageKey("bench", "local")


def _percentiles(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]


def _timed(fn, repeat: int) -> list[float]:
    fn()
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def _prefill(store, n: int, verdict: dict) -> None:
    """n history entries for KEY, written in bulk (n saves would take minutes)."""
    vd, now = dumps(verdict), time.time() - n
    rows = [
        (
            KEY.stage,
            KEY.host,
            seq,
            now + seq,
            "running",
            vd,
            history_seal(KEY.stage, KEY.host, seq, now + seq, "running", vd),
        )
        for seq in range(1, n + 1)
    ]
    cols = ("stage", "host", "seq", "at", "state", "verdict", "seal")
    if hasattr(store, "engine"):
        from sensors._store.postgres import history_t

        # One transaction (the store's engine autocommits by default).
        with store.engine.connect().execution_options(isolation_level="READ COMMITTED") as conn, conn.begin():
            conn.execute(history_t.insert(), [dict(zip(cols, r, strict=True)) for r in rows])
    else:
        conn = store._conn
        conn.execute("BEGIN")
        conn.executemany(
            f"INSERT INTO crosscheck_history ({', '.join(cols)}) VALUES (?, ?, ?, ?, ?, ?, ?)", rows
        )
        conn.execute("COMMIT")


def _cycles(location: str, history: int, memory: str, verdict: dict, repeat: int) -> dict[str, list[float]]:
    out = {}
    with open_store(location, retention=100_000) as store:
        if history > 1:
            _prefill(store, history - 1, verdict)
        store.save(KEY, memory=memory, fingerprint={"log": "f"}, verdict=verdict, version=1, changed=True)
        assert len(store.history(KEY.stage, KEY.host, limit=3)) == min(3, history)
        store.acquire(KEY, "bench", 60.0)
        for changed in (False, True):

            def cycle(changed=changed):
                # What every check adds: its save, which also renews the watch's lease in the
                # same round trip (Persistence.save; the check after it then skips a renewal).
                lease = store.save(
                    KEY,
                    memory=memory,
                    fingerprint={"log": "f"},
                    verdict=verdict,
                    version=1,
                    changed=changed,
                    renew=("bench", 60.0),
                )
                assert lease is not None and lease.held

            out["changed" if changed else "unchanged"] = _timed(cycle, repeat)
        # Once per watch (its start), not per check: shown, not in the target.
        out["load (once per watch)"] = _timed(lambda: store.load(KEY), repeat)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--history", type=int, default=100_000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="crosscheck-bench-store-") as tmp:
        root = Path(tmp)
        log = root / "extract.log"
        log.write_text("".join(f"[{i}/40000] extracted, ETA 3 minutes\n" for i in range(2000)))
        stage = stage_from_dict(
            {"stage": "bench", "host": "local", "log": {"path": str(log), "complete": "^Extraction complete"}}
        )
        with Checker(stage, since="1h") as checker:
            verdict_doc = checker.check().to_json()
            check_p50, check_p99 = _percentiles(_timed(checker.check, 50))
        # A memory the size of a real one: the verdict's JSON and a little state besides.
        memory = json.dumps({"verdict": verdict_doc, "pad": "m" * 1000})
        print(f"local check (log stage, since=1h): p50 {check_p50:.2f} ms  p99 {check_p99:.2f} ms")
        print(f"memory {len(memory)} B, verdict {len(dumps(verdict_doc))} B, {args.repeat} cycles each\n")

        backends = {"sqlite": lambda n: str(root / f"state-{n}.db")}
        pg = None
        try:
            from tests.postgres import running_postgres, why_unavailable

            reason = why_unavailable()
        except ImportError as exc:
            reason = str(exc)
        if reason is None:
            pg = running_postgres(fsync=True)
            server = pg.__enter__()
            backends["postgres"] = lambda n: server.create_database()
        else:
            print(f"(PostgreSQL skipped: {reason})\n")

        rows = []
        try:
            for name, location in backends.items():
                for history in (1, args.history):
                    for kind, times in _cycles(
                        location(history), history, memory, verdict_doc, args.repeat
                    ).items():
                        rows.append((name, history, kind, *_percentiles(times)))
        finally:
            if pg is not None:
                pg.__exit__(None, None, None)

    print(
        f"{'backend':9} {'history':>8} {'per check':22} {'p50 ms':>8} {'p99 ms':>8}"
        f" {'p50/check':>10} {'p99/check':>10}"
    )
    worst = 0.0
    for name, history, kind, p50, p99 in rows:
        ratio = p50 / check_p50
        if not kind.startswith("load"):
            worst = max(worst, ratio)
        print(
            f"{name:9} {history:8,} {kind:22} {p50:8.3f} {p99:8.3f}"
            f" {100 * ratio:9.2f}% {100 * p99 / check_p50:9.2f}%"
        )
    print(f"\nworst p50 ratio store/check: {100 * worst:.2f} %  (target < 5 %)")
    return 0 if worst < 0.05 else 1


if __name__ == "__main__":
    raise SystemExit(main())
