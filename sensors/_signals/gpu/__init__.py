"""The GPU signal: what the GPUs compute, read through NVML locally or nvidia-smi remotely.

Two readers produce one value, a :class:`GpuSnapshot`:

- :func:`read_local` reads NVML in this process through nvidia-ml-py (module ``pynvml``).
- :data:`REMOTE_SECTIONS` are POSIX ``sh`` snippets for the one-round-trip probe on a host
  without Python; :func:`parse_remote` turns their raw text into the same snapshot.

:func:`gpu_reading` is a pure function from a snapshot, the process signal's PIDs and the
previous :class:`GpuWindow` to a :class:`~sensors._base.model.Reading` and the next window.

What the reading says (incident 2: 92 GB allocated at 0 % while the job was still working):

- ``unknown``: no driver, no nvidia-smi, an NVML error, garbled output, a configured GPU not
  found, or no utilisation reported for a GPU that counts (``[N/A]``, NotSupported, and no
  driver samples in this read) while none is busy. Never "idle" for want of an answer.
- ``working``: a GPU the job may be using reached ``idle_below`` in some sample of the
  window, *or* idle has not yet lasted ``idle_for``, sampled without a gap (detail:
  ``idle for 20s of 60s``, and the gap if there was one). Idle not yet established is not
  idle: saying ``unknown`` there would make every fresh watcher's first minute look broken,
  and ``done`` would be a guess. So ``working`` means "not shown idle".
- ``done``: every sample of those GPUs, over a window reaching back at least ``idle_for``
  seconds (and at least two samples), was below ``idle_below``, and that window was sampled
  without a gap: consecutive samples at most :data:`MAX_GAP_FACTOR` (1.5) times ``idle_for``
  apart (see *Gaps* below). The detail says how many samples and what span back them. Memory
  is not activity: a model kept resident (PyTorch's caching allocator) at 0 % is idle here;
  the verdict turns "GPU idle + process progressing" into ``running``.

Which GPUs count (``evidence["attribution"]``):

- ``pids``: every compute process on the configured GPUs was identified against this host's
  ``/proc`` (directly or through ``NSpid``); the job's GPUs (where its PIDs hold a context)
  and GPUs with no listed process count; GPUs used only by others do not, and
  ``other_processes`` says whose they are.
- ``device``: the stage has no process signal; every configured GPU counts.
- ``unknown: <why>``: the stage has a process signal but the job's identity is not known:
  no job process alive now and none seen alive in this watch (``job_pids`` empty, no PIDs
  remembered), so a GPU process cannot be told to be "not the job's" (a ``match`` that
  misses the job would otherwise file the job itself under others). Every configured GPU
  counts, device level: a busy GPU is busy (``working``), whoever holds it; the detail lists
  the GPU processes whose owner is not known. Only a known identity (PIDs alive now, or the
  PIDs the job last had while seen alive) lets "used only by others" discount a GPU.
- ``impossible: <why>``: NVML did not list processes, or NVML reported
  PIDs this ``/proc`` neither shows nor maps (inside a container NVML reports host PIDs:
  NVIDIA/nvidia-docker#179). Then every configured GPU counts (device level).

Samples: locally ``nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES, since)`` adds the
driver's recent samples (one every 1/6 s to 1 s) to each check, so a burst between checks is
seen; remotely only one sample per check exists. The window folds each check's new samples
per GPU into at most :data:`MAX_BUCKETS_PER_READ` buckets keeping the maximum, so "any sample
busy" stays exact while memory stays bounded for long ``idle_for``.

Gaps: idle is claimed only over time that was looked at. A failed read (SSH down, NVML error)
keeps only the window's busy samples (busy still wins) and drops the idle ones, so idle must
be shown again after a blind spell. Two consecutive samples of a GPU (or its newest sample and
``now``) more than ``MAX_GAP_FACTOR * idle_for`` apart break the idle span: a busy stretch
longer than that could have fallen between them unseen, so idle counts only from the first
sample after the last such gap, and ``done`` needs that part to reach ``idle_for`` on its own
(``evidence["sample_gap_seconds"]`` and the detail say so). The bound depends on ``idle_for``
alone: the reading does not know the check interval and cannot tell a slow cadence from a
blind spell. The factor (not 1) leaves room for the jitter of when checks run. The cost is
deliberate: remotely (one sample per check) a check interval above 1.5 times ``idle_for``
never reaches ``done`` -- samples that sparse cannot show idle for ``idle_for`` -- and the
detail says so and asks for a longer ``idle_for``; locally the driver's recent samples (those
it still keeps, back to ``idle_for``) fill in between checks, so checks may be about twice
``idle_for`` apart.


Layout (one module per job; this package re-exports what other code uses):

- :mod:`~sensors._signals.gpu.snapshot`: the values both readers produce (:class:`GpuSnapshot`).
- :mod:`~sensors._signals.gpu.nvml`: :func:`read_local`, NVML in this process.
- :mod:`~sensors._signals.gpu.smi`: :data:`REMOTE_SECTIONS` (the probe's snippets), :func:`parse_remote`.
- :mod:`~sensors._signals.gpu.attribution`: NSpid maps and whose GPU processes are the job's.
- :mod:`~sensors._signals.gpu.reading`: the idle window, :func:`gpu_reading`, :class:`GpuMemory` and
  :func:`read_gpu` (what the signal calls).

Example:
    >>> from sensors._signals.gpu.spec import GpuSpec
    >>> spec = GpuSpec(idle_below=5, idle_for=60)
    >>> dev = GpuDevice(0, "GPU-a", "H200", 0.0, 92000.0, 143771.0, ())
    >>> snap = GpuSnapshot(True, None, "550.54", (dev,), read_at=100.0, source="nvml")
    >>> reading, window = gpu_reading(snap, spec, job_pids=None, visible_pids=frozenset(),
    ...                               nspid={}, state=None, now=100.0, host="local")
    >>> str(reading.says), reading.detail
    ('working', 'GPU idle for 0s of 60s (1 sample below 5%); not yet established')
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
from sensors._signals.gpu.spec import GpuSpec  # first: the modules below use it

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
