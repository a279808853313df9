"""A picture of a wait: the signals over time with the verdicts as bands, as one SVG.

What the gate saw, at a glance: CPU seconds, outputs written, the log's age and GPU use, one
small panel each on a shared time axis, behind them a band per verdict (cyan running, yellow
stalled, ...). Incident 2 reads as a flat outputs line and a quiet log over a CPU line that
keeps climbing, all inside a "running" band.

Self-contained on purpose (no plotting library, no fonts to fetch, no scripts): the SVG is a
string built here, small enough to travel as a ``data:`` URL in a Prefect image artifact.
Every text in it is escaped XML; job text never enters it (only numbers, times, verdicts).

Example:
    >>> history = WaitHistory()
    >>> history.add(verdict)  # doctest: +SKIP
    >>> svg = wait_svg(history.samples, title="extract")  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from sensors._base.model import State, Verdict
from sensors._base.text import inert, markdown_escape
from sensors._present.evidence import COLOUR, number

__all__ = ["Sample", "WaitHistory", "data_url", "markdown_image", "wait_svg"]


@dataclass(frozen=True)
class Sample:
    """The numbers of one check (``None`` where a signal gave none)."""

    at: float  # the check's time, seconds since the epoch (monitored host's clock)
    state: State
    cpu_seconds: float | None = None
    outputs: float | None = None
    log_age: float | None = None
    gpu_util: float | None = None
    #: A stage over several hosts: each host's (name, CPU time, log age, GPU use), one line
    #: per host in the picture (its readings are ``process@HOST``, ``log@HOST``, ``gpu@HOST``).
    per_host: tuple[tuple[str, float | None, float | None, float | None], ...] = ()

    @classmethod
    def of(cls, verdict: Verdict, *, at: float) -> Sample:
        def ev(signal: str, key: str) -> float | None:
            reading = verdict.readings.get(signal)
            return _drawn(key, reading.evidence.get(key)) if reading is not None else None

        hosts: dict[str, list[float | None]] = {}
        for name, reading in verdict.readings.items():
            signal, at_sign, host = name.partition("@")
            if at_sign and signal in _PER_HOST:
                values = hosts.setdefault(host, [None, None, None])
                values[_PER_HOST.index(signal)] = (
                    _gpu_use(reading.evidence)
                    if signal == "gpu"
                    else _drawn(_KEY[signal], reading.evidence.get(_KEY[signal]))
                )
        gpu = verdict.readings.get("gpu")
        return cls(
            at=number(verdict.checked_at) or at,
            state=verdict.state,
            cpu_seconds=ev("process", "cpu_seconds"),
            outputs=ev("outputs", "count"),
            log_age=ev("log", "age_seconds"),
            gpu_util=_gpu_use(gpu.evidence) if gpu is not None else None,
            per_host=tuple((host, *values) for host, values in hosts.items()),  # type: ignore[misc]
        )

    def value(self, attr: str, host: str | None = None) -> float | None:
        """``attr`` of this check (``cpu_seconds``, ``outputs``, ...), of ``host`` if given."""
        if host is None:
            value: float | None = getattr(self, attr)
            return value
        if attr not in _HOST_ATTRS:
            return None
        for name, cpu, log_age, gpu in self.per_host:
            if name == host:
                return (cpu, log_age, gpu)[_HOST_ATTRS.index(attr)]
        return None


#: The signals drawn per host, in the order of a ``per_host`` row, the evidence each is read
#: from, and the sample's attribute each is drawn in.
_PER_HOST = ("process", "log", "gpu")
_KEY = {"process": "cpu_seconds", "log": "age_seconds"}
_HOST_ATTRS = ("cpu_seconds", "log_age", "gpu_util")


def _drawn(key: str, value: object) -> float | None:
    """An evidence value as drawn: a log "age" below zero is a file time ahead of the host's
    clock, no age, and is left out of the line (the table says what it is)."""
    found = number(value)
    return None if key == "age_seconds" and found is not None and found < 0 else found


def _gpu_use(evidence: object) -> float | None:
    """The busiest device's utilisation (a GPU reading's evidence)."""
    devices = evidence.get("devices") if isinstance(evidence, Mapping) else None
    utils = [
        u
        for d in (devices if isinstance(devices, list) else [])
        if isinstance(d, dict) and (u := number(d.get("utilization_pct"))) is not None
    ]
    return max(utils) if utils else None


class WaitHistory:
    """The samples of one wait, bounded: past ``limit`` every other old sample is dropped,
    so a 12-hour wait keeps its shape in a constant amount of memory. ``checks`` counts
    every check added (the samples may be fewer), ``first_at`` is the first one's time.

    A watch that another process began (a stage handed to ``crosscheck serve``) travels as
    :meth:`to_json` and goes on with :meth:`from_json`: the gate that reports it shows
    every check the watcher made, not only its own.
    """

    def __init__(self, limit: int = 720) -> None:
        self.limit = max(8, limit)
        self.samples: list[Sample] = []
        self.checks = 0
        self.first_at: float | None = None

    def add(self, verdict: Verdict, *, at: float | None = None) -> None:
        sample = Sample.of(verdict, at=at if at is not None else 0.0)
        self.checks += 1
        if self.first_at is None:
            self.first_at = sample.at
        self.samples.append(sample)
        if len(self.samples) > self.limit:
            # Keep the newest quarter at full resolution; halve the rest.
            keep = self.limit // 4
            old, new = self.samples[:-keep], self.samples[-keep:]
            self.samples = old[::2] + new

    def to_json(self) -> dict[str, object]:
        """Plain JSON: the counts and one short list per sample (``[at, state, cpu, outputs,
        log age, gpu]``, about 50 bytes each; a stage over several hosts adds its hosts' rows)."""
        return {
            "checks": self.checks,
            "first_at": self.first_at,
            "samples": [
                [s.at, str(s.state), s.cpu_seconds, s.outputs, s.log_age, s.gpu_util]
                + ([[list(row) for row in s.per_host]] if s.per_host else [])
                for s in self.samples
            ],
        }

    @classmethod
    def from_json(cls, doc: object, *, limit: int = 720) -> WaitHistory | None:
        """The history :meth:`to_json` wrote; None for anything else (never a guess)."""
        if not isinstance(doc, dict) or not isinstance(doc.get("samples"), list):
            return None
        history = cls(limit)
        try:
            for row in doc["samples"]:
                at, state, *values = row
                hosts = values.pop() if len(values) == 5 else []
                cpu, outputs, log_age, gpu = (number(v) for v in values)
                per_host = tuple((str(name), *(number(v) for v in rest)) for name, *rest in hosts)
                if any(len(r) != 4 for r in per_host):
                    return None
                history.samples.append(
                    Sample(float(at), State(state), cpu, outputs, log_age, gpu, per_host)  # type: ignore[arg-type]
                )
        except (TypeError, ValueError):
            return None
        history.samples = history.samples[-history.limit :]
        checks, first_at = number(doc.get("checks")), number(doc.get("first_at"))
        history.checks = max(int(checks or 0), len(history.samples))
        history.first_at = first_at if first_at is not None else next((s.at for s in history.samples), None)
        return history


_PANELS = (
    ("cpu_seconds", "CPU time (s)", "#1f6feb"),
    ("outputs", "outputs written", "#2da44e"),
    ("log_age", "log age (s)", "#8250df"),
    ("gpu_util", "GPU utilisation (%)", "#cf222e"),
)
_WIDTH, _LEFT, _RIGHT, _TOP, _PANEL, _GAP = 860, 150, 20, 34, 64, 14
_NOTE_MAX = 200  # characters of the note under the title (one line of the picture's width)


def wait_svg(samples: Sequence[Sample], *, title: str, note: str = "") -> str:
    """The SVG document (a string) for ``samples``, oldest first; ``note`` (the verdict's
    first reason: a hung collective's lost rank, named) is written under the title, one line."""
    top = _TOP + (16 if note else 0)
    hosts = list(dict.fromkeys(row[0] for s in samples for row in s.per_host))
    panels = [
        p
        for p in _PANELS
        if any(s.value(p[0]) is not None or any(s.value(p[0], h) is not None for h in hosts) for s in samples)
    ]
    height = top + len(panels) * (_PANEL + _GAP) + 44
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{_WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="{_LEFT}" y="18" font-size="13" font-weight="bold">{escape(title)}</text>',
    ]
    if note:
        out.append(f'<text x="{_LEFT}" y="34">{escape(inert(note, _NOTE_MAX))}</text>')
    if not samples:
        out.append(f'<text x="{_LEFT}" y="{top + 20}">no checks yet</text></svg>')
        return "".join(out)
    frame = _Frame(samples[0].at, samples[-1].at, top + len(panels) * (_PANEL + _GAP) - _GAP)
    out += _bands(samples, frame)
    for n, panel in enumerate(panels):
        out += _panel(samples, frame, top + n * (_PANEL + _GAP), *panel, hosts=hosts)
    out += _axis_and_legend(samples, frame)
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True)
class _Frame:
    """The time axis shared by every panel: first and last check, and the plots' bottom."""

    t0: float
    t1: float
    bottom: float
    width: float = _WIDTH - _LEFT - _RIGHT

    def x(self, t: float) -> float:
        if self.t1 <= self.t0:
            return _LEFT + self.width / 2
        return _LEFT + (t - self.t0) / (self.t1 - self.t0) * self.width


