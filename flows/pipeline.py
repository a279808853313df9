"""The example pipeline: extraction → gate → training, and ``crosscheck demo``.

Each stage is launched as a command (its stage file's ``launch:`` section), detached on the
stage's host (locally, or over SSH with nohup), with its PID and log path recorded. The gate
waits until process, log and outputs agree; only a ``complete`` verdict launches the next
stage. ``failed`` fails the flow with the evidence in its message; ``stalled`` and
``contradiction`` notify and the wait goes on until the policy's timeout.

Example:
    >>> pipeline("stages/extract.yaml", "stages/train.yaml")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE
from rich.markup import escape
from rich.text import Text

from sensors._config import Stage, stage_from_dict
from sensors._errors import ConfigError, StageFailed
from sensors._run import launch_mark_script, parse_launch_mark
from sensors._text import inert
from sensors.prefect import _check_observers, artifact_key, as_stage, wait_for_stage


@task(cache_policy=NO_CACHE, task_run_name="launch-stage")
def launch_stage(stage: Stage) -> dict[str, Any]:
    """Start the stage's ``launch`` command detached on its host; record PID and log path.

    Returns:
        ``{"stage", "host", "pid", "log", "command", "cwd"}``.
    """
    from sensors._check import host_for

    if stage.launch is None:
        raise ConfigError("no launch section: nothing to start", field=f"{stage.stage}.launch")
    log_path = stage.launch.log or (stage.log.path if stage.log else None)
    if log_path is None:
        raise ConfigError(
            "give launch.log (or a log section): the job's output must go somewhere",
            field=f"{stage.stage}.launch.log",
        )
    host = host_for(stage)
    # Mark where this run begins (the host's clock, the log's inode, size and last bytes)
    # before the job starts: its log lines are exactly those written after the mark.
    mark = parse_launch_mark(host.run_script(launch_mark_script(log_path), timeout=30))
    pid = host.spawn(stage.launch.command, log_path=log_path, cwd=stage.launch.cwd)
    record = {
        "stage": stage.stage,
        "host": stage.host_name,
        "pid": pid,
        "log": log_path,
        "command": " ".join(stage.launch.command),
        "cwd": stage.launch.cwd or "",
        "run": {
            "started_at": mark.started_at,
            "log_inode": mark.log_inode,
            "log_offset": mark.log_offset,
            "log_fingerprint": mark.log_fingerprint,
        },
    }
    get_run_logger().info("%s: launched on %s as PID %d, log %s", stage.stage, stage.host_name, pid, log_path)
    create_table_artifact(
        key=artifact_key(stage.stage, "launch"),
        table=[{k: str(v) for k, v in record.items() if k != "run"}],
        description=f"{stage.stage}: launched as PID {pid} on {stage.host_name}",
    )
    return record


def with_pid(stage: Stage, pid: int) -> Stage:
    """The stage watching ``pid`` when it names no process of its own.

    A stage that has a ``process`` section keeps it: a ``match`` regex also verifies the
    command line (paths, flags), which a bare PID cannot.

    Example:
        >>> with_pid(stage, 4455).process.pid  # doctest: +SKIP
        4455
    """
    if stage.process is not None:
        return stage
    return stage_from_dict({**stage.model_dump(exclude_none=True), "process": {"pid": pid}})


def _launch_and_wait(stage: Stage, *, wait: bool, timeout: float | str | None) -> dict[str, Any]:
    launched = launch_stage(stage) if stage.launch is not None else None
    result: dict[str, Any] = {"stage": stage.stage, "launched": launched, "verdict": None}
    if wait:
        gated = with_pid(stage, launched["pid"]) if launched else stage
        result["verdict"] = wait_for_stage(gated, timeout=timeout, run=launched).to_json()
    return result


@flow(name="crosscheck-pipeline", log_prints=False)
def pipeline(
    extraction: Stage | str,
    training: Stage | str,
    timeout: float | str | None = None,
    wait_for_training: bool = True,
) -> dict[str, Any]:
    """extraction → gate → training: training starts only after a ``complete`` verdict.

    Args:
        extraction: the first stage (file path or Stage). With a ``launch`` section it is
            started here; without one the gate watches a job that is already running.
        training: the stage started once extraction is complete (needs ``launch``).
        timeout: the gate's timeout (default: the stage's ``policy.timeout``).
        wait_for_training: also gate training (the flow ends when training is complete).

    Raises:
        StageFailed: a stage failed or its gate timed out; the message holds the evidence.
    """
    first = as_stage(extraction)
    second = as_stage(training)
    if second.launch is None:
        raise ConfigError("the training stage needs a launch section", field="training.launch")
    upstream = _launch_and_wait(first, wait=True, timeout=timeout)
    downstream = _launch_and_wait(second, wait=wait_for_training, timeout=timeout)
    return {"extraction": upstream, "training": downstream}


@flow(name="crosscheck-start-stage", log_prints=False)
def start_stage(
    stage: Stage | str,
    after: str | None = None,
    wait: bool = True,
    timeout: float | str | None = None,
) -> dict[str, Any]:
    """Launch one stage (and gate it): what the ``crosscheck.stage.complete`` trigger runs.

    Args:
        stage: the stage to start (file path or Stage); needs a ``launch`` section.
        after: the upstream stage whose completion started this run (for the record).
        wait: gate the launched stage too.
        timeout: the gate's timeout (default: the stage's ``policy.timeout``).
    """
    spec = as_stage(stage)
    if spec.launch is None:
        raise ConfigError("no launch section: nothing to start", field=f"{spec.stage}.launch")
    if after:
        get_run_logger().info("%s: starting because %s is complete", spec.stage, after)
    return _launch_and_wait(spec, wait=wait, timeout=timeout)


@flow(name="crosscheck-stall-alert", log_prints=False)
def stall_alert(stage_name: str, last_verdict: str | None = None) -> None:
    """Run by the proactive automation when a stage's gate stops sending heartbeats.

    The gate itself is gone or hung (its worker died, the flow was cancelled): nobody is
    watching the stage any more. This flow fails so that the alert is visible in the UI and
    reaches whatever notifications are set on failed flow runs.
    """
    message = (
        f"{stage_name}: no crosscheck heartbeat within the expected window "
        f"(last verdict: {last_verdict or 'unknown'}); is its gate still running?"
    )
    get_run_logger().error(message)
    raise RuntimeError(message)


# --- the demo -----------------------------------------------------------------------------

#: Quiet Prefect for the demo: only warnings, no server chatter, no analytics or telemetry.
DEMO_ENV = {
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY": "false",
    "PREFECT_TELEMETRY_ENABLE_RESOURCE_METRICS": "false",
}


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
    owned = workdir is None
    work = Path(workdir or tempfile.mkdtemp(prefix="crosscheck-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    console.print(
        "[bold]crosscheck demo[/]: extraction → gate → training on this machine.\n"
        "The extraction job logs [yellow]'ETA 0 minutes'[/] long before it is done and then "
        "spins on the CPU (incident 2).\nThe gate advances only when process, log and outputs "
        f"agree. Job files: {escape(str(work))}\n"
        "Starting Prefect (ephemeral mode: a local API for this run; allow ~30 s)…"
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
        console.print(
            f"Done in {time.monotonic() - started:.0f} s. Runs, artifacts and events are kept "
            "in Prefect's local database; to see them:\n"
            "  export PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_LOGGING_LEVEL=WARNING\n"
            "  prefect artifact ls                                (evidence, progress, summary)\n"
            "  prefect artifact inspect crosscheck-extraction-verdict\n"
            "  prefect server start   → http://127.0.0.1:4200 (Runs, Artifacts; Events: "
            "crosscheck.stage.*)"
        )
        return 0
    finally:
        if owned:
            shutil.rmtree(work, ignore_errors=True)


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
        ETA 0, the process still works), show why the gate keeps waiting."""
        log = verdict.readings.get("log")
        process = verdict.readings.get("process")
        if log is None or process is None or verdict.state.value != "running":
            return
        if "ETA 0" not in str(log.evidence.get("last_line")) or process.says.value != "working":
            return
        cpu = process.evidence.get("cpu_seconds")
        outputs = verdict.readings.get("outputs")
        count = f"{outputs.evidence.get('count')}/{outputs.evidence.get('expected')}" if outputs else "?"
        stamp = time.strftime("%H:%M:%S")
        self.console.print(
            Text.assemble(
                f"{stamp}  ",
                (f"{inert(verdict.stage):<10}", "bold"),
                " ",
                (f"{'running':<13}", "cyan"),
                ("log says 'ETA 0 minutes'", "yellow"),
                inert(
                    f", outputs {count}, but pid {process.evidence.get('pid')} is in "
                    f"state {process.evidence.get('state')} with CPU time {cpu}s and rising: "
                    "still working, the gate waits"
                ),
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
    _check_observers.append(handler.check)
    try:
        yield
    finally:
        _check_observers.remove(handler.check)
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


if __name__ == "__main__":
    sys.exit(demo(sys.argv[1] if len(sys.argv) > 1 else None))
