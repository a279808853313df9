"""What to send: a verdict as a Slack Block Kit payload and a plain-text fallback.

Job text (log lines, command lines, details) is data, never markup: inside Slack it sits in
code spans, escaped (no mention, link or formatting), and the mrkdwn fallback is escaped with
formatting off.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sensors._base.model import State, Verdict
from sensors._base.text import inert, slack_code
from sensors._present.evidence import COLOUR, EMOJI, evidence_line, fmt_duration, one_line

__all__ = ["Message", "MessageKind", "build_message"]

MessageKind = Literal["transition", "reminder", "resolved", "stuck"]

# Slack Block Kit limits: header text 150 chars, section text 3000 chars.
_HEADER_MAX = 150
_SECTION_MAX = 2900


@dataclass(frozen=True)
class Message:
    """One notification, ready for Slack (``payload``) or any plain-text channel (``text``).

    Attributes:
        kind: ``transition`` (a new verdict), ``reminder`` (a problem persists),
            ``resolved`` (a stall, contradiction or unknown cleared) or ``stuck`` (an unknown
            that can never become complete: why, and the fix).
        stage: the stage name.
        state: the verdict the message reports.
        title: one line; also the subject for channels that have one.
        text: the plain-text fallback, with the same essentials as the blocks: its first
            line is the title.
        payload: the Slack JSON body (``text``, ``blocks``, ``attachments``).
    """

    kind: MessageKind
    stage: str
    state: State
    title: str
    text: str
    payload: Mapping[str, Any] = field(repr=False)

    @property
    def body(self) -> str:
        """``text`` without its title line: the body for a channel that is given the title as
        a subject and shows both (a Prefect notification block's ``notify(body, subject)``:
        prefect-slack's SlackWebhook posts ``subject\\nbody``, apprise's blocks put the title
        above the body), so the title is shown once."""
        first, _, rest = self.text.partition("\n")
        return rest if first == inert(self.title) else self.text

    @property
    def blocks(self) -> list[dict[str, Any]]:
        """Every Block Kit block, top level and inside the coloured attachment."""
        blocks = list(self.payload.get("blocks", []))
        for attachment in self.payload.get("attachments", []):
            blocks.extend(attachment.get("blocks", []))
        return blocks


def build_message(
    verdict: Verdict,
    *,
    kind: MessageKind = "transition",
    held_for: float | None = None,
    previous: State | None = None,
    flow_run_url: str | None = None,
) -> Message:
    """Build the Slack Block Kit payload and plain text for a verdict.

    Args:
        verdict: the verdict to report; its evidence is read defensively (any key may be missing).
        kind: ``transition``, ``reminder`` ("still stalled for 2h") or ``resolved``.
        held_for: for reminders, how long the problem has lasted; for resolved, how long the
            cleared problem lasted. Defaults to ``checked_at - since`` when both are known.
        previous: for resolved, the problem that cleared.
        flow_run_url: the Prefect flow-run URL, linked when given.

    Example:
        >>> msg = build_message(verdict, flow_run_url="http://prefect/runs/flow-run/1")  # doctest: +SKIP
        >>> msg.title  # doctest: +SKIP
        '⏸️ extract on gpu-host: stalled'
    """
    state = verdict.state
    if held_for is None and verdict.since is not None and verdict.checked_at is not None:
        held_for = max(0.0, verdict.checked_at - verdict.since)
    title = _title(verdict, kind, held_for, previous)
    colour = COLOUR[State.COMPLETE] if kind == "resolved" else COLOUR[state]
    since = _since_phrase(verdict, held_for if kind != "resolved" else None)
    reasons = [one_line(r, 300) for r in verdict.reasons]
    if verdict.stuck is not None:
        # Said first, whole: why the gate can never open for this run, and what to do.
        reasons = [
            one_line(f"stuck: {verdict.stuck.why}", 600),
            one_line(f"the fix: {verdict.stuck.fix}", 600),
            *reasons,
        ]
    evidence = [evidence_line(reading, name) for name, reading in verdict.readings.items()]

    top: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(inert(title, _HEADER_MAX))},
        {"type": "section", "text": _mrkdwn(_glance(verdict, since))},
    ]
    detail = _detail_blocks(verdict, reasons, evidence, flow_run_url)
    text = _plain_text(verdict, title, since, reasons, evidence, flow_run_url)
    payload = {
        # The fallback (notifications, old clients) is parsed as mrkdwn too: escaped, and
        # formatting off, so a log line cannot mention or link there either.
        "text": _esc(text),
        "mrkdwn": False,
        "blocks": top,
        "attachments": [{"color": colour, "blocks": detail, "fallback": title}],
    }
    return Message(kind, verdict.stage, state, title, text, payload)


def _title(verdict: Verdict, kind: MessageKind, held_for: float | None, previous: State | None) -> str:
    state = verdict.state
    where = f"{verdict.stage} on {verdict.host}"
    if kind == "reminder":
        span = f" for {fmt_duration(held_for)}" if held_for is not None else ""
        return f"{EMOJI[state]} {where}: still {state}{span}"
    if kind == "resolved":
        was = ""
        if previous is not None:
            was = f" (was {previous}" + (f" for {fmt_duration(held_for)})" if held_for is not None else ")")
        now = "completed" if state is State.COMPLETE else f"{state} again"
        return f"{EMOJI[state]} {where}: resolved, {now}{was}"
    if kind == "stuck":
        return f"{EMOJI[state]} {where}: stuck, {state} for good: this run can never be found complete"
    return f"{EMOJI[state]} {where}: {state}"


def _glance(verdict: Verdict, since: str) -> str:
    state = verdict.state
    glance = f"*Verdict:* {EMOJI[state]} *{state}*" + (f"  ·  since {since}" if since else "")
    glance += f"\n*Stage:* `{slack_code(verdict.stage)}`  ·  *Host:* `{slack_code(verdict.host)}`"
    glance += f"  ·  *Advance:* {'yes' if verdict.advance else 'no'}"
    return glance


def _detail_blocks(
    verdict: Verdict, reasons: list[str], evidence: list[str], flow_run_url: str | None
) -> list[dict[str, Any]]:
    detail: list[dict[str, Any]] = []
    # Reasons and evidence carry job text (log and command lines): inside code, escaped, it
    # can neither mention (<!channel>), link, nor format; verbatim stops auto-linking.
    if reasons:
        body = _fit("*Why*\n```", [f"• {slack_code(r)}" for r in reasons], "```")
        detail.append({"type": "section", "text": _mrkdwn(body, verbatim=True)})
    if evidence:
        body = _fit("*Evidence*\n", [_mrkdwn_evidence(line) for line in evidence], "")
        detail.append({"type": "section", "text": _mrkdwn(body, verbatim=True)})
    context = []
    if verdict.checked_at is not None:
        context.append(f"checked {_clock_time(verdict.checked_at)}")
    if flow_run_url:
        context.append(f"<{_esc(flow_run_url)}|Prefect flow run>")
    if context:
        detail.append({"type": "context", "elements": [_mrkdwn("  ·  ".join(context))]})
    return detail


def _plain_text(
    verdict: Verdict,
    title: str,
    since: str,
    reasons: list[str],
    evidence: list[str],
    flow_run_url: str | None,
) -> str:
    lines = [inert(title), f"Verdict: {verdict.state}" + (f" since {since}" if since else "")]
    lines.append(f"Stage: {inert(verdict.stage)} · Host: {inert(verdict.host)}")
    if reasons:
        lines.append("Why:")
        lines.extend(f"- {r}" for r in reasons)
    if evidence:
        lines.append("Evidence:")
        lines.extend(f"- {line}" for line in evidence)
    if flow_run_url:
        lines.append(f"Flow run: {flow_run_url}")
    return "\n".join(lines)


def _since_phrase(verdict: Verdict, held_for: float | None) -> str:
    if verdict.since is None:
        return f"{fmt_duration(held_for)} ago" if held_for is not None else ""
    phrase = _clock_time(verdict.since)
    if held_for is not None:
        phrase += f" ({fmt_duration(held_for)})"
    return phrase


def _clock_time(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _esc(text: str) -> str:
    # Slack mrkdwn: only &, < and > are control characters.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _mrkdwn_evidence(line: str) -> str:
    signal, _, rest = line.partition(": ")
    return f"• *{slack_code(signal)}*: `{slack_code(rest)}`" if rest else f"• `{slack_code(line)}`"


def _fit(head: str, lines: list[str], tail: str, limit: int = _SECTION_MAX) -> str:
    """``head``, as many whole ``lines`` as fit in ``limit``, and ``tail``: a cut never
    splits a code span (which would let the rest of the text format)."""
    kept: list[str] = []
    size = len(head) + len(tail)
    for line in lines:
        if size + len(line) + 1 > limit - 2:
            kept.append("…")
            break
        kept.append(line)
        size += len(line) + 1
    return head + "\n".join(kept) + tail


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": True}


def _mrkdwn(text: str, *, verbatim: bool = False) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text, **({"verbatim": True} if verbatim else {})}
