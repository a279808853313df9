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
import datetime as dt
import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any
from uuid import UUID, uuid4

from prefect import get_run_logger, task
from prefect.artifacts import (
    create_image_artifact,
    create_markdown_artifact,
    create_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.events import Event, emit_event
from prefect.exceptions import EventTooLarge, MissingContextError

from sensors._config import Stage, load_stage, parse_duration
from sensors._errors import ConfigError, NotificationError, StageFailed
from sensors._model import State, Verdict
from sensors._picture import WaitHistory, data_url, wait_svg
from sensors._present import (
    age,
    clock,
    evidence_rows,
    number,
    one_line,
    progress_detail,
    progress_percent,
    reasons_text,
    still_working,
)
from sensors._text import inert, markdown_escape

__all__ = [
    "DEFAULT_CADENCE",
    "EVENT_PREFIX",
    "HEARTBEAT_EVENT",
    "TIMEOUT_EVENT",
    "Cadence",
    "check_stage",
    "observe_checks",
    "resource_id",
    "stage_label",
    "wait_for_stage",
]

#: Every crosscheck event name starts with this; the verdict (or ``heartbeat``) follows.
EVENT_PREFIX = "crosscheck.stage."
HEARTBEAT_EVENT = EVENT_PREFIX + "heartbeat"
#: The last event of a gate that timed out (complete and failed are verdict events).
TIMEOUT_EVENT = EVENT_PREFIX + "timeout"

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
    """A :class:`Stage` from a stage, a path to a stage file, ``block:NAME`` (a saved
    ``CrosscheckStage`` block, :mod:`sensors.blocks`), or a stage dict."""
    if isinstance(stage, Stage):
        return stage
    if isinstance(stage, Mapping):
        from sensors._config import stage_from_dict

        return stage_from_dict(dict(stage))
    if isinstance(stage, str) and stage.startswith("block:"):
        from sensors.blocks import load_stage_block

        return load_stage_block(stage)
    if isinstance(stage, (str, os.PathLike)):
        return load_stage(stage)
    raise ConfigError(f"expected a Stage or a path to a stage file, got {type(stage).__name__}")


def stage_label(stage: Any) -> str:
    """What people call a stage, from a Stage, a stage dict or a path (the file's stem),
    without loading the file: a bad file must fail the run with its own message, not
    fail the naming of the run.

    Example:
        >>> stage_label("/etc/crosscheck/extract.yaml")
        'extract'
    """
    if isinstance(stage, Stage):
        return stage.stage
    if isinstance(stage, Mapping) and "stage" in stage:
        return str(stage["stage"])
    if isinstance(stage, str) and stage.startswith("block:"):
        return stage.removeprefix("block:") or "stage"
    return str(stage).rsplit("/", 1)[-1].rsplit(".", 1)[0] or "stage"


def _task_run_name(verb: str) -> Callable[..., str]:
    def name(parameters: dict[str, Any]) -> str:
        return f"{verb}-{stage_label(parameters.get('stage'))}"

    return name


@task(cache_policy=NO_CACHE, task_run_name=_task_run_name("check"))
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
    _logger().log(_level(verdict), "%s", _line(verdict), extra={"crosscheck_verdict": verdict.to_json()})
    return verdict


@dataclass(frozen=True)
class Cadence:
    """How often a long wait speaks when nothing changes (every change is reported at once).

    Attributes:
        heartbeat: at most one ``crosscheck.stage.heartbeat`` event per this many seconds
            (the proactive stall automation waits 15 minutes for one).
        still: a "still <verdict> after …" log line after this many seconds without a line.
        refresh: the evidence, progress and picture artifacts are rewritten at most this
            often (and at every change, and at the end).
    """

    heartbeat: float = 60.0
    still: float = 600.0
    refresh: float = 10.0


#: What :func:`wait_for_stage` uses; its ``heartbeat`` argument overrides the first field.
DEFAULT_CADENCE = Cadence()

#: The report's clock (seconds, monotonic); a test may run it faster to see hours pass.
_clock: Callable[[], float] = time.monotonic


@task(cache_policy=NO_CACHE, task_run_name=_task_run_name("wait-for"))
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
    from sensors._check import Checker
    from sensors._run import run_from_record

    spec = as_stage(stage)
    limit = spec.policy.timeout if timeout is None else parse_duration(timeout)
    cadence = DEFAULT_CADENCE
    if heartbeat is not None:
        cadence = replace(cadence, heartbeat=parse_duration(heartbeat))
    gate = _GateReport(spec, notifier=_notifier(spec), cadence=cadence)
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
    """Turns the stream of verdicts into what a person on call sees in Prefect.

    Kept apart from the task so the rules live in one place:

    - every change (of the verdict, or of what a signal says) at once: a log line (ERROR for
      ``failed``, WARNING for ``stalled``/``contradiction``/``unknown``), the flow run's state
      name, the evidence artifact, a verdict event;
    - between changes, bounded by :class:`Cadence`: heartbeats, "still …" lines, artifact
      refreshes — never one of each per check;
    - one artifact of each kind per run (keyed by the run's identity), updated in place.

    ``observe`` then ``finish``; :func:`observe_checks` callbacks run after each check's
    report, so they see what the check left.
    """

    def __init__(self, stage: Stage, *, notifier: Any | None, cadence: Cadence = DEFAULT_CADENCE) -> None:
        self.stage = stage
        self.name = stage.stage
        self.notifier = notifier
        self.cadence = cadence
        self.log = _logger()
        self.last: Verdict | None = None
        self.checks = 0
        self.history = WaitHistory()
        self.keys: dict[str, str] = {}
        self._ids: dict[str, UUID | None] = {}
        self._state_name: str | None = None
        self._explained = False
        self._heartbeat_at: float | None = None
        self._line_at = _clock()
        self._refresh_at: float | None = None
        self._started = _clock()
        self._state_since = self._started
        # Records a run's final verdict in the state store: False when announced before.
        self.announce: Callable[[Verdict], bool] = lambda verdict: True

    def observe(self, verdict: Verdict) -> None:
        now = _clock()
        self.checks += 1
        previous, self.last = self.last, verdict
        self.history.add(verdict, at=time.time())
        if not self.keys:
            self._key_run(verdict)
        state_changed = previous is None or verdict.state is not previous.state
        if state_changed:
            self._state_since = now
        # A signal changing its mind (the log says done while the process still works) is
        # news even when the verdict stays `running`: it is the evidence trail of incident 2.
        changed = state_changed or _says(verdict) != _says(previous)
        payload = verdict.to_json()
        if changed:
            self.log.log(_level(verdict), "%s", _line(verdict), extra={"crosscheck_verdict": payload})
            self._line_at = now
        why = still_working(verdict, previous)
        if why and not self._explained:
            # Incident 2's stretch, in words, once as it begins (and in each "still" line).
            self.log.info("%s: %s", self.name, why)
            self._line_at = now
        self._explained = why is not None
        if not changed and now - self._line_at >= self.cadence.still:
            self._still(verdict, now, why)
        if state_changed:
            self._name_run_state(verdict)
        if changed or self._refresh_at is None or now - self._refresh_at >= self.cadence.refresh:
            self._write_artifacts(verdict)
            self._refresh_at = now
        heartbeat = None
        if self._heartbeat_at is None or now - self._heartbeat_at >= self.cadence.heartbeat:
            heartbeat = _emit(HEARTBEAT_EVENT, verdict, self._heartbeat_payload(verdict))
            self._heartbeat_at = now
        final = verdict.state in (State.COMPLETE, State.FAILED)
        if state_changed and (not final or self.announce(verdict)):
            # Events are named after the verdict, so they fire on verdict changes only, and a
            # run's complete or failed once, whoever watched it.
            _emit(EVENT_PREFIX + str(verdict.state), verdict, payload, follows=heartbeat)
        self._notify(verdict)
        for observer in list(_check_observers):
            observer(verdict)

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
        self._write_artifacts(verdict, final=True, timed_out=timed_out)
        if self._state_name not in (None, "Running"):
            # The run goes on after the gate (the next stage, or a Failed state): not "Stalled".
            self._set_state_name("Running")
        if verdict.state is State.COMPLETE and not timed_out:
            return verdict
        if timed_out and verdict.state is not State.FAILED:
            head = f"stage {self.name}: not complete after {timeout:g}s (last verdict {verdict.state})"
            # The last word of this gate for automations: without it, the last event is
            # `stalled` while the flow run has already failed.
            _emit(
                TIMEOUT_EVENT,
                verdict,
                {**verdict.to_json(), "timeout_seconds": timeout, "reason": head},
            )
        else:
            head = f"stage {self.name}: {verdict.state}"
        message = failure_message(head, verdict)
        if timed_out:
            # `failed` was already said at ERROR when the verdict changed; a timeout was not.
            # Prefect's own failure lines repeat only this short message.
            self.log.error("%s (evidence: artifact %s)", message, self.keys.get("evidence", "?"))
        raise StageFailed(message, verdict=verdict, timed_out=timed_out)

    # --- the pieces -----------------------------------------------------------------------

    def _key_run(self, verdict: Verdict) -> None:
        slug = run_slug(verdict.run) or _flow_run_slug()
        self.keys = {
            what: artifact_key(self.name, what, run=slug) for what in ("evidence", "progress", "picture")
        }

    def _still(self, verdict: Verdict, now: float, why: str | None) -> None:
        level = logging.INFO if verdict.state in (State.RUNNING, State.COMPLETE) else logging.WARNING
        for_how_long = age(now - self._state_since)
        text = f"{self.name}: still {verdict.state} after {for_how_long}: {reasons_text(verdict)}"
        if why:
            text += f" — {why}"
        self.log.log(level, "%s", inert(text, 600))
        self._line_at = now

    def _heartbeat_payload(self, verdict: Verdict) -> dict[str, Any]:
        return {
            "verdict": str(verdict.state),
            "reasons": list(verdict.reasons),
            "checked_at": verdict.to_json()["checked_at"],
            "check": self.checks,
            "progress": progress_percent(verdict),
        }

    def _name_run_state(self, verdict: Verdict) -> None:
        name = _RUN_STATE_NAMES.get(verdict.state)
        if name is not None and name != (self._state_name or "Running"):
            self._set_state_name(name)

    def _set_state_name(self, name: str) -> None:
        """Name the flow run's RUNNING state (``Stalled``, ``Contradiction``): what the runs list
        shows. Forced, because it is a rename, not a transition Prefect should arbitrate; the
        engine's own final state replaces it when the flow ends."""
        flow_run_id = _flow_run_id()
        if flow_run_id is None:
            return
        from prefect.client.orchestration import get_client
        from prefect.states import Running

        def rename() -> None:
            with get_client(sync_client=True) as client:
                client.set_flow_run_state(flow_run_id, Running(name=name), force=True)

        rename.__name__ = "set_flow_run_state"
        self._report(rename)
        self._state_name = name

    def _write_artifacts(self, verdict: Verdict, *, final: bool = False, timed_out: bool = False) -> None:
        when = clock(verdict.checked_at)
        title = f"{self.name}: {verdict.state} at {when}" + (" (final)" if final else "")
        progress = progress_percent(verdict)
        value = progress if progress is not None else (100.0 if verdict.advance else 0.0)
        self._upsert(
            "progress",
            value,
            description=f"{_md(title)} — {_md(progress_detail(verdict))}; last checked {when}",
            create=lambda **kw: create_progress_artifact(progress=value, **kw),
        )
        markdown = evidence_markdown(verdict, checks=self.checks, final=final, timed_out=timed_out)
        self._upsert(
            "evidence",
            markdown,
            description=_md(title),
            create=lambda **kw: create_markdown_artifact(markdown=markdown, **kw),
        )
        svg = wait_svg(self.history.samples, title=f"{self.name}: the wait, {verdict.state} at {when}")
        picture = data_url(svg)
        self._upsert(
            "picture",
            picture,
            description=f"{_md(self.name)}: signals over time, verdicts as bands ({self.checks} checks)",
            create=lambda **kw: create_image_artifact(image_url=picture, **kw),
        )

    def _upsert(self, what: str, data: Any, *, description: str, create: Callable[..., UUID]) -> None:
        """Create the run's ``what`` artifact once (``create(key=, description=)``), then
        update it in place: one artifact per run, not one per change."""
        if what not in self._ids:
            create.__name__ = f"create_{what}_artifact"
            self._ids[what] = self._report(create, key=self.keys[what], description=description)
            return
        artifact_id = self._ids[what]
        if artifact_id is None:
            return  # creating it failed (logged): the wait goes on without it
        from prefect.client.orchestration import get_client

        def update_artifact() -> None:
            # The PATCH itself, not ``client.update_artifact``: that one also emits a
            # ``prefect.artifact.updated`` event per call, which would bury the verdict
            # events in the feed again (one per refresh and artifact).
            with get_client(sync_client=True) as client:
                response = client.request(
                    "PATCH",
                    "/artifacts/{id}",
                    path_params={"id": artifact_id},
                    json={"data": data, "description": description},
                )
                response.raise_for_status()

        self._report(update_artifact)

    def _report(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        """An API call that cannot end the wait: one error (a 5xx, a timeout) must not fail
        a gate that has waited for hours; it is logged, and the wait goes on."""
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            self.log.warning("%s: could not write to Prefect (%s): %s", self.name, call.__name__, exc)
            return None

    def _notify(self, verdict: Verdict) -> None:
        if self.notifier is None:
            return
        try:
            self.notifier.observe(verdict, flow_run_url=_flow_run_url())
        except NotificationError as exc:
            # A notification that cannot be delivered never changes a verdict or a gate.
            self.log.warning("%s: notification not delivered: %s", self.name, exc)


#: The flow run's state name while the gate waits (the state stays of type RUNNING).
_RUN_STATE_NAMES = {
    State.RUNNING: "Running",
    State.STALLED: "Stalled",
    State.CONTRADICTION: "Contradiction",
    State.UNKNOWN: "Unknown",
}


def run_slug(run: Mapping[str, Any] | None) -> str | None:
    """The run's identity as an artifact-key fragment: its source and start time.

    Example:
        >>> run_slug({"source": "launch", "started_at": "2026-12-01T06:00:00.120+00:00"})
        'launch-20261201t060000-120'
    """
    if not run or not run.get("started_at"):
        return None
    stamp = re.sub(r"[-:]", "", str(run["started_at"]).lower()).split("+", 1)[0]
    return re.sub(r"[^a-z0-9]+", "-", f"{run.get('source') or 'run'}-{stamp}").strip("-")


def artifact_key(stage_name: str, what: str, *, run: str | None = None) -> str:
    """An artifact key Prefect accepts (lowercase letters, digits, dashes), per run when
    ``run`` (a :func:`run_slug`) is given, so that reruns do not mix into one history.

    Example:
        >>> artifact_key("Extract_v2.1", "progress")
        'crosscheck-extract-v2-1-progress'
        >>> artifact_key("extract", "evidence", run="launch-20261201t060000-120")
        'crosscheck-extract-launch-20261201t060000-120-evidence'
    """
    slug = re.sub(r"[^a-z0-9]+", "-", stage_name.lower()).strip("-") or "stage"
    middle = f"{slug}-{run}" if run else slug
    return f"crosscheck-{middle}-{what}"


def evidence_markdown(verdict: Verdict, *, checks: int, final: bool = False, timed_out: bool = False) -> str:
    """The current evidence for a person: verdict and time, the reasons, one short row per
    signal (says, what it says, the key facts in words). The raw evidence is the verdict
    JSON (events, ``crosscheck status --json``), not repeated here."""
    doc = verdict.to_json()
    when = clock(verdict.checked_at)
    checked, since = number(verdict.checked_at), number(verdict.since)
    facts = [
        f"{'final' if final else 'current'} verdict at **{when}** (local time of the check)",
        f"{age(checked - since)} in this state" if checked is not None and since is not None else "",
        f"advance: **{'yes' if verdict.advance else 'no'}**",
        f"host {_md(verdict.host)}",
        f"{checks} check{'s' if checks != 1 else ''}",
    ]
    if verdict.run:
        source = _md(verdict.run.get("source", "?"))
        facts.append(f"this run began {_md(_run_start(verdict.run))} (from the {source})")
    lines = [
        f"# {_md(verdict.stage)}: {verdict.state}" + (" (timed out)" if timed_out else ""),
        "",
        " · ".join(f for f in facts if f),
    ]
    lines += [
        "",
        "## Reasons",
        *[f"- {_md(r)}" for r in verdict.reasons or ("(none)",)],
        "",
        "## Signals",
        "",
        # Three narrow columns: what each signal says in words is already under Reasons.
        "| signal | says | facts |",
        "|---|---|---|",
        *[
            f"| {_md(r['signal'])} | {_says_cell(r['says'])} | {_md(r['facts'])} |"
            for r in evidence_rows(verdict)
        ],
        "",
        f"Raw evidence: the `{EVENT_PREFIX}{doc['verdict']}` event's payload, or `crosscheck status --json`.",
    ]
    return "\n".join(lines) + "\n"


def summary_markdown(verdict: Verdict, *, checks: int, timed_out: bool = False) -> str:
    """The final verdict as markdown (:func:`evidence_markdown` at the end of a wait)."""
    return evidence_markdown(verdict, checks=checks, final=True, timed_out=timed_out)


def failure_message(head: str, verdict: Verdict) -> str:
    """One line: the head, then the verdict's reasons in words. The evidence is in the
    run's evidence artifact (and ``StageFailed.verdict``), never a repr in the message.

    Example:
        >>> failure_message("stage extract: failed", verdict)  # doctest: +SKIP
        'stage extract: failed — log: error line: RuntimeError: CUDA error; process: pid 4455 exited'
    """
    return inert(f"{head} — {reasons_text(verdict)}", 1000)


# --- helpers ---------------------------------------------------------------------------------


def _emit(
    event: str, verdict: Verdict, payload: dict[str, Any], *, follows: Event | None = None
) -> Event | None:
    reason = inert(verdict.reasons[0] if verdict.reasons else "(no reasons given)", 200)
    resource = {
        "prefect.resource.id": resource_id(verdict.stage),
        "prefect.resource.name": verdict.stage,
        "crosscheck.verdict": str(verdict.state),
        "crosscheck.reason": reason,
        "crosscheck.host": str(verdict.host),
    }
    # The event card and its Details tab show related resources by name: the verdict and
    # its first reason are read there, not only in the raw JSON.
    # The UI shows an unknown related resource by its id: the reason is written into it.
    related = [
        {
            "prefect.resource.id": f"crosscheck.verdict.{verdict.state}",
            "prefect.resource.role": "verdict",
            "prefect.resource.name": f"{verdict.state}: {reason}",
        },
        {
            "prefect.resource.id": f"crosscheck.reason: {reason}",
            "prefect.resource.role": "reason",
            "prefect.resource.name": reason,
        },
    ]
    try:
        return emit_event(event=event, resource=resource, related=related, payload=payload, follows=follows)
    except EventTooLarge:
        # Evidence can carry long log lines; the verdict and reasons must still get through.
        slim = {k: v for k, v in payload.items() if k != "signals"}
        slim["signals"] = {
            name: {"says": s.get("says"), "detail": s.get("detail")}
            for name, s in payload.get("signals", {}).items()
        }
        return emit_event(event=event, resource=resource, related=related, payload=slim, follows=follows)


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


def _level(verdict: Verdict) -> int:
    """``failed`` is an error; what needs a person while the wait goes on, a warning."""
    if verdict.state is State.FAILED:
        return logging.ERROR
    if verdict.state in _ATTENTION or verdict.state is State.UNKNOWN:
        return logging.WARNING
    return logging.INFO


def _flow_run_id() -> str | None:
    try:
        from prefect.runtime import flow_run

        return flow_run.id
    except Exception:
        return None


def _flow_run_slug() -> str:
    # No run identity in the verdict (nothing bound it yet): this flow run is the run.
    flow_run_id = _flow_run_id()
    return f"flow-{str(flow_run_id)[:8]}" if flow_run_id else f"wait-{uuid4().hex[:8]}"


def _run_start(run: Mapping[str, Any]) -> str:
    started = run.get("started_at")
    if not started:
        return "?"
    try:
        return clock(dt.datetime.fromisoformat(str(started)).timestamp())
    except ValueError:
        return one_line(started, 40)


def _says_cell(says: str) -> str:
    return f"**{says}**" if says in ("failed", "unknown") else says


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
