"""The ``crosscheck`` command: status, wait, demo."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from sensors._check import Checker
from sensors._config import Stage, load_stage, parse_duration
from sensors._errors import ConfigError, CrosscheckError, HostKeyError
from sensors._gc import tune_for_watching
from sensors._model import State, Verdict
from sensors._present import STATE_STYLE
from sensors._run import Since, parse_since
from sensors._sampling import StatusSampling, sample_status
from sensors._schedule import watch_all
from sensors._terminal import (
    LiveProgress,
    new_console,
    print_change,
    print_json,
    print_verdicts,
    text,
)
from sensors._text import inert

EXIT_ADVANCE, EXIT_NOT_YET, EXIT_USAGE, EXIT_FAILED, EXIT_TIMEOUT = 0, 1, 2, 3, 4

EPILOG = """\
examples:
  crosscheck status extract.yaml              one check, a table for a person
  crosscheck status extract.yaml --json       one JSON object for a script
  crosscheck wait extract.yaml && train.sh    block until every signal agrees it is done
  crosscheck wait a.yaml b.yaml --json        several stages at once, JSON lines
  crosscheck history extract                  the verdict changes a stage went through
  crosscheck serve /etc/crosscheck/stages     watch every stage file there until SIGTERM
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
        return metadata.version("prefect-crosscheck")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a checkout
        return "0+unknown"


STAGE_HELP = "a stage file, or block:NAME (a CrosscheckStage block on the Prefect server)"


