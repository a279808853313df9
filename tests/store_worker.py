"""A second process for the store tests: ``python -m tests.store_worker MODE LOCATION ...``.

Each mode prints one JSON line per step, flushed, so the test can read what happened before
it killed the process.

- ``save-loop LOCATION``: save stage ``s``@``local`` in a tight loop, printing ``{"i": i}``
  after each commit (every third save is a verdict change, appended to the history);
- ``lease LOCATION HOLDER TTL SECONDS START_AT``: from START_AT (epoch, or ``go``: see
  ``_start``), acquire the lease of
  ``s``@``local`` every TTL/10 s for SECONDS, printing ``{"t", "held", "holder", "expires_at"}``;
- ``announce LOCATION RUNS START_AT``: from START_AT, announce runs ``run-0``… ``complete``,
  printing ``{"run", "first"}``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from sensors._store import StageKey, open_store

KEY = StageKey("s", "local")
PAD = "x" * 2000  # a memory about the size of a real one


def _say(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _wait_until(start_at: float) -> None:
    while time.time() < start_at:
        time.sleep(0.001)


def _start(arg: str) -> float:
    """When to begin: an epoch time, or ``go``: once the store is open, say ``ready`` and begin
    at the line the test writes (an interpreter that starts slowly on a loaded machine, after
    an epoch set beforehand, would begin alone)."""
    if arg != "go":
        return float(arg)
    _say(ready=True)
    sys.stdin.readline()
    return time.time()


def main(argv: list[str]) -> int:
    mode, location, *rest = argv
    store = open_store(location)
    if mode == "save-loop":
        before = store.load(KEY)  # a restarted watcher carries on from its memory
        i = json.loads(before.memory)["i"] + 1 if before else 0
        while True:
            memory = json.dumps({"i": i, "pad": PAD})
            verdict = {"verdict": "running" if i % 2 else "stalled", "i": i}
            store.save(
                KEY, memory=memory, fingerprint={"i": str(i)}, verdict=verdict, version=1, changed=i % 3 == 0
            )
            _say(i=i)
            i += 1
    if mode == "lease":
        holder, ttl, seconds, start_at = rest[0], float(rest[1]), float(rest[2]), _start(rest[3])
        _wait_until(start_at)
        while time.time() < start_at + seconds:
            lease = store.acquire(KEY, holder, ttl)
            _say(t=time.time(), held=lease.held, holder=lease.holder, expires_at=lease.expires_at)
            time.sleep(ttl / 10)
        return 0
    if mode == "announce":
        runs, start_at = int(rest[0]), float(rest[1])
        _wait_until(start_at)
        for r in range(runs):
            got = store.announce(KEY, f"run-{r}", "complete", {"verdict": "complete", "pid": os.getpid()})
            _say(run=r, first=got.first, pid=got.verdict["pid"] if got.verdict else None)
        return 0
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
