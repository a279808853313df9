"""Reading a remote host's GPUs in the one-round-trip probe: nvidia-smi snippets and their parser.

:data:`REMOTE_SECTIONS` are POSIX ``sh`` snippets for a host without Python: two nvidia-smi
queries (GPUs, compute processes) and the ``NSpid:`` lines of every process, each section
bounded in size and closed by its exit status, so a truncated one is recognisable.
:func:`parse_remote` turns their raw text into the same :class:`GpuSnapshot` NVML gives
locally; only one sample per check exists remotely.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping

from sensors._signals.gpu.attribution import parse_nspid
from sensors._signals.gpu.snapshot import BOGUS_PIDS, GpuDevice, GpuProcess, GpuSnapshot, failed
from sensors._signals.gpu.spec import GpuSpec

__all__ = ["REMOTE_SECTIONS", "parse_remote", "remote_nspid_map", "remote_sections"]

#: Output limits inside the remote probe (bytes).
SMI_LIMIT = 262144
STDERR_LIMIT = 2000
NSPID_LIMIT = 1000000

_QUERY_GPU = "timestamp,index,uuid,name,utilization.gpu,memory.used,memory.total,driver_version"
_QUERY_APPS = "gpu_uuid,pid,process_name,used_memory"


def _smi_snippet(query: str) -> str:
    # stdout lines are tagged "|" (process names are job text: no line of it can pass for
    # a marker or a section header), and "@@exit N" with them, last: the one that ends the
    # tagged lines closes the section, so a truncated section is recognisable. stderr lines
    # are tagged "@@stderr " (limited). TZ=UTC makes the
    # timestamp column parseable without knowing the host's zone. `timeout` (coreutils,
    # busybox) keeps a hung driver from eating the whole probe's deadline.
    return (
        "if command -v nvidia-smi >/dev/null 2>&1; then\n"
        "  __cc_t=; command -v timeout >/dev/null 2>&1 && __cc_t='timeout 20'\n"
        "  { { { LC_ALL=C TZ=UTC $__cc_t nvidia-smi "
        f"{query} --format=csv,noheader,nounits; "
        "echo \"@@exit $?\"; } | sed 's/^/|/'; } 2>&1 1>&3 3>&- "
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
    if any(ln[:1] not in ("|", "@") for ln in lines):
        raise _Garbled(f"nvidia-smi {what}: a line neither output nor marker")
    tagged = [ln[1:] for ln in lines if ln.startswith("|")]
    # Only the last tagged line is the exit's: one before it is output (a process name
    # may hold a newline and anything after it).
    exits, body = tagged[-1:], tagged[:-1]
    if not exits or not exits[0].startswith("@@exit "):
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
    Every output line comes tagged ``|``, the exit status last among them (see
    ``_smi_snippet``).

    Example:
        >>> gpu = b"|2026/02/23 19:54:03.120, 0, GPU-a, H200, 0, 92000, 143771, 550.54.15\\n|@@exit 0\\n"
        >>> snap = parse_remote({"gpu_query": gpu, "gpu_apps": b"|@@exit 0\\n"})
        >>> snap.ok, snap.devices[0].utilization_pct, snap.driver_version
        (True, 0.0, '550.54.15')
    """
    missing = [name for name in ("gpu_query", "gpu_apps") if name not in sections]
    if missing:
        return failed(f"probe sections missing: {', '.join(missing)}", "nvidia-smi")
    try:
        gpu_lines = _split_smi(sections["gpu_query"], "--query-gpu")
        app_lines = _split_smi(sections["gpu_apps"], "--query-compute-apps")
        driver, read_at, rows = _parse_gpus(gpu_lines)
        procs, dropped = _parse_apps(app_lines)
    except _Garbled as exc:
        return failed(str(exc), "nvidia-smi")
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


_Row = tuple[int, str, str, float | None, float | None, float | None]


def _parse_gpus(lines: list[str]) -> tuple[str | None, float | None, list[_Row]]:
    """``--query-gpu`` lines: the driver version, the read time (first line) and one row per GPU."""
    driver: str | None = None
    read_at: float | None = None
    rows: list[_Row] = []
    for n, line in enumerate(lines, 1):
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
    return driver, read_at, rows


def _parse_apps(lines: list[str]) -> tuple[dict[str, list[GpuProcess]], dict[str, int]]:
    """``--query-compute-apps`` lines: the processes per GPU UUID, and bogus PIDs dropped per UUID."""
    procs: dict[str, list[GpuProcess]] = {}
    dropped: dict[str, int] = {}
    for n, line in enumerate(lines, 1):
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
        procs.setdefault(uuid, []).append(GpuProcess(pid, _num(used, "used_memory"), name.strip() or None))
    return procs, dropped


def remote_nspid_map(sections: Mapping[str, bytes]) -> tuple[dict[int, int], frozenset[int]]:
    """The map and visible PIDs from the probe's ``gpu_nspid`` section (empty if absent)."""
    return parse_nspid(sections.get("gpu_nspid", b""))
