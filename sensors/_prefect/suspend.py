"""A gate that holds no worker while it waits: hand the stage to ``crosscheck serve``, suspend.

The gate hands its stage off (the ``hand-off`` task writes the request under the flow run's
id), suspends (Prefect 3's ``suspend_flow_run``, the pause timeout a little past the
deadline), is resumed by the watcher once it has settled the handoff, and reports the outcome
(the ``finish`` task) like a gate that waited in its worker. Every step is idempotent: a
resumed flow run runs the flow function again from the top. It hands off only when it can be
resumed (a deployment, a shared store and a live watcher, or ``hand_off=True``); otherwise it
waits in its worker and says why. Why suspend and resume, and the steps: docs/deployments.md,
"Gates that hold no worker".
"""

from __future__ import annotations

import logging
import time
from typing import Any
from uuid import UUID

from prefect import get_run_logger, task

from sensors._base.errors import StageFailed
from sensors._base.text import markdown_escape
from sensors._check.codec import dumps, loads
from sensors._check.persist import Persistence
from sensors._config.stage import Stage
from sensors._prefect.artifacts import patch_artifact, waiting_key, waiting_markdown
from sensors._prefect.compat import NO_CACHE
from sensors._prefect.gate import DEFAULT_CADENCE, GateReport
from sensors._present.evidence import clock
from sensors._store import Handoff, Store
from sensors._watch.handoff import (
    RESUMES_GATES,
    Outcome,
    has_inline_secret,
    new_handoff,
    read_outcome,
    request_for,
    watcher_name,
)
from sensors.prefect import opened_store, task_run_name

#: The server fails a suspended gate this long after its deadline if no watcher resumed it.
PAUSE_GRACE_S = 600
#: How often a resumed gate that finds no outcome yet suspends again, at most (rounds).
MAX_ROUNDS = 1000


def can_hand_off(
    hand_off: bool | None, stage: Stage, reference: str | None, store: Store | None, log: Any
) -> bool:
    """Whether this gate hands its stage off (docs/deployments.md); says why not."""
    if hand_off is False:
        return False
    from prefect.runtime import deployment, flow_run

    why_not = None
    if has_inline_secret(stage) and reference is None:
        why_not = "the stage's host has a secret inline, which is never written to the store"
    elif not flow_run.get_id():
        why_not = "not a flow run"
    elif not deployment.id:
        why_not = "this flow run has no deployment (only a deployment's runs can be resumed)"
    elif store is None or store.location == ":memory:":
        why_not = "no shared state store (the watcher reads handoffs from it)"
    elif hand_off is None:
        try:
            watchers = [w for w in store.live_watchers() if w.endswith(RESUMES_GATES)]
        except Exception as exc:  # an older store or one that cannot answer: wait here
            watchers, detail = [], f" ({exc})"
        else:
            detail = ""
        if not watchers:
            # One without the Prefect API would settle the stage but never resume the gate.
            why_not = f"no crosscheck serve with the Prefect API is watching {store.location}{detail}"
    if why_not is None:
        return True
    level = logging.WARNING if hand_off else logging.INFO
    log.log(level, "waiting in this worker (it stays held until the verdict): %s", why_not)
    return False


def ticket_for(stage: Stage) -> str:
    """The handoff's key: this flow run and the stage (a pipeline hands off two stages)."""
    from prefect.runtime import flow_run

    return f"{flow_run.get_id()}:{stage.stage}"


def handed_off_launch(stage: Stage, state: str | None) -> dict[str, Any] | None:
    """The launch record of this flow run's handoff of ``stage``, when there is one: a
    resumed flow run runs its body again, and must not launch the job a second time."""
    with opened_store(state) as store:
        if store is None:
            return None
        handoff = store.handoff(ticket_for(stage))
    if handoff is None:
        return None
    run = handoff.request.get("run")
    return dict(run) if isinstance(run, dict) else {}


def _as_time(since: str | float | None, checker: Any) -> str | float | None:
    """A start given as a duration, as the time it stands for: the watcher starts (and
    restarts) long after the gate, and a duration is resolved anew by every watch (a new
    run each time). Resolved by a check, on the monitored host's clock."""
    from sensors._run.run import parse_since

    given = parse_since(since)
    if given is None or given.ago is None:
        return since
    checker.check()
    run = checker.run
    if run is not None and run.source == "since" and run.started_at is not None:
        return run.started_at
    return time.time() - given.ago  # the host could not be asked: this machine's clock


@task(cache_policy=NO_CACHE, task_run_name=task_run_name("hand-off"))
def hand_off_stage(
    stage: Stage,
    reference: str | None,
    timeout: float,
    since: str | float | None,
    run: dict[str, Any] | None,
    state: str | None,
) -> dict[str, Any]:
    """Write the handoff (once per flow run and stage); ``{"already": ...}`` for an announced run."""
    from prefect.runtime import flow_run

    from sensors._check.span import checker_for
    from sensors._run.run import run_from_record

    log = get_run_logger()
    ticket = ticket_for(stage)
    with opened_store(state) as store:
        known = store.handoff(ticket)
        if known is not None:
            log.info("%s: handed off before (this flow run resumed)", stage.stage)
            return {"ticket": ticket, "deadline": known.deadline}
        with checker_for(stage, since=since, run=run_from_record(run), state=store) as checker:
            announced = checker.announced()
            host = checker.host.name
            if announced is None:
                since = _as_time(since, checker)
        if announced is not None:
            return {"ticket": ticket, "already": dumps(announced)}
        request = request_for(stage, reference=reference, since=since, run=run)
        request["flow_run_id"] = str(flow_run.get_id())
        handoff = store.hand_off(new_handoff(ticket, stage, host, request, timeout))
        log.info(
            "%s: handed to crosscheck serve on %s; this flow run suspends (no worker is held) and "
            "resumes when the stage is complete or failed, or at its deadline %s",
            stage.stage,
            store.location,
            time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(handoff.deadline)),
        )
        return {"ticket": ticket, "deadline": handoff.deadline}


