"""Evidence in words: one home for how the terminal, Slack and Prefect show a verdict.

Three readers, three shapes of the same facts, built from the same pieces here:

- the terminal (``crosscheck status``/``wait``): :data:`STATE_STYLE`/:data:`SAYS_STYLE` colours
  and :func:`key_values`, the few values a person looks at first (``pid=4455  cpu=2761.0s``);
- Slack and plain-text notifications: the emoji and colours of the same tables, and
  :func:`evidence_line`, one sentence per signal (``pid 4455, cpu 46m 1s``);
- Prefect artifacts and run logs: :func:`progress_percent`, :func:`progress_detail`,
  :func:`evidence_rows` and :func:`facts` (the key facts in words and units, ``pid 4455 · R ·
  CPU 2,761 s · 2 h 32 m old``), :func:`clock` and :func:`age` for times (a local clock time or
  an age, never an epoch), :func:`still_working` (incident 2's "ETA 0, but still working" in
  words). :func:`evidence_pairs` keeps every value as ``key=value`` for the raw view.

Everything returned is one line of inert text (job text can neither format nor escape), and
a percentage is rounded *down*: 37311 of 37312 must not read "100 %" in a tool about false
"done".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sensors._base.model import Reading, Says, State, Verdict
from sensors._base.text import inert

__all__ = [
    "COLOUR",
    "EMOJI",
    "SAYS_STYLE",
    "STATE_STYLE",
    "age",
    "clock",
    "evidence_line",
    "evidence_pairs",
    "evidence_rows",
    "facts",
    "floor_percent",
    "fmt_duration",
    "key_values",
    "number",
    "one_line",
    "outputs_values",
    "progress_detail",
    "progress_percent",
    "reasons_text",
    "still_working",
    "thousands",
    "truncate",
]


@dataclass(frozen=True)
class Style:
    """How one verdict state (or one signal's ``says``) looks on each output."""

    terminal: str  # a rich style
    emoji: str
    colour: str = ""  # Slack's attachment bar (states only)


# Slack's own palette for the colours, so the bar reads like Slack's native alerts.
STATE_STYLE: Mapping[State, Style] = {
    State.COMPLETE: Style("bold green", "✅", "#2EB67D"),
    State.RUNNING: Style("bold cyan", "▶️", "#36C5F0"),
    State.STALLED: Style("bold yellow", "⏸️", "#ECB22E"),
    State.FAILED: Style("bold red", "❌", "#E01E5A"),
    State.CONTRADICTION: Style("bold magenta", "🔀", "#E8912D"),
    State.UNKNOWN: Style("bold white on red", "❔", "#9E9E9E"),
}
SAYS_STYLE: Mapping[str, Style] = {
    "done": Style("green", "✅"),
    "working": Style("cyan", "⚙️"),
    "failed": Style("red", "❌"),
    "unknown": Style("yellow", "❔"),
}
EMOJI: Mapping[State, str] = {state: style.emoji for state, style in STATE_STYLE.items()}
COLOUR: Mapping[State, str] = {state: style.colour for state, style in STATE_STYLE.items()}

from sensors._present.facts import (  # noqa: E402 - the shared pieces, re-exported for the callers
    age,
    clock,
    evidence_pairs,
    facts,
    first_of,
    floor_percent,
    fmt_duration,
    generic_values,
    has_value,
    mib,
    number,
    one_line,
    per_device,
    reasons_text,
    still_working,
    thousands,
    truncate,
)

# --------------------------------------------------------------------------- terminal


def key_values(signal: str, evidence: dict[str, Any] | Any, host: str | None = None) -> str:
    """The few evidence values a person looks at first, per signal (one inert line). ``host``:
    the host the reading is of, named where a value is true of its clock.

    Example:
        >>> key_values("process", {"pid": 4455, "state": "R", "cpu_seconds": 2761.0})
        'pid=4455  state=R  cpu=2761.0s'
        >>> key_values("log", {"age_seconds": -575.6, "size": 16}, "gpu-02")
        "stamped 575.6s ahead of gpu-02's clock  bytes=16"
    """
    ev = dict(evidence)

    def fmt(key: str, label: str | None = None, unit: str = "") -> str | None:
        value = ev.get(key)
        if value is None:
            return None
        if isinstance(value, float):
            value = f"{value:.1f}"
        return f"{label or key}={value}{unit}"

    parts: list[str | None]
    if signal == "process":
        # A stage over several hosts: the host's ranks alive against ``process.per_host``.
        ranks = number(ev.get("ranks")) if has_value(ev, "per_host") else None
        parts = [
            f"ranks={ranks:.0f}/{ev['per_host']}" if ranks is not None else None,
            fmt("pid"),
            fmt("state"),
            fmt("cpu_seconds", "cpu", "s"),
            fmt("elapsed_seconds", "elapsed", "s"),
        ]
    elif signal == "log":
        age = number(ev.get("age_seconds"))
        whose = "this machine's" if host == "local" else f"{host}'s" if host else "the host's"
        parts = [
            # A file time ahead of the host's clock is no age: say what it is.
            f"stamped {-age:.1f}s ahead of {whose} clock"
            if age is not None and age < 0
            else fmt("age_seconds", "age", "s"),
            fmt("size", "bytes"),
        ]
    elif signal == "outputs":
        count, expected = ev.get("count"), ev.get("expected")
        parts = [f"{count if count is not None else '?'}/{expected}"]
    elif signal == "gpu":
        devices = ev.get("devices") or []
        utils = [d.get("utilization_pct") for d in devices if isinstance(d, dict)]
        parts = [
            f"util={','.join('?' if u is None else f'{u:.0f}%' for u in utils)}" if utils else None,
            fmt("job_memory_mib", "job_mem", "MiB"),
            fmt("samples"),
        ]
    else:
        parts = []
    return inert("  ".join(p for p in parts if p))


# --------------------------------------------------------------------------- notifications


def evidence_line(reading: Any, name: str | None = None) -> str:
    """One line for one signal: what it says, then its key values. ``name`` is the reading's
    key in its verdict where that is not its signal (a stage over several hosts keys each
    host's reading ``process@HOST``: by its signal alone, one host's line was another's).

    Example:
        >>> from sensors import Reading
        >>> evidence_line(Reading("outputs", "working", "37300 of 37312",
        ...                       {"count": 37300, "expected": 37312}))
        'outputs: working — 37300 of 37312 (count 37300/37312, 99.96%)'
    """
    ev = reading.evidence if isinstance(reading.evidence, Mapping) else {}
    values = _VALUES.get(reading.signal, generic_values)(ev)
    if ev.get("error") not in (None, ""):
        values.append(f"error: {one_line(ev['error'], 120)}")
    line = f"{name or reading.signal}: {reading.says}"
    if reading.detail:
        line += f" — {one_line(reading.detail, 120)}"
    if values:
        line += f" ({', '.join(values)})"
    return truncate(line, 400)


def _process_values(ev: Mapping[str, Any]) -> list[str]:
    out = []
    if has_value(ev, "per_host") and (ranks := number(ev.get("ranks"))) is not None:
        out.append(f"ranks {ranks:.0f}/{ev['per_host']}")  # over several hosts: against per_host
    if has_value(ev, "pid"):
        out.append(f"pid {ev['pid']}")
    if has_value(ev, "state"):
        out.append(f"state {one_line(ev['state'])}")
    if (cpu := number(ev.get("cpu_seconds"))) is not None:
        out.append(f"cpu {fmt_duration(cpu)}")
    if (elapsed := number(ev.get("elapsed_seconds"))) is not None:
        out.append(f"elapsed {fmt_duration(elapsed)}")
    for key in ("exit_code", "returncode"):
        if has_value(ev, key):
            out.append(f"exit {ev[key]}")
            break
    return out


def _log_values(ev: Mapping[str, Any]) -> list[str]:
    out = []
    if has_value(ev, "last_line"):
        out.append(f'last "{one_line(ev["last_line"], 100)}"')
    if (age := number(ev.get("age_seconds"))) is not None:
        out.append(
            f"age {fmt_duration(age)}"
            if age >= 0
            else f"stamped {fmt_duration(-age)} ahead of the host's clock"
        )
    progress = ev.get("progress")
    if isinstance(progress, Mapping) and has_value(progress, "done"):
        total = progress.get("total")
        out.append(f"progress {progress['done']}/{total if total is not None else '?'}")
    return out


def outputs_values(ev: Mapping[str, Any]) -> list[str]:
    """``count 37311/37312``, then the percentage rounded down (``99.99%``) when both are numbers."""
    count, expected = ev.get("count"), ev.get("expected")
    if count is None and expected is None:
        return []
    out = [f"count {count if count is not None else '?'}/{expected if expected else '?'}"]
    c, e = number(count), number(expected)
    if c is not None and e:
        out.append(f"{floor_percent(c, e):.2f}%")
    return out


def _gpu_values(ev: Mapping[str, Any]) -> list[str]:
    out = []
    devices = ev.get("devices")
    rows = [d for d in devices if isinstance(d, Mapping)] if isinstance(devices, list) else []
    if rows:
        # The probe's shape: one dict per GPU (sensors/_signals/gpu/).
        utils = [d.get("utilization_pct") for d in rows]
        mems = [d.get("memory_used_mib") for d in rows]
        if any(u is not None for u in utils):
            out.append(f"util {per_device(utils, '%')}")
        if any(m is not None for m in mems):
            out.append(f"mem {per_device([mib(m) for m in mems], '')}")
    else:
        # Flat keys, as a hand-built or older reading may carry them.
        util = first_of(ev, "utilisation", "utilization", "utilization_pct", "util")
        if util is not None:
            out.append(f"util {per_device(util, '%')}")
        mem = first_of(ev, "memory_used_mib", "memory_mib", "memory")
        if mem is not None:
            in_mib = has_value(ev, "memory_used_mib") or has_value(ev, "memory_mib")
            out.append(f"mem {per_device(mem, ' MiB' if in_mib else '')}")
    if (job_mem := number(ev.get("job_memory_mib"))) is not None:
        out.append(f"job holds {mib(job_mem)}")
    idle = ev.get("idle")
    if isinstance(idle, bool):
        out.append("idle" if idle else "busy")
    elif (idle_s := number(idle)) is not None:
        out.append(f"idle {fmt_duration(idle_s)}")
    return out


_VALUES: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "process": _process_values,
    "log": _log_values,
    "outputs": outputs_values,
    "gpu": _gpu_values,
}


