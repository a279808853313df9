"""What a gate writes for a person to read: artifact keys per run, the evidence markdown, the
one-line failure message, the verdict line of the log."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

from sensors._base.model import State, Verdict
from sensors._base.text import inert, markdown_escape
from sensors._present.evidence import (
    age,
    clock,
    evidence_rows,
    number,
    one_line,
    reasons_text,
)

#: The flow run's state name while the gate waits (the state stays of type RUNNING).
#: Every crosscheck event name starts with this; the verdict (or ``heartbeat``) follows.
EVENT_PREFIX = "crosscheck.stage."


HEARTBEAT_EVENT = EVENT_PREFIX + "heartbeat"


#: The last event of a gate that timed out (complete and failed are verdict events).
TIMEOUT_EVENT = EVENT_PREFIX + "timeout"

RUN_STATE_NAMES = {
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


def patch_artifact(client: Any, artifact_id: Any, *, data: str, description: str | None) -> None:
    """Replace an artifact's content with ``client`` (Prefect's sync client).

    The PATCH itself, not ``client.update_artifact``: that one also emits a
    ``prefect.artifact.updated`` event per call, which would bury the verdict events in the
    feed (one per refresh and artifact).
    """
    response = client.request(
        "PATCH",
        "/artifacts/{id}",
        path_params={"id": artifact_id},
        json={"data": data, "description": description},
    )
    response.raise_for_status()


def upsert_artifact(
    artifact_id: UUID | None, *, create: Callable[[], UUID], data: Any, description: str | None
) -> UUID:
    """One artifact per run, updated in place (a gate's evidence, progress and picture; the
    watcher's waiting artifact): no ``artifact_id`` yet, ``create()`` it and answer its id;
    else replace its ``data`` and ``description`` (:func:`patch_artifact`, with Prefect's
    sync client) and answer ``artifact_id``. An error is the caller's to log."""
    if artifact_id is None:
        return create()
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        patch_artifact(client, artifact_id, data=data, description=description)
    return artifact_id


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


def evidence_markdown(
    verdict: Verdict,
    *,
    checks: int,
    final: bool = False,
    timed_out: bool = False,
    first_check: float | None = None,
    by: str | None = None,
) -> str:
    """The current evidence for a person: verdict and time, how long in this state, the
    checks behind it (``checks`` since ``first_check``, ``by`` whom when not this gate), the
    reasons, and a table: first the verdict with the reason that decided it (a stall is
    "no progress for 66 s", though every signal says working), then one short row per
    signal (says, the key facts in words). The raw evidence is the verdict JSON (events,
    ``crosscheck status --json``), not repeated here."""
    doc = verdict.to_json()
    when = clock(verdict.checked_at)
    facts = [
        f"{'final' if final else 'current'} verdict at **{when}** (local time of the check)",
        _in_state(verdict),
        f"advance: **{'yes' if verdict.advance else 'no'}**",
        f"host {markdown_escape(verdict.host)}",
        _checks(verdict, checks, first_check, by),
    ]
    if verdict.run:
        source = markdown_escape(verdict.run.get("source", "?"))
        facts.append(f"this run began {markdown_escape(_run_start(verdict.run))} (from the {source})")
    decided = verdict.reasons[0] if verdict.reasons else "(no reasons given)"
    lines = [
        f"# {markdown_escape(verdict.stage)}: {verdict.state}" + (" (timed out)" if timed_out else ""),
        "",
        " · ".join(f for f in facts if f),
    ]
    lines += [
        "",
        "## Reasons",
        *[f"- {markdown_escape(r)}" for r in verdict.reasons or ("(none)",)],
        "",
        "## Signals",
        "",
        # Three narrow columns: what each signal says in words is already under Reasons.
        "| signal | says | facts |",
        "|---|---|---|",
        f"| **verdict** | **{verdict.state}** | {markdown_escape(decided)} |",
        *[
            f"| {markdown_escape(r['signal'])} | {_says_cell(r['says'])} | {markdown_escape(r['facts'])} |"
            for r in evidence_rows(verdict)
        ],
        "",
        f"Raw evidence: the `{EVENT_PREFIX}{doc['verdict']}` event's payload, or `crosscheck status --json`.",
    ]
    return "\n".join(lines) + "\n"


def _in_state(verdict: Verdict) -> str:
    """How long the verdict has held: ``stalled for 1 m 6 s, since 12:00:01``; a state this
    check began says so (never "0 s in this state" beside "agreed for 2 checks")."""
    checked, since = number(verdict.checked_at), number(verdict.since)
    if checked is None or since is None:
        return ""
    if checked - since < 1:
        return f"{verdict.state} from this check on"
    return f"{verdict.state} for {age(checked - since)}, since {clock(since)}"


def _checks(verdict: Verdict, checks: int, first_check: float | None, by: str | None) -> str:
    """``49 checks over 1 m 38 s by crosscheck serve (host:pid)``: the checks behind it."""
    said = f"{checks} check{'s' if checks != 1 else ''}"
    checked = number(verdict.checked_at)
    if checks > 1 and first_check is not None and checked is not None and checked - first_check >= 1:
        said += f" over {age(checked - first_check)}"
    if by:
        said += f" by {markdown_escape(by)}"
    return said


def waiting_key(stage_name: str, flow_run_id: str) -> str:
    """The key of the "waiting" artifact a watcher keeps on a gate's suspended flow run."""
    return artifact_key(stage_name, "waiting", run=f"flow-{flow_run_id[:8]}")


def waiting_markdown(
    verdict: Verdict,
    *,
    what: str,
    checks: int,
    first_check: float | None,
    by: str,
    settled: bool = False,
    reported_at: float | None = None,
    timed_out: bool = False,
) -> str:
    """The "waiting" artifact of a gate handed to the watcher, at each step of its life.

    - the watcher, while the stage runs: suspended, what it waits for, the latest verdict;
    - the watcher, at the final verdict (``settled``): decided, the flow run resumes;
    - the resumed gate (``reported_at``): what happened, start to end.

    ``what`` names the stage and host; ``by`` the watcher (``crosscheck serve on host:pid``).
    """
    when = clock(verdict.checked_at)
    counted = _checks(verdict, checks, first_check, None)
    who = markdown_escape(by)
    if reported_at is not None:
        decided = (
            f"the last verdict at its deadline was **{verdict.state}** at {when}"
            if timed_out
            else f"decided **{verdict.state}** at {when}"
        )
        head = (
            f"**Done: {'not complete by its deadline' if timed_out else verdict.state}.** While the"
            f" stage ran, this flow run was suspended and no worker was held: {who} watched"
            f" {markdown_escape(what)} ({counted}), {decided}, and resumed the run; its gate reported the"
            f" verdict at {clock(reported_at)}. The evidence and the picture: this run's"
            " `-evidence` and `-picture` artifacts."
        )
    elif settled:
        head = (
            f"**Decided: {verdict.state}** at {when}, by {who} ({counted}): it resumes this flow"
            " run now, and the gate reports the verdict."
        )
    else:
        head = (
            f"**Suspended: no worker is held.** {who} watches {markdown_escape(what)} and resumes this flow"
            " run when it is complete or failed, or at its deadline.\n\n"
            f"Latest verdict: **{verdict.state}** at {when} ({counted} by the watcher)."
        )
    final = settled or reported_at is not None
    return (
        head
        + "\n\n"
        + evidence_markdown(
            verdict, checks=checks, final=final, timed_out=timed_out, first_check=first_check, by=by
        )
    )


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


def _says_cell(says: str) -> str:
    return f"**{says}**" if says in ("failed", "unknown") else says


def says_of(verdict: Verdict | None) -> tuple[tuple[str, str], ...]:
    if verdict is None:
        return ()
    return tuple((name, str(r.says)) for name, r in verdict.readings.items())


def verdict_line(verdict: Verdict) -> str:
    # One line of inert text: a log record never carries the job's newlines or escapes.
    return inert(f"{verdict.stage}: {verdict.state} — {reasons_text(verdict)}")


def _run_start(run: Mapping[str, Any]) -> str:
    started = run.get("started_at")
    if not started:
        return "?"
    try:
        return clock(dt.datetime.fromisoformat(str(started)).timestamp())
    except ValueError:
        return one_line(started, 40)


def payload_time(verdict: Verdict) -> str:
    return str(verdict.to_json().get("checked_at"))
