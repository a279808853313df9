"""``crosscheck demo``: the example pipeline on this machine, with simulated jobs.

Part of the Prefect layer (it runs :func:`sensors.flows.pipeline`); the CLI imports this
module only inside its ``demo`` branch, so the core never imports Prefect. The extraction job
logs ``ETA 0 minutes`` long before it is done and then spins on the CPU (incident 2); the
console shows each verdict change, and during that stretch why the gate keeps waiting.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from rich.markup import escape
from rich.text import Text

from sensors._base.errors import StageFailed
from sensors._base.text import inert
from sensors._config.stage import Stage, stage_from_dict
from sensors._present.evidence import still_working
from sensors.flows import pipeline
from sensors.prefect import observe_checks

__all__ = ["DEMO_ENV", "demo", "demo_stages"]

#: Quiet Prefect for the demo: only warnings, no server chatter, no analytics or telemetry.
DEMO_ENV = {
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY": "false",
    "PREFECT_TELEMETRY_ENABLE_RESOURCE_METRICS": "false",
}

#: Seconds the demo lets Prefect's ephemeral API take to start (Prefect's own default: 20).
EPHEMERAL_STARTUP_TIMEOUT = 120


def demo_stages(workdir: str | os.PathLike[str]) -> tuple[Stage, Stage]:
    """The demo's two stages: an extraction that says "ETA 0" while still working, and a
    short training job; both simulated by real processes (:mod:`sensors.testing`).
    """
    from sensors.testing import SimulatedJob

    root = str(Path(__file__).resolve().parent.parent)
    extraction_job = SimulatedJob(workdir, scenario="eta0_spin", total=12, step=0.4, spin=6.0)
    training_job = SimulatedJob(workdir, scenario="complete", total=4, step=0.3)
    stages = []
    for name, job in (("extraction", extraction_job), ("training", training_job)):
        spec = job.stage_dict(name=name, interval="1s", timeout="90s")
        spec["launch"] = {"command": job.command, "cwd": root, "log": str(job.log_path)}
        if name == "extraction":
            # The pipeline fills in the PID it launched: the demo shows that path.
            spec.pop("process")
        stages.append(stage_from_dict(spec))
    return stages[0], stages[1]


def demo(workdir: str | None = None) -> int:
    """Run the example pipeline on this machine with simulated jobs; return an exit code.

    Prefect runs in ephemeral mode when no server is configured (``PREFECT_API_URL``
    unset): it starts a local API for the run, keeping runs, artifacts and events in
    ``~/.prefect/prefect.db``, where ``prefect server start`` shows them afterwards.
    """
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    api = _api_url()
    owned = workdir is None
    work = Path(workdir or tempfile.mkdtemp(prefix="crosscheck-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    console.print(
        "[bold]crosscheck demo[/]: extraction → gate → training on this machine.\n"
        "The extraction job logs [yellow]'ETA 0 minutes'[/] long before it is done and then "
        "spins on the CPU (incident 2).\nThe gate advances only when process, log and outputs "
        f"agree. Job files: {escape(str(work))}\n" + _starting(api)
    )
    try:
        with _quiet_prefect(), _print_verdicts(console):
            extraction, training = demo_stages(work)
            try:
                result = pipeline(extraction, training)
            except StageFailed as exc:
                console.print(Text.assemble(("pipeline failed", "bold red"), ": ", str(exc)))
                return 1
        launched = result["training"]["launched"]
        console.print(
            f"[bold green]gate complete[/]: training started (PID {launched['pid']}) only after "
            "every signal agreed, and finished: "
            f"[bold]{result['training']['verdict']['verdict']}[/]."
        )
        console.print(f"Done in {time.monotonic() - started:.0f} s. " + _where_to_look(api))
        return 0
    finally:
        if owned:
            shutil.rmtree(work, ignore_errors=True)


def _api_url() -> str | None:
    """The server this process talks to (``PREFECT_API_URL``), or None for ephemeral mode."""
    import prefect.settings

    return prefect.settings.PREFECT_API_URL.value() or None


def _starting(api: str | None) -> str:
    if api:
        return f"Using the Prefect server at {escape(api)}…"
    return "Starting Prefect (ephemeral mode: a local API for this run; allow ~30 s)…"


def _where_to_look(api: str | None) -> str:
    if api:
        ui = escape(api.removesuffix("/").removesuffix("/api"))
        return (
            f"Runs, artifacts and events are on the server at {ui}: Runs (gate-extraction, "
            "pipeline-…), Artifacts (crosscheck-extraction-…-evidence, -picture), Events "
            "(crosscheck.stage.*)."
        )
    return (
        "Runs, artifacts and events are kept in Prefect's local database; to see them:\n"
        "  export PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_LOGGING_LEVEL=WARNING\n"
        "  prefect artifact ls                                (evidence, progress, picture)\n"
        "  prefect server start   → http://127.0.0.1:4200 (Runs, Artifacts; Events: "
        "crosscheck.stage.*)"
    )


@contextlib.contextmanager
def _quiet_prefect() -> Iterator[None]:
    """Apply :data:`DEMO_ENV` to this process (already importing prefect) and its children."""
    import prefect.settings
    from prefect.logging.configuration import setup_logging

    saved = {k: os.environ.get(k) for k in DEMO_ENV}
    os.environ.update(DEMO_ENV)  # the ephemeral API server is a child process
    updates = {
        prefect.settings.PREFECT_LOGGING_LEVEL: "WARNING",
        prefect.settings.PREFECT_SERVER_LOGGING_LEVEL: "CRITICAL",
        prefect.settings.PREFECT_SERVER_ANALYTICS_ENABLED: False,
    }
    # Prefect waits 20 s for its ephemeral API to start; on a busy machine it took longer
    # (seen here under a load of 16 on 2 cores: a traceback, not the demo). This run only,
    # and only where the user set no timeout of their own; Prefect before 3.2 has no setting.
    startup = getattr(prefect.settings, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", None)
    if startup is not None and "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" not in os.environ:
        updates[startup] = EPHEMERAL_STARTUP_TIMEOUT
    try:
        with prefect.settings.temporary_settings(updates=updates):
            # Logging was configured when prefect was imported, with the old level.
            setup_logging(incremental=False)
            yield
    finally:
        # Logging stays quiet: the ephemeral server stops at exit and would log at INFO.
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class _VerdictPrinter(logging.Handler):
    """Prints the gate's verdict-change log records (and nothing else) to the console."""

    STYLE: ClassVar[dict[str, str]] = {
        "complete": "bold green",
        "running": "cyan",
        "stalled": "bold yellow",
        "contradiction": "bold magenta",
        "failed": "bold red",
        "unknown": "dim",
    }

    def __init__(self, console: Any) -> None:
        super().__init__(logging.DEBUG)
        self.console = console
        self._previous: Any = None

    def emit(self, record: logging.LogRecord) -> None:
        doc = getattr(record, "crosscheck_verdict", None)
        if not isinstance(doc, dict):
            if record.levelno >= logging.WARNING:  # what propagation would have shown
                self.console.print(
                    Text.assemble((record.levelname, "yellow"), " ", inert(record.getMessage()))
                )
            return
        # Details carry job text: rich Text, never markup ("[/data/out]" is a closing tag).
        state = str(doc["verdict"])
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        self.console.print(
            Text.assemble(
                f"{stamp}  ",
                (f"{inert(doc['stage']):<10}", "bold"),
                " ",
                (f"{state:<13}", self.STYLE.get(state, "")),
            )
        )
        for name, sig in doc["signals"].items():
            self.console.print(Text(f"            {name:<8} {sig['says']:<8} {inert(sig['detail'])}"))

    def check(self, verdict: Any) -> None:
        """Every check: during the stretch that fooled a person in incident 2 (the log says
        ETA 0, the process still works), show why the gate keeps waiting; the flow run's log
        has the same words (:func:`sensors._present.evidence.still_working`)."""
        why = still_working(verdict, self._previous)
        self._previous = verdict
        if why is None:
            return
        stamp = time.strftime("%H:%M:%S")
        self.console.print(
            Text.assemble(
                f"{stamp}  ",
                (f"{inert(verdict.stage):<10}", "bold"),
                " ",
                (f"{'running':<13}", "cyan"),
                inert(why),
            )
        )


@contextlib.contextmanager
def _print_verdicts(console: Any) -> Iterator[None]:
    # Prefect's run loggers sit below the `prefect` logger, which the demo sets to WARNING;
    # let INFO through on the task-run logger and catch only crosscheck's records there.
    # propagate=False keeps Prefect's own INFO lines off the console; the API handler stays.
    logger = logging.getLogger("prefect.task_runs")
    saved = (logger.level, logger.propagate)
    handler = _VerdictPrinter(console)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        with observe_checks(handler.check):
            yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