# --------------------------------------------------------------------------- Prefect


def progress_percent(verdict: Verdict) -> float | None:
    """Outputs written / expected in percent (else the log's progress done/total), or None."""
    facts: list[Mapping[str, Any]] = []
    if (outputs := verdict.readings.get("outputs")) is not None:
        facts.append({"done": outputs.evidence.get("count"), "total": outputs.evidence.get("expected")})
    if (log := verdict.readings.get("log")) is not None and isinstance(log.evidence.get("progress"), Mapping):
        facts.append(log.evidence["progress"])
    for fact in facts:
        done, total = number(fact.get("done")), number(fact.get("total"))
        if done is not None and total is not None and total > 0:
            return max(0.0, min(100.0, floor_percent(done, total)))
    return None


def progress_detail(verdict: Verdict) -> str:
    reading = verdict.readings.get("outputs")
    if reading is not None and "count" in reading.evidence:
        return f"{reading.evidence.get('count')}/{reading.evidence.get('expected')} outputs"
    return reasons_text(verdict)


def evidence_rows(verdict: Verdict) -> list[dict[str, str]]:
    """One row per signal for a person: signal, says, detail and the key :func:`facts` (each
    cell one short line of inert text; the raw evidence stays in the verdict JSON). A stage
    over several hosts has a row per host's signal (``process@HOST``) and, under each host's
    process row, a row per rank it lists (a live match whose parent is not matched too)."""
    rows = []
    for name, reading in verdict.readings.items():
        rows.append(
            {
                "signal": inert(name),
                "says": str(reading.says),
                "detail": one_line(reading.detail, 120),
                "facts": facts(reading),
            }
        )
        if reading.signal == "process" and "@" in name:
            rows += _rank_rows(name, reading.evidence)
    return rows


