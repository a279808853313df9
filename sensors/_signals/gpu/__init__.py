"""The GPU signal: what the GPUs compute, read through NVML locally or nvidia-smi remotely.

Two readers produce one value, a :class:`GpuSnapshot`: :func:`read_local` reads NVML in this
process through nvidia-ml-py (module ``pynvml``), and :func:`parse_remote` reads the text of
:data:`REMOTE_SECTIONS`, POSIX ``sh`` snippets for the one-round-trip probe on a host without
Python. :func:`gpu_reading` is a pure function from a snapshot, the process signal's PIDs and
the previous :class:`GpuWindow` to a :class:`~sensors._base.model.Reading` and the next window.
What the reading says, which GPUs count, and why idle needs a window sampled without gaps:
docs/gpu.md.

Layout (one module per job; this package re-exports what other code uses):

- :mod:`~sensors._signals.gpu.spec`: :class:`GpuSpec`, the stage's ``gpu:`` section (which GPUs,
  what idle means).
- :mod:`~sensors._signals.gpu.snapshot`: the values both readers produce (:class:`GpuSnapshot`).
- :mod:`~sensors._signals.gpu.nvml`: :func:`read_local`, NVML in this process.
- :mod:`~sensors._signals.gpu.smi`: :data:`REMOTE_SECTIONS` (the probe's snippets), :func:`parse_remote`.
- :mod:`~sensors._signals.gpu.attribution`: NSpid maps and whose GPU processes are the job's.
- :mod:`~sensors._signals.gpu.reading`: the idle window, :func:`gpu_reading`, :class:`GpuMemory` and
  :func:`read_gpu` (what the signal calls).
- :mod:`~sensors._signals.gpu.signal`: :data:`SIGNAL`, the registration (the probe's
  :func:`snippet` and the reader).
"""

from sensors._signals.gpu.attribution import local_nspid_map, parse_nspid
from sensors._signals.gpu.nvml import read_local
from sensors._signals.gpu.reading import (
    MAX_BUCKETS_PER_READ,
    MAX_GAP_FACTOR,
    GpuMemory,
    GpuWindow,
    gpu_reading,
    read_gpu,
)
from sensors._signals.gpu.signal import SIGNAL, snippet
from sensors._signals.gpu.smi import REMOTE_SECTIONS, parse_remote, remote_nspid_map, remote_sections
from sensors._signals.gpu.snapshot import BOGUS_PIDS, GpuDevice, GpuProcess, GpuSnapshot, matches
from sensors._signals.gpu.spec import GpuSpec  # sensors._config.stage imports it from here

__all__ = [
    "BOGUS_PIDS",
    "MAX_BUCKETS_PER_READ",
    "MAX_GAP_FACTOR",
    "REMOTE_SECTIONS",
    "SIGNAL",
    "GpuDevice",
    "GpuMemory",
    "GpuProcess",
    "GpuSnapshot",
    "GpuSpec",
    "GpuWindow",
    "gpu_reading",
    "local_nspid_map",
    "matches",
    "parse_nspid",
    "parse_remote",
    "read_gpu",
    "read_local",
    "remote_nspid_map",
    "remote_sections",
    "snippet",
]
