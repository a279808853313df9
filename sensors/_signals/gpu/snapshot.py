"""What one read of the GPUs returns, from either reader: :class:`GpuSnapshot` and its parts.

``nvml.read_local`` (this machine) and ``smi.parse_remote`` (the probe's nvidia-smi text)
produce the same value; :func:`matches` decides which GPUs a stage's ``gpu.devices`` names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["BOGUS_PIDS", "GpuDevice", "GpuProcess", "GpuSnapshot", "failed", "matches"]

#: PIDs NVML reports when bindings and driver disagree on the process-info struct layout
#: (or for processes in another PID namespace on some drivers): never a real process.
BOGUS_PIDS = frozenset({0, 0xFFFFFFFF})


@dataclass(frozen=True)
class GpuProcess:
    """A compute context on a GPU, as the driver reports it.

    ``pid`` is in the driver's PID namespace (the host's, inside a container).
    """

    pid: int
    used_memory_mib: float | None
    name: str | None = None


@dataclass(frozen=True)
class GpuDevice:
    """One GPU at one read.

    Attributes:
        samples: ``(timestamp_s, pct)`` utilisation samples the driver kept recently
            (local NVML only; empty otherwise).
        processes_known: False when the driver would not list compute processes.
        dropped_pids: how many processes reported with PID 0 or 0xFFFFFFFF were dropped.
    """

    index: int
    uuid: str
    name: str
    utilization_pct: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    processes: tuple[GpuProcess, ...] = ()
    samples: tuple[tuple[float, float], ...] = ()
    processes_known: bool = True
    dropped_pids: int = 0


@dataclass(frozen=True)
class GpuSnapshot:
    """Every GPU read at one moment, or why they could not be read (``ok=False``).

    Attributes:
        devices: the GPUs read in detail (locally only the configured ones; remotely all).
        gpus: ``(index, uuid)`` of every GPU the driver listed, configured or not, so a
            configured GPU that is missing can be reported against what exists. Empty when the
            snapshot was built by hand: then ``devices`` stand for the GPUs that exist.
    """

    ok: bool
    error: str | None
    driver_version: str | None
    devices: tuple[GpuDevice, ...] = ()
    read_at: float | None = None
    source: Literal["nvml", "nvidia-smi"] = "nvml"
    gpus: tuple[tuple[int, str], ...] = ()


def failed(error: str, source: Literal["nvml", "nvidia-smi"], read_at: float | None = None) -> GpuSnapshot:
    """A snapshot saying why the GPUs could not be read."""
    return GpuSnapshot(ok=False, error=error, driver_version=None, read_at=read_at, source=source)


def matches(devices: Literal["all"] | tuple[int | str, ...], index: int, uuid: str) -> bool:
    """Whether the GPU ``index``/``uuid`` is one of the configured ``devices``.

    Example:
        >>> matches((0, "GPU-b"), 1, "GPU-b"), matches((0,), 1, "GPU-b")
        (True, False)
    """
    if devices == "all":
        return True
    for want in devices:
        if isinstance(want, int):
            if want == index:
                return True
        elif want == uuid or (want.isdigit() and int(want) == index):
            return True
    return False
