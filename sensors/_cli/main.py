"""The ``crosscheck`` command: init, status, wait, check, serve, history, demo, validate,
schema, completion."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from typing import Any, NoReturn

from sensors._base.errors import ConfigError, CrosscheckError, HostKeyError
from sensors._base.model import State, Verdict
from sensors._base.output import guarded_streams, on_closed
from sensors._base.schema import bounded_duration
from sensors._base.started import IMPORTED_AT
from sensors._base.text import inert
from sensors._base.tolerances import EXEC_TO_IMPORT
from sensors._check.checker import Checker
from sensors._check.sampling import StatusSampling, sample_status
from sensors._check.span import SpanChecker, checker_for
from sensors._config.stage import Stage, load_stage
from sensors._present.evidence import STATE_STYLE
from sensors._present.terminal import (
    LiveProgress,
    new_console,
    print_change,
    print_json,
    print_verdicts,
    text,
)
from sensors._run.run import Since, parse_since
from sensors._version import __version__
from sensors._watch.gc import tune_for_watching
from sensors._watch.schedule import watch_all

EXIT_ADVANCE, EXIT_NOT_YET, EXIT_USAGE, EXIT_FAILED, EXIT_TIMEOUT = 0, 1, 2, 3, 4
#: An unknown that can never become complete (``Verdict.stuck``): a wait ends at once with it.
EXIT_STUCK = 5

EPILOG = """\
examples:
  crosscheck init --pid 4242 --write extract.yaml   draft a stage file from a running job
  crosscheck status extract.yaml              one check, a table for a person
  crosscheck status extract.yaml --json       one JSON object for a script
  crosscheck wait extract.yaml && train.sh    block until every signal agrees it is done
  crosscheck wait a.yaml b.yaml --json        several stages at once, JSON lines
  crosscheck check extract.yaml               one check for Nagios/Icinga (0 OK ... 3 UNKNOWN)
  crosscheck history extract                  the verdict changes a stage went through
  crosscheck serve /etc/crosscheck/stages     watch every stage file there until SIGTERM
  crosscheck validate stages/*.yaml           load and explain stage files, without probing
  source <(crosscheck completion bash)        shell completion (bash, zsh)
  crosscheck demo                             the example pipeline on this machine

exit codes:
  0  complete: advance        1  not yet (running, stalled, contradiction, unknown)
  2  usage or config error    3  failed        4  wait timed out
  5  wait: stuck, unknown for good: this run can never be found complete (stderr: why, the fix)
  history: 0 changes printed, 1 none recorded, 2 no store to read (--state none, not a store)
  check: 0 OK (complete, running), 1 WARNING (stalled, contradiction), 2 CRITICAL (failed),
         3 UNKNOWN (unknown, a host that cannot be read, a config error, --timeout)
  validate: 0 every file loads, 1 --strict and a warning, 2 a file that does not load
  init: 0 drafted, 1 the job cannot be seen or read, 2 usage (--write to an existing file)
"""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, on_error: Callable[[str], int] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_error = on_error  # a subcommand's own answer to a usage error (check: UNKNOWN)

    def error(self, message: str) -> NoReturn:  # exit 2 with one line, like a config error
        self.print_usage(sys.stderr)
        if self._on_error is not None:
            raise SystemExit(self._on_error(message))
        print(f"crosscheck: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _version() -> str:
    """``0.1.0, prefect 3.9.1, regexes: re2 (linear time)``: what a bug report needs first."""
    from sensors._base.regex import engine_summary

    try:
        prefect = f"prefect {metadata.version('prefect')}"
    except metadata.PackageNotFoundError:
        prefect = "no prefect"
    return f"{__version__}, {prefect}, regexes: {engine_summary()}"


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
    from sensors._cli.init import add_parser as add_init

    add_init(sub, _duration_arg)
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
        help="check every policy.interval until complete, failed, stuck (unknown for good) or the timeout",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    wait.add_argument("stages", nargs="+", metavar="STAGE.yaml", help=STAGE_HELP)
    wait.add_argument("--json", action="store_true", help="one JSON object per stage per check")
    wait.add_argument("--timeout", type=_duration_arg, help="e.g. 2h (default: policy.timeout)")
    wait.add_argument("--since", type=_since_arg, metavar="TIME|DURATION", help=SINCE_HELP)
    wait.add_argument("--state", metavar="PATH|URL", help=STATE_HELP)
    check = sub.add_parser(
        "check",
        help="one check as a Nagios/Icinga plugin: a status line with perfdata, exit 0 OK,"
        " 1 WARNING, 2 CRITICAL, 3 UNKNOWN",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        on_error=_plugin_usage_error,
    )
    check.add_argument("stages", nargs="+", metavar="STAGE.yaml", help=STAGE_HELP)
    check.add_argument(
        "-t",
        "--timeout",
        type=_duration_arg,
        default=CHECK_TIMEOUT,
        help=f"UNKNOWN when there is no verdict this long after the start (default {CHECK_TIMEOUT:g}s:"
        " under Nagios' and Icinga's 60s)",
    )
    check.add_argument("--since", type=_since_arg, metavar="TIME|DURATION", help=SINCE_HELP)
    check.add_argument("--state", metavar="PATH|URL", help=STATE_HELP)
    serve = sub.add_parser(
        "serve", help="watch every stage file of a directory, until SIGTERM (a long-lived watcher)"
    )
    serve.add_argument("directory", metavar="DIR", help="stage files (*.yaml), picked up as they change")
    serve.add_argument("--json", action="store_true", help="one JSON object per stage per check")
    serve.add_argument("--state", metavar="PATH|URL", help=STATE_HELP)
    serve.add_argument("--metrics-port", type=_port, metavar="PORT", help="serve /metrics and /healthz")
    serve.add_argument(
        "--metrics-host",
        type=_listen_address,
        default="127.0.0.1",
        metavar="ADDR",
        help="the address /metrics listens on (default 127.0.0.1: this machine only; 0.0.0.0 or ::"
        " for a Prometheus in another container or pod)",
    )
    serve.add_argument(
        "--rescan",
        type=_duration_at_least(0.1),
        default=5.0,
        help="how often DIR is scanned (5s; 100ms or more)",
    )
    serve.add_argument(
        "--prefect",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send events and resume the gates that handed their stages off"
        " (default: if PREFECT_API_URL is set)",
    )
    serve.add_argument(
        "--heartbeat",
        type=_duration_arg,
        default=None,
        help="at most one heartbeat event per stage per this long (default 1m; with --prefect)",
    )
    serve.add_argument(
        "--lease",
        type=_duration_at_least(1.0),
        default=None,
        help="the one lease rule of a watcher: another serve process on the store takes the stages"
        " of one that died or hangs over within this long, whatever their interval (default 30s)",
    )
    loudness = serve.add_mutually_exclusive_group()
    loudness.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        metavar="LEVEL",
        help="debug, info (default: verdict changes, stages picked up), warning or error;"
        " paramiko's connection lines only at debug",
    )
    loudness.add_argument(
        "-q", "--quiet", dest="log_level", action="store_const", const="WARNING", help="--log-level warning"
    )
    loudness.add_argument(
        "-v", "--verbose", dest="log_level", action="store_const", const="DEBUG", help="--log-level debug"
    )
    history = sub.add_parser(
        "history", help="the verdict changes a stage went through (from the state store)"
    )
    history.add_argument("stage", metavar="STAGE", help="the stage name (or a stage file)")
    history.add_argument("--host", help="only this host (default: every host the stage ran on)")
    history.add_argument("--json", action="store_true", help="one JSON object per verdict change")
    history.add_argument("--limit", type=_positive_int, help="the last N changes only")
    history.add_argument("--state", metavar="PATH|URL", help=STATE_HELP)
    demo = sub.add_parser("demo", help="run the example pipeline on this machine")
    demo.add_argument("--workdir", help="where the simulated job writes (default: a temp dir)")
    validate = sub.add_parser(
        "validate",
        help="load stage files and say what each will read and decide, with warnings; no probing",
    )
    validate.add_argument("stages", nargs="+", metavar="STAGE.yaml", help="stage files")
    validate.add_argument("--strict", action="store_true", help="exit 1 when a file has a warning")
    sub.add_parser("schema", help="print the stage file's JSON Schema (for editors: yaml-language-server)")
    completion = sub.add_parser(
        "completion", help="print a shell completion script: source <(crosscheck completion bash)"
    )
    completion.add_argument("shell", choices=["bash", "zsh"], help="bash or zsh")
    return parser


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

#: ``check --timeout``'s default: the longest status sampling (10 s) and a connection fit in
#: it, and the answer comes before Nagios' and Icinga's own 60 s (which they report CRITICAL).
CHECK_TIMEOUT = 30.0

SINCE_HELP = (
    "when the run being watched began: a duration before now (2h), a time"
    " (2026-12-01T06:00:00Z) or epoch seconds (@1796104800); evidence from before it is an"
    " earlier run's"
)


STATE_HELP = (
    "the state store that keeps each stage's memory across restarts: a SQLite file or a"
    " postgresql:// URL (default: $CROSSCHECK_STATE, else $XDG_STATE_HOME/crosscheck/state.db);"
    " 'none' keeps memory in this process only. Keep a password out of the URL (ps shows it):"
    " postgresql://USER@HOST/DB takes it from $PGPASSWORD or ~/.pgpass ($PGPASSFILE)"
)


@dataclass(frozen=True)
class _Options:
    """What every watch of this command shares: the run start and the state store."""

    since: Since | None = None
    store: Any = None

    @classmethod
    def of(cls, args: argparse.Namespace) -> _Options:
        from sensors._store import open_store, store_location

        location = store_location(args.state)
        if location is None:
            return cls(args.since, None)
        return cls(args.since, open_store(location))

    def checker(self, stage: Stage) -> Checker | SpanChecker:
        return checker_for(stage, since=self.since, state=self.store, began=_process_started())


def _process_started() -> float:
    """When this command began (this machine's clock, at the latest: its start tick rounded
    up). A watch begins when the person typed the command, not once Python has imported it
    (a second or more on a loaded host): a job started just after is over before its first
    check, and its log is still the run this watch is for. A process start long before the
    package's first import is a script's that exec'd this command later (exec keeps the
    start): then the import's time, as where /proc cannot tell."""
    from sensors._hosts.exits import proc_start_ticks  # lazy: the CLI imports hosts per command

    ticks = proc_start_ticks(os.getpid())
    if ticks is None:
        return IMPORTED_AT
    boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    started = boot + (ticks + 1) / os.sysconf("SC_CLK_TCK")
    return started if IMPORTED_AT - started <= EXEC_TO_IMPORT else IMPORTED_AT


def _since_arg(value: str) -> Since:
    try:
        since = parse_since(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    assert since is not None
    return since


def _duration_at_least(floor: float) -> Callable[[str], float]:
    """A duration option with a floor: a watcher's cycle of a millisecond would spin."""

    def parse(value: str) -> float:
        seconds = _duration_arg(value)
        if seconds < floor:
            raise argparse.ArgumentTypeError(f"{value!r} is shorter than {floor:g}s")
        return seconds

    return parse


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return number


def _port(value: str) -> int:
    """A TCP port, 0 to 65535 (70000 was a traceback from bind())."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port (0 to 65535)")
    return number


def _listen_address(value: str) -> str:
    """An address to listen on: a name, an IPv4 or an IPv6 address (``[::1]`` as ``::1``).
    Never empty: the empty address is every interface, and ``--metrics-host "$UNSET"`` must
    not publish /metrics beyond this machine."""
    address = value.strip()
    if address.startswith("[") and address.endswith("]"):
        address = address[1:-1]
    if not address:
        raise argparse.ArgumentTypeError(
            "an empty address would listen on every interface: name one (0.0.0.0 or :: for all)"
        )
    return address


def _duration_arg(value: str) -> float:
    try:
        return bounded_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """The command, its exit code returned. Its output may go to a pipe that closes early
    (``| head``): a quiet exit with the exit code it decided (see sensors._base.output)."""
    with guarded_streams():
        return _command(argv)


def _command(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # argparse reports a subcommand's unrecognised arguments from the top parser, past the
        # subcommand's own answer to a usage error (check's: UNKNOWN, on stdout; user s16).
        if args.command == "check":
            raise SystemExit(_plugin_usage_error(f"unrecognized arguments: {' '.join(extra)}"))
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "serve":  # serve's --log-level decides what of paramiko's is shown
        return _dispatch(args)
    with _quiet_paramiko():
        return _dispatch(args)


@contextlib.contextmanager
def _quiet_paramiko() -> Iterator[None]:
    """paramiko's log lines kept off stderr for a command's length. paramiko logs a failed
    handshake as ERROR with its traceback, from its transport thread ("Exception (client):
    Error reading SSH protocol banner" and a dozen lines more, for each try); with no logging
    configured Python prints them on stderr, around a verdict that already says, in one line,
    why the host could not be read."""
    logger = logging.getLogger("paramiko")
    handler, propagate = logging.NullHandler(), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _dispatch(args: argparse.Namespace) -> int:
    try:
        if args.command == "demo":
            from sensors._prefect.demo import demo

            return demo(workdir=args.workdir)
        if args.command == "history":
            return _history(args)
        if args.command == "check":
            return _plugin_check(args)
        if args.command == "validate":
            return _validate(args)
        if args.command == "init":
            from sensors._cli.init import init

            return init(args)
        if args.command == "schema":
            from sensors._config.stage import stage_json_schema

            sys.stdout.write(json.dumps(stage_json_schema(), indent=2, sort_keys=True) + "\n")
            return EXIT_ADVANCE
        if args.command == "completion":
            from sensors._cli.completion import script

            sys.stdout.write(script(args.shell, build_parser()))
            return EXIT_ADVANCE
        if args.command == "serve":
            from sensors._watch.watcher import serve

            args.since = None
            return serve(
                args.directory,
                store=_Options.of(args).store,
                as_json=args.json,
                metrics_port=args.metrics_port,
                metrics_host=args.metrics_host,
                log_level=args.log_level,
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
    except ImportError as exc:
        # A part of Prefect (or an extra) this environment lacks: what to install, one line.
        print(f"crosscheck: {missing_module(exc)}", file=sys.stderr)
        return EXIT_USAGE
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
        from sensors._base.regex import ENGINE

        for sampling in samplings:
            # The verdict object plus two keys (status only): "sampling", how it was reached,
            # and "regex_engine", what ran the stage's regexes (re2; regex without google-re2).
            data = {**sampling.verdict.to_json(), "sampling": sampling.to_json(), "regex_engine": ENGINE}
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
    stop = threading.Event()
    on_closed(stop.set)  # nobody reads any more (| head): stop, with the verdicts so far
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
            notifier.observe(verdict)

    checkers = [options.checker(stage) for stage in stages]
    for notifier, checker in zip(notifiers, checkers, strict=True):
        if notifier is not None:
            notifier.resume(checker.last)  # an earlier watch's verdict of this run is not news
    tune_for_watching()  # a wait can last days: see sensors._watch.gc
    try:
        if live:
            live.start()
        # One scheduler for every stage (each at its own interval, a bounded pool, at most a
        # few checks at once per host): no thread per stage, no cap on how many are watched.
        results = watch_all(checkers, on_verdict=report, timeout=timeout, stop=stop)
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
    stuck = [v for v in verdicts if v.stuck is not None]
    for v in stuck:
        # One line each, on stderr whatever the format: why the gate can never open, the fix.
        assert v.stuck is not None
        print(
            f"crosscheck: {v.stage} is stuck: {v.stuck.why}; the fix: {v.stuck.fix}",
            file=sys.stderr,
        )
    if stuck:
        return EXIT_STUCK
    late = [s.stage for s, r in zip(stages, results, strict=True) if r.timed_out]
    if late:
        # On stderr whatever the format, as a stuck stage's line: a script reading --json on
        # stdout has its last verdict there, and the person reading its log needs the why.
        print(f"crosscheck: timed out waiting for {', '.join(late)}", file=sys.stderr)
        return EXIT_TIMEOUT
    return _exit_code(verdicts)


def _notifier(stage: Stage) -> Any:
    """The stage's :class:`~sensors._notify.policy.Notifier` (None: it notifies nobody)."""
    if stage.notify is None:
        return None
    from sensors._notify.policy import notifier_for  # imported only for stages that notify

    return notifier_for(stage)


# --------------------------------------------------------------------------- check


def _plugin_check(args: argparse.Namespace) -> int:
    """``crosscheck check``: status's sampling, answered as a Nagios/Icinga plugin
    (:mod:`sensors._cli.nagios`). Whatever keeps the check from being made is UNKNOWN on stdout
    (a plugin's one status line), never status's exit 2; a check with no verdict within
    ``--timeout`` is UNKNOWN too, and ends the process at once: a probe stuck on a host
    cannot hold the plugin past the monitor's own limit."""
    from sensors._cli import nagios as _nagios

    began = time.monotonic()
    try:
        stages = [_load_stage(path) for path in args.stages]
        if len({s.stage for s in stages}) != len(stages):
            raise ConfigError("two stage files use the same stage name", field="stage")
        options = _Options.of(args)
    except CrosscheckError as exc:
        return _plugin_answer(*_nagios.unknown_report(str(exc)))
    except ImportError as exc:
        return _plugin_answer(*_nagios.unknown_report(missing_module(exc)))
    outcome: list[Any] = []

    def sample() -> None:
        try:
            with ThreadPoolExecutor(max_workers=min(32, len(stages))) as pool:
                outcome.append([s.verdict for s in pool.map(lambda s: _status_one(s, options), stages)])
        except BaseException as exc:  # handed to the main thread as it is
            outcome.append(exc)

    worker = threading.Thread(target=sample, name="crosscheck-check", daemon=True)
    worker.start()
    worker.join(max(0.0, args.timeout - (time.monotonic() - began)))
    if not outcome:
        _plugin_answer(*_nagios.unknown_report(f"no verdict within {args.timeout:g}s (--timeout)"))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_nagios.UNKNOWN)  # the probe's threads cannot be stopped; the plugin can
    (result,) = outcome
    if isinstance(result, CrosscheckError):  # a host key refused, a host that cannot be read
        return _plugin_answer(*_nagios.unknown_report(str(result)))
    if isinstance(result, BaseException):
        raise result
    return _plugin_answer(*_nagios.report(result, time.monotonic() - began))


def _plugin_answer(code: int, text: str) -> int:
    sys.stdout.write(text)
    sys.stdout.flush()
    return code


def _plugin_usage_error(message: str) -> int:
    """A usage error of ``check``: UNKNOWN, the status line on stdout (where monitors read)."""
    from sensors._cli import nagios as _nagios

    return _plugin_answer(*_nagios.unknown_report(f"crosscheck check: {message}"))


# --------------------------------------------------------------------------- validate


def _validate(args: argparse.Namespace) -> int:
    """Load each file and say what it will do (:mod:`sensors._cli.validate`): nothing is probed.
    A file that does not load is its one error line on stderr, as ``status`` prints it, and
    the others are still explained; exit 2 then, 1 with ``--strict`` and a warning, else 0."""
    from sensors._cli.validate import explain_files

    explained = explain_files(args.stages)
    for e in explained:
        if e.stage is None:
            print(f"crosscheck: {inert(e.error)}", file=sys.stderr)
            continue
        print(f"{inert(e.file)}: stage {e.stage.stage}: valid")
        for part, what in e.parts:
            print(f"  {part:<8} {what}")
        for note in e.warnings:
            print(f"  warning  {inert(note)}")
    if any(e.stage is None for e in explained):
        return EXIT_USAGE
    return EXIT_NOT_YET if args.strict and any(e.warnings for e in explained) else EXIT_ADVANCE


# --------------------------------------------------------------------------- history


def _history(args: argparse.Namespace) -> int:
    """The verdict changes of a stage, oldest first, from the state store.

    A reader: the store is opened read-only, nothing is created or repaired. One exit rule
    for the text and the JSON forms: 0 when there are entries, 1 when the store has none for
    the stage (or there is no store at the location yet), 2 when there is no store to read
    (``--state none``) or the location is not a store that can be read."""
    from sensors._store import StoreError, StoreMissing, open_store, store_location

    name = args.stage
    if name.endswith((".yaml", ".yml")) and os.path.exists(name):
        name = load_stage(name).stage
    location = store_location(args.state)
    if location is None:
        raise ConfigError("history reads the state store, and --state none means no store: name one")
    try:
        store = open_store(location, readonly=True)
    except StoreMissing as exc:
        print(f"crosscheck: no history for stage {inert(name)}: {inert(exc)}", file=sys.stderr)
        return EXIT_NOT_YET
    except StoreError as exc:
        raise ConfigError(f"cannot read the history: {exc}") from None
    try:
        entries = store.history(name, args.host, limit=args.limit)
    except StoreError as exc:
        raise ConfigError(f"cannot read the history: {exc}") from None
    finally:
        store.close()
    if not entries:
        print(f"crosscheck: no history for stage {inert(name)} in the state store", file=sys.stderr)
        return EXIT_NOT_YET
    if args.json:
        for entry in entries:
            sys.stdout.write(json.dumps(entry.verdict, sort_keys=False) + "\n")
        return EXIT_ADVANCE
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


# --------------------------------------------------------------------------- missing parts

#: What to install for a module this environment lacks (the module's top-level name).
_INSTALL = {
    "prefect_slack": "prefect-slack (pip install 'prefect-crosscheck[slack]')",
    "psycopg": "the PostgreSQL store's drivers (pip install 'prefect-crosscheck[postgres]')",
    "sqlalchemy": "the PostgreSQL store's drivers (pip install 'prefect-crosscheck[postgres]')",
    "prefect": "Prefect (pip install prefect)",
}
#: Modules only the Prefect server has: `prefect-client` installed where `prefect` should be.
_SERVER = {"asyncpg", "aiosqlite", "alembic", "uvicorn"}


def missing_module(exc: ImportError) -> str:
    """One line for an import this environment cannot satisfy: what is missing, what to install.

    Example:
        >>> print(missing_module(ModuleNotFoundError("No module named 'asyncpg'", name="asyncpg")))
        ... # doctest: +ELLIPSIS
        this needs the Prefect server, which is not installed (no module 'asyncpg': ...): pip install prefect
    """
    name = (exc.name or "").split(".")[0]
    if name in _SERVER:
        return (
            f"this needs the Prefect server, which is not installed (no module {name!r}: the"
            " `prefect-client` distribution has no server): pip install prefect"
        )
    if name in _INSTALL:
        return f"this needs {_INSTALL[name]}, which is not installed (no module {name!r})"
    return f"cannot import {exc.name or 'a module'}: {inert(exc)}"
