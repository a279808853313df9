"""bench/fleet.py in its smoke size: real sshd ports as hosts, one Watcher, one round trip per
host per tick (the full run is `make bench`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sshd import sshd_available

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not sshd_available(), reason="needs /usr/sbin/sshd")
def test_fleet_bench_quick_makes_one_round_trip_per_host_per_tick() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "fleet.py"), "--quick", "--sizes", "100", "--ticks", "1",
         "--rounds", "1",
         # Side by side is not asserted here (its ratios want `make bench`'s 24 rounds of 40
         # stages): 8 stages a group still run every line of it, in a quarter of the time.
         "--side-stages", "8"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert "ok   round trips per host per tick = 1" in out.stdout, out.stdout + out.stderr
    assert "ok   every stage checked every measured tick" in out.stdout, out.stdout
    assert "stages checked every measured tick 100/100" in out.stdout, out.stdout
