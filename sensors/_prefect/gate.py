"""What a gate leaves behind in Prefect while it waits: the run's state name, one evidence,
progress and picture artifact per run (updated in place), log lines at each change and a
bounded "still ..." line, events (each verdict change, bounded heartbeats, a final timeout),
and notifications.

The rules ("per change, not per check"; "once per run") live in :class:`GateReport`; the
tasks in :mod:`sensors.prefect` only feed it verdicts.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID, uuid4

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_progress_artifact
from prefect.events import Event, emit_event
from prefect.exceptions import MissingContextError

from sensors._base.errors import NotificationError, StageFailed, StageStuck
from sensors._base.model import State, Verdict
from sensors._base.text import inert
from sensors._config.stage import Stage
from sensors._prefect.artifacts import (
    EVENT_PREFIX,
    HEARTBEAT_EVENT,
    RUN_STATE_NAMES,
    TIMEOUT_EVENT,
    artifact_key,
    evidence_markdown,
    failure_message,
    markdown_escape,
    payload_time,
    run_slug,
    says_of,
    upsert_artifact,
    verdict_line,
)
from sensors._prefect.compat import EventTooLarge
from sensors._present.evidence import (
    age,
    clock,
    progress_detail,
    progress_percent,
    reasons_text,
    still_working,
)
from sensors._present.picture import WaitHistory, markdown_image, wait_svg
from sensors._watch.handoff import HandoffSeen

#: Verdicts that deserve a person's attention while the wait goes on.
_ATTENTION = (State.STALLED, State.CONTRADICTION)


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


def resource_id(stage_name: str) -> str:
    """The Prefect resource id of a stage's events: ``crosscheck.stage.<name>``.

    Example:
        >>> resource_id("extract")
        'crosscheck.stage.extract'
    """
    return EVENT_PREFIX + stage_name


class GateReport:
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

    A gate whose stage the watcher checked (``watched``, from its outcome) reports the
    watcher's wait as its own story: its checks and picture, ``by`` whom, and the
    heartbeats' cadence the watcher kept (the next one is due a cadence after its last).
    """

    def __init__(
        self,
        stage: Stage,
        *,
        notifier: Any | None,
        cadence: Cadence = DEFAULT_CADENCE,
        watched: HandoffSeen | None = None,
        by: str | None = None,
    ) -> None:
        self.stage = stage
        self.name = stage.stage
        self.notifier = notifier
        self.cadence = cadence
        self.log = run_logger()
        self.last: Verdict | None = None
        self.history = watched.history if watched is not None else WaitHistory()
        self.by = by
        self.keys: dict[str, str] = {}
        self._ids: dict[str, UUID | None] = {}
        self._state_name: str | None = None
        self._explained = False
        self._heartbeat_at: float | None = None
        if watched is not None and watched.heartbeat_at is not None:
            # The watcher's last heartbeat, on this report's clock: one cadence across both.
            self._heartbeat_at = _clock() - max(0.0, time.time() - watched.heartbeat_at)
        self._line_at = _clock()
        self._refresh_at: float | None = None
        self._started = _clock()
        self._state_since = self._started
        # Records a run's final verdict in the state store: False when announced before.
        self.announce: Callable[[Verdict], bool] = lambda verdict: True

    @property
    def checks(self) -> int:
        """The checks this report stands on (the watcher's too, for a handed-off stage)."""
        return self.history.checks

    def observe(self, verdict: Verdict, *, counted: bool = False) -> None:
        """Report one check's verdict; ``counted``: already in the history (the watcher's
        last check, which the resumed gate reports)."""
        now = _clock()
        previous, self.last = self.last, verdict
        if not counted:
            self.history.add(verdict, at=time.time())
        if not self.keys:
            self._key_run(verdict)
        state_changed = previous is None or verdict.state is not previous.state
        if state_changed:
            self._state_since = now
        # A signal changing its mind (the log says done while the process still works) is
        # news even when the verdict stays `running`: it is the evidence trail of incident 2.
        changed = state_changed or says_of(verdict) != says_of(previous)
        payload = verdict.to_json()
        if changed:
            self.log.log(
                log_level(verdict), "%s", verdict_line(verdict), extra={"crosscheck_verdict": payload}
            )
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
            heartbeat = emit_verdict_event(HEARTBEAT_EVENT, verdict, heartbeat_payload(verdict, self.checks))
            self._heartbeat_at = now
        final = verdict.state.final
        if state_changed and (not final or self.announce(verdict)):
            # Events are named after the verdict, so they fire on verdict changes only, and a
            # run's complete or failed once, whoever watched it.
            emit_verdict_event(EVENT_PREFIX + str(verdict.state), verdict, payload, follows=heartbeat)
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
        if verdict.stuck is not None and not timed_out:
            # Ended at once, not at the timeout: nothing later can open this gate for this run.
            stuck = verdict.stuck
            head = f"stage {self.name}: stuck, unknown for good: {stuck.why}; the fix: {stuck.fix}"
            message = failure_message(head, verdict)
            self.log.error("%s (evidence: artifact %s)", message, self.keys.get("evidence", "?"))
            raise StageStuck(message, verdict=verdict)
        if timed_out and verdict.state is not State.FAILED:
            head = f"stage {self.name}: not complete after {timeout:g}s (last verdict {verdict.state})"
            # The last word of this gate for automations: without it, the last event is
            # `stalled` while the flow run has already failed.
            emit_verdict_event(
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

    def _name_run_state(self, verdict: Verdict) -> None:
        name = RUN_STATE_NAMES.get(verdict.state)
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
        self.best_effort(rename)
        self._state_name = name

    def _write_artifacts(self, verdict: Verdict, *, final: bool = False, timed_out: bool = False) -> None:
        when = clock(verdict.checked_at)
        title = f"{self.name}: {verdict.state} at {when}" + (" (final)" if final else "")
        progress = progress_percent(verdict)
        value = progress if progress is not None else (100.0 if verdict.advance else 0.0)
        self._upsert(
            "progress",
            value,
            description=(
                f"{markdown_escape(title)} — {markdown_escape(progress_detail(verdict))}; last checked {when}"
            ),
            create=lambda **kw: create_progress_artifact(progress=value, **kw),
        )
        markdown = evidence_markdown(
            verdict,
            checks=self.checks,
            final=final,
            timed_out=timed_out,
            first_check=self.history.first_at,
            by=self.by,
        )
        self._upsert(
            "evidence",
            markdown,
            description=markdown_escape(title),
            create=lambda **kw: create_markdown_artifact(markdown=markdown, **kw),
        )
        svg = wait_svg(
            self.history.samples,
            title=f"{self.name}: the wait, {verdict.state} at {when}",
            # Why, under the title: a hung collective's lost rank is named in the first reason.
            note=verdict.reasons[0] if verdict.reasons and verdict.state is not State.COMPLETE else "",
        )
        # Markdown that embeds the picture, not an image artifact: the UI prints an image
        # artifact's whole data: URL under it (see markdown_image).
        picture = markdown_image(svg, alt=f"{self.name}: the wait, {verdict.state} at {when}")
        checks = f"{self.checks} check{'s' if self.checks != 1 else ''}"
        checks += f" by {self.by}" if self.by else ""
        self._upsert(
            "picture",
            picture,
            description=(
                f"{markdown_escape(self.name)}: signals over time, verdicts as bands"
                f" ({markdown_escape(checks)})"
            ),
            create=lambda **kw: create_markdown_artifact(markdown=picture, **kw),
        )

    def _upsert(
        self,
        what: str,
        data: Any,
        *,
        description: str,
        create: Callable[..., UUID | Coroutine[Any, Any, UUID]],
    ) -> None:
        """Create the run's ``what`` artifact once (``create(key=, description=)``), then
        update it in place: one artifact per run, not one per change. (Prefect's artifact
        functions are sync and async in one, typed so: called here, in a sync flow, a UUID.)"""
        created = what in self._ids
        artifact_id = self._ids.get(what)
        if created and artifact_id is None:
            return  # creating it failed (logged): the wait goes on without it

        def upsert() -> UUID:
            return upsert_artifact(
                artifact_id,
                create=lambda: cast(UUID, create(key=self.keys[what], description=description)),
                data=data,
                description=description,
            )

        upsert.__name__ = "update_artifact" if created else f"create_{what}_artifact"
        answer = self.best_effort(upsert)
        if not created:
            self._ids[what] = answer

    def best_effort(self, call: Any, *args: Any, **kwargs: Any) -> Any:
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


def heartbeat_payload(verdict: Verdict, checks: int, *, by: str | None = None) -> dict[str, Any]:
    """The payload of a ``crosscheck.stage.heartbeat`` event: the verdict, its reasons, when
    it was checked, the number of ``checks`` so far and the progress; ``by`` who sent it when
    not the gate itself (the watcher's heartbeats say ``"crosscheck serve"``; a gate's have
    no ``by``)."""
    payload: dict[str, Any] = {
        "verdict": str(verdict.state),
        "reasons": list(verdict.reasons),
        "checked_at": verdict.to_json()["checked_at"],
        "check": checks,
        "progress": progress_percent(verdict),
    }
    if by is not None:
        payload["by"] = by
    return payload


def emit_verdict_event(
    event: str,
    verdict: Verdict,
    payload: dict[str, Any],
    *,
    follows: Event | None = None,
    related: list[dict[str, str]] | None = None,
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
    # the reason that decided it (the first: a stall's "no progress for 66s", not "process
    # alive") are read there, not only in the raw JSON.
    # The UI shows an unknown related resource by its id: the reason is written into it.
    related = [
        *(related or ()),
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


def notifier_for(stage: Stage) -> Any | None:
    """The stage's notifier (:func:`sensors._notify.policy.notifier_for`), imported only for a
    stage that notifies."""
    if stage.notify is None:
        return None
    from sensors._notify.policy import notifier_for as build

    return build(stage)


def _flow_run_url() -> str | None:
    try:
        from prefect.runtime import flow_run

        return flow_run.ui_url
    except Exception:
        # Outside a flow run (task called directly) there is no URL; not worth failing for.
        return None


def run_logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    try:
        return get_run_logger()
    except MissingContextError:
        # task.fn(...) called outside any run: log like a plain library.
        return logging.getLogger("crosscheck.prefect")


def log_level(verdict: Verdict) -> int:
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