def _bands(samples: Sequence[Sample], frame: _Frame) -> list[str]:
    """Verdict bands behind every panel: one rectangle per run of equal verdicts, each sample
    owning the time halfway to its neighbours (so a last ``complete`` check shows too)."""

    def edge(i: int) -> float:
        if i <= 0:
            return _LEFT
        if i >= len(samples):
            return _LEFT + frame.width
        return (frame.x(samples[i - 1].at) + frame.x(samples[i].at)) / 2

    out, start = [], 0
    for i in range(1, len(samples) + 1):
        if i == len(samples) or samples[i].state is not samples[start].state:
            left, right = edge(start), edge(i)
            colour = COLOUR.get(samples[start].state, "#9E9E9E")
            out.append(
                f'<rect x="{left:.1f}" y="{_TOP}" width="{max(right - left, 1.5):.1f}" '
                f'height="{frame.bottom - _TOP}" fill="{colour}" fill-opacity="0.18"/>'
            )
            start = i
    return out


def _panel(
    samples: Sequence[Sample],
    frame: _Frame,
    top: int,
    attr: str,
    label: str,
    colour: str,
    *,
    hosts: Sequence[str] = (),
) -> list[str]:
    """One signal over time: a framed panel, its label and scale, the line of its values —
    for a stage over several hosts, one line per host, each named at its end."""
    lines: list[tuple[str | None, str, list[tuple[float, float]]]] = []
    own = [(s.at, v) for s in samples if (v := s.value(attr)) is not None]
    if own:
        lines.append((None, colour, own))
    for k, host in enumerate(hosts):
        values = [(s.at, v) for s in samples if (v := s.value(attr, host)) is not None]
        if values:
            lines.append((host, _HOST_COLOURS[k % len(_HOST_COLOURS)], values))
    high = max((v for _, _, values in lines for _, v in values), default=0.0)
    high = 100.0 if attr == "gpu_util" else (high if high > 0 else 1.0)

    def y(v: float) -> float:
        return top + _PANEL - (v / high) * _PANEL

    out = [
        f'<rect x="{_LEFT}" y="{top}" width="{frame.width}" height="{_PANEL}" fill="none" stroke="#d0d7de"/>'
        f'<text x="{_LEFT - 8}" y="{top + _PANEL / 2 + 4:.0f}" text-anchor="end">{escape(label)}</text>'
        f'<text x="{_LEFT - 8}" y="{top + 10}" text-anchor="end" fill="#57606a">{_num(high)}</text>'
    ]
    for named, stroke, values in lines:
        if len(values) == 1:
            t, v = values[0]
            out.append(f'<circle cx="{frame.x(t):.1f}" cy="{y(v):.1f}" r="2.5" fill="{stroke}"/>')
        else:
            points = " ".join(f"{frame.x(t):.1f},{y(v):.1f}" for t, v in values)
            out.append(f'<polyline points="{points}" fill="none" stroke="{stroke}" stroke-width="1.8"/>')
        if named is not None:
            t, v = values[-1]
            out.append(
                f'<text x="{frame.x(t) - 4:.1f}" y="{y(v) - 3:.1f}" text-anchor="end" font-size="9" '
                f'fill="{stroke}">{escape(named)}</text>'
            )
    return out


