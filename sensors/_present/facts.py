"""Evidence in words a person scans: numbers with units and thousands, ages, clock times,
one line per signal ("pid 4455 · R · CPU 2,761 s · 2 h 32 m old"). No reprs, no epochs,
no ``None``. Shared by the terminal, Slack and Prefect (:mod:`sensors._present.evidence`)."""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from sensors._base.model import State, Verdict
from sensors._base.text import inert

# --------------------------------------------------------------------------- small pieces


def number(value: Any) -> float | None:
    """``value`` as a finite float, or ``None`` (a bool is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def one_line(value: Any, limit: int | None = None) -> str:
    """Any value as one line of inert text, whitespace runs collapsed; cut with ``…`` at ``limit``."""
    return inert(" ".join(str(value).split()), limit)


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def floor_percent(done: float, total: float) -> float:
    """``done / total`` in percent with two decimals, rounded down (99.99, never 100.00 too soon)."""
    return math.floor(10000.0 * done / total) / 100


def fmt_duration(seconds: float | None) -> str:
    """A short human duration: ``42s``, ``46m 1s``, ``2h 29m``, ``3d 4h``.

    Example:
        >>> fmt_duration(2761)
        '46m 1s'
    """
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s" if s % 60 else f"{s // 60}m"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h}h {m}m" if m else f"{h}h"
    d, h = divmod(s // 3600, 24)
    return f"{d}d {h}h" if h else f"{d}d"


def reasons_text(verdict: Verdict) -> str:
    return "; ".join(verdict.reasons) or "(no reasons given)"


def generic_values(ev: Mapping[str, Any]) -> list[str]:
    # An unknown signal name: show a few scalar facts rather than nothing.
    out = []
    for key, value in ev.items():
        if key == "error" or not isinstance(value, (str, int, float, bool)):
            continue
        out.append(f"{key} {one_line(value, 40)}")
        if len(out) == 4:
            break
    return out


def has_value(ev: Mapping[str, Any], key: str) -> bool:
    return ev.get(key) not in (None, "")


def mib(value: Any) -> str:
    n = number(value)
    if n is None:
        return "?"
    return f"{n / 1024:.0f} GiB" if n >= 1024 else f"{n:.0f} MiB"


def first_of(ev: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if has_value(ev, key):
            return ev[key]
    return None


def per_device(value: Any, unit: str) -> str:
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        shown = "/".join(_num_str(v) for v in value[:8]) + ("/…" if len(value) > 8 else "")
        return shown + unit
    return _num_str(value) + unit


def _num_str(value: Any) -> str:
    n = number(value)
    if n is None:
        return one_line(value, 20)
    return str(int(n)) if n == int(n) else f"{n:.1f}"


# --------------------------------------------------------------------------- facts in words

#: Separates the facts of one signal: short, and never part of a number or a path.
SEP = " · "


def thousands(value: Any, unit: str = "") -> str:
    """A number for reading: ``2,761``, ``0.7``, with a unit after a space.

    Example:
        >>> thousands(2761.4, "s")
        '2,761 s'
    """
    n = number(value)
    if n is None:
        return "?"
    text = f"{n:,.0f}" if abs(n) >= 10 or n == int(n) else f"{n:.1f}"
    return f"{text} {unit}" if unit else text


def age(seconds: Any) -> str:
    """A duration in words and units: ``12 s``, ``46 m 1 s``, ``2 h 32 m``, ``3 d 4 h``.

    Example:
        >>> age(9120)
        '2 h 32 m'
    """
    return " ".join(re.sub(r"(\d)([a-z])", r"\1 \2", part) for part in fmt_duration(number(seconds)).split())


def clock(epoch: float | None) -> str:
    """A local clock time (``08:06:14``; with the date when not today), never an epoch."""
    if number(epoch) is None:
        return "?"
    moment = _dt.datetime.fromtimestamp(float(epoch))  # type: ignore[arg-type]
    if moment.date() == _dt.date.today():
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def facts(reading: Any, *, limit: int = 100) -> str:
    """The key facts of one reading in words and units, joined by `` · `` (one inert line,
    no ``None``, no reprs, no epochs).

    Example:
        >>> from sensors import Reading
        >>> facts(Reading("process", "working", "", {"pid": 4455, "state": "R",
        ...                                           "cpu_seconds": 2761.0, "elapsed_seconds": 9120}))
        'pid 4455 · R · CPU 2,761 s · 2 h 32 m old'
    """
    ev = reading.evidence if isinstance(reading.evidence, Mapping) else {}
    parts = _FACTS.get(reading.signal, generic_values)(ev)
    if has_value(ev, "error"):
        parts.append(f"error: {one_line(ev['error'], 80)}")
    return truncate(SEP.join(p for p in parts if p), limit)


def _process_facts(ev: Mapping[str, Any]) -> list[str]:
    out = []
    # A stage over several hosts: the host's ranks alive against ``process.per_host``.
    if has_value(ev, "per_host") and (ranks := number(ev.get("ranks"))) is not None:
        out.append(f"ranks {ranks:.0f}/{one_line(ev['per_host'], 10)}")
    if has_value(ev, "pid"):
        out.append(f"pid {one_line(ev['pid'], 20)}")
    if has_value(ev, "state"):
        out.append(one_line(ev["state"], 10))
    if (cpu := number(ev.get("cpu_seconds"))) is not None:
        out.append(f"CPU {thousands(cpu, 's')}")
    if (elapsed := number(ev.get("elapsed_seconds"))) is not None:
        out.append(f"{age(elapsed)} old")
    for key in ("exit_code", "returncode"):
        if has_value(ev, key):
            out.append(f"exit {one_line(ev[key], 10)}")
            break
    if (more := number(ev.get("descendants"))) and more > 0:
        out.append(f"{int(more)} child process{'es' if more > 1 else ''}")
    if not out and ev.get("alive") in (0, False):
        out.append("no process running")
    return out


def _log_facts(ev: Mapping[str, Any]) -> list[str]:
    out = []
    if has_value(ev, "error_line"):
        out.append(f'error "{one_line(ev["error_line"], 60)}"')
    elif has_value(ev, "complete_line"):
        out.append(f'done "{one_line(ev["complete_line"], 60)}"')
    elif has_value(ev, "last_line"):
        out.append(f'last "{one_line(ev["last_line"], 60)}"')
    if (seconds := number(ev.get("age_seconds"))) is not None:
        # A file time ahead of the host's clock tells no age: say what it is.
        out.append(
            f"written {age(seconds)} ago"
            if seconds >= 0
            else f"stamped {age(-seconds)} ahead of the host's clock"
        )
    progress = ev.get("progress")
    shown = any(has_value(ev, k) for k in ("error_line", "complete_line", "last_line"))
    if not shown and isinstance(progress, Mapping) and number(progress.get("done")) is not None:
        total = number(progress.get("total"))
        out.append(f"progress {thousands(progress['done'])}/{thousands(total) if total is not None else '?'}")
    return out


def _outputs_facts(ev: Mapping[str, Any]) -> list[str]:
    count, expected = number(ev.get("count")), number(ev.get("expected"))
    out = []
    if count is not None:
        line = f"{thousands(count)} of {thousands(expected)}" if expected else f"{thousands(count)} files"
        if expected:
            line += f" ({floor_percent(count, expected):.2f} %)"
        out.append(line)
    if has_value(ev, "pattern"):
        out.append(one_line(ev["pattern"], 30))
    return out


def _gpu_facts(ev: Mapping[str, Any]) -> list[str]:
    out = []
    devices = ev.get("devices")
    rows = [d for d in devices if isinstance(d, Mapping)] if isinstance(devices, list) else []
    utils = [number(d.get("utilization_pct")) for d in rows]
    if any(u is not None for u in utils):
        out.append("util " + "/".join("?" if u is None else f"{u:.0f}" for u in utils[:8]) + " %")
    if (job_mem := number(ev.get("job_memory_mib"))) is not None:
        out.append(f"job holds {mib(job_mem)}")
    idle = ev.get("idle")
    if isinstance(idle, bool):
        out.append("idle" if idle else "busy")
    if (samples := number(ev.get("samples"))) is not None and samples > 0:
        out.append(f"{int(samples)} sample{'s' if samples != 1 else ''}")
    return out


_FACTS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "process": _process_facts,
    "log": _log_facts,
    "outputs": _outputs_facts,
    "gpu": _gpu_facts,
}


def still_working(verdict: Verdict, previous: Verdict | None) -> str | None:
    """Incident 2 in words, when it is happening: the log or the outputs say (nearly) done
    while the process is still working, so the gate waits. ``None`` otherwise.

    "Still working" is a claim of progress, so it is made only on a measured change: the
    same process's CPU time rose between ``previous`` and this check. A first check
    (``previous`` None: nothing to compare), another process, or CPU time that stood still
    (a job asleep, or stalled) say nothing.

    Example:
        >>> still_working(verdict, previous)  # doctest: +SKIP
        "log says '[5/6] 5 extracted, ETA 0 minutes', outputs 5/6, but pid 4455 is in state R
        with CPU 2,761 s, up 30 s since the last check: still working, the gate waits"
    """
    if verdict.state is not State.RUNNING or previous is None:
        return None
    process, log = verdict.readings.get("process"), verdict.readings.get("log")
    before = previous.readings.get("process")
    if process is None or before is None or str(process.says) != "working" or str(before.says) != "working":
        return None
    ev = process.evidence
    cpu, was = number(ev.get("cpu_seconds")), number(before.evidence.get("cpu_seconds"))
    if cpu is None or was is None or cpu <= was or ev.get("pid") != before.evidence.get("pid"):
        return None
    last = one_line(log.evidence.get("last_line") or "", 80) if log is not None else ""
    outputs = verdict.readings.get("outputs")
    count = number(outputs.evidence.get("count")) if outputs is not None else None
    expected = number(outputs.evidence.get("expected")) if outputs is not None else None
    eta0 = bool(re.search(r"\bETA:?\s*0\b", last, re.IGNORECASE))
    nearly = count is not None and expected is not None and expected > 0 and count >= expected - 1
    if not eta0 and not nearly:
        return None
    says = f"log says '{last}'" if eta0 else f"outputs {thousands(count)}/{thousands(expected)}"
    if eta0 and count is not None:
        says += f", outputs {thousands(count)}/{thousands(expected) if expected else '?'}"
    return inert(
        f"{says}, but pid {one_line(ev.get('pid', '?'), 20)} "
        f"is in state {one_line(ev.get('state', '?'), 10)} "
        f"with CPU {thousands(cpu, 's')}, up {_rise(cpu - was)} since the last check:"
        " still working, the gate waits"
    )


def _rise(seconds: float) -> str:
    """A CPU time increase for reading: ``0.4 s``, ``30 s``, ``2,761 s``."""
    return f"{seconds:.1f} s" if seconds < 10 else thousands(seconds, "s")


def evidence_pairs(evidence: Mapping[str, Any], *, limit: int = 400) -> str:
    """Every evidence value as ``key=value``, comma-separated, each value cut at 80 characters.

    Example:
        >>> evidence_pairs({"count": 37311, "expected": 37312})
        'count=37311, expected=37312'
    """
    text = ", ".join(f"{k}={_short(v)}" for k, v in evidence.items())
    return truncate(text, limit)


def _short(value: Any, limit: int = 80) -> str:
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return one_line(text, limit)