def _load_stage(ref: str) -> Stage:
    """A stage file, or ``block:NAME``: a CrosscheckStage block on the Prefect server."""
    if ref.startswith("block:"):
        from sensors.blocks import load_stage_block  # the Prefect layer, only when asked

        return load_stage_block(ref)
    return load_stage(ref)


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
    status.add_argument("stages", nargs="+", metavar="STAGE.yaml", help=STAGE_HELP)
    status.add_argument("--json", action="store_true", help="one JSON object per stage")
    status.add_argument("--since", type=_since_arg, metavar="TIME|DURATION", help=SINCE_HELP)
    status.add_argument("--state", metavar="PATH|URL", help=STATE_HELP)
    wait = sub.add_parser(
        "wait",
        help="check every policy.interval until complete, failed or the timeout",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    wait.add_argument("stages", nargs="+", metavar="STAGE.yaml", help=STAGE_HELP)
    wait.add_argument("--json", action="store_true", help="one JSON object per stage per check")
    wait.add_argument("--timeout", type=_duration_arg, help="e.g. 2h (default: policy.timeout)")
    wait.add_argument("--since", type=_since_arg, metavar="TIME|DURATION", help=SINCE_HELP)
    wait.add_argument("--state", metavar="PATH|URL", help=STATE_HELP)
    serve = sub.add_parser(
        "serve", help="watch every stage file of a directory, until SIGTERM (a long-lived watcher)"
    )
    serve.add_argument("directory", metavar="DIR", help="stage files (*.yaml), picked up as they change")
    serve.add_argument("--json", action="store_true", help="one JSON object per stage per check")
    serve.add_argument("--state", metavar="PATH|URL", help=STATE_HELP)
    serve.add_argument("--metrics-port", type=int, metavar="PORT", help="serve /metrics and /healthz")
    serve.add_argument("--rescan", type=_duration_arg, default=5.0, help="how often DIR is scanned (5s)")
    serve.add_argument(
        "--prefect",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send events and resume the gates that handed stages over (default: if PREFECT_API_URL is set)",
    )
    serve.add_argument(
        "--heartbeat",
        type=_duration_arg,
        default=None,
        help="at most one heartbeat event per stage per this long (default 1m; with --prefect)",
    )
    serve.add_argument(
        "--lease",
        type=_duration_arg,
        default=None,
        help="how long this watcher's heartbeat and stage leases last unrenewed: how soon another"
        " serve process on the store takes over its stages when it dies (default 30s)",
    )
    history = sub.add_parser(
        "history", help="the verdict changes a stage went through (from the state store)"
    )
    history.add_argument("stage", metavar="STAGE", help="the stage name (or a stage file)")
    history.add_argument("--host", help="only this host (default: every host the stage ran on)")
    history.add_argument("--json", action="store_true", help="one JSON object per verdict change")
    history.add_argument("--limit", type=int, help="the last N changes only")
    history.add_argument("--state", metavar="PATH|URL", help=STATE_HELP)
    demo = sub.add_parser("demo", help="run the example pipeline on this machine")
    demo.add_argument("--workdir", help="where the simulated job writes (default: a temp dir)")
    return parser


SINCE_HELP = (
    "when the run being watched began: a duration before now (2h), a time"
    " (2026-12-01T06:00:00Z) or epoch seconds (@1796104800); evidence from before it is an"
    " earlier run's"
)


STATE_HELP = (
    "the state store that keeps each stage's memory across restarts: a SQLite file or a"
    " postgresql:// URL (default: $CROSSCHECK_STATE, else $XDG_STATE_HOME/crosscheck/state.db);"
    " 'none' keeps memory in this process only"
)


@dataclass(frozen=True)
class _Options:
    """What every watch of this command shares: the run start and the state store."""

    since: Since | None = None
    store: Any = None

    @classmethod
    def of(cls, args: argparse.Namespace) -> _Options:
        location = args.state or os.environ.get("CROSSCHECK_STATE")
        if location is not None and location.strip().lower() == "none":
            return cls(args.since, None)
        from sensors._store import open_store

        return cls(args.since, open_store(location))

    def checker(self, stage: Stage) -> Checker:
        return Checker(stage, since=self.since, state=self.store)


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
        if args.command == "history":
            return _history(args)
        if args.command == "serve":
            from sensors._serve import serve

            args.since = None
            return serve(
                args.directory,
                store=_Options.of(args).store,
                as_json=args.json,
                metrics_port=args.metrics_port,
                rescan_every=args.rescan,
                prefect=args.prefect,
                lease=args.lease,
                heartbeat=args.heartbeat,
            )
        stages = [_load_stage(path) for path in args.stages]
        names = [s.stage for s in stages]
        if len(set(names)) != len(names):
            raise ConfigError("two stage files use the same stage name", field="stage")
        options = _Options.of(args)
        if args.command == "status":
            return _status(stages, as_json=args.json, options=options)
        return _wait(stages, as_json=args.json, timeout=args.timeout, options=options)
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


def _status_one(stage: Stage, options: _Options) -> StatusSampling:
    with options.checker(stage) as checker:
        return sample_status(checker)


def _status(stages: list[Stage], *, as_json: bool, options: _Options = _Options()) -> int:
    with ThreadPoolExecutor(max_workers=min(32, len(stages))) as pool:
        samplings = list(pool.map(lambda s: _status_one(s, options), stages))
    verdicts = [s.verdict for s in samplings]
    if as_json:
        for sampling in samplings:
            # The verdict object plus one key, "sampling" (status only): how it was reached.
            data = {**sampling.verdict.to_json(), "sampling": sampling.to_json()}
            sys.stdout.write(json.dumps(data, sort_keys=False) + "\n")
        sys.stdout.flush()
    else:
        print_verdicts(verdicts)
        for sampling in samplings:
            prefix = f"{sampling.verdict.stage}: " if len(samplings) > 1 else ""
            new_console().print(f"  {prefix}{sampling.summary()}", style="dim", markup=False)
    return _exit_code(verdicts)


# --------------------------------------------------------------------------- wait


def _wait(
    stages: list[Stage], *, as_json: bool, timeout: float | None, options: _Options = _Options()
) -> int:
    lock = threading.Lock()
    live = LiveProgress(stages) if (not as_json and sys.stdout.isatty()) else None
    notifiers = [_notifier(stage) for stage in stages]
    previous: dict[int, State] = {}

    def report(index: int, verdict: Verdict) -> None:
        with lock:
            if as_json:
                print_json(verdict)
            elif verdict.state is not previous.get(index):
                if live:
                    live.pause()
                print_change(verdict)
                if live:
                    live.resume()
            if live:
                live.update(verdict)
            previous[index] = verdict.state
        notifier = notifiers[index]
        if notifier is not None:
            notifier(verdict)

    checkers = [options.checker(stage) for stage in stages]
    tune_for_watching()  # a wait can last days: see sensors._gc
    try:
        if live:
            live.start()
        # One scheduler for every stage (each at its own interval, a bounded pool, at most a
        # few checks at once per host): no thread per stage, no cap on how many are watched.
        results = watch_all(checkers, on_verdict=report, timeout=timeout)
    finally:
        if live:
            live.stop()
        for checker in checkers:
            checker.close()
    verdicts = [r.last for r in results if r.last is not None]
    if not as_json:
        print_verdicts(verdicts)
    if any(v.state is State.FAILED for v in verdicts):
        return EXIT_FAILED
    late = [s.stage for s, r in zip(stages, results, strict=True) if r.timed_out]
    if late:
        if not as_json:
            print(f"crosscheck: timed out waiting for {', '.join(late)}", file=sys.stderr)
        return EXIT_TIMEOUT
    return _exit_code(verdicts)


def _notifier(stage: Stage) -> Callable[[Verdict], Any] | None:
    from sensors._notify import notifier_for  # imported only for stages that notify

    return notifier_for(stage) if stage.notify is not None else None


# --------------------------------------------------------------------------- history


def _history(args: argparse.Namespace) -> int:
    """The verdict changes of a stage, oldest first, from the state store."""
    from sensors._store import open_store

    name = args.stage
    if name.endswith((".yaml", ".yml")) and os.path.exists(name):
        name = load_stage(name).stage
    location = args.state or os.environ.get("CROSSCHECK_STATE")
    store = open_store(location)
    try:
        entries = store.history(name, args.host, limit=args.limit)
    finally:
        store.close()
    if args.json:
        for entry in entries:
            sys.stdout.write(json.dumps(entry.verdict, sort_keys=False) + "\n")
        return EXIT_ADVANCE
    if not entries:
        print(f"crosscheck: no history for stage {inert(name)} in the state store", file=sys.stderr)
        return EXIT_NOT_YET
    from rich.text import Text

    console = new_console()
    for entry in entries:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.at))
        reasons = entry.verdict.get("reasons") or [""]
        known = str(entry.state) in {s.value for s in State}
        style = STATE_STYLE[State(entry.state)].terminal if known else ""
        console.print(
            Text.assemble(
                text(f"{when}  {entry.host}  "),
                text(str(entry.state).upper(), style),
                text(f"  {reasons[0]}"),
            )
        )
    return EXIT_ADVANCE
