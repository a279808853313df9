"""Whose GPU processes are the job's: PIDs placed in this host's ``/proc``, directly or by NSpid.

The driver reports a GPU process's PID in its own PID namespace (the host's, inside a
container: NVIDIA/nvidia-docker#179). :func:`parse_nspid` maps PIDs of nested namespaces to
the PIDs the probe sees; :func:`attribute` then files each GPU process as the job's, someone
else's, or not placeable, and says how the decision was made (``Attribution.mode``, the
``attribution`` evidence: ``pids``, ``device``, ``unknown: ...``, ``impossible: ...``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sensors._signals.gpu.snapshot import GpuDevice, GpuProcess

__all__ = [
    "Attribution",
    "attribute",
    "ints",
    "local_nspid",
    "local_nspid_map",
    "others_note",
    "parse_nspid",
    "unattributed_note",
]


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
    return local_nspid(proc)[0]


def local_nspid(proc: str = "/proc") -> tuple[dict[int, int], frozenset[int]]:
    """The map and the visible PIDs from one listing of ``proc``.

    The local twin of :func:`~sensors._signals.gpu.smi.remote_nspid_map`. Every numeric entry listed
    is visible, with or without an ``NSpid:`` line (kernels before 4.1 have none).
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


@dataclass(frozen=True)
class Attribution:
    """Which GPU processes are the job's, which are others', and how that was decided."""

    mode: str  # "pids", "device", "unknown: <why>" or "impossible: <why>"
    job: tuple[tuple[str, GpuProcess, int], ...] = ()  # (uuid, process, pid here)
    others: tuple[tuple[str, GpuProcess, int], ...] = ()
    all_procs: tuple[tuple[str, GpuProcess, int | None], ...] = field(default=())


def attribute(
    devices: tuple[GpuDevice, ...],
    job_pids: frozenset[int] | None,
    visible_pids: frozenset[int],
    nspid: Mapping[int, int],
) -> Attribution:
    """Place every GPU process in this ``/proc`` and file it as the job's or another's."""
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
        return Attribution("device", (), (), tuple(placed))
    if not job_pids:
        # Whose a GPU process is can be said only against a known identity: with none, every
        # process would be filed as "not the job's" and a GPU at 100 % would read idle.
        why = "the job's PIDs are not known (its process has not been seen alive in this watch)"
        return Attribution(f"unknown: {why}", (), (), tuple(placed))
    unlisted = [d.index for d in devices if not d.processes_known]
    if unlisted:
        why = f"the driver did not list compute processes on GPU {ints(unlisted)}"
        return Attribution(f"impossible: {why}", (), (), tuple(placed))
    unexplained = sorted({p.pid for _, p, here in placed if here is None})
    if unexplained:
        why = (
            f"GPU PIDs {ints(unexplained[:10])} are not visible here and NSpid does not map "
            "them (inside a container NVML reports host PIDs)"
        )
        return Attribution(f"impossible: {why}", (), (), tuple(placed))
    job = tuple((u, p, h) for u, p, h in placed if h is not None and h in job_pids)
    others = tuple((u, p, h) for u, p, h in placed if h is not None and h not in job_pids)
    return Attribution("pids", job, others, tuple(placed))


def ints(values: Iterable[int]) -> str:
    """``1, 2, 3``: PIDs or GPU indexes in a detail."""
    return ", ".join(str(v) for v in values)


def unattributed_note(attr: Attribution, by_uuid: Mapping[str, GpuDevice]) -> str:
    """With the job's identity unknown: the GPU processes, owner not known (they all count)."""
    if not attr.mode.startswith("unknown:") or not attr.all_procs:
        return ""
    shown = ", ".join(
        f"PID {here if here is not None else p.pid} ({p.name or '?'}) on GPU {by_uuid[u].index}"
        for u, p, here in attr.all_procs[:3]
    )
    more = f" and {len(attr.all_procs) - 3} more" if len(attr.all_procs) > 3 else ""
    return f"; whose is not known (the job's PIDs are not known): {shown}{more}"


def others_note(others: list[dict[str, Any]], by_uuid: Mapping[str, GpuDevice]) -> str:
    """The GPU processes that are not the job's, for the detail (the first three)."""
    if not others:
        return ""
    shown = ", ".join(
        f"PID {o['pid']} ({o['name'] or '?'}) on GPU {by_uuid[o['gpu']].index}" for o in others[:3]
    )
    more = f" and {len(others) - 3} more" if len(others) > 3 else ""
    return f"; not the job's: {shown}{more}"
