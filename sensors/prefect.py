"""Prefect tasks that gate a pipeline on a crosscheck verdict.

Prefect has no sensor concept (PrefectHQ/prefect#9330), so a sensor here is a task that polls
inside its own body: :func:`wait_for_stage` runs :meth:`Checker.watch` in one task run and
returns only when every signal agrees the stage is ``complete`` (:func:`check_stage` checks
once). It never asks Prefect to re-run it (``cache_policy=NO_CACHE``, no task retries): a host
that cannot be asked makes a verdict ``unknown`` inside the Checker, and the wait goes on.
While it waits it keeps progress, evidence and picture artifacts up to date (:class:`Cadence`),
emits an event at each verdict change and a heartbeat event, and logs one line per verdict
change: what a person or an automation sees is in docs/prefect.md.

This module and the Prefect layer built on it (:mod:`sensors.flows`, the demo) are the only
ones under ``sensors/`` that import prefect at module level.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from prefect import task

from sensors._base.errors import ConfigError
from sensors._base.model import Verdict
from sensors._config.stage import Stage, load_stage, parse_duration
from sensors._prefect.artifacts import (
    artifact_key,
    evidence_markdown,
    failure_message,
    run_slug,
    summary_markdown,
)
from sensors._prefect.compat import NO_CACHE
from sensors._prefect.gate import (
    DEFAULT_CADENCE,
    EVENT_PREFIX,
    HEARTBEAT_EVENT,
    TIMEOUT_EVENT,
    Cadence,
    GateReport,
    log_level,
    notifier_for,
    observe_checks,
    resource_id,
    run_logger,
    verdict_line,
)
from sensors._present.evidence import evidence_rows, progress_percent

__all__ = [
    "DEFAULT_CADENCE",
    "EVENT_PREFIX",
    "HEARTBEAT_EVENT",
    "TIMEOUT_EVENT",
    "Cadence",
    "artifact_key",
    "check_stage",
    "evidence_markdown",
    "evidence_rows",
    "failure_message",
    "observe_checks",
    "progress_percent",
    "resource_id",
    "run_slug",
    "stage_label",
    "state_store",
    "summary_markdown",
    "wait_for_stage",
]


StageLike = Stage | str | os.PathLike[str]


def as_stage(stage: StageLike | Mapping[str, Any]) -> Stage:
    """A :class:`Stage` from a stage, a path to a stage file, ``block:NAME`` (a saved
    ``CrosscheckStage`` block, :mod:`sensors.blocks`), or a stage dict."""
    if isinstance(stage, Stage):
        return stage
    if isinstance(stage, Mapping):
        from sensors._config.stage import stage_from_dict

        return stage_from_dict(dict(stage))
    if isinstance(stage, str) and stage.startswith("block:"):
        from sensors.blocks import load_stage_block

        return load_stage_block(stage)
    if isinstance(stage, (str, os.PathLike)):
        return load_stage(stage)
    raise ConfigError(f"expected a Stage or a path to a stage file, got {type(stage).__name__}")


def stage_label(stage: Any) -> str:
    """What people call a stage, from a Stage, a stage dict or a path: the stage's own name
    (``stage:``), the one its events and artifacts carry; the file's stem only when the file
    cannot be read as a stage (a bad file must fail the run with its own message, not fail
    the naming of the run), and a block's name (the flows rename their run once the block
    is loaded).

    Example:
        >>> stage_label("/etc/crosscheck/missing.yaml")
        'missing'
    """
    if isinstance(stage, Stage):
        return stage.stage
    if isinstance(stage, Mapping) and "stage" in stage:
        return str(stage["stage"])
    if isinstance(stage, str) and stage.startswith("block:"):
        return stage.removeprefix("block:") or "stage"
    if isinstance(stage, (str, os.PathLike)):
        try:
            return load_stage(stage).stage
        except Exception:  # unreadable or invalid: the run fails on it, with its own message
            pass
    return str(stage).rsplit("/", 1)[-1].rsplit(".", 1)[0] or "stage"


def task_run_name(verb: str) -> Callable[..., str]:
    def name(parameters: dict[str, Any]) -> str:
        return f"{verb}-{stage_label(parameters.get('stage'))}"

    return name


@task(cache_policy=NO_CACHE, task_run_name=task_run_name("check"))
def check_stage(
    stage: StageLike,
    since: str | float | None = None,
    run: Mapping[str, Any] | None = None,
    state: str | None = None,
) -> Verdict:
    """Check a stage once and return the verdict (the same value the CLI prints).

    Args:
        stage: a :class:`~sensors.Stage` or a path to a YAML stage file.
        since: when the run began (``"2h"``, an ISO time, epoch seconds): evidence from
            before it is an earlier run's (the CLI's ``--since``).
        run: the launch record ``launch_stage`` returned, when crosscheck started the job.
        state: the state store (a SQLite path or a ``postgresql://`` URL; default
            ``$CROSSCHECK_STATE``, else ``$XDG_STATE_HOME/crosscheck/state.db``; ``"none"``: off).

    Returns:
        The :class:`~sensors.Verdict`; ``verdict.advance`` is true only for ``complete``,
        ``verdict.to_json()`` is the CLI's ``--json`` document.

    Example:
        >>> from prefect import flow
        >>> @flow
        ... def nightly():
        ...     verdict = check_stage("stages/extract.yaml")
        ...     if verdict.advance:
        ...         ...
    """
    from sensors._check.span import checker_for
    from sensors._run.run import run_from_record

    with (
        opened_store(state) as store,
        checker_for(as_stage(stage), since=since, run=run_from_record(run), state=store) as checker,
    ):
        verdict = checker.check()
    run_logger().log(
        log_level(verdict), "%s", verdict_line(verdict), extra={"crosscheck_verdict": verdict.to_json()}
    )
    return verdict


@task(cache_policy=NO_CACHE, task_run_name=task_run_name("wait-for"))
def wait_for_stage(
    stage: StageLike,
    timeout: float | str | None = None,
    since: str | float | None = None,
    run: Mapping[str, Any] | None = None,
    state: str | None = None,
    heartbeat: float | str | None = None,
) -> Verdict:
    """Wait in one task run until every signal agrees the stage is complete.

    Checks every ``policy.interval``. ``stalled`` and ``contradiction`` notify (through the
    stage's ``notify`` section, else a warning in the run log) and the wait goes on: they
    are news for a person, not a reason to give up.

    While it waits, the flow run's state is named after the verdict (``Stalled``,
    ``Contradiction``; still of type RUNNING), one evidence artifact per run is kept current,
    a log line is written at each change and a "still …" line every 10 minutes without one.

    Args:
        stage: a :class:`~sensors.Stage` or a path to a YAML stage file.
        timeout: seconds (or a duration like ``"2h"``) to wait at most; default: the stage's
            ``policy.timeout``.
        since: when the run began (``"2h"``, an ISO time, epoch seconds): evidence from
            before it is an earlier run's (the CLI's ``--since``).
        run: the launch record ``launch_stage`` returned, when crosscheck started the job:
            the run's log lines are exactly those written after the launch.
        state: the state store that keeps the stage's memory across restarts (a SQLite path
            or a ``postgresql://`` URL; default ``$CROSSCHECK_STATE``, else
            ``$XDG_STATE_HOME/crosscheck/state.db``; ``"none"``: off). A gate started again on
            a run the store knows as complete returns that verdict at once, announced once.
        heartbeat: at most one heartbeat event per this many seconds (default 60).

    Returns:
        The ``complete`` verdict.

    Raises:
        StageFailed: the stage failed, or the timeout passed first. ``exc.verdict`` is the
            last verdict with all its evidence; ``exc.timed_out`` says which. The message is
            one line: the verdict and its reasons in words.

    Example:
        >>> from prefect import flow
        >>> @flow
        ... def pipeline():
        ...     wait_for_stage("stages/extract.yaml", timeout="12h")
        ...     train()  # runs only after process, log, outputs and GPU all agree
    """
    from sensors._check.span import checker_for
    from sensors._run.run import run_from_record

    spec = as_stage(stage)
    limit = spec.policy.timeout if timeout is None else parse_duration(timeout)
    cadence = DEFAULT_CADENCE
    if heartbeat is not None:
        cadence = replace(cadence, heartbeat=parse_duration(heartbeat))
    gate = GateReport(spec, notifier=notifier_for(spec), cadence=cadence)
    with (
        opened_store(state) as store,
        checker_for(spec, since=since, run=run_from_record(run), state=store) as checker,
    ):
        known = checker.announced()
        if known is not None:
            return gate.already(known)
        gate.announce = checker.announce
        watch = checker.watch(timeout=limit)
        for verdict in watch:
            gate.observe(verdict)
        timed_out = watch.timed_out
    return gate.finish(timed_out=timed_out, timeout=limit)


@contextlib.contextmanager
def opened_store(location: str | None) -> Iterator[Any]:
    """:func:`state_store`, closed when the task is done with it."""
    store = state_store(location)
    try:
        yield store
    finally:
        if store is not None:
            store.close()


def state_store(location: str | None) -> Any:
    """The state store a task uses: ``location``, else ``$CROSSCHECK_STATE``, else the default
    file; ``"none"``: no store (memory lives with the task run)."""
    from sensors._store import open_store, store_location

    where = store_location(location)
    return None if where is None else open_store(where)
