"""The GPU signal: what the GPUs compute, read through NVML locally or nvidia-smi remotely.

Two readers produce one value, a :class:`GpuSnapshot`:

- :func:`read_local` reads NVML in this process through nvidia-ml-py (module ``pynvml``).
- :data:`REMOTE_SECTIONS` are POSIX ``sh`` snippets for the one-round-trip probe on a host
  without Python; :func:`parse_remote` turns their raw text into the same snapshot.

:func:`gpu_reading` is a pure function from a snapshot, the process signal's PIDs and the
previous :class:`GpuWindow` to a :class:`~sensors._model.Reading` and the next window.

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

Example:
    >>> from sensors._signals.gpu import GpuSpec
    >>> spec = GpuSpec(idle_below=5, idle_for=60)
    >>> dev = GpuDevice(0, "GPU-a", "H200", 0.0, 92000.0, 143771.0, ())
    >>> snap = GpuSnapshot(True, None, "550.54", (dev,), read_at=100.0, source="nvml")
    >>> reading, window = gpu_reading(snap, spec, job_pids=None, visible_pids=frozenset(),
    ...                               nspid={}, state=None, now=100.0, host="local")
    >>> str(reading.says), reading.detail
    ('working', 'GPU idle for 0s of 60s (1 sample below 5%); not yet established')
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sensors._model import Reading, Says

if TYPE_CHECKING:  # the spec lives with the signal, which imports this module
    from sensors._signals.gpu import GpuSpec

#: PIDs NVML reports when bindings and driver disagree on the process-info struct layout
#: (or for processes in another PID namespace on some drivers): never a real process.
BOGUS_PIDS = frozenset({0, 0xFFFFFFFF})

#: Each read adds at most this many (max-folded) samples per GPU to the window.
MAX_BUCKETS_PER_READ = 8

#: Samples of a GPU more than this many ``idle_for`` apart break its idle span (module docstring).
MAX_GAP_FACTOR = 1.5

#: Output limits inside the remote probe (bytes).
SMI_LIMIT = 262144
STDERR_LIMIT = 2000
NSPID_LIMIT = 1000000

_MIB = 1024.0 * 1024.0


# --------------------------------------------------------------------------- values


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


@dataclass(frozen=True)
class GpuWindow:
    """Utilisation samples across checks: ``(timestamp_s, uuid, max_pct, n_samples)``.

    Per GPU it keeps every entry newer than ``now - idle_for`` plus the newest older one
    (the anchor that shows idle reaching back past the window's start). A failed read keeps
    only the busy entries: idle must be seen again after a blind spell.
    """

    samples: tuple[tuple[float, str, float, int], ...] = ()

    def for_uuid(self, uuid: str) -> list[tuple[float, str, float, int]]:
        return [s for s in self.samples if s[1] == uuid]


def _failed(error: str, source: Literal["nvml", "nvidia-smi"], read_at: float | None = None):
    return GpuSnapshot(ok=False, error=error, driver_version=None, read_at=read_at, source=source)


# --------------------------------------------------------------------------- local (NVML)

_init_lock = threading.Lock()
_initialised = False


def _nvml() -> Any:
    """Import the bindings and ``nvmlInit`` once per process (lazily, thread-safe)."""
    global _initialised
    import pynvml  # nvidia-ml-py; imported lazily so a host without GPUs pays nothing

    if not _initialised:
        with _init_lock:
            if not _initialised:
                pynvml.nvmlInit()
                _initialised = True
    return pynvml


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


def _read_device(pynvml: Any, index: int, handle: Any, uuid: str, spec: GpuSpec, read_at: float):
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

    samples: tuple[tuple[float, float], ...] = ()
    try:
        since_us = max(0, int((read_at - spec.idle_for) * 1e6))
        value_type, raw = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, since_us)
        values = ((s.timeStamp / 1e6, _sample_value(pynvml, value_type, s.sampleValue)) for s in raw)
        samples = _plausible_samples(((t, v) for t, v in values if v is not None), read_at)
    except pynvml.NVMLError:
        # NOT_FOUND (no sample since), NOT_SUPPORTED, old driver: the rate above still counts.
        samples = ()

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
    return GpuDevice(
        index=index,
        uuid=uuid,
        name=name,
        utilization_pct=util,
        memory_used_mib=memory.used / _MIB,
        memory_total_mib=memory.total / _MIB,
        processes=tuple(processes),
        samples=samples,
        processes_known=known,
        dropped_pids=dropped,
    )


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
        return _failed(f"nvidia-ml-py is not installed: {exc}", "nvml", read_at)
    except Exception as exc:  # NVMLError subclasses, created at import time by the bindings
        return _failed(f"NVML unavailable: {exc}", "nvml", read_at)
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
        return _failed(str(exc), "nvml", read_at)
    return GpuSnapshot(True, None, driver, tuple(devices), read_at, "nvml", tuple(seen))


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


# --------------------------------------------------------------------------- PID namespaces


def parse_nspid(text: str | bytes) -> tuple[dict[int, int], frozenset[int]]:
    """Parse ``grep -H '^NSpid:' /proc/[0-9]*/status`` into (map, visible PIDs).

    ``NSpid:`` lists a process's PID in each namespace from the one of the ``/proc`` mount
    inward (kernel ``proc_pid_status``): the first value is the PID we see; the others are
    its PIDs in nested namespaces. The map sends each nested PID to the PID we see, so a GPU
    PID reported in an inner namespace can be placed. Nested PIDs that several processes
    share (every container has a PID 1) are dropped. Inside a container the host's PID is
    *not* listed (``/proc`` is the container's): NSpid cannot explain host PIDs there.

    Example:
        >>> mapping, visible = parse_nspid(
        ...     "/proc/4455/status:NSpid:\\t4455\\t12\\n/proc/7/status:NSpid:\\t7\\n"
        ... )
        >>> mapping, sorted(visible)
        ({12: 4455}, [7, 4455])
    """
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    mapping: dict[int, int] = {}
    ambiguous: set[int] = set()
    visible: set[int] = set()
    for line in text.splitlines():
        m = re.match(r"^/proc/(\d+)/status:NSpid:\s*([\d\s]+)$", line)
        if not m:
            continue  # a truncated last line, or a process that vanished mid-grep
        ours = int(m.group(1))
        pids = [int(p) for p in m.group(2).split()]
        if not pids or pids[0] != ours:
            continue
        visible.add(ours)
        for inner in pids[1:]:
            if inner in mapping and mapping[inner] != ours:
                ambiguous.add(inner)
            mapping[inner] = ours
    for pid in ambiguous:
        del mapping[pid]
    return mapping, frozenset(visible)


def local_nspid_map(proc: str = "/proc") -> dict[int, int]:
    """Nested-namespace PID → PID in this ``/proc``, for every process visible here.

    Example:
        >>> isinstance(local_nspid_map(), dict)
        True
    """
    return _local_nspid(proc)[0]


def _local_nspid(proc: str = "/proc") -> tuple[dict[int, int], frozenset[int]]:
    """The map and the visible PIDs from one listing of ``proc`` (as :func:`remote_nspid_map`).

    Every numeric entry listed is visible, with or without an ``NSpid:`` line (kernels before
    4.1 have none).
    """
    lines = []
    visible: set[int] = set()
    try:
        entries = os.listdir(proc)
    except OSError:
        return {}, frozenset()
    for entry in entries:
        if not entry.isdigit():
            continue
        visible.add(int(entry))
        try:
            with open(f"{proc}/{entry}/status", "rb") as f:
                for raw in f:
                    if raw.startswith(b"NSpid:"):
                        lines.append(f"/proc/{entry}/status:{raw.decode().rstrip()}")
                        break
        except OSError:
            continue  # exited meanwhile
    return parse_nspid("\n".join(lines))[0], frozenset(visible)


def remote_nspid_map(sections: Mapping[str, bytes]) -> tuple[dict[int, int], frozenset[int]]:
    """The map and visible PIDs from the probe's ``gpu_nspid`` section (empty if absent)."""
    return parse_nspid(sections.get("gpu_nspid", b""))


# --------------------------------------------------------------------------- remote (nvidia-smi)

_QUERY_GPU = "timestamp,index,uuid,name,utilization.gpu,memory.used,memory.total,driver_version"
_QUERY_APPS = "gpu_uuid,pid,process_name,used_memory"


def _smi_snippet(query: str) -> str:
    # stdout goes straight out; stderr lines are tagged "@@stderr " (limited); "@@exit N"
    # closes the section, so a truncated section is recognisable. TZ=UTC makes the
    # timestamp column parseable without knowing the host's zone. `timeout` (coreutils,
    # busybox) keeps a hung driver from eating the whole probe's deadline.
    return (
        "if command -v nvidia-smi >/dev/null 2>&1; then\n"
        "  __cc_t=; command -v timeout >/dev/null 2>&1 && __cc_t='timeout 20'\n"
        "  { { LC_ALL=C TZ=UTC $__cc_t nvidia-smi "
        f"{query} --format=csv,noheader,nounits; "
        'echo "@@exit $?"; } 2>&1 1>&3 3>&- '
        f"| head -c {STDERR_LIMIT} | sed 's/^/@@stderr /'; }} 3>&1 | head -c {SMI_LIMIT}\n"
        "else\n"
        "  echo '@@missing nvidia-smi'\n"
        "fi\n"
    )


#: Probe sections for a host read by ``nvidia-smi``: name → POSIX sh printing its raw text.
REMOTE_SECTIONS: dict[str, str] = {
    "gpu_query": _smi_snippet(f"--query-gpu={_QUERY_GPU}"),
    "gpu_apps": _smi_snippet(f"--query-compute-apps={_QUERY_APPS}"),
    "gpu_nspid": f"grep -H '^NSpid:' /proc/[0-9]*/status 2>/dev/null | head -c {NSPID_LIMIT}\n",
}


def remote_sections(spec: GpuSpec | None = None) -> dict[str, str]:
    """The probe sections for the GPU signal (the same for every spec: filtering is ours)."""
    return dict(REMOTE_SECTIONS)


_NA = {"[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "[Insufficient Permissions]"}


class _Garbled(ValueError):
    pass


def _split_smi(raw: bytes, what: str) -> list[str]:
    """The CSV lines of one smi section; raises _Garbled with the reason."""
    text = raw.decode(errors="replace")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if any(ln.startswith("@@missing nvidia-smi") for ln in lines):
        raise _Garbled("nvidia-smi not found on the host (no NVIDIA driver?)")
    stderr = [ln[len("@@stderr ") :] for ln in lines if ln.startswith("@@stderr ")]
    exits = [ln for ln in lines if ln.startswith("@@exit ")]
    body = [ln for ln in lines if not ln.startswith("@@")]
    if not exits:
        raise _Garbled(f"nvidia-smi {what}: output truncated or cut off (no exit status)")
    rc = exits[-1].split()[-1]
    if rc != "0":
        why = "timed out" if rc == "124" else f"exited with {rc}"
        detail = " ".join(stderr or body)[:300]
        raise _Garbled(f"nvidia-smi {what} {why}" + (f": {detail}" if detail else ""))
    return body


def _num(value: str, what: str) -> float | None:
    value = value.strip()
    if value in _NA:
        return None
    try:
        return float(value)
    except ValueError as exc:
        raise _Garbled(f"nvidia-smi: {what} is not a number: {value[:40]!r}") from exc


def _smi_time(value: str) -> float | None:
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
        try:
            parsed = _dt.datetime.strptime(value.strip(), fmt)
        except ValueError:
            continue
        return parsed.replace(tzinfo=_dt.UTC).timestamp()  # the probe ran it with TZ=UTC
    return None


def parse_remote(sections: Mapping[str, bytes]) -> GpuSnapshot:
    """Parse the probe's ``gpu_query`` and ``gpu_apps`` sections into a snapshot.

    Defensive: a missing section, a missing nvidia-smi, a non-zero exit, a truncated or
    garbled line gives ``ok=False`` with the reason; ``[N/A]``/``[Not Supported]`` → None.

    Example:
        >>> gpu = b"2026/02/23 19:54:03.120, 0, GPU-a, H200, 0, 92000, 143771, 550.54.15\\n@@exit 0\\n"
        >>> snap = parse_remote({"gpu_query": gpu, "gpu_apps": b"@@exit 0\\n"})
        >>> snap.ok, snap.devices[0].utilization_pct, snap.driver_version
        (True, 0.0, '550.54.15')
    """
    missing = [name for name in ("gpu_query", "gpu_apps") if name not in sections]
    if missing:
        return _failed(f"probe sections missing: {', '.join(missing)}", "nvidia-smi")
    try:
        gpu_lines = _split_smi(sections["gpu_query"], "--query-gpu")
        app_lines = _split_smi(sections["gpu_apps"], "--query-compute-apps")
        driver: str | None = None
        read_at: float | None = None
        rows = []
        for n, line in enumerate(gpu_lines, 1):
            parts = [p.strip() for p in line.split(", ")]
            if len(parts) != 8 or not parts[1].isdigit() or not parts[2]:
                raise _Garbled(f"nvidia-smi --query-gpu line {n} unparseable: {line[:120]!r}")
            stamp, index, uuid, name, util, used, total, driver_version = parts
            read_at = _smi_time(stamp) if read_at is None else read_at
            driver = driver or (None if driver_version in _NA else driver_version)
            rows.append(
                (
                    int(index),
                    uuid,
                    name,
                    _num(util, "utilization.gpu"),
                    _num(used, "memory.used"),
                    _num(total, "memory.total"),
                )
            )
        procs: dict[str, list[GpuProcess]] = {}
        dropped: dict[str, int] = {}
        for n, line in enumerate(app_lines, 1):
            if line.strip().lower().startswith("no running"):
                continue
            head = line.split(", ", 2)
            if len(head) != 3 or ", " not in head[2] or not head[1].strip().isdigit():
                raise _Garbled(f"nvidia-smi --query-compute-apps line {n} unparseable: {line[:120]!r}")
            uuid, pid_text = head[0].strip(), head[1].strip()
            name, used = head[2].rsplit(", ", 1)
            pid = int(pid_text)
            if pid in BOGUS_PIDS:
                dropped[uuid] = dropped.get(uuid, 0) + 1
                continue
            procs.setdefault(uuid, []).append(
                GpuProcess(pid, _num(used, "used_memory"), name.strip() or None)
            )
    except _Garbled as exc:
        return _failed(str(exc), "nvidia-smi")
    devices = tuple(
        GpuDevice(
            index,
            uuid,
            name,
            util,
            used,
            total,
            tuple(procs.get(uuid, ())),
            dropped_pids=dropped.get(uuid, 0),
        )
        for index, uuid, name, util, used, total in rows
    )
    gpus = tuple((index, uuid) for index, uuid, *_ in rows)
    return GpuSnapshot(True, None, driver, devices, read_at, "nvidia-smi", gpus)


# --------------------------------------------------------------------------- the reading


@dataclass(frozen=True)
class _Attribution:
    mode: str  # "pids", "device", "unknown: <why>" or "impossible: <why>"
    job: tuple[tuple[str, GpuProcess, int], ...] = ()  # (uuid, process, pid here)
    others: tuple[tuple[str, GpuProcess, int], ...] = ()
    all_procs: tuple[tuple[str, GpuProcess, int | None], ...] = field(default=())


def _attribute(
    devices: tuple[GpuDevice, ...],
    job_pids: frozenset[int] | None,
    visible_pids: frozenset[int],
    nspid: Mapping[int, int],
) -> _Attribution:
    placed: list[tuple[str, GpuProcess, int | None]] = []
    for dev in devices:
        for proc in dev.processes:
            # A PID this /proc shows is taken as is; otherwise a nested-namespace PID that
            # NSpid maps to one we see. Anything else is in a namespace we cannot see.
            if proc.pid in visible_pids:
                here: int | None = proc.pid
            elif proc.pid in nspid and nspid[proc.pid] in visible_pids:
                here = nspid[proc.pid]
            else:
                here = None
            placed.append((dev.uuid, proc, here))
    if job_pids is None:
        return _Attribution("device", (), (), tuple(placed))
    if not job_pids:
        # Whose a GPU process is can be said only against a known identity: with none, every
        # process would be filed as "not the job's" and a GPU at 100 % would read idle.
        why = "the job's PIDs are not known (its process has not been seen alive in this watch)"
        return _Attribution(f"unknown: {why}", (), (), tuple(placed))
    unlisted = [d.index for d in devices if not d.processes_known]
    if unlisted:
        why = f"the driver did not list compute processes on GPU {_ints(unlisted)}"
        return _Attribution(f"impossible: {why}", (), (), tuple(placed))
    unexplained = sorted({p.pid for _, p, here in placed if here is None})
    if unexplained:
        why = (
            f"GPU PIDs {_ints(unexplained[:10])} are not visible here and NSpid does not map "
            "them (inside a container NVML reports host PIDs)"
        )
        return _Attribution(f"impossible: {why}", (), (), tuple(placed))
    job = tuple((u, p, h) for u, p, h in placed if h is not None and h in job_pids)
    others = tuple((u, p, h) for u, p, h in placed if h is not None and h not in job_pids)
    return _Attribution("pids", job, others, tuple(placed))


def _ints(values: Iterable[int]) -> str:
    return ", ".join(str(v) for v in values)


def _fold(samples: list[tuple[float, float]], uuid: str) -> list[tuple[float, str, float, int]]:
    """At most MAX_BUCKETS_PER_READ entries (last ts, max pct, count) over time buckets."""
    if len(samples) <= MAX_BUCKETS_PER_READ:
        return [(ts, uuid, pct, 1) for ts, pct in samples]
    size = -(-len(samples) // MAX_BUCKETS_PER_READ)
    out = []
    for i in range(0, len(samples), size):
        chunk = samples[i : i + size]
        out.append((chunk[-1][0], uuid, max(p for _, p in chunk), len(chunk)))
    return out


def _advance(
    window: GpuWindow, devices: tuple[GpuDevice, ...], read_at: float, now: float, idle_for: float
) -> GpuWindow:
    present = {d.uuid for d in devices}
    # A clock that went backwards leaves "future" samples: drop them rather than trust them.
    kept = [s for s in window.samples if s[1] in present and s[0] <= now + 5.0]
    last: dict[str, float] = {}
    for ts, uuid, _, _ in kept:
        last[uuid] = max(ts, last.get(uuid, float("-inf")))
    for dev in devices:
        new = list(dev.samples)
        if dev.utilization_pct is not None:
            new.append((read_at, dev.utilization_pct))
        newer = sorted(s for s in new if s[0] > last.get(dev.uuid, float("-inf")))
        kept.extend(_fold(newer, dev.uuid))
    cutoff = now - idle_for
    pruned = []
    for uuid in present:
        mine = sorted(s for s in kept if s[1] == uuid)
        old = [s for s in mine if s[0] < cutoff]
        pruned.extend(old[-1:] + [s for s in mine if s[0] >= cutoff])
    return GpuWindow(tuple(sorted(pruned)))


def _since_last_gap(
    entries: list[tuple[float, str, float, int]], now: float, max_gap: float
) -> tuple[list[tuple[float, str, float, int]], float | None]:
    """The entries after the last gap longer than ``max_gap`` (``now`` closes the series), and
    that gap (None: none).

    Example:
        >>> _since_last_gap([(0.0, "g", 0.0, 1), (600.0, "g", 0.0, 1)], 600.0, 90.0)
        ([(600.0, 'g', 0.0, 1)], 600.0)
    """
    entries = sorted(entries)
    points = [s[0] for s in entries] + [now]
    start, gap = 0, None
    for i in range(1, len(points)):
        if points[i] - points[i - 1] > max_gap:
            start, gap = i, points[i] - points[i - 1]
    return entries[start:], gap


def _evidence_base(snapshot: GpuSnapshot, spec: GpuSpec) -> dict[str, Any]:
    return {
        "devices": [],
        "idle": None,
        "samples": 0,
        "window_seconds": 0.0,
        "job_pids_on_gpu": [],
        "job_memory_mib": None,
        "job_gpu_busy": None,
        "other_processes": [],
        "attribution": "impossible: GPUs not read",
        "driver_version": snapshot.driver_version,
        "source": snapshot.source,
        "error": snapshot.error,
        "idle_below_pct": spec.idle_below,
        "idle_for_seconds": spec.idle_for,
        "sample_gap_seconds": None,
        "max_sample_gap_seconds": MAX_GAP_FACTOR * spec.idle_for,
    }


def gpu_reading(
    snapshot: GpuSnapshot,
    spec: GpuSpec,
    *,
    job_pids: frozenset[int] | None,
    visible_pids: frozenset[int],
    nspid: Mapping[int, int],
    state: GpuWindow | None,
    now: float,
    host: str,
) -> tuple[Reading, GpuWindow]:
    """The GPU signal's reading and the next window. Pure: same inputs, same outputs.

    Args:
        snapshot: from :func:`read_local` or :func:`parse_remote`.
        spec: the stage's ``gpu:`` section.
        job_pids: the job's PIDs and their live descendants (None: no process signal).
            After the process is gone, pass its last known PIDs: a GPU context still held
            by one of them is how the verdict sees "busy after exit". Empty: the job's
            identity is not known (no PIDs now, none remembered): attribution ``unknown``,
            device level, never "every GPU process is someone else's".
        visible_pids: every PID in the monitored host's ``/proc`` at this check.
        nspid: nested-namespace PID → visible PID (:func:`local_nspid_map`,
            :func:`remote_nspid_map`).
        state: the previous window (None at the first check).
        now: the monitored host's clock at this check.
        host: labels the reading.

    Example:
        >>> from sensors._signals.gpu import GpuSpec
        >>> snap = GpuSnapshot(False, "nvidia-smi not found on the host", None, source="nvidia-smi")
        >>> r, _ = gpu_reading(snap, GpuSpec(), job_pids=None, visible_pids=frozenset(),
        ...                    nspid={}, state=None, now=0.0, host="gpu-host")
        >>> str(r.says), r.detail
        ('unknown', 'GPU not read: nvidia-smi not found on the host')
    """
    window = state or GpuWindow()
    read_at = snapshot.read_at if snapshot.read_at is not None else now
    evidence = _evidence_base(snapshot, spec)

    def reading(says: Says, detail: str) -> Reading:
        return Reading("gpu", says, detail, evidence, read_at=read_at, host=host)

    if not snapshot.ok:
        # Nothing was looked at: a busy sample still counts, idle must be shown again.
        kept = GpuWindow(tuple(s for s in window.samples if s[2] >= spec.idle_below))
        return reading(Says.UNKNOWN, f"GPU not read: {snapshot.error}"), kept

    # The one place that decides which GPUs count (read_local only skips reading the others).
    devices = tuple(d for d in snapshot.devices if matches(spec.devices, d.index, d.uuid))
    evidence["devices"] = [
        {
            "index": d.index,
            "uuid": d.uuid,
            "name": d.name,
            "utilization_pct": d.utilization_pct,
            "memory_used_mib": d.memory_used_mib,
            "memory_total_mib": d.memory_total_mib,
        }
        for d in devices
    ]
    if spec.devices != "all":
        absent = [w for w in spec.devices if not any(matches((w,), d.index, d.uuid) for d in devices)]
        if absent:
            exist = snapshot.gpus or tuple((d.index, d.uuid) for d in snapshot.devices)
            listed = ", ".join(f"{i} {u}" for i, u in sorted(exist)) or "none"
            detail = f"configured GPU {', '.join(map(str, absent))} not found (GPUs here: {listed})"
            return reading(Says.UNKNOWN, detail), window
    if not devices:
        return reading(Says.UNKNOWN, "no GPU found on the host"), window

    window = _advance(window, devices, read_at, now, spec.idle_for)
    attr = _attribute(devices, job_pids, visible_pids, nspid)
    evidence["attribution"] = attr.mode
    evidence["gpu_processes"] = [
        {"pid": p.pid, "pid_here": here, "name": p.name, "used_memory_mib": p.used_memory_mib, "gpu": u}
        for u, p, here in attr.all_procs
    ]
    evidence["dropped_pids"] = sum(d.dropped_pids for d in devices)
    by_uuid = {d.uuid: d for d in devices}

    def busy_now(dev: GpuDevice) -> bool | None:
        if dev.utilization_pct is not None:
            return dev.utilization_pct >= spec.idle_below
        if dev.samples:
            return max(dev.samples)[1] >= spec.idle_below  # the newest sample
        return None

    if attr.mode == "pids":
        job_uuids = {u for u, _, _ in attr.job}
        other_uuids = {u for u, _, _ in attr.others}
        # GPUs only others use are not the job's work; GPUs with no listed process still
        # count (utilisation there is unexplained, so it may be the job's).
        relevant = [d for d in devices if d.uuid in job_uuids or d.uuid not in other_uuids]
        evidence["job_pids_on_gpu"] = sorted({here for _, _, here in attr.job})
        mems = [p.used_memory_mib for _, p, _ in attr.job]
        known = [m for m in mems if m is not None]
        # One job process of unknown size makes the total unknown, not smaller.
        evidence["job_memory_mib"] = float(sum(known)) if len(known) == len(mems) else None
        states = [busy_now(by_uuid[u]) for u in sorted(job_uuids)]
        evidence["job_gpu_busy"] = (
            False if not states else True if any(states) else None if None in states else False
        )
        evidence["other_processes"] = [
            {"pid": here, "name": p.name, "used_memory_mib": p.used_memory_mib, "gpu": u}
            for u, p, here in attr.others
        ]
    else:
        relevant = list(devices)

    # Busy anywhere the job may be → working; the evidence says which GPU and whose.
    busy = []
    for dev in relevant:
        peak = max((s[2] for s in window.for_uuid(dev.uuid)), default=None)
        if peak is not None and peak >= spec.idle_below:
            busy.append((dev, peak))
    # Idle counts only since the last gap in sampling (module docstring, "Gaps").
    max_gap = MAX_GAP_FACTOR * spec.idle_for
    unbroken = {d.uuid: _since_last_gap(window.for_uuid(d.uuid), now, max_gap) for d in relevant}
    n_samples = sum(s[3] for entries, _ in unbroken.values() for s in entries)
    spans = [now - entries[0][0] if entries else 0.0 for entries, _ in unbroken.values()]
    span = max(0.0, min(spans)) if spans else 0.0
    gaps = [gap for _, gap in unbroken.values() if gap is not None]
    evidence["samples"] = n_samples
    evidence["window_seconds"] = round(span, 3)
    evidence["sample_gap_seconds"] = round(max(gaps), 3) if gaps else None
    others_note = _others_note(evidence["other_processes"], by_uuid) or _unattributed_note(attr, by_uuid)

    if busy:
        evidence["idle"] = False
        parts = [f"GPU {d.index} reached {pct:g}%" for d, pct in busy]
        detail = "; ".join(parts) + f" within the last {spec.idle_for:g}s"
        return reading(Says.WORKING, detail + others_note), window
    # A GPU that counts but reported no utilisation in this read ([N/A], NotSupported, no
    # driver samples) has not been seen idle now, whatever the window held before.
    blind = [
        d.index
        for d in relevant
        if not window.for_uuid(d.uuid) or (d.utilization_pct is None and not d.samples)
    ]
    if blind:
        detail = f"utilisation not reported for GPU {_ints(blind)}"
        return reading(Says.UNKNOWN, detail + others_note), window
    if not relevant:
        evidence["idle"] = True
        detail = "the job holds no GPU context; its GPUs are idle" + others_note
        return reading(Says.DONE, detail), window
    below = f"{n_samples} sample{'s' if n_samples != 1 else ''} below {spec.idle_below:g}%"
    if span < spec.idle_for or n_samples < 2:
        evidence["idle"] = None
        detail = f"GPU idle for {span:.0f}s of {spec.idle_for:g}s ({below}); not yet established"
        if gaps:
            detail += (
                f": no sample for {max(gaps):.0f}s before that (more than {max_gap:g}s,"
                f" {MAX_GAP_FACTOR:g} times idle_for), so idle across the gap was not seen;"
                " checks this far apart need a longer gpu.idle_for"
            )
        return reading(Says.WORKING, detail + others_note), window
    evidence["idle"] = True
    memory = evidence["job_memory_mib"]
    held = f"; job holds {memory:.0f} MiB (memory is not activity)" if memory else ""
    gpus = _ints(d.index for d in relevant)
    detail = f"GPU {gpus} idle: {below} over {span:.0f}s{held}"
    return reading(Says.DONE, detail + others_note), window


@dataclass(frozen=True)
class GpuMemory:
    """What the GPU signal keeps between checks.

    ``last_job_pids`` are the job's PIDs while they were last seen: once the process signal
    says gone, a GPU context still held by one of them is the "busy after exit" evidence.
    """

    window: GpuWindow = GpuWindow()
    last_job_pids: frozenset[int] = frozenset()


def read_gpu(
    spec: GpuSpec,
    sections: Mapping[str, bytes],
    memory: GpuMemory | None,
    *,
    nvml: bool,
    now: float | None,
    host: str,
    job_pids: frozenset[int] | None,
) -> tuple[Reading, GpuMemory]:
    """Read (NVML here, or the probe's smi sections), decide, and return the new memory.

    ``now`` is the monitored host's clock; ``job_pids`` the process signal's (None: none).
    """
    memory = memory if isinstance(memory, GpuMemory) else GpuMemory()
    if nvml:
        snapshot = read_local(spec)
        nspid: Mapping[int, int]
        nspid, visible = _local_nspid()
        now = snapshot.read_at if snapshot.read_at is not None else time.time()
    else:
        snapshot = parse_remote(sections)
        nspid, visible = remote_nspid_map(sections)
        now = now if now is not None else (snapshot.read_at or time.time())
    pids = job_pids
    if job_pids is not None and not job_pids:
        # Gone: attribute to the PIDs it last had. Never seen alive: still empty, and
        # gpu_reading then counts every configured GPU (attribution "unknown: ...").
        pids = memory.last_job_pids
    reading, window = gpu_reading(
        snapshot,
        spec,
        job_pids=pids,
        visible_pids=visible,
        nspid=nspid,
        state=memory.window,
        now=now,
        host=host,
    )
    return reading, GpuMemory(window, job_pids or memory.last_job_pids)


def _unattributed_note(attr: _Attribution, by_uuid: Mapping[str, GpuDevice]) -> str:
    """With the job's identity unknown: the GPU processes, owner not known (they all count)."""
    if not attr.mode.startswith("unknown:") or not attr.all_procs:
        return ""
    shown = ", ".join(
        f"PID {here if here is not None else p.pid} ({p.name or '?'}) on GPU {by_uuid[u].index}"
        for u, p, here in attr.all_procs[:3]
    )
    more = f" and {len(attr.all_procs) - 3} more" if len(attr.all_procs) > 3 else ""
    return f"; whose is not known (the job's PIDs are not known): {shown}{more}"


def _others_note(others: list[dict[str, Any]], by_uuid: Mapping[str, GpuDevice]) -> str:
    if not others:
        return ""
    shown = ", ".join(
        f"PID {o['pid']} ({o['name'] or '?'}) on GPU {by_uuid[o['gpu']].index}" for o in others[:3]
    )
    more = f" and {len(others) - 3} more" if len(others) > 3 else ""
    return f"; not the job's: {shown}{more}"


__all__ = [
    "BOGUS_PIDS",
    "REMOTE_SECTIONS",
    "GpuDevice",
    "GpuMemory",
    "GpuProcess",
    "GpuSnapshot",
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
]