#: One colour per host (a stage over several hosts), in the hosts' order, then again.
_HOST_COLOURS = ("#1f6feb", "#cf222e", "#2da44e", "#8250df", "#bf8700", "#0a7b83", "#d1242f", "#6e7781")


def _axis_and_legend(samples: Sequence[Sample], frame: _Frame) -> list[str]:
    """The time axis (local clock times) and the legend of the verdicts that occurred."""
    axis = frame.bottom + 16
    out = []
    for frac in (0.0, 0.5, 1.0):
        t = frame.t0 + frac * (frame.t1 - frame.t0)
        anchor = ("start", "middle", "end")[int(frac * 2)]
        out.append(
            f'<text x="{_LEFT + frac * frame.width:.1f}" y="{axis}" text-anchor="{anchor}">{_clock(t)}</text>'
        )
    seen: list[State] = []
    for s in samples:
        if s.state not in seen:
            seen.append(s.state)
    lx = _LEFT
    for state in seen:
        out.append(
            f'<rect x="{lx}" y="{axis + 10}" width="12" height="10" fill="{COLOUR.get(state, "#9E9E9E")}" '
            f'fill-opacity="0.5"/><text x="{lx + 16}" y="{axis + 19}">{escape(str(state))}</text>'
        )
        lx += 30 + 7 * len(str(state))
    return out


def data_url(svg: str) -> str:
    """``svg`` as a ``data:image/svg+xml;base64,...`` URL (what an image artifact shows)."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode("ascii")


def markdown_image(svg: str, *, alt: str) -> str:
    """``svg`` as markdown that shows only the picture: ``![alt](data:...)``.

    Why not an image artifact: Prefect's UI prints an image artifact's URL as text under the
    picture, and a ``data:`` URL is the whole picture in base64 (tens of kilobytes running
    into the sidebar). A markdown artifact that embeds it renders the image alone. The alt
    text is escaped (a stage name is a user's text); base64 holds no markdown characters.
    """
    return f"![{markdown_escape(alt)}]({data_url(svg)})\n"


def _clock(t: float) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%H:%M:%S")


def _num(v: float) -> str:
    return f"{v:,.0f}" if v >= 10 else f"{v:.1f}"
