"""The signals, one module each, and their registry (the order they are read in).

=========  ========================================  ==========================================
signal     reads                                     module
=========  ========================================  ==========================================
process    /proc/*/stat and command lines, framed    ``process`` (+ ``procfs``: the records)
log        stat, the tail, the bytes at the last end ``log``
outputs    a directory's count or a JSONL's records  ``outputs``
gpu        NVML here, or nvidia-smi in the probe     ``gpu/`` (a package: snapshot, NVML, smi,
                                                     attribution, reading, spec, signal)
=========  ========================================  ==========================================

The process signal comes first: it learns the job's PIDs (the GPU attribution) and, when it
first sees the job alive, where the run begins (the log's binding). See ``base`` for what a
signal is and how to add one.

May import :mod:`sensors._base` and :mod:`sensors._run` (run binding).
"""

from __future__ import annotations

from typing import Any

from sensors._signals import gpu, log, outputs, process
from sensors._signals.base import CheckFacts, ProbeInputs, Signal

#: Every signal, in the order a check reads them.
SIGNALS: tuple[Signal[Any, Any], ...] = (process.SIGNAL, log.SIGNAL, outputs.SIGNAL, gpu.SIGNAL)

__all__ = ["SIGNALS", "CheckFacts", "ProbeInputs", "Signal"]
