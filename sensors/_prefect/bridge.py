"""What ``crosscheck serve`` does in Prefect (``--prefect``; on when ``PREFECT_API_URL`` is set).

- Events, as a gate sends them: ``crosscheck.stage.<verdict>`` at each verdict change (a
  run's ``complete``/``failed`` once, whoever watched it: the announcement in the state
  store decides) and ``crosscheck.stage.heartbeat`` at a bounded cadence (default at most one
  a minute per stage), so the deployments' reactive and proactive automations work the same
  whether a stage is watched by a gate or by the watcher.
- For a stage a gate handed off (:mod:`sensors._prefect.suspend`): its final event is the gate's
  (the resumed gate announces and reports it, with every check the watcher made and the
  heartbeats' cadence it kept: :class:`~sensors._watch.handoff.HandoffSeen`); the watcher keeps one
  "waiting" artifact on the suspended flow run (what it waits for, the latest verdict and
  its evidence, updated in place at each change and at most every ``refresh`` seconds; at
  the final verdict, that it resumes the run) and resumes the run when the stage is
  settled. The resumed gate writes the artifact's last words: what happened.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from uuid import UUID

from sensors._base.model import State, Verdict
from sensors._config.stage import Stage
from sensors._prefect.artifacts import (
    EVENT_PREFIX,
    HEARTBEAT_EVENT,
    markdown_escape,
    upsert_artifact,
    waiting_key,
    waiting_markdown,
)
from sensors._prefect.gate import DEFAULT_CADENCE, Cadence, emit_verdict_event, heartbeat_payload
from sensors._present.evidence import clock
from sensors._watch.handoff import HandoffSeen

log = logging.getLogger("crosscheck.serve")

#: Who sent a heartbeat, in the watcher's: the command, not :attr:`PrefectBridge.by` (its host
#: and pid), so that the payload is the same whichever watcher sent it.
_HEARTBEAT_BY = "crosscheck serve"


@dataclass
class _Seen:
    state: State | None = None
    heartbeat_at: float | None = None
    refresh_at: float | None = None
    artifact: UUID | None = None
    checks: int = 0


@dataclass
class PrefectBridge:
    """The watcher's Prefect side: events, the waiting gate's artifact, resuming gates."""

    cadence: Cadence = DEFAULT_CADENCE
    clock: Callable[[], float] = time.monotonic
    #: Who watches, in the waiting artifact (``crosscheck serve`` sets its host and pid).
    by: str = "crosscheck serve"
    _seen: dict[tuple[str, str, str], _Seen] = field(default_factory=dict)

    @classmethod
    def every(cls, heartbeat: float) -> PrefectBridge:
        """A bridge sending at most one heartbeat per stage per ``heartbeat`` seconds."""
        return cls(cadence=replace(DEFAULT_CADENCE, heartbeat=heartbeat))

    # ------------------------------------------------------------------ stages from blocks

    def resolve_block(self, reference: str) -> Stage:
        from sensors.prefect import as_stage

        return as_stage(reference)

    # ------------------------------------------------------------------ every check

    def observe(
        self,
        verdict: Verdict,
        *,
        flow_run_id: str | None,
        announce: Callable[[Verdict], bool],
        waiting_for: str = "",
        watched: HandoffSeen | None = None,
    ) -> None:
        """Report one check of a stage (``flow_run_id``: the gate that handed it off;
        ``watched``: what the watcher saw of it, this check included, where the time of
        each heartbeat is kept for the gate that reports it)."""
        seen = self._seen.setdefault((verdict.stage, verdict.host, flow_run_id or ""), _Seen())
        now = self.clock()
        seen.checks += 1
        checks = watched.history.checks if watched is not None else seen.checks
        changed = verdict.state is not seen.state
        seen.state = verdict.state
        related = _flow_run_related(flow_run_id)
        heartbeat = None
        try:
            if seen.heartbeat_at is None or now - seen.heartbeat_at >= self.cadence.heartbeat:
                payload = heartbeat_payload(verdict, checks, by=_HEARTBEAT_BY)
                heartbeat = emit_verdict_event(HEARTBEAT_EVENT, verdict, payload, related=related)
                seen.heartbeat_at = now
                if watched is not None:
                    watched.heartbeat_at = time.time()
            if changed:
                final = verdict.state.final
                # A handed-off stage's final event is its gate's; any other once per run.
                if not final or (flow_run_id is None and announce(verdict)):
                    emit_verdict_event(
                        EVENT_PREFIX + str(verdict.state),
                        verdict,
                        verdict.to_json(),
                        follows=heartbeat,
                        related=related,
                    )
        except Exception as exc:  # the API is down: the watch goes on, the events are lost
            log.warning("%s: events not sent: %s", verdict.stage, exc)
        if flow_run_id and (
            changed or seen.refresh_at is None or now - seen.refresh_at >= self.cadence.refresh
        ):
            seen.refresh_at = now
            self._waiting_artifact(seen, verdict, flow_run_id, waiting_for, watched)

    def forget(self, stage: str, host: str, flow_run_id: str | None) -> None:
        self._seen.pop((stage, host, flow_run_id or ""), None)

    def _waiting_artifact(
        self, seen: _Seen, verdict: Verdict, flow_run_id: str, waiting_for: str, watched: HandoffSeen | None
    ) -> None:
        from prefect.client.orchestration import get_client

        when = clock(verdict.checked_at)
        markdown = waiting_markdown(
            verdict,
            what=waiting_for,
            checks=watched.history.checks if watched is not None else seen.checks,
            first_check=watched.history.first_at if watched is not None else None,
            by=self.by,
            # A final verdict settles the handoff at this check: the run is resumed next.
            settled=verdict.state.final,
        )
        description = f"{markdown_escape(verdict.stage)}: waiting, {verdict.state} at {when}"
        if verdict.state.final:
            description = (
                f"{markdown_escape(verdict.stage)}: {verdict.state} at {when}, resuming the flow run"
            )

        def create() -> UUID:
            from prefect.client.schemas.actions import ArtifactCreate

            with get_client(sync_client=True) as client:
                created = client.create_artifact(
                    ArtifactCreate(
                        key=waiting_key(verdict.stage, flow_run_id),
                        type="markdown",
                        data=markdown,
                        description=description,
                        flow_run_id=UUID(flow_run_id),
                    )
                )
            return created.id

        try:
            seen.artifact = upsert_artifact(
                seen.artifact, create=create, data=markdown, description=description
            )
        except Exception as exc:
            log.warning(
                "%s: the waiting artifact of flow run %s not written: %s", verdict.stage, flow_run_id, exc
            )

    # ------------------------------------------------------------------ resuming gates

    def resume(self, flow_run_id: str, stage: str) -> str:
        """Resume the gate's flow run if it is suspended on ``stage``: ``"resumed"``;
        ``"waiting"`` (not suspended yet, or on another stage: asked again later); ``"gone"``."""
        from prefect.client.orchestration import get_client
        from prefect.exceptions import ObjectNotFound

        with get_client(sync_client=True) as client:
            try:
                run = client.read_flow_run(UUID(flow_run_id))
            except ObjectNotFound:
                return "gone"
            state = run.state
            if state is None or state.is_final():
                return "gone"
            key = str(getattr(state.state_details, "pause_key", "") or "")
            if not state.is_paused() or not key.startswith(f"crosscheck-{stage}-"):
                return "waiting"
            client.resume_flow_run(UUID(flow_run_id))
        log.info("flow run %s: resumed (stage %s settled)", flow_run_id, stage)
        return "resumed"

    def over(self, flow_run_id: str) -> bool:
        """Whether the gate's flow run has ended (or is gone): its handoffs can be dropped."""
        from prefect.client.orchestration import get_client
        from prefect.exceptions import ObjectNotFound

        try:
            with get_client(sync_client=True) as client:
                run = client.read_flow_run(UUID(flow_run_id))
        except ObjectNotFound:
            return True
        except Exception:  # the API cannot answer: keep it
            return False
        return run.state is None or run.state.is_final()


def _flow_run_related(flow_run_id: str | None) -> list[dict[str, str]]:
    if not flow_run_id:
        return []
    return [{"prefect.resource.id": f"prefect.flow-run.{flow_run_id}", "prefect.resource.role": "flow-run"}]
