"""``crosscheck check``: a verdict as a Nagios/Icinga check (the monitoring-plugins convention).

A check plugin exits 0 OK, 1 WARNING, 2 CRITICAL or 3 UNKNOWN and prints one status line on
stdout, its performance data after a ``|``, then lines of detail; ``status``'s own codes
read wrongly there. :data:`PLUGIN_STATE` maps each verdict to a plugin state (``complete`` and
``running`` OK, ``stalled`` and ``contradiction`` WARNING, ``failed`` CRITICAL, ``unknown``
UNKNOWN), and several stages in one check report the worst. Why each verdict maps as it does:
docs/cli.md, "As a Nagios or Icinga check".

Example:
    >>> OK, WARNING, CRITICAL, UNKNOWN
    (0, 1, 2, 3)
    >>> [PLUGIN_STATE[s] for s in State]
    [0, 0, 1, 2, 1, 3]
    >>> perf_value(2761.0), perf_value(0.5004), perf_value(None)
    ('2761', '0.5', 'U')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sensors._base.model import State, Verdict
from sensors._base.text import inert

__all__ = [
    "CRITICAL",
    "OK",
    "PLUGIN_STATE",
    "UNKNOWN",
    "WARNING",
    "Metric",
    "metrics",
    "perf_value",
    "report",
    "unknown_report",
    "worst",
]

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
_NAMES = {OK: "OK", WARNING: "WARNING", CRITICAL: "CRITICAL", UNKNOWN: "UNKNOWN"}

#: A verdict's plugin state (docs/cli.md, "As a Nagios or Icinga check", says why).
PLUGIN_STATE: dict[State, int] = {
    State.COMPLETE: OK,
    State.RUNNING: OK,
    State.STALLED: WARNING,
    State.FAILED: CRITICAL,
    State.CONTRADICTION: WARNING,
    State.UNKNOWN: UNKNOWN,
}
#: Which of two plugin states a check of several stages reports: the higher rank.
_RANK = {OK: 0, UNKNOWN: 1, WARNING: 2, CRITICAL: 3}
#: The product's name at the head of the status line, as plugins name themselves.
_SERVICE = "CROSSCHECK"
#: One reason line of detail at most this long (a log line can be 64 KiB).
_REASON_MAX = 300


def worst(codes: Sequence[int]) -> int:
    """The state of several: CRITICAL > WARNING > UNKNOWN > OK (none: UNKNOWN)."""
    return max(codes, key=_RANK.__getitem__) if codes else UNKNOWN


@dataclass(frozen=True)
class Metric:
    """One performance value: ``label=value[uom];warn;crit;min;max`` (no thresholds here)."""

    label: str
    value: float | None  # None: not determined at this check ("U")
    uom: str = ""
    min: float | None = None
    max: float | None = None

    def __str__(self) -> str:
        bounds = ";".join("" if b is None else perf_value(b) for b in (self.min, self.max))
        value = perf_value(self.value)
        return f"{self.label}={value}{self.uom if self.value is not None else ''};;;{bounds}".rstrip(";")


def perf_value(value: float | None) -> str:
    """A number as performance data writes it (C locale, ``[-0-9.]``); ``U``: undetermined."""
    if value is None:
        return "U"
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


#: The metrics in the order a plugin's performance data lists them.
_ORDER = {"outputs": 0, "log": 1, "process": 2, "gpu": 3}


def metrics(verdict: Verdict, prefix: str = "") -> list[Metric]:
    """What a stage's configured signals measure: outputs written (of expected), the log's
    age, the job's CPU seconds, the busiest configured GPU's utilisation. A signal that is
    not configured has no metric; one whose reading lacks the value has ``U``. A stage over
    several hosts reads its signals per host (``process@gpu-02``): one metric each, labelled
    ``cpu_time@gpu-02`` (a host name has no ``=`` or quote, which a label may not hold)."""
    found: list[Metric] = []
    for key, reading in sorted(
        verdict.readings.items(), key=lambda kv: _ORDER.get(kv[0].partition("@")[0], 9)
    ):
        signal, at, host = key.partition("@")
        where, ev = f"{at}{host}", reading.evidence
        if signal == "outputs":
            expected = ev.get("expected")
            found.append(
                Metric(f"{prefix}outputs{where}", _number(ev.get("count")), "", 0, _number(expected))
            )
        elif signal == "log":
            found.append(Metric(f"{prefix}log_age{where}", _number(ev.get("age_seconds")), "s", 0))
        elif signal == "process":
            found.append(Metric(f"{prefix}cpu_time{where}", _number(ev.get("cpu_seconds")), "s", 0))
        elif signal == "gpu":
            devices = ev.get("devices") or []
            utils = [_number(d.get("utilization_pct")) for d in devices if isinstance(d, dict)]
            known = [u for u in utils if u is not None]
            found.append(Metric(f"{prefix}gpu_util{where}", max(known) if known else None, "%", 0, 100))
    return found


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _line(text: object, limit: int | None = None) -> str:
    """Job text on one line of plugin output: inert, and without ``|`` (which would start the
    performance data)."""
    return inert(text, limit).replace("|", "¦")


def report(verdicts: Sequence[Verdict], seconds: float) -> tuple[int, str]:
    """The plugin's exit code and output for the verdicts of one check that took ``seconds``.

    One stage::

        CROSSCHECK OK - extract running: process alive: pid 4455 ... | outputs=37311;;;0;37312 ...
        - process alive: pid 4455 alive in state R, cpu 2761.0s
        - ...

    Several: the worst state, each stage's verdict on the status line, each stage's reasons
    below, metrics named ``STAGE.label``.
    """
    code = worst([PLUGIN_STATE[v.state] for v in verdicts])
    several = len(verdicts) > 1
    perf: list[Metric] = []
    for v in verdicts:
        perf.extend(metrics(v, f"{v.stage}." if several else ""))
    perf.append(Metric("time", seconds, "s", 0))
    if several:
        summary = ", ".join(f"{v.stage} {v.state.value}" for v in verdicts)
    else:
        (v,) = verdicts
        summary = f"{v.stage} {v.state.value}" + (f": {v.reasons[0]}" if v.reasons else "")
    lines = [f"{_SERVICE} {_NAMES[code]} - {_line(summary, _REASON_MAX)} | {' '.join(map(str, perf))}"]
    for v in verdicts:
        if several:
            lines.append(f"{v.stage} on {v.host}: {v.state.value}")
        lines.extend(f"- {_line(reason, _REASON_MAX)}" for reason in v.reasons)
    return code, "\n".join(lines) + "\n"


def unknown_report(message: str) -> tuple[int, str]:
    """UNKNOWN, with why the check could not be made (a stage file that does not load, a bad
    option, no verdict in time), as one status line."""
    return UNKNOWN, f"{_SERVICE} UNKNOWN - {_line(message, 1000)}\n"
