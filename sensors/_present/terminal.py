"""What the terminal shows: verdict lines, tables and a live progress bar.

Job text (log lines, command lines) reaches the console only as rich ``Text`` built from
:func:`sensors._base.text.inert`: never markup, never an escape sequence.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from sensors._base.model import Verdict
from sensors._base.output import is_terminal
from sensors._base.text import inert
from sensors._config.stage import Stage
from sensors._present.evidence import SAYS_STYLE, STATE_STYLE, key_values

if TYPE_CHECKING:  # rich is imported when something is shown
    from rich.console import Console


def print_json(verdict: Verdict, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(verdict.to_json(), sort_keys=False) + "\n")
    out.flush()


#: The width a console has when standard output is not a terminal: no line is wrapped.
UNWRAPPED = 1_000_000


def new_console() -> Console:
    from rich.console import Console

    # Job text reaches this console only as rich ``Text`` built by ``text`` below, never
    # as markup: a log line "[/data/out]" is a closing tag to rich and would crash the
    # output — and the exit code of a wait that reached complete.
    # Not a terminal (a pipe, a file): one record per line, whatever COLUMNS says — rich
    # would wrap at 80 columns, and `| grep` would find half a reason.
    return Console(highlight=False, soft_wrap=False, emoji=False, width=None if is_terminal() else UNWRAPPED)


def text(value: object, style: str = "") -> Any:
    """Inert rich text: job text shown as it is (no markup, no escapes, one line)."""
    from rich.text import Text

    return Text(inert(value), style=style)


def print_change(verdict: Verdict) -> None:
    from rich.text import Text

    when = time.strftime("%H:%M:%S")
    first = verdict.reasons[0] if verdict.reasons else ""
    line = Text.assemble(
        f"{when}  ",
        text(verdict.stage),
        "  ",
        text(verdict.state.value.upper(), STATE_STYLE[verdict.state].terminal),
        "  ",
        text(first),
    )
    new_console().print(line)


def _says_style(says: str) -> str:
    style = SAYS_STYLE.get(says)
    return style.terminal if style else ""


def _says_cell(says: str, rest: str = "") -> Any:
    from rich.text import Text

    cell = text(says, _says_style(says))
    return Text.assemble(cell, " ", text(rest)) if rest else cell


def print_verdicts(verdicts: Sequence[Verdict]) -> None:
    """One stage: the detailed table. Several: one table, a row per stage."""
    if len(verdicts) == 1:
        print_table(verdicts[0])
        return
    from rich.table import Table

    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for column in ("stage", "host", "verdict", "process", "log", "outputs", "gpu", "why"):
        table.add_column(column, overflow="fold")
    for v in verdicts:
        data = v.to_json()["signals"]
        cells = []
        for name in ("process", "log", "outputs", "gpu"):
            r = data.get(name)
            if r is not None:
                cells.append(_says_cell(r["says"], key_values(name, r["evidence"], v.host)))
                continue
            # A stage over several hosts keys each host's reading ``process@HOST``: "—" there
            # said it has no such signal. Each host's, named.
            each = [(key, reading) for key, reading in v.readings.items() if reading.signal == name]
            cells.append(_per_host_cell(name, each) if each else text("—"))
        table.add_row(
            text(v.stage),
            text(v.host),
            text(v.state.value.upper(), STATE_STYLE[v.state].terminal),
            *cells,
            text(v.reasons[0] if v.reasons else ""),
        )
    new_console().print(table)


def _per_host_cell(signal: str, readings: list[tuple[str, Any]]) -> Any:
    """One cell for a signal read on several hosts: each reading's host (its key after the
    signal: ``gpu-02``, ``#rank3@gpu-02``), what it says and its key values."""
    from rich.text import Text

    parts: list[Any] = []
    for key, reading in readings:
        if parts:
            parts.append("; ")
        where = key[len(signal) :].removeprefix("@")
        values = key_values(signal, reading.evidence, _host_of(key, reading))
        parts += [text(where), " ", _says_cell(str(reading.says), values)]
    return Text.assemble(*parts)


def _host_of(key: str, reading: Any) -> str:
    """The host a reading is of, as the stage names it: after the ``@`` of its key over several
    hosts (``log#rank3@gpu-02``, with its port where the stage gives one), else its own."""
    return key.partition("@")[2] or reading.host


def print_table(verdict: Verdict) -> None:
    from rich.table import Table
    from rich.text import Text

    console = new_console()
    data = verdict.to_json()
    console.print(
        Text.assemble(
            text(verdict.stage, "bold"),
            " on ",
            text(verdict.host),
            ": ",
            text(f" {verdict.state.value.upper()} ", STATE_STYLE[verdict.state].terminal),
            "  → advance" if verdict.advance else "",
        )
    )
    for reason in verdict.reasons:
        console.print(Text.assemble("  • ", text(reason)))
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("signal")
    table.add_column("says")
    table.add_column("key evidence")
    table.add_column("detail", overflow="fold")
    for name, r in data["signals"].items():
        # By the reading's signal, not its key: a stage over several hosts keys each host's
        # reading ``process@HOST``, whose key values were left out under that name.
        table.add_row(
            text(name),
            _says_cell(r["says"]),
            text(
                key_values(
                    verdict.readings[name].signal, r["evidence"], _host_of(name, verdict.readings[name])
                )
            ),
            text(r["detail"]),
        )
    console.print(table)
    # A stage over several hosts (its readings keyed ``signal@HOST``) is checked on this
    # machine's clock (``SpanChecker``): "host clock" named none of its hosts.
    span = any(name != r.signal for name, r in verdict.readings.items())
    whose = "this machine's clock" if span else "host clock"
    console.print(text(f"  checked at {data['checked_at']} ({whose})", "dim"))


class LiveProgress:
    """A progress bar per stage with outputs: count/expected, rate and ETA (terminals only)."""

    def __init__(self, stages: list[Stage]) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}", markup=False),
            TimeRemainingColumn(),
            transient=True,
        )
        self._tasks = {
            s.stage: self._progress.add_task(s.stage, total=s.outputs.expected, rate="")
            for s in stages
            if s.outputs
        }
        self._first: dict[str, tuple[float, int]] = {}

    def start(self) -> None:
        self._progress.start()

    def stop(self) -> None:
        self._progress.stop()

    def pause(self) -> None:
        self._progress.stop()

    def resume(self) -> None:
        self._progress.start()

    def update(self, verdict: Verdict) -> None:
        task = self._tasks.get(verdict.stage)
        outputs = verdict.readings.get("outputs")
        if task is None or outputs is None or outputs.evidence.get("count") is None:
            return
        count = int(outputs.evidence["count"])
        now = time.monotonic()
        first = self._first.setdefault(verdict.stage, (now, count))
        rate = (count - first[1]) / (now - first[0]) if now > first[0] else 0.0
        self._progress.update(task, completed=count, rate=f"{rate:.1f}/s" if rate else "")
