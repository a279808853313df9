"""Prefect tasks that gate a pipeline on a crosscheck verdict.

Prefect has no sensor concept (PrefectHQ/prefect#9330), so a sensor here is a task that polls
inside its own body: :func:`wait_for_stage` runs :meth:`Checker.watch` in one task run and
returns only when every signal agrees the stage is ``complete``. It never asks Prefect to
re-run it (``cache_policy=NO_CACHE``, no task retries): a host that cannot be asked makes a
verdict ``unknown`` inside the Checker, and the wait goes on.

While it waits it leaves what a person or an automation needs to follow along:

- a progress artifact (outputs written / expected), updated every check;
- a table artifact with the evidence at each verdict change, and a markdown summary at the end;
- an event at each verdict change (``crosscheck.stage.<verdict>``, resource
  ``crosscheck.stage.<name>``, payload: the verdict JSON) and a ``crosscheck.stage.heartbeat``
  event every check, for reactive and proactive automations;
- one log line per verdict change (never one per check).

This module and the Prefect layer built on it (:mod:`sensors.flows`, the demo) are the only
ones under ``sensors/`` that import prefect at module level.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from uuid import UUID

from prefect import get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.events import Event, emit_event
from prefect.exceptions import EventTooLarge, MissingContextError

from sensors._config import Stage, load_stage, parse_duration
from sensors._errors import ConfigError, NotificationError, StageFailed
from sensors._model import State, Verdict
from sensors._present import evidence_pairs, evidence_rows, progress_detail, progress_percent, reasons_text
from sensors._text import inert, markdown_escape

__all__ = [
    "EVENT_PREFIX",
    "HEARTBEAT_EVENT",
    "check_stage",
    "observe_checks",
    "resource_id",
    "wait_for_stage",
]

#: Every crosscheck event name starts with this; the verdict (or ``heartbeat``) follows.
EVENT_PREFIX = "crosscheck.stage."
HEARTBEAT_EVENT = EVENT_PREFIX + "heartbeat"

#: Verdicts that deserve a person's attention while the wait goes on.
_ATTENTION = (State.STALLED, State.CONTRADICTION)

StageLike = Stage | str | os.PathLike[str]


def resource_id(stage_name: str) -> str:
    """The Prefect resource id of a stage's events: ``crosscheck.stage.<name>``.

    Example:
        >>> resource_id("extract")
        'crosscheck.stage.extract'
    """
    return EVENT_PREFIX + stage_name


def as_stage(stage: StageLike | Mapping[str, Any]) -> Stage:
    """A :class:`Stage` from a stage, a path to a stage file, or a stage dict."""
    if isinstance(stage, Stage):
        return stage
    if isinstance(stage, Mapping):
        from sensors._config import stage_from_dict

        return stage_from_dict(dict(stage))
    if isinstance(stage, (str, os.PathLike)):
        return load_stage(stage)
    raise ConfigError(f"expected a Stage or a path to a stage file, got {type(stage).__name__}")


@task(cache_policy=NO_CACHE, task_run_name="check-stage")
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
    from sensors._check import Checker
    from sensors._run import run_from_record

    with Checker(as_stage(stage), since=since, run=run_from_record(run), state=state_store(state)) as checker:
        verdict = checker.check()
    _logger().info("%s", _line(verdict), extra={"crosscheck_verdict": verdict.to_json()})
    return verdict


@task(cache_policy=NO_CACHE, task_run_name="wait-for-stage")
def wait_for_stage(
    stage: StageLike,
    timeout: float | str | None = None,
    since: str | float | None = None,
    run: Mapping[str, Any] | None = None,
    state: str | None = None,
) -> Verdict:
    """Wait in one task run until every signal agrees the stage is complete.

    Checks every ``policy.interval``. ``stalled`` and ``contradiction`` notify (through the
    stage's ``notify`` section, else a warning in the run log) and the wait goes on: they
    are news for a person, not a reason to give up.

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

    Returns:
        The ``complete`` verdict.

    Raises:
        StageFailed: the stage failed, or the timeout passed first. ``exc.verdict`` is the
            last verdict with all its evidence; ``exc.timed_out`` says which.

    Example:
        >>> from prefect import flow
        >>> @flow
        ... def pipeline():
        ...     wait_for_stage("stages/extract.yaml", timeout="12h")
        ...     train()  # runs only after process, log, outputs and GPU all agree
    """
    from sensors._check import Checker
    from sensors._run import run_from_record

    spec = as_stage(stage)
    limit = spec.policy.timeout if timeout is None else parse_duration(timeout)
    gate = _GateReport(spec, notifier=_notifier(spec))
    with Checker(spec, since=since, run=run_from_record(run), state=state_store(state)) as checker:
        known = checker.announced()
        if known is not None:
            return gate.already(known)
        gate.announce = checker.announce
        watch = checker.watch(timeout=limit)
        for verdict in watch:
            gate.observe(verdict)
        timed_out = watch.timed_out
    return gate.finish(timed_out=timed_out, timeout=limit)


# --- what the wait leaves behind -------------------------------------------------------------


#: Callables given every verdict of every check; added and removed by :func:`observe_checks`.
_check_observers: list[Callable[[Verdict], None]] = []


@contextlib.contextmanager
def observe_checks(callback: Callable[[Verdict], None]) -> Iterator[None]:
    """Call ``callback`` with the verdict of every check :func:`wait_for_stage` makes in this
    process while the block runs (every check, not only changes; the demo uses it to show why
    the gate keeps waiting). In-process only: a deployment's runs report through events and
    artifacts. An exception in ``callback`` fails the wait, so keep it simple.

    Example:
        >>> seen = []
        >>> with observe_checks(seen.append):
        ...     wait_for_stage("stages/extract.yaml")  # doctest: +SKIP
        >>> [v.state for v in seen]  # doctest: +SKIP
        [<State.RUNNING: 'running'>, ..., <State.COMPLETE: 'complete'>]
    """
    _check_observers.append(callback)
    try:
        yield
    finally:
        _check_observers.remove(callback)


class _GateReport:
    """Turns the stream of verdicts into artifacts, events, log lines and notifications.

    Kept apart from the task so the rules ("per change, not per check") live in one place.
    """

    def __init__(self, stage: Stage, *, notifier: Any | None) -> None:
        self.stage = stage
        self.name = stage.stage
        self.notifier = notifier
        self.log = _logger()
        self.last: Verdict | None = None
        self.checks = 0
        self._progress_id: UUID | None = None
        self._progress: tuple[float, State] | None = None
        # Records a run's final verdict in the state store: False when announced before.
        self.announce: Callable[[Verdict], bool] = lambda verdict: True

    def observe(self, verdict: Verdict) -> None:
        self.checks += 1
        for observer in list(_check_observers):
            observer(verdict)
        previous, self.last = self.last, verdict
        state_changed = previous is None or verdict.state is not previous.state
        # A signal changing its mind (the log says done while the process still works) is
        # news even when the verdict stays `running`: it is the evidence trail of incident 2.
        changed = state_changed or _says(verdict) != _says(previous)
        payload = verdict.to_json()
        progress = progress_percent(verdict)
        self._update_progress(verdict, progress)
        if changed:
            # stalled/contradiction are warnings: with no notify section the run log is
            # the only notification a person gets.
            level = logging.WARNING if verdict.state in _ATTENTION else logging.INFO
            self.log.log(level, "%s", _line(verdict), extra={"crosscheck_verdict": payload})
            self._report(
                create_table_artifact,
                key=artifact_key(self.name, "evidence"),
                table=evidence_rows(verdict),
                description=f"{_md(self.name)}: **{verdict.state}** — {_md(reasons_text(verdict))}",
            )
        # The heartbeat goes first: the proactive "no heartbeat" automation closes its window
        # on the complete/failed event that follows the last heartbeat.
        heartbeat = _emit(
            HEARTBEAT_EVENT,
            verdict,
            {
                "verdict": str(verdict.state),
                "reasons": list(verdict.reasons),
                "checked_at": payload["checked_at"],
                "check": self.checks,
                "progress": progress,
            },
        )
        final = verdict.state in (State.COMPLETE, State.FAILED)
        if state_changed and (not final or self.announce(verdict)):
            # Events are named after the verdict, so they fire on verdict changes only, and a
            # run's complete or failed once, whoever watched it.
            _emit(EVENT_PREFIX + str(verdict.state), verdict, payload, follows=heartbeat)
        self._notify(verdict)

    def already(self, verdict: Verdict) -> Verdict:
        """A run the state store knows as complete (or failed): its verdict, no new event."""
        decided = payload_time(verdict)
        self.log.info(
            "%s: already %s at %s (this run's verdict, announced then): not announced again",
            self.name,
            verdict.state,
            decided,
        )
        self.last = verdict
        if verdict.state is State.COMPLETE:
            return verdict
        raise StageFailed(failure_message(f"stage {self.name}: {verdict.state}", verdict), verdict=verdict)

    def finish(self, *, timed_out: bool, timeout: float) -> Verdict:
        verdict = self.last
        if verdict is None:
            # watch() yields at least once unless the timeout is already over.
            raise StageFailed(f"stage {self.name}: no check ran within {timeout:g}s", timed_out=True)
        self._report(
            create_markdown_artifact,
            key=artifact_key(self.name, "verdict"),
            markdown=summary_markdown(verdict, checks=self.checks, timed_out=timed_out),
            description=f"{_md(self.name)}: final verdict {verdict.state}",
        )
        if verdict.state is State.COMPLETE and not timed_out:
            return verdict
        if timed_out and verdict.state is not State.FAILED:
            head = f"stage {self.name}: not complete after {timeout:g}s (last verdict {verdict.state})"
        else:
            head = f"stage {self.name}: {verdict.state}"
        raise StageFailed(failure_message(head, verdict), verdict=verdict, timed_out=timed_out)

    def _update_progress(self, verdict: Verdict, progress: float | None) -> None:
        value = progress if progress is not None else (100.0 if verdict.advance else 0.0)
        description = f"{_md(self.name)}: {verdict.state} — {_md(progress_detail(verdict))}"
        if self._progress_id is None:
            self._progress_id = self._report(
                create_progress_artifact,
                progress=value,
                key=artifact_key(self.name, "progress"),
                description=description,
            )
        elif (value, verdict.state) != self._progress:
            # Same value and state as last check: skip the API call, nothing to show.
            self._report(update_progress_artifact, self._progress_id, value, description=description)
        self._progress = (value, verdict.state)

    def _report(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        """An artifact call that cannot end the wait: one API error (a 5xx, a timeout) must
        not fail a gate that has waited for hours; it is logged, and the wait goes on."""
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            self.log.warning("%s: could not write an artifact (%s): %s", self.name, call.__name__, exc)
            return None

    def _notify(self, verdict: Verdict) -> None:
        if self.notifier is None:
            return
        try:
            self.notifier.observe(verdict, flow_run_url=_flow_run_url())
        except NotificationError as exc:
            # A notification that cannot be delivered never changes a verdict or a gate.
            self.log.warning("%s: notification not delivered: %s", self.name, exc)


def artifact_key(stage_name: str, what: str) -> str:
    """An artifact key Prefect accepts (lowercase letters, digits, dashes).

    Example:
        >>> artifact_key("Extract_v2.1", "progress")
        'crosscheck-extract-v2-1-progress'
    """
    slug = re.sub(r"[^a-z0-9]+", "-", stage_name.lower()).strip("-") or "stage"
    return f"crosscheck-{slug}-{what}"


def summary_markdown(verdict: Verdict, *, checks: int, timed_out: bool = False) -> str:
    """The final verdict as markdown: state, reasons, and one table row per signal."""
    doc = verdict.to_json()
    lines = [
        f"# {_md(verdict.stage)}: {verdict.state}",
        "",
        f"- advance: **{'yes' if verdict.advance else 'no'}**" + (" (timed out)" if timed_out else ""),
        f"- host: {_md(verdict.host)}",
        f"- checked at: {doc['checked_at']} (monitored host's clock); since: {doc['since']}",
        f"- checks: {checks}",
        "",
        "## Reasons",
        *[f"- {_md(r)}" for r in verdict.reasons or ("(none)",)],
        "",
        "## Signals",
        "",
        "| signal | says | detail | evidence |",
        "|---|---|---|---|",
        *[
            f"| {_md(row['signal'])} | {_md(row['says'])} | {_md(row['detail'])} | {_md(row['evidence'])} |"
            for row in evidence_rows(verdict)
        ],
    ]
    return "\n".join(lines) + "\n"


def failure_message(head: str, verdict: Verdict) -> str:
    """The head line, the reasons and each signal's reading: what a failed flow shows."""
    parts = [inert(f"{head}: {reasons_text(verdict)}")]
    for name, reading in verdict.readings.items():
        parts.append(
            inert(f"  {name}: {reading.says} — {reading.detail} [{evidence_pairs(reading.evidence)}]")
        )
    return "\n".join(parts)


# --- helpers ---------------------------------------------------------------------------------


def _emit(
    event: str, verdict: Verdict, payload: dict[str, Any], *, follows: Event | None = None
) -> Event | None:
    resource = {
        "prefect.resource.id": resource_id(verdict.stage),
        "prefect.resource.name": verdict.stage,
        "crosscheck.verdict": str(verdict.state),
        "crosscheck.host": str(verdict.host),
    }
    try:
        return emit_event(event=event, resource=resource, payload=payload, follows=follows)
    except EventTooLarge:
        # Evidence can carry long log lines; the verdict and reasons must still get through.
        slim = {k: v for k, v in payload.items() if k != "signals"}
        slim["signals"] = {
            name: {"says": s.get("says"), "detail": s.get("detail")}
            for name, s in payload.get("signals", {}).items()
        }
        return emit_event(event=event, resource=resource, payload=slim, follows=follows)


def _notifier(stage: Stage) -> Any | None:
    if stage.notify is None:
        return None
    try:
        from sensors._notify import Notifier
    except ImportError:
        # The notifications module is optional here: without it, warnings in the run log
        # are the notification.
        _logger().warning(
            "%s: notify is configured but sensors._notify is unavailable; logging instead",
            stage.stage,
        )
        return None
    return Notifier(stage.notify, stage=stage.stage)


def _flow_run_url() -> str | None:
    try:
        from prefect.runtime import flow_run

        return flow_run.ui_url
    except Exception:
        # Outside a flow run (task called directly) there is no URL; not worth failing for.
        return None


def _logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    try:
        return get_run_logger()
    except MissingContextError:
        # task.fn(...) called outside any run: log like a plain library.
        return logging.getLogger("crosscheck.prefect")


def _says(verdict: Verdict | None) -> tuple[tuple[str, str], ...]:
    if verdict is None:
        return ()
    return tuple((name, str(r.says)) for name, r in verdict.readings.items())


def _line(verdict: Verdict) -> str:
    # One line of inert text: a log record never carries the job's newlines or escapes.
    return inert(f"{verdict.stage}: {verdict.state} — {reasons_text(verdict)}")


def _md(text: str) -> str:
    """Job text inside markdown (a list item, a table cell): every markdown character
    escaped, one line, so ``| x |``, ``[click](http://evil)`` or ``<img>`` stay text."""
    return markdown_escape(text)


def state_store(location: str | None) -> Any:
    """The state store a task uses: ``location``, else ``$CROSSCHECK_STATE``, else the default
    file; ``"none"``: no store (memory lives with the task run)."""
    location = location or os.environ.get("CROSSCHECK_STATE")
    if location is not None and location.strip().lower() == "none":
        return None
    from sensors._store import open_store

    return open_store(location)


def payload_time(verdict: Verdict) -> str:
    return str(verdict.to_json().get("checked_at"))