#: Ranks listed under a host's process row, at most.
_RANK_ROWS = 16
_GONE = frozenset({"Z", "X", "x"})


def _rank_rows(name: str, evidence: Mapping[str, Any]) -> list[dict[str, str]]:
    listed = evidence.get("processes") if isinstance(evidence, Mapping) else None
    if not isinstance(listed, (list, tuple)):
        return []
    entries = [e for e in listed if isinstance(e, Mapping)]
    pids = {e.get("pid") for e in entries}
    ranks = [e for e in entries if e.get("ppid") not in pids]
    rows = [
        {
            "signal": inert(f"{name} rank pid {e.get('pid')}"),
            "says": "done" if e.get("state") in _GONE else "working",
            "detail": "",
            "facts": _entry_facts(e),
        }
        for e in ranks[:_RANK_ROWS]
    ]
    # The probe lists 16 of a host's matches (ranks and their forked workers): how many ranks
    # there are in all is its own count over every match (``ranks``), not the rows above.
    matched, counted = evidence.get("matched"), evidence.get("ranks")
    cut = isinstance(matched, int) and matched > len(entries)
    if cut and isinstance(counted, int):
        rows.append(
            {
                "signal": inert(f"{name} ranks"),
                "says": "",
                "detail": "",
                "facts": f"{counted} alive in all; {matched} processes matched, {len(entries)} listed",
            }
        )
    return rows


def _entry_facts(entry: Mapping[str, Any]) -> str:
    return facts(Reading("process", Says.WORKING, "", dict(entry)))