@task(cache_policy=NO_CACHE, task_run_name=task_run_name("finish"))
def finish_handed_off(stage: Stage, ticket: str, timeout: float, state: str | None) -> dict[str, Any]:
    """Report the watcher's outcome as the gate's own verdict, once: the watcher's whole
    wait (its checks, their picture, its heartbeats' cadence), and the waiting artifact's
    last words (what happened).

    The handoff stays in the store (the watcher drops it when the flow run has ended): a
    flow run resumed again later (a pipeline's second stage) finds this stage reported and
    goes on without launching or reporting it a second time."""
    with opened_store(state) as store:
        handoff = store.handoff(ticket)
        outcome = read_outcome(handoff) if handoff is not None else None
        if handoff is None or outcome is None:
            raise StageFailed(f"stage {stage.stage}: resumed without an outcome from the watcher")
        persistence = Persistence(store, stage, handoff.host)
        by = watcher_name(outcome.by)
        # The watcher notified; its checks are this report's story.
        report = GateReport(stage, notifier=None, cadence=DEFAULT_CADENCE, watched=outcome.watched, by=by)
        if persistence.announced(outcome.run, outcome.verdict) is not None:
            report.log.info("%s: reported before (this flow run resumed)", stage.stage)
            report.last = outcome.verdict
        else:
            checks = max(report.checks, 1)
            report.log.info(
                "%s: %s, decided by %s at %s after %d check%s",
                stage.stage,
                outcome.verdict.state,
                by,
                time.strftime("%H:%M:%S", time.localtime(outcome.decided_at)),
                checks,
                "s" if checks != 1 else "",
            )
            report.announce = lambda verdict: persistence.announce(outcome.run, verdict)
            report.observe(outcome.verdict, counted=outcome.watched is not None)
            _close_waiting(report, outcome, handoff, by)
        return report.finish(timed_out=outcome.timed_out, timeout=timeout).to_json()


def _close_waiting(report: GateReport, outcome: Outcome, handoff: Handoff, by: str) -> None:
    """The waiting artifact's last words: what happened, start to end (it said "suspended …
    resumes this flow run when …" until now). Not found or not written: logged, no more."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    flow_run_id = str(handoff.request.get("flow_run_id") or "")
    if not flow_run_id:
        return
    verdict = outcome.verdict
    markdown = waiting_markdown(
        verdict,
        what=f"stage {handoff.stage} on {handoff.host}",
        checks=max(report.checks, 1),
        first_check=report.history.first_at,
        by=by,
        reported_at=time.time(),
        timed_out=outcome.timed_out,
    )
    description = f"{markdown_escape(handoff.stage)}: done, {verdict.state} at {clock(verdict.checked_at)}"
    if outcome.timed_out:
        description = f"{markdown_escape(handoff.stage)}: done, not complete by its deadline"

    def close_waiting_artifact() -> None:
        with get_client(sync_client=True) as client:
            found = client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    key=ArtifactFilterKey(any_=[waiting_key(handoff.stage, flow_run_id)]),
                    flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(flow_run_id)]),
                )
            )
            for artifact in found:
                patch_artifact(client, artifact.id, data=markdown, description=description)

    report.best_effort(close_waiting_artifact)


def wait_handed_off(
    stage: Stage,
    *,
    reference: str | None,
    timeout: float,
    since: str | float | None,
    run: dict[str, Any] | None,
    state: str | None,
) -> dict[str, Any]:
    """The flow body of a gate that hands off (docs/deployments.md, "Gates that hold no worker")."""
    from prefect import suspend_flow_run

    handed = hand_off_stage(stage, reference, timeout, since, run, state)
    if "already" in handed:
        report = GateReport(stage, notifier=None)
        return report.already(loads(handed["already"])).to_json()
    ticket, deadline = handed["ticket"], float(handed["deadline"])
    for round_ in range(1, MAX_ROUNDS + 1):
        with opened_store(state) as store:
            handoff = store.handoff(ticket)
        if handoff is None:
            raise StageFailed(f"stage {stage.stage}: the handoff {ticket} is gone from the store")
        if handoff.outcome is not None:
            break
        pause = max(60, int(deadline - time.time()) + PAUSE_GRACE_S)
        # Returns at once when this key was used before (the run was resumed): the loop then
        # looks at the store again.
        suspend_flow_run(timeout=pause, key=f"crosscheck-{stage.stage}-{round_}")
    else:
        raise StageFailed(f"stage {stage.stage}: resumed {MAX_ROUNDS} times without an outcome")
    return finish_handed_off(stage, ticket, timeout, state)


def reference_of(stage: Any) -> str | None:
    """``block:NAME`` when the gate was given a block (handed off by name, not by value)."""
    return stage if isinstance(stage, str) and stage.startswith("block:") else None
