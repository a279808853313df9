"""The GPU signal's reading: the idle window across checks, the evidence, what it says.

:func:`gpu_reading` is a pure function from a snapshot, the process signal's PIDs and the
previous :class:`GpuWindow` to a :class:`~sensors._base.model.Reading` and the next window
(docs/gpu.md says what each answer means, and why idle needs a window without gaps).
:func:`read_gpu` reads (NVML here, or the probe's smi sections), decides, and returns the next
:class:`GpuMemory`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sensors._base.model import Reading, Says
from sensors._signals.gpu.attribution import (
    Attribution,
    attribute,
    ints,
    local_nspid,
    others_note,
    unattributed_note,
)
from sensors._signals.gpu.nvml import read_local
from sensors._signals.gpu.smi import parse_remote, remote_nspid_map
from sensors._signals.gpu.snapshot import GpuDevice, GpuSnapshot, matches
from sensors._signals.gpu.spec import GpuSpec

__all__ = [
    "MAX_BUCKETS_PER_READ",
    "MAX_GAP_FACTOR",
    "GpuMemory",
    "GpuWindow",
    "gpu_reading",
    "read_gpu",
]

#: Each read adds at most this many (max-folded) samples per GPU to the window.
MAX_BUCKETS_PER_READ = 8

#: Samples of a GPU more than this many ``idle_for`` apart break its idle span (docs/gpu.md).
MAX_GAP_FACTOR = 1.5

_Entry = tuple[float, str, float, int]  # (timestamp_s, uuid, max_pct, n_samples)


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
        snapshot: from :func:`~sensors._signals.gpu.nvml.read_local` or
            :func:`~sensors._signals.gpu.smi.parse_remote`.
        spec: the stage's ``gpu:`` section.
        job_pids: the job's PIDs and their live descendants (None: no process signal).
            After the process is gone, pass its last known PIDs: a GPU context still held
            by one of them is how the verdict sees "busy after exit". Empty: the job's
            identity is not known (no PIDs now, none remembered): attribution ``unknown``,
            device level, never "every GPU process is someone else's".
        visible_pids: every PID in the monitored host's ``/proc`` at this check.
        nspid: nested-namespace PID → visible PID (:func:`~sensors._signals.gpu.attribution.local_nspid_map`,
            :func:`~sensors._signals.gpu.smi.remote_nspid_map`).
        state: the previous window (None at the first check).
        now: the monitored host's clock at this check.
        host: labels the reading.

    Example:
        >>> from sensors._signals.gpu.spec import GpuSpec
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
    evidence["devices"] = [_device_row(d) for d in devices]
    missing = _missing_detail(snapshot, spec, devices)
    if missing:
        return reading(Says.UNKNOWN, missing), window

    window = _advance(window, devices, read_at, now, spec.idle_for)
    attr = attribute(devices, job_pids, visible_pids, nspid)
    relevant = _attribution_evidence(evidence, attr, devices, spec)
    says, detail = _judge(evidence, window, relevant, attr, devices, spec, now)
    return reading(says, detail), window


def _device_row(d: GpuDevice) -> dict[str, Any]:
    return {
        "index": d.index,
        "uuid": d.uuid,
        "name": d.name,
        "utilization_pct": d.utilization_pct,
        "memory_used_mib": d.memory_used_mib,
        "memory_total_mib": d.memory_total_mib,
    }


def _missing_detail(snapshot: GpuSnapshot, spec: GpuSpec, devices: tuple[GpuDevice, ...]) -> str | None:
    """Why the GPUs that count cannot be read: a configured GPU not found (listed against the
    GPUs that exist), or no GPU at all. None: they are all there."""
    if spec.devices != "all":
        absent = [w for w in spec.devices if not any(matches((w,), d.index, d.uuid) for d in devices)]
        if absent:
            exist = snapshot.gpus or tuple((d.index, d.uuid) for d in snapshot.devices)
            listed = ", ".join(f"{i} {u}" for i, u in sorted(exist)) or "none"
            return f"configured GPU {', '.join(map(str, absent))} not found (GPUs here: {listed})"
    if not devices:
        return "no GPU found on the host"
    return None


def _busy_now(dev: GpuDevice, spec: GpuSpec) -> bool | None:
    """Whether ``dev`` is busy in this read (None: it reported no utilisation)."""
    if dev.utilization_pct is not None:
        return dev.utilization_pct >= spec.idle_below
    if dev.samples:
        return max(dev.samples)[1] >= spec.idle_below  # the newest sample
    return None


def _attribution_evidence(
    evidence: dict[str, Any], attr: Attribution, devices: tuple[GpuDevice, ...], spec: GpuSpec
) -> list[GpuDevice]:
    """Record whose GPU processes are whose in ``evidence``; return the GPUs that count."""
    evidence["attribution"] = attr.mode
    evidence["gpu_processes"] = [
        {"pid": p.pid, "pid_here": here, "name": p.name, "used_memory_mib": p.used_memory_mib, "gpu": u}
        for u, p, here in attr.all_procs
    ]
    evidence["dropped_pids"] = sum(d.dropped_pids for d in devices)
    if attr.mode != "pids":
        return list(devices)
    by_uuid = {d.uuid: d for d in devices}
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
    states = [_busy_now(by_uuid[u], spec) for u in sorted(job_uuids)]
    evidence["job_gpu_busy"] = (
        False if not states else True if any(states) else None if None in states else False
    )
    evidence["other_processes"] = [
        {"pid": here, "name": p.name, "used_memory_mib": p.used_memory_mib, "gpu": u}
        for u, p, here in attr.others
    ]
    return relevant


def _idle_span(
    window: GpuWindow, relevant: list[GpuDevice], now: float, max_gap: float
) -> tuple[int, float, list[float]]:
    """Samples and span of idle since the last gap in sampling (docs/gpu.md, "Samples and gaps"),
    over the GPUs that count, and the gaps that broke it."""
    unbroken = {d.uuid: _since_last_gap(window.for_uuid(d.uuid), now, max_gap) for d in relevant}
    n_samples = sum(s[3] for entries, _ in unbroken.values() for s in entries)
    spans = [now - entries[0][0] if entries else 0.0 for entries, _ in unbroken.values()]
    span = max(0.0, min(spans)) if spans else 0.0
    gaps = [gap for _, gap in unbroken.values() if gap is not None]
    return n_samples, span, gaps


def _judge(
    evidence: dict[str, Any],
    window: GpuWindow,
    relevant: list[GpuDevice],
    attr: Attribution,
    devices: tuple[GpuDevice, ...],
    spec: GpuSpec,
    now: float,
) -> tuple[Says, str]:
    """What the GPUs that count say over the window, and the detail; completes ``evidence``."""
    by_uuid = {d.uuid: d for d in devices}
    # Busy anywhere the job may be → working; the evidence says which GPU and whose.
    busy = []
    for dev in relevant:
        peak = max((s[2] for s in window.for_uuid(dev.uuid)), default=None)
        if peak is not None and peak >= spec.idle_below:
            busy.append((dev, peak))
    max_gap = MAX_GAP_FACTOR * spec.idle_for
    n_samples, span, gaps = _idle_span(window, relevant, now, max_gap)
    evidence["samples"] = n_samples
    evidence["window_seconds"] = round(span, 3)
    evidence["sample_gap_seconds"] = round(max(gaps), 3) if gaps else None
    note = others_note(evidence["other_processes"], by_uuid) or unattributed_note(attr, by_uuid)

    if busy:
        evidence["idle"] = False
        parts = [f"GPU {d.index} reached {pct:g}%" for d, pct in busy]
        return Says.WORKING, "; ".join(parts) + f" within the last {spec.idle_for:g}s" + note
    # A GPU that counts but reported no utilisation in this read ([N/A], NotSupported, no
    # driver samples) has not been seen idle now, whatever the window held before.
    blind = [
        d.index
        for d in relevant
        if not window.for_uuid(d.uuid) or (d.utilization_pct is None and not d.samples)
    ]
    if blind:
        return Says.UNKNOWN, f"utilisation not reported for GPU {ints(blind)}" + note
    if not relevant:
        evidence["idle"] = True
        return Says.DONE, "the job holds no GPU context; its GPUs are idle" + note
    below = f"{n_samples} sample{'s' if n_samples != 1 else ''} below {spec.idle_below:g}%"
    if span < spec.idle_for or n_samples < 2:
        evidence["idle"] = None
        return Says.WORKING, _not_yet(span, below, gaps, spec) + note
    evidence["idle"] = True
    memory = evidence["job_memory_mib"]
    held = f"; job holds {memory:.0f} MiB (memory is not activity)" if memory else ""
    gpus = ints(d.index for d in relevant)
    return Says.DONE, f"GPU {gpus} idle: {below} over {span:.0f}s{held}" + note


def _not_yet(span: float, below: str, gaps: list[float], spec: GpuSpec) -> str:
    """The detail while idle is not yet established, and why when a gap broke it."""
    detail = f"GPU idle for {span:.0f}s of {spec.idle_for:g}s ({below}); not yet established"
    if gaps:
        max_gap = MAX_GAP_FACTOR * spec.idle_for
        detail += (
            f": no sample for {max(gaps):.0f}s before that (more than {max_gap:g}s,"
            f" {MAX_GAP_FACTOR:g} times idle_for), so idle across the gap was not seen;"
            " checks this far apart need a longer gpu.idle_for"
        )
    return detail


@dataclass(frozen=True)
class GpuMemory:
    """What the checker keeps between checks for the GPU signal (``Checker._memory.gpu``).

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
        nspid, visible = local_nspid()
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
