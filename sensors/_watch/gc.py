"""The garbage collector of a process that watches many stages for a long time.

CPython's thresholds (700, 10, 10) suit a short script. A watcher allocates steadily — each
stage-check leaves new memories, readings and a verdict and frees the last check's by
reference counting, which needs no collector — and the collector only walks what is alive:
with the defaults a young-generation pass ran every few stage-checks of a batch, and a full
pass walked every object of the process (its imports, each stage's state). Measured in one
watcher of 2,500 stages at a 10 s interval (``bench/fleet.py``'s fleet, two ticks): with the
defaults the collector took 10.7% of its CPU (two full passes, of 104 and 130 ms), with the
settings below 2.6%; CPU per tick 1.44 → 1.16 s in that pair of runs (1.47 → 1.36 s and
1.50 → 1.47 s in two more: this machine is noisy).

What startup made (modules, the stage definitions' parse) is frozen: kept out of every later
pass (``gc.freeze``). The young generation is collected every 50,000 net allocations of
container objects, not 700: reference cycles are rare here (a traceback, a closed
connection) and wait a little longer to be freed.
"""

from __future__ import annotations

import gc

#: gen-0 allocations between young passes, gen-0 passes per gen-1 pass, gen-1 per full pass.
THRESHOLDS = (50_000, 20, 10)


def tune_for_watching() -> None:
    """Freeze what exists now and set :data:`THRESHOLDS` (process-wide: called by the
    long-running entry points, ``crosscheck serve`` and ``crosscheck wait``, never by the
    library on its own)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
