"""The ``crosscheck`` command: status, wait, demo."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from importlib import metadata
from typing import Any, TextIO

from sensors._check import Checker
from sensors._config import Stage, load_stage, parse_duration
from sensors._errors import ConfigError, CrosscheckError, HostKeyError
from sensors._model import Reading, Says, State, Verdict
from sensors._present import SAYS_STYLE, STATE_STYLE, key_values
from sensors._run import Since, parse_since
from sensors._text import inert

EXIT_ADVANCE, EXIT_NOT_YET, EXIT_USAGE, EXIT_FAILED, EXIT_TIMEOUT = 0, 1, 2, 3, 4

EPILOG = """\
examples:
  crosscheck status extract.yaml              one check, a table for a person
  crosscheck status extract.yaml --json       one JSON object for a script
  crosscheck wait extract.yaml && train.sh    block until every signal agrees it is done
  crosscheck wait a.yaml b.yaml --json        several stages at once, JSON lines
  crosscheck demo                             the example pipeline on this machine

exit codes:
  0  complete: advance        1  not yet (running, stalled, contradiction, unknown)
  2  usage or config error    3  failed        4  wait timed out
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # exit 2 with one line, like a config error
        self.print_usage(sys.stderr)
        print(f"crosscheck: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _version() -> str:
    try:
        return metadata.version("crosscheck")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a checkout
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="crosscheck",
        description="Decide when a long pipeline stage is really finished, by cross-checking "
        "its process, log, outputs and GPU.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"crosscheck {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    status = sub.add_parser(
        "status",
        help="check stages once and print the verdict",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    status.add_argument("stages", nargs="+", metavar="STAGE.yaml")
    status.add_argument("--json", action="store_true", help="one JSON object per stage")
    status.add_argument("--since", type=_since_arg, metavar="TIME|DURATION", help=SINCE_HELP)
    wait = sub.add_parser(
        "wait",
        help="check every policy.interval until complete, failed or the timeout",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    wait.add_argument("stages", nargs="+", metavar="STAGE.yaml")
    wait.add_argument("--json", action="store_true", help="one JSON object per stage per check")
    wait.add_argument("--timeout", type=_duration_arg, help="e.g. 2h (default: policy.timeout)")
    wait.add_argument("--since", type=_since_arg, metavar="TIME|DURATION", help=SINCE_HELP)
    demo = sub.add_parser("demo", help="run the example pipeline on this machine")
    demo.add_argument("--workdir", help="where the simulated job writes (default: a temp dir)")
    return parser


SINCE_HELP = (
    "when the run being watched began: a duration before now (2h) or a time"
    " (2026-12-01T06:00:00Z); evidence from before it is an earlier run's"
)


def _since_arg(value: str) -> Since:
    try:
        since = parse_since(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    assert since is not None
    return since


def _duration_arg(value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            from sensors._demo import demo

            return demo(workdir=args.workdir)
        stages = [load_stage(path) for path in args.stages]
        names = [s.stage for s in stages]
        if len(set(names)) != len(names):
            raise ConfigError("two stage files use the same stage name", field="stage")
        if args.command == "status":
            return _status(stages, as_json=args.json, since=args.since)
        return _wait(stages, as_json=args.json, timeout=args.timeout, since=args.since)
    except ConfigError as exc:
        print(f"crosscheck: {inert(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except HostKeyError as exc:
        print(f"crosscheck: {inert(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except CrosscheckError as exc:
        print(f"crosscheck: {inert(exc)}", file=sys.stderr)
        return EXIT_NOT_YET
    except KeyboardInterrupt:
        return 130
    finally:
        if "sensors._hosts.ssh" in sys.modules:
            sys.modules["sensors._hosts.ssh"].close_all()


def _exit_code(verdicts: Sequence[Verdict]) -> int:
    if any(v.state is State.FAILED for v in verdicts):
        return EXIT_FAILED
    if verdicts and all(v.advance for v in verdicts):
        return EXIT_ADVANCE
    return EXIT_NOT_YET


# --------------------------------------------------------------------------- status


#: ``status`` stops sampling after this many seconds (and after ``settle + 2`` checks).
STATUS_MAX_SECONDS = 10.0


@dataclass(frozen=True)
class StatusSampling:
    """What ``status`` saw: the last verdict, how many checks over how long, and why it stopped."""

    verdict: Verdict
    checks: int
    seconds: float
    stopped: str

    def summary(self) -> str:
        plural = "s" if self.checks != 1 else ""
        return f"took {self.checks} sample{plural} over {self.seconds:.1f}s ({self.stopped})"

    def to_json(self) -> dict[str, Any]:
        return {"checks": self.checks, "seconds": round(self.seconds, 3), "stopped": self.stopped}


def _settling(r: Reading, remaining: float) -> bool:
    """Whether more quick checks could turn this reading into done (nothing else is waited for).

    Outputs at the expected count say done only once the count is unchanged since the
    previous check (and nothing was written in place): their first reading is "confirming".
    A GPU not yet shown idle (nothing busy) may be within ``remaining`` seconds.
    """
    if r.says is Says.DONE:
        return True
    if r.says is not Says.WORKING:
        return False
    ev = r.evidence
    if r.signal == "outputs":
        count, expected = ev.get("count"), ev.get("expected")
        return isinstance(count, int) and isinstance(expected, int) and count >= expected
    if r.signal == "gpu":
        idle_for, span = ev.get("idle_for_seconds"), ev.get("window_seconds")
        return (
            ev.get("idle") is None
            and isinstance(idle_for, (int, float))
            and isinstance(span, (int, float))
            and idle_for - span <= remaining
        )
    return False


def _why_stop(verdict: Verdict, remaining: float) -> str | None:
    """Why more checks would not change the verdict now (None: they might: keep sampling)."""
    if verdict.state in (State.COMPLETE, State.FAILED):
        return f"{verdict.state.value}: final"
    readings = verdict.readings
    stuck = [r for r in readings.values() if not _settling(r, remaining)]
    if stuck:
        r = stuck[0]
        return f"{r.signal} {r.says.value}: more samples cannot make it complete now"
    if all(r.says is Says.DONE for r in readings.values()) and verdict.state is not State.RUNNING:
        # Every signal done, yet a rule decides otherwise: not a matter of settling.
        return f"every signal done, verdict {verdict.state.value}: more samples would not change it"
    return None


def sample_status(
    checker: Checker,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    max_seconds: float = STATUS_MAX_SECONDS,
) -> StatusSampling:
    """The checks ``status`` takes: as many as the verdict needs, within a bound.

    At least two (CPU progress and a stable output count are seen between two samples);
    then more while every signal is done or only settling -- outputs at the expected count
    confirming they stopped changing, a GPU not yet shown idle for ``idle_for`` -- so that a
    finished stage can reach ``complete`` at its ``settle`` (outputs need ``settle + 1``
    checks: their first has no previous count). It stops as soon as more samples cannot
    change the verdict (complete, failed, the process alive, a signal not settling), and at
    ``settle + 2`` checks or ``max_seconds``. Checks are ``min(policy.interval, 0.5 s)`` apart.

    Example:
        >>> sampling = sample_status(Checker(stage), sleep=lambda s: None)  # doctest: +SKIP
        >>> sampling.summary()  # doctest: +SKIP
        'took 3 samples over 1.0s (complete: final)'
    """
    policy = checker.stage.policy
    most = policy.settle + 2
    pause = min(policy.interval, 0.5)
    start = clock()
    verdict = checker.check()
    took = clock() - start  # the next check is expected to take as long as the last
    checks = 1
    while True:
        elapsed = clock() - start
        left = max_seconds - elapsed - pause - took  # after the next check
        why = _why_stop(verdict, left) if checks >= 2 else None
        if why is None and checks >= most:
            why = f"at the bound of {most} samples (settle {policy.settle} + 2)"
        if why is None and left < 0:
            why = f"at the bound of {max_seconds:g}s"
        if why is not None:
            return StatusSampling(verdict, checks, clock() - start, why)
        sleep(pause)
        began = clock()
        verdict = checker.check()
        took = clock() - began
        checks += 1


def _status_one(stage: Stage, since: Since | None = None) -> StatusSampling:
    return sample_status(Checker(stage, since=since))


def _status(stages: list[Stage], *, as_json: bool, since: Since | None = None) -> int:
    with ThreadPoolExecutor(max_workers=min(32, len(stages))) as pool:
        samplings = list(pool.map(lambda s: _status_one(s, since), stages))
    verdicts = [s.verdict for s in samplings]
    if as_json:
        for sampling in samplings:
            # The verdict object plus one key, "sampling" (status only): how it was reached.
            data = {**sampling.verdict.to_json(), "sampling": sampling.to_json()}
            sys.stdout.write(json.dumps(data, sort_keys=False) + "\n")
        sys.stdout.flush()
    else:
        _print_verdicts(verdicts)
        for sampling in samplings:
            prefix = f"{sampling.verdict.stage}: " if len(samplings) > 1 else ""
            _console().print(f"  {prefix}{sampling.summary()}", style="dim", markup=False)
    return _exit_code(verdicts)


# --------------------------------------------------------------------------- wait


def _wait(stages: list[Stage], *, as_json: bool, timeout: float | None, since: Since | None = None) -> int:
    lock = threading.Lock()
    finals: dict[str, Verdict] = {}
    timed_out: dict[str, bool] = {}
    live = _LiveProgress(stages) if (not as_json and sys.stdout.isatty()) else None
    # Ctrl-C must end the wait now, not after the watchers' next interval (or their timeout):
    # they sleep on this event.
    stop = threading.Event()

    def run(stage: Stage) -> None:
        checker = Checker(stage, since=since)
        notifier = _notifier(stage)
        previous: State | None = None
        watch = checker.watch(timeout=timeout, sleep=stop.wait)
        for verdict in watch:
            if stop.is_set():
                return
            with lock:
                if as_json:
                    _print_json(verdict)
                elif verdict.state is not previous:
                    if live:
                        live.pause()
                    _print_change(verdict)
                    if live:
                        live.resume()
                if live:
                    live.update(verdict)
            if notifier is not None:
                notifier(verdict)
            previous = verdict.state
            finals[stage.stage] = verdict
        timed_out[stage.stage] = watch.timed_out

    try:
        if live:
            live.start()
        pool = ThreadPoolExecutor(max_workers=min(32, len(stages)))
        try:
            futures = [pool.submit(run, s) for s in stages]
            # The first error (a host key, a secret) ends every wait now, not after the
            # stages listed before it finish.
            wait_futures(futures, return_when=FIRST_EXCEPTION)
            for fut in futures:
                if fut.done() and fut.exception() is not None:
                    stop.set()
                    fut.result()
            for fut in futures:
                fut.result()
        except BaseException:
            stop.set()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    finally:
        if live:
            live.stop()
    verdicts = [finals[s.stage] for s in stages if s.stage in finals]
    if not as_json:
        _print_verdicts(verdicts)
    if any(v.state is State.FAILED for v in verdicts):
        return EXIT_FAILED
    if any(timed_out.values()):
        if not as_json:
            late = ", ".join(name for name, t in timed_out.items() if t)
            print(f"crosscheck: timed out waiting for {late}", file=sys.stderr)
        return EXIT_TIMEOUT
    return _exit_code(verdicts)


def _notifier(stage: Stage) -> Callable[[Verdict], Any] | None:
    if stage.notify is None:
        return None
    from sensors._notify import Notifier

    notifier = Notifier(stage.notify, stage=stage.stage)
    return notifier.observe


# --------------------------------------------------------------------------- output


def _print_json(verdict: Verdict, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(verdict.to_json(), sort_keys=False) + "\n")
    out.flush()


def _console():  # type: ignore[no-untyped-def]
    from rich.console import Console

    # Job text reaches this console only as rich ``Text`` built by ``_text`` below, never
    # as markup: a log line "[/data/out]" is a closing tag to rich and would crash the
    # output — and the exit code of a wait that reached complete.
    return Console(highlight=False, soft_wrap=False, emoji=False)


def _text(value: object, style: str = "") -> Any:
    """Inert rich text: job text shown as it is (no markup, no escapes, one line)."""
    from rich.text import Text

    return Text(inert(value), style=style)


def _print_change(verdict: Verdict) -> None:
    from rich.text import Text

    when = time.strftime("%H:%M:%S")
    first = verdict.reasons[0] if verdict.reasons else ""
    line = Text.assemble(
        f"{when}  ",
        _text(verdict.stage),
        "  ",
        _text(verdict.state.value.upper(), STATE_STYLE[verdict.state].terminal),
        "  ",
        _text(first),
    )
    _console().print(line)


def _says_style(says: str) -> str:
    style = SAYS_STYLE.get(says)
    return style.terminal if style else ""


def _says_cell(says: str, rest: str = "") -> Any:
    from rich.text import Text

    cell = _text(says, _says_style(says))
    return Text.assemble(cell, " ", _text(rest)) if rest else cell


def _print_verdicts(verdicts: Sequence[Verdict]) -> None:
    """One stage: the detailed table. Several: one table, a row per stage."""
    if len(verdicts) == 1:
        _print_table(verdicts[0])
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
            cells.append(_text("—") if r is None else _says_cell(r["says"], key_values(name, r["evidence"])))
        table.add_row(
            _text(v.stage),
            _text(v.host),
            _text(v.state.value.upper(), STATE_STYLE[v.state].terminal),
            *cells,
            _text(v.reasons[0] if v.reasons else ""),
        )
    _console().print(table)


def _print_table(verdict: Verdict) -> None:
    from rich.table import Table
    from rich.text import Text

    console = _console()
    data = verdict.to_json()
    console.print(
        Text.assemble(
            _text(verdict.stage, "bold"),
            " on ",
            _text(verdict.host),
            ": ",
            _text(f" {verdict.state.value.upper()} ", STATE_STYLE[verdict.state].terminal),
            "  → advance" if verdict.advance else "",
        )
    )
    for reason in verdict.reasons:
        console.print(Text.assemble("  • ", _text(reason)))
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("signal")
    table.add_column("says")
    table.add_column("key evidence")
    table.add_column("detail", overflow="fold")
    for name, r in data["signals"].items():
        table.add_row(
            _text(name),
            _says_cell(r["says"]),
            _text(key_values(name, r["evidence"])),
            _text(r["detail"]),
        )
    console.print(table)
    console.print(_text(f"  checked at {data['checked_at']} (host clock)", "dim"))


class _LiveProgress:
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
