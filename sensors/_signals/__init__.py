"""The signals, one module each, and their registry (the order they are read in).

==========  =======================================  ==========================================
signal      reads                                    module
==========  =======================================  ==========================================
supervisor  docker inspect, systemctl show, sacct    ``supervisor`` (the record: ``_run``)
process    /proc/*/stat and command lines, framed    ``process`` (+ ``procfs``: the records)
log        stat, the tail, the bytes at the last end ``log``
outputs    a directory's count or a JSONL's records  ``outputs``
gpu        NVML here, or nvidia-smi in the probe     ``gpu/`` (a package: snapshot, NVML, smi,
                                                     attribution, reading, spec, signal)
=========  ========================================  ==========================================

The supervisor's record comes first, where a stage names one: its identity is the run, its
PIDs the job's. Then the process signal: it learns the job's PIDs (the GPU attribution) and, when it
first sees the job alive, where the run begins (the log's binding). See ``base`` for what a
signal is and how to add one.

May import :mod:`sensors._base` and :mod:`sensors._run` (run binding).
"""

from __future__ import annotations

from typing import Any

from sensors._signals import gpu, log, outputs, process, supervisor
from sensors._signals.base import CheckFacts, ProbeInputs, Signal

#: Every signal, in the order a check reads them.
SIGNALS: tuple[Signal[Any, Any], ...] = (
    supervisor.SIGNAL,
    process.SIGNAL,
    log.SIGNAL,
    outputs.SIGNAL,
    gpu.SIGNAL,
)

__all__ = ["SIGNALS", "CheckFacts", "ProbeInputs", "Signal"]
