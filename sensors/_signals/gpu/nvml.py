"""Reading this machine's GPUs through NVML (nvidia-ml-py, module ``pynvml``), in this process.

The bindings are imported lazily and ``nvmlInit`` runs once per process, so a host without
GPUs pays nothing. ``nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES, since)`` adds the
driver's recent samples (one every 1/6 s to 1 s) to each read, so a burst between checks is
seen. Only the configured GPUs are read in detail: a failing GPU the stage does not watch
cannot blind it.
"""

from __future__ import annotations

import sys
import threading
import time
import warnings
from collections.abc import Iterable
from typing import Any

from sensors._signals.gpu.snapshot import BOGUS_PIDS, GpuDevice, GpuProcess, GpuSnapshot, failed, matches
from sensors._signals.gpu.spec import GpuSpec

__all__ = ["read_local"]

_MIB = 1024.0 * 1024.0

_init_lock = threading.Lock()
_initialised = False


#: What the deprecated ``pynvml`` distribution (13.x, a wrapper over nvidia-ml-py) warns on
#: every first import of the ``pynvml`` module: its ``.pth`` puts a finder on ``sys.meta_path``
#: that warns from ``find_spec`` (``_pynvml_redirector.py``). The module it then imports is
#: nvidia-ml-py's, the one this project depends on: the warning is about the environment, and
#: every GPU check (one per ``crosscheck status``) printed it.
_DEPRECATED_WRAPPER = r"The pynvml package is deprecated\."


def _import_pynvml() -> Any:
    """``import pynvml`` (nvidia-ml-py), without the deprecated wrapper's FutureWarning.

    Only that warning, by its message, is ignored, and only around this import: any other
    warning the import raises is shown as usual."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_DEPRECATED_WRAPPER, category=FutureWarning)
        import pynvml  # nvidia-ml-py; imported lazily so a host without GPUs pays nothing
    return pynvml


def _nvml() -> Any:
    """Import the bindings and ``nvmlInit`` once per process (lazily, thread-safe)."""
    global _initialised
    if not _initialised:
        with _init_lock:  # also keeps two first imports from racing on the warning filters
            if not _initialised:
                _import_pynvml().nvmlInit()
                _initialised = True
    return sys.modules["pynvml"]


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class _CallFailed(Exception):
    pass


def _sample_value(pynvml: Any, value_type: int, value: Any) -> float | None:
    fields = {
        pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
    }
    name = fields.get(value_type)
    return None if name is None else float(getattr(value, name))


def _plausible_samples(raw: Iterable[tuple[float, float]], read_at: float) -> tuple[tuple[float, float], ...]:
    """Drop impossible percentages; re-base timestamps from a clock that is not ours.

    NVML documents sample timestamps as CPU microseconds; should a driver use another epoch,
    trusting it would place the samples outside every window, so they are re-based to end at
    ``read_at`` (their spacing is still right).
    """
    good = sorted((ts, pct) for ts, pct in raw if 0.0 <= pct <= 100.0)
    if not good:
        return ()
    newest = good[-1][0]
    if not read_at - 120.0 <= newest <= read_at + 5.0:
        good = [(ts - newest + read_at, pct) for ts, pct in good]
    return tuple(good)


def _proc_name(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().decode(errors="replace").strip() or None
    except OSError:
        return None


def _read_device(pynvml: Any, index: int, handle: Any, uuid: str, spec: GpuSpec, read_at: float) -> GpuDevice:
    def call(name: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            raise _CallFailed(f"{name} on GPU {index}: {exc}") from exc

    optional = (
        pynvml.NVMLError_NotSupported,
        pynvml.NVMLError_FunctionNotFound,
    )
    name = _text(call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle))
    memory = call("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle)
    try:
        util: float | None = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except optional:
        util = None  # e.g. some MIG / vGPU setups: say so, never "0 %"
    except pynvml.NVMLError as exc:
        raise _CallFailed(f"nvmlDeviceGetUtilizationRates on GPU {index}: {exc}") from exc
    samples = _read_samples(pynvml, handle, spec, read_at)
    processes, known, dropped = _read_processes(pynvml, handle)
    return GpuDevice(
        index=index,
        uuid=uuid,
        name=name,
        utilization_pct=util,
        memory_used_mib=memory.used / _MIB,
        memory_total_mib=memory.total / _MIB,
        processes=processes,
        samples=samples,
        processes_known=known,
        dropped_pids=dropped,
    )


def _read_samples(pynvml: Any, handle: Any, spec: GpuSpec, read_at: float) -> tuple[tuple[float, float], ...]:
    """The utilisation samples the driver kept since ``idle_for`` ago (empty if none or unsupported)."""
    try:
        since_us = max(0, int((read_at - spec.idle_for) * 1e6))
        value_type, raw = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, since_us)
        values = ((s.timeStamp / 1e6, _sample_value(pynvml, value_type, s.sampleValue)) for s in raw)
        return _plausible_samples(((t, v) for t, v in values if v is not None), read_at)
    except pynvml.NVMLError:
        # NOT_FOUND (no sample since), NOT_SUPPORTED, old driver: the rate still counts.
        return ()


def _read_processes(pynvml: Any, handle: Any) -> tuple[tuple[GpuProcess, ...], bool, int]:
    """The GPU's compute processes, whether the driver listed them, how many bogus PIDs were dropped."""
    processes: list[GpuProcess] = []
    known = True
    dropped = 0
    try:
        infos = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
        infos, known = [], False
    for info in infos:
        pid = int(info.pid)
        if pid in BOGUS_PIDS:
            dropped += 1
            continue
        used = info.usedGpuMemory
        processes.append(GpuProcess(pid, None if used is None else used / _MIB, _proc_name(pid)))
    return tuple(processes), known, dropped


def read_local(spec: GpuSpec) -> GpuSnapshot:
    """Read this machine's GPUs through NVML: every GPU's index and UUID (``gpus``), and in
    detail (``devices``) only those ``spec.devices`` names, so a failing GPU the stage does
    not watch cannot blind it. Which GPUs count is decided by :func:`gpu_reading` alone.

    Never raises for a driver problem: the snapshot carries it (``ok=False``).

    Example:
        >>> snap = read_local(GpuSpec(devices=[0]))   # doctest: +SKIP
        >>> snap.ok, snap.error                        # doctest: +SKIP
        (False, 'NVML unavailable: NVML Shared Library Not Found')
    """
    global _initialised
    read_at = time.time()
    try:
        pynvml = _nvml()
    except ImportError as exc:
        return failed(f"nvidia-ml-py is not installed: {exc}", "nvml", read_at)
    except Exception as exc:  # NVMLError subclasses, created at import time by the bindings
        return failed(f"NVML unavailable: {exc}", "nvml", read_at)
    try:
        try:
            driver = _text(pynvml.nvmlSystemGetDriverVersion())
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            raise _CallFailed(f"NVML: {exc}") from exc
        devices = []
        seen = []
        for index in range(count):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            except pynvml.NVMLError as exc:
                raise _CallFailed(f"GPU {index}: {exc}") from exc
            seen.append((index, uuid))
            if matches(spec.devices, index, uuid):
                devices.append(_read_device(pynvml, index, handle, uuid, spec, read_at))
    except _CallFailed as exc:
        if isinstance(exc.__cause__, pynvml.NVMLError_Uninitialized):
            # Someone called nvmlShutdown under us: initialise again on the next read.
            with _init_lock:
                _initialised = False
        return failed(str(exc), "nvml", read_at)
    return GpuSnapshot(True, None, driver, tuple(devices), read_at, "nvml", tuple(seen))
