"""Notifications that carry the evidence: Slack incoming webhooks and any Prefect notification block.

Three parts, each usable alone:

- ``build_message(verdict, ...)`` turns a :class:`~sensors._model.Verdict` into a
  :class:`Message`: a Slack Block Kit payload (stage and host, the verdict at a glance, the
  reasons, one evidence line per signal, since when, the flow-run link) and a plain-text
  fallback with the same essentials.
- :class:`Notifier` is the policy, a small pure state machine with an injected clock: it decides
  *when* a verdict is news (transitions into ``notify.on``; ``unknown`` only once it has lasted
  ``unknown_after``; reminders every ``remind_every``; "resolved" when a problem clears).
- Senders deliver a message: :class:`SlackWebhookSender` (httpx, retried with tenacity within a
  bounded total time) and :class:`PrefectBlockSender` (any saved Prefect notification block).

A delivery never raises into the caller's wait loop and never changes a verdict: a failure is
logged once, with its HTTP status, and returned as a failed :class:`Delivery`.

The Slack webhook URL is a secret. It is kept in a :class:`_Secret` whose ``repr`` and ``str``
hide it, it is never formatted into a message, log record or exception (errors say "the Slack
webhook"), and the records httpx/slack_sdk log about requests are redacted.

Prefect is imported lazily, only where a ``block:`` secret or a ``prefect_block`` is used (the
contract: nothing under ``sensors/`` but ``sensors/prefect.py`` imports it at module level).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as _dt
import email.utils
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import httpx
import tenacity

from sensors._config import NotifySpec
from sensors._errors import NotificationError
from sensors._model import State, Verdict
from sensors._secrets import SlackWebhookURL as _Secret
from sensors._secrets import register_secret as _register_secret
from sensors._secrets import resolve_slack_webhook
from sensors._secrets import run_sync as _sync
from sensors._text import inert, slack_code

__all__ = [
    "Delivery",
    "Message",
    "MessageKind",
    "Notifier",
    "PrefectBlockSender",
    "Sent",
    "SlackWebhookSender",
    "build_message",
    "resolve_slack_webhook",
    "senders_from_spec",
]

log = logging.getLogger("crosscheck.notify")

_T = TypeVar("_T")

MessageKind = Literal["transition", "reminder", "resolved"]

EMOJI: Mapping[State, str] = {
    State.COMPLETE: "✅",
    State.RUNNING: "▶️",
    State.STALLED: "⏸️",
    State.FAILED: "❌",
    State.CONTRADICTION: "🔀",
    State.UNKNOWN: "❔",
}
# Slack's own palette, so the bar reads like Slack's native alerts.
COLOUR: Mapping[State, str] = {
    State.COMPLETE: "#2EB67D",
    State.RUNNING: "#36C5F0",
    State.STALLED: "#ECB22E",
    State.FAILED: "#E01E5A",
    State.CONTRADICTION: "#E8912D",
    State.UNKNOWN: "#9E9E9E",
}
_SAYS_EMOJI = {"done": "✅", "working": "⚙️", "failed": "❌", "unknown": "❔"}

# Problems that persist get reminders; of those, the ones that can "clear" get a resolved message.
# `failed` gets reminders (a flow may keep watching a failed stage) but is not "resolved" by a
# later running verdict: a restarted job is a new transition, announced as such.
_REMINDABLE = frozenset({State.STALLED, State.CONTRADICTION, State.UNKNOWN, State.FAILED})
_RESOLVABLE = frozenset({State.STALLED, State.CONTRADICTION, State.UNKNOWN})
_CLEARS = frozenset({State.RUNNING, State.COMPLETE})

# Slack Block Kit limits: header text 150 chars, section text 3000 chars.
_HEADER_MAX = 150
_SECTION_MAX = 2900
_LINE_MAX = 160


# --------------------------------------------------------------------------- message


@dataclass(frozen=True)
class Message:
    """One notification, ready for Slack (``payload``) or any plain-text channel (``text``).

    Attributes:
        kind: ``transition`` (a new verdict), ``reminder`` (a problem persists) or
            ``resolved`` (a stall, contradiction or unknown cleared).
        stage: the stage name.
        state: the verdict the message reports.
        title: one line; also the subject for channels that have one.
        text: the plain-text fallback, with the same essentials as the blocks.
        payload: the Slack JSON body (``text``, ``blocks``, ``attachments``).
    """

    kind: MessageKind
    stage: str
    state: State
    title: str
    text: str
    payload: Mapping[str, Any] = field(repr=False)

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
        >>> msg.title
        '⏸️ extract on gpu-host: stalled'
    """
    state = verdict.state
    if held_for is None and verdict.since is not None and verdict.checked_at is not None:
        held_for = max(0.0, verdict.checked_at - verdict.since)
    where = f"{verdict.stage} on {verdict.host}"
    if kind == "reminder":
        span = f" for {fmt_duration(held_for)}" if held_for is not None else ""
        title = f"{EMOJI[state]} {where}: still {state}{span}"
    elif kind == "resolved":
        was = ""
        if previous is not None:
            was = f" (was {previous}" + (f" for {fmt_duration(held_for)})" if held_for is not None else ")")
        now = "completed" if state is State.COMPLETE else f"{state} again"
        title = f"{EMOJI[state]} {where}: resolved, {now}{was}"
    else:
        title = f"{EMOJI[state]} {where}: {state}"
    colour = COLOUR[State.COMPLETE] if kind == "resolved" else COLOUR[state]

    since = _since_phrase(verdict, held_for if kind != "resolved" else None)
    glance = f"*Verdict:* {EMOJI[state]} *{state}*" + (f"  ·  since {since}" if since else "")
    glance += f"\n*Stage:* `{_code(verdict.stage)}`  ·  *Host:* `{_code(verdict.host)}`"
    glance += f"  ·  *Advance:* {'yes' if verdict.advance else 'no'}"

    reasons = [_truncate(_one_line(r), 300) for r in verdict.reasons]
    evidence = [evidence_line(reading) for reading in verdict.readings.values()]

    top: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(_truncate(inert(title), _HEADER_MAX))},
        {"type": "section", "text": _mrkdwn(glance)},
    ]
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

    lines = [inert(title), f"Verdict: {state}" + (f" since {since}" if since else "")]
    lines.append(f"Stage: {inert(verdict.stage)} · Host: {inert(verdict.host)}")
    if reasons:
        lines.append("Why:")
        lines.extend(f"- {r}" for r in reasons)
    if evidence:
        lines.append("Evidence:")
        lines.extend(f"- {line}" for line in evidence)
    if flow_run_url:
        lines.append(f"Flow run: {flow_run_url}")
    text = "\n".join(lines)

    payload = {
        # The fallback (notifications, old clients) is parsed as mrkdwn too: escaped, and
        # formatting off, so a log line cannot mention or link there either.
        "text": _esc(text),
        "mrkdwn": False,
        "blocks": top,
        "attachments": [{"color": colour, "blocks": detail, "fallback": title}],
    }
    return Message(kind, verdict.stage, state, title, text, payload)


def evidence_line(reading: Any) -> str:
    """One line for one signal: what it says, then its key values.

    Example:
        >>> evidence_line(Reading("outputs", "working", "37300 of 37312",
        ...                       {"count": 37300, "expected": 37312}))
        'outputs: working — 37300 of 37312 (count 37300/37312, 99.97%)'
    """
    ev = reading.evidence if isinstance(reading.evidence, Mapping) else {}
    values = _KEY_VALUES.get(reading.signal, _generic_values)(ev)
    if ev.get("error") not in (None, ""):
        values.append(f"error: {_truncate(_one_line(ev['error']), 120)}")
    line = f"{reading.signal}: {reading.says}"
    if reading.detail:
        line += f" — {_truncate(_one_line(reading.detail), 120)}"
    if values:
        line += f" ({', '.join(values)})"
    return _truncate(line, 400)


def _process_values(ev: Mapping[str, Any]) -> list[str]:
    out = []
    if _has(ev, "pid"):
        out.append(f"pid {ev['pid']}")
    if _has(ev, "state"):
        out.append(f"state {_one_line(ev['state'])}")
    if (cpu := _number(ev.get("cpu_seconds"))) is not None:
        out.append(f"cpu {fmt_duration(cpu)}")
    if (elapsed := _number(ev.get("elapsed_seconds"))) is not None:
        out.append(f"elapsed {fmt_duration(elapsed)}")
    for key in ("exit_code", "returncode"):
        if _has(ev, key):
            out.append(f"exit {ev[key]}")
            break
    return out


def _log_values(ev: Mapping[str, Any]) -> list[str]:
    out = []
    if _has(ev, "last_line"):
        out.append(f'last "{_truncate(_one_line(ev["last_line"]), 100)}"')
    if (age := _number(ev.get("age_seconds"))) is not None:
        out.append(f"age {fmt_duration(age)}")
    progress = ev.get("progress")
    if isinstance(progress, Mapping) and _has(progress, "done"):
        total = progress.get("total")
        out.append(f"progress {progress['done']}/{total if total is not None else '?'}")
    return out


def _outputs_values(ev: Mapping[str, Any]) -> list[str]:
    count, expected = ev.get("count"), ev.get("expected")
    if count is None and expected is None:
        return []
    out = [f"count {count if count is not None else '?'}/{expected if expected else '?'}"]
    c, e = _number(count), _number(expected)
    if c is not None and e:
        # Rounded down: 37311/37312 must not read "100.00%" in a tool about false "done".
        out.append(f"{math.floor(10000.0 * c / e) / 100:.2f}%")
    return out


def _gpu_values(ev: Mapping[str, Any]) -> list[str]:
    out = []
    devices = ev.get("devices")
    rows = [d for d in devices if isinstance(d, Mapping)] if isinstance(devices, list) else []
    if rows:
        # The probe's shape: one dict per GPU (sensors/_gpu.py).
        utils = [d.get("utilization_pct") for d in rows]
        mems = [d.get("memory_used_mib") for d in rows]
        if any(u is not None for u in utils):
            out.append(f"util {_per_device(utils, '%')}")
        if any(m is not None for m in mems):
            out.append(f"mem {_per_device([_mib(m) for m in mems], '')}")
    else:
        # Flat keys, as a hand-built or older reading may carry them.
        util = _first(ev, "utilisation", "utilization", "utilization_pct", "util")
        if util is not None:
            out.append(f"util {_per_device(util, '%')}")
        mem = _first(ev, "memory_used_mib", "memory_mib", "memory")
        if mem is not None:
            mib = _has(ev, "memory_used_mib") or _has(ev, "memory_mib")
            out.append(f"mem {_per_device(mem, ' MiB' if mib else '')}")
    if (job_mem := _number(ev.get("job_memory_mib"))) is not None:
        out.append(f"job holds {_mib(job_mem)}")
    idle = ev.get("idle")
    if isinstance(idle, bool):
        out.append("idle" if idle else "busy")
    elif (idle_s := _number(idle)) is not None:
        out.append(f"idle {fmt_duration(idle_s)}")
    return out


def _mib(value: Any) -> str:
    n = _number(value)
    if n is None:
        return "?"
    return f"{n / 1024:.0f} GiB" if n >= 1024 else f"{n:.0f} MiB"


def _generic_values(ev: Mapping[str, Any]) -> list[str]:
    # An unknown signal name: show a few scalar facts rather than nothing.
    out = []
    for key, value in ev.items():
        if key == "error" or not isinstance(value, (str, int, float, bool)):
            continue
        out.append(f"{key} {_truncate(_one_line(value), 40)}")
        if len(out) == 4:
            break
    return out


_KEY_VALUES: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "process": _process_values,
    "log": _log_values,
    "outputs": _outputs_values,
    "gpu": _gpu_values,
}


def fmt_duration(seconds: float | None) -> str:
    """A short human duration: ``42s``, ``46m 1s``, ``2h 29m``, ``3d 4h``.

    Example:
        >>> fmt_duration(2761)
        '46m 1s'
    """
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s" if s % 60 else f"{s // 60}m"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h}h {m}m" if m else f"{h}h"
    d, h = divmod(s // 3600, 24)
    return f"{d}d {h}h" if h else f"{d}d"


def _since_phrase(verdict: Verdict, held_for: float | None) -> str:
    if verdict.since is None:
        return f"{fmt_duration(held_for)} ago" if held_for is not None else ""
    phrase = _clock_time(verdict.since)
    if held_for is not None:
        phrase += f" ({fmt_duration(held_for)})"
    return phrase


def _clock_time(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _has(ev: Mapping[str, Any], key: str) -> bool:
    return ev.get(key) not in (None, "")


def _first(ev: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if _has(ev, key):
            return ev[key]
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _per_device(value: Any, unit: str) -> str:
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        shown = "/".join(_num_str(v) for v in value[:8]) + ("/…" if len(value) > 8 else "")
        return shown + unit
    return _num_str(value) + unit


def _num_str(value: Any) -> str:
    n = _number(value)
    if n is None:
        return _truncate(_one_line(value), 20)
    return str(int(n)) if n == int(n) else f"{n:.1f}"


def _one_line(value: Any) -> str:
    return inert(" ".join(str(value).split()))


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _esc(text: str) -> str:
    # Slack mrkdwn: only &, < and > are control characters.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code(text: str) -> str:
    return slack_code(text)


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


# --------------------------------------------------------------------------- delivery


@dataclass(frozen=True)
class Delivery:
    """How one message fared on one channel. Never contains the webhook URL.

    Attributes:
        channel: ``the Slack webhook`` or ``Prefect block NAME``.
        ok: delivered.
        status: the last HTTP status seen (``None``: no answer, or not HTTP).
        attempts: requests made.
        error: why it failed, in words (``HTTP 500``, ``timed out``), or ``None``.
    """

    channel: str
    ok: bool
    status: int | None = None
    attempts: int = 0
    error: str | None = None


@dataclass(frozen=True)
class Sent:
    """A message the policy decided to send, and how each channel fared."""

    message: Message
    deliveries: tuple[Delivery, ...] = ()

    @property
    def ok(self) -> bool:
        return all(d.ok for d in self.deliveries)


Sender = Callable[[Message], "Delivery | Sequence[Delivery] | None"]


# Transient failures worth another try; anything else (a bad URL, 4xx) will not get better.
_RETRY_EXC = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


def _retryable_status(status: int | None) -> bool:
    return status is not None and (status >= 500 or status == 429)


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header: delta-seconds or an HTTP date.

    Example:
        >>> retry_after_seconds("3")
        3.0
    """
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class _Deadline:
    """tenacity stop/wait policies bounded by one total time budget."""

    def __init__(
        self,
        *,
        total: float,
        max_attempts: int,
        backoff: float,
        backoff_max: float,
        retry_after_max: float,
        clock: Callable[[], float],
        status_of: Callable[[tenacity.RetryCallState], tuple[int | None, str | None]],
    ) -> None:
        self.end = clock() + total
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.retry_after_max = retry_after_max
        self.clock = clock
        self.status_of = status_of

    def remaining(self) -> float:
        return self.end - self.clock()

    def wait(self, rs: tenacity.RetryCallState) -> float:
        _, retry_after = self.status_of(rs)
        hinted = retry_after_seconds(retry_after)
        if hinted is not None:
            # Honour the server's hint, but a hint of an hour must not hold the wait loop.
            return min(hinted, self.retry_after_max)
        return min(self.backoff_max, self.backoff * 2 ** (rs.attempt_number - 1))

    def stop(self, rs: tenacity.RetryCallState) -> bool:
        # tenacity computes the wait before asking stop: give up now rather than sleep past
        # the deadline and then fail anyway.
        if rs.attempt_number >= self.max_attempts:
            return True
        return self.clock() + (rs.upcoming_sleep or 0.0) >= self.end


class _RetryableStatus(Exception):
    """An HTTP answer worth retrying (5xx, 429); carries status and Retry-After, not the URL."""

    def __init__(self, status: int, retry_after: str | None) -> None:
        self.status = status
        self.retry_after = retry_after
        super().__init__(f"HTTP {status}")


class _TotalTimeout(httpx.TimeoutException):
    """The delivery's total deadline passed while an attempt was still running."""


def _within(limit: float, call: Callable[[], _T], abandon: Callable[[], None] | None = None) -> _T:
    """``call()`` in a worker thread, waited for at most ``limit`` seconds.

    httpx's timeouts bound each socket operation, not a request: a server that sends one byte
    a second never lets a read time out, and holds a plain ``client.post`` for as long as it
    likes. The caller (a watch, a gate) waits here for the deadline at the most; then
    ``abandon()`` closes what the attempt holds (the HTTP client and its sockets), so the
    worker fails at its next read, and never later than its own per-read timeout. The worker
    is a daemon and runs in a copy of the caller's context (Prefect's run context included).
    """
    box: dict[str, Any] = {}
    context = contextvars.copy_context()

    def run() -> None:
        try:
            box["value"] = context.run(call)
        except BaseException as exc:  # handed to the caller below, whatever it is
            box["error"] = exc

    worker = threading.Thread(target=run, name="crosscheck-notify", daemon=True)
    worker.start()
    worker.join(max(0.0, limit))
    if worker.is_alive():
        if abandon is not None:
            try:
                abandon()
            except Exception:  # closing a client mid-request may raise anything; it is abandoned
                log.debug("error abandoning a notification attempt", exc_info=True)
        raise _TotalTimeout("the total deadline passed during the request")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _status_of(rs: tenacity.RetryCallState) -> tuple[int | None, str | None]:
    exc = rs.outcome.exception() if rs.outcome is not None and rs.outcome.failed else None
    if isinstance(exc, _RetryableStatus):
        return exc.status, exc.retry_after
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code, exc.response.headers.get("retry-after")
    return None, None


def _describe(exc: BaseException) -> tuple[int | None, str]:
    """Status and words for an error, never ``str(exc)``: httpx puts the URL in its messages."""
    if isinstance(exc, _RetryableStatus):
        return exc.status, f"HTTP {exc.status}"
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code, f"HTTP {exc.response.status_code}"
    if isinstance(exc, httpx.TimeoutException):
        return None, "timed out"
    if isinstance(exc, httpx.ConnectError):
        return None, "could not connect"
    if isinstance(exc, NotificationError):
        return exc.status, str(exc)  # ours: written never to contain a secret
    return None, type(exc).__name__


def _run_logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    # Inside a Prefect run the failure belongs in the run's log; only look if Prefect is
    # already loaded, so the CLI never pays Prefect's import time for a log line.
    if "prefect" in sys.modules:
        try:
            from prefect.logging import get_run_logger

            return get_run_logger()
        except Exception:
            pass
    return log


def _log_failure(message: Message, delivery: Delivery) -> None:
    _run_logger().warning(
        "crosscheck: could not deliver the %s notification (%s) for stage %s to %s after %d attempt(s): %s",
        message.kind,
        message.state,
        message.stage,
        delivery.channel,
        delivery.attempts,
        delivery.error,
    )


class _RetryingSender:
    """What both senders share: one delivery, retried within a total time budget, as a Delivery.

    A subclass prepares its channel (URL, block), then hands ``_deliver`` one attempt and a
    "transient?" predicate; everything about retrying, deadlines and turning an error into a
    failed :class:`Delivery` lives here, so both channels follow the same rules.
    """

    channel: str

    def __init__(
        self,
        total_timeout: float,
        max_attempts: int,
        backoff: float,
        backoff_max: float,
        retry_after_max: float,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
        /,
    ) -> None:
        self.total_timeout = total_timeout
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.retry_after_max = retry_after_max
        self._sleep = sleep
        self._clock = clock

    def _prepare(self, get: Callable[[], Any], failed: str) -> Any:
        """``get()``, or a failed Delivery (0 attempts) when it raises.

        Our NotificationError is written to be shown; anything else only by its type, since
        its message may hold a secret.
        """
        try:
            return get()
        except NotificationError as exc:
            return Delivery(self.channel, False, None, 0, str(exc))
        except Exception as exc:
            return Delivery(self.channel, False, None, 0, f"{failed}: {type(exc).__name__}")

    def _deliver(
        self,
        attempt: Callable[[_Deadline], int | None],
        transient: Callable[[BaseException], bool],
        *,
        before_sleep: Callable[[tenacity.RetryCallState], None] | None = None,
    ) -> Delivery:
        """Run ``attempt`` until it succeeds, fails for good, or the budget is spent.

        ``attempt`` gets the deadline (to bound its own request) and returns the HTTP status,
        or ``None`` where the channel has none; a non-2xx status it returns is a failure that
        is not retried.
        """
        deadline = _Deadline(
            total=self.total_timeout,
            max_attempts=self.max_attempts,
            backoff=self.backoff,
            backoff_max=self.backoff_max,
            retry_after_max=self.retry_after_max,
            clock=self._clock,
            status_of=_status_of,
        )
        attempts = 0

        def counted() -> int | None:
            nonlocal attempts
            attempts += 1
            return attempt(deadline)

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(transient),
            wait=deadline.wait,
            stop=deadline.stop,
            sleep=self._sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            status = retrying(counted)
        except Exception as exc:
            code, words = _describe(exc)
            return Delivery(self.channel, False, code, attempts, words)
        if status is None or 200 <= status < 300:
            return Delivery(self.channel, True, status, attempts)
        return Delivery(self.channel, False, status, attempts, f"HTTP {status}")


class SlackWebhookSender(_RetryingSender):
    """Posts a message's Block Kit payload to a Slack incoming webhook.

    Retried with tenacity on timeouts, connection errors, 5xx and 429 (``Retry-After``
    honoured, capped at ``retry_after_max``), all within ``total_timeout`` seconds. Returns a
    :class:`Delivery`; never raises, never logs the URL.

    Args:
        webhook: ``env:NAME`` / ``block:NAME``, or a zero-argument callable returning the URL
            (resolved at the first send, then kept).
        total_timeout: bound on one delivery, retries and waits included.
        request_timeout: bound on one request.
        sleep, clock: injectable for tests (``clock`` is monotonic seconds).

    Example:
        >>> send = SlackWebhookSender("env:SLACK_WEBHOOK_URL")
        >>> send(build_message(verdict)).ok  # doctest: +SKIP
        True
    """

    channel = "the Slack webhook"

    def __init__(
        self,
        webhook: str | Callable[[], str],
        *,
        total_timeout: float = 30.0,
        request_timeout: float = 10.0,
        max_attempts: int = 6,
        backoff: float = 0.5,
        backoff_max: float = 8.0,
        retry_after_max: float = 15.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(total_timeout, max_attempts, backoff, backoff_max, retry_after_max, sleep, clock)
        self._ref = webhook
        self._url: _Secret | None = None
        self.request_timeout = request_timeout
        self._transport = transport

    def __repr__(self) -> str:
        ref = self._ref if isinstance(self._ref, str) else "<callable>"
        return f"SlackWebhookSender({ref!r})"  # env:NAME / block:NAME name, never the URL

    def _resolve(self) -> _Secret:
        if self._url is None:
            if isinstance(self._ref, str):
                self._url = resolve_slack_webhook(self._ref)
            else:
                self._url = _Secret(self._ref())
        return self._url

    def __call__(self, message: Message) -> Delivery:
        url = self._prepare(self._resolve, "lookup failed")
        if isinstance(url, Delivery):
            return url
        payload = dict(message.payload)

        with httpx.Client(transport=self._transport, follow_redirects=False) as client:

            def attempt(deadline: _Deadline) -> int:
                timeout = max(0.05, min(self.request_timeout, deadline.remaining()))
                response = _within(
                    deadline.remaining(),
                    lambda: client.post(url.get(), json=payload, timeout=timeout),
                    abandon=client.close,
                )
                if _retryable_status(response.status_code):
                    raise _RetryableStatus(response.status_code, response.headers.get("retry-after"))
                return response.status_code

            return self._deliver(
                attempt,
                lambda exc: isinstance(exc, (*_RETRY_EXC, _RetryableStatus)),
                before_sleep=lambda rs: log.debug(
                    "the Slack webhook: attempt %d failed (%s); retrying in %.1fs",
                    rs.attempt_number,
                    _describe(rs.outcome.exception())[1],
                    rs.upcoming_sleep,
                ),
            )


class PrefectBlockSender(_RetryingSender):
    """Sends a message's plain text through any saved Prefect notification block.

    ``name`` is a block document name (``my-alerts``) or a slug (``custom-webhook/my-alerts``).
    ``notify(body, subject)`` is dual sync/async in Prefect 3.9 (``async_dispatch``): inside an
    async run it returns a coroutine, which is run to completion here. Apprise-based blocks
    swallow failures unless wrapped in ``raise_on_failure()``, so they are.

    Example:
        >>> send = PrefectBlockSender("custom-webhook/ops-alerts")
        >>> send(build_message(verdict)).ok  # doctest: +SKIP
        True
    """

    def __init__(
        self,
        name: str,
        *,
        total_timeout: float = 30.0,
        max_attempts: int = 4,
        backoff: float = 0.5,
        backoff_max: float = 8.0,
        retry_after_max: float = 15.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(total_timeout, max_attempts, backoff, backoff_max, retry_after_max, sleep, clock)
        self.name = name
        self.channel = f"Prefect block {name}"
        self._block: Any = None

    def __repr__(self) -> str:
        return f"PrefectBlockSender({self.name!r})"

    def _load(self) -> Any:
        if self._block is None:
            from prefect.blocks.core import Block

            slug = self.name if "/" in self.name else _notification_slug(self.name)
            block = _sync(Block.load(slug))
            if not callable(getattr(block, "notify", None)):
                raise NotificationError(f"Prefect block {self.name!r} cannot notify")
            # A webhook URL in the block is as secret as ours: keep it out of httpx's logs.
            url = getattr(block, "url", None)
            if url is not None:
                url = url.get_secret_value() if hasattr(url, "get_secret_value") else url
                if isinstance(url, str):
                    _register_secret(url)
            self._block = block
        return self._block

    def __call__(self, message: Message) -> Delivery:
        block = self._prepare(self._load, "could not load")
        if isinstance(block, Delivery):
            return block

        def attempt(deadline: _Deadline) -> None:
            def notify() -> None:
                guard = getattr(block, "raise_on_failure", None)
                with (guard if callable(guard) else contextlib.nullcontext)():
                    _sync(block.notify(message.text, message.title))

            # The block's client (apprise, slack_sdk) is not ours to close: at the deadline
            # the attempt is abandoned, and its thread ends when that client's own timeouts
            # fire. The caller is free at the deadline either way.
            _within(deadline.remaining(), notify)

        def transient(exc: BaseException) -> bool:
            if isinstance(exc, _RETRY_EXC):
                return True
            return isinstance(exc, httpx.HTTPStatusError) and _retryable_status(exc.response.status_code)

        return self._deliver(attempt, transient)


def _notification_slug(name: str) -> str:
    """``TYPE/NAME`` for a bare block name, among block types that can notify."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        documents = client.read_block_documents(include_secrets=False)
    found = sorted(
        {
            doc.block_type.slug
            for doc in documents
            if doc.name == name
            and doc.block_type is not None
            and doc.block_schema is not None
            and "notify" in (doc.block_schema.capabilities or [])
        }
    )
    if not found:
        raise NotificationError(f"no Prefect notification block named {name!r}")
    if len(found) > 1:
        raise NotificationError(
            f"several Prefect notification blocks are named {name!r} ({', '.join(found)}): "
            "write it as TYPE/NAME"
        )
    return f"{found[0]}/{name}"


def senders_from_spec(spec: NotifySpec, **options: Any) -> list[Sender]:
    """The senders a ``notify:`` section asks for (Slack webhook, Prefect block, or both).

    ``options`` (``total_timeout``, ``sleep``, ``clock``, ...) go to each sender.
    Nothing is resolved or loaded yet: that happens at the first message.
    """
    senders: list[Sender] = []
    if spec.slack_webhook:
        senders.append(SlackWebhookSender(spec.slack_webhook, **options))
    if spec.prefect_block:
        options.pop("request_timeout", None)
        options.pop("transport", None)
        senders.append(PrefectBlockSender(spec.prefect_block, **options))
    return senders


# --------------------------------------------------------------------------- policy


class Notifier:
    """Decides when a verdict is news, builds the message and delivers it.

    Feed it every verdict (``observe``); it sends only on transitions into ``spec.on``,
    ``unknown`` only after it has lasted ``spec.unknown_after`` (a shorter blip is ignored
    entirely: the state before it still holds), a reminder every ``spec.remind_every`` while a
    notified problem persists, and a "resolved" message when a notified stall, contradiction
    or unknown clears (running again, or complete; a completion after a stall is one message).

    Time is the injected ``clock`` (local seconds), not ``verdict.checked_at``: that is the
    monitored host's clock, and it is ``None`` exactly when the host could not be asked, which
    is when ``unknown_after`` matters.

    ``observe`` never raises on delivery failures and never changes a verdict.

    Args:
        spec: the stage's ``notify:`` section.
        stage: the stage name (for logs).
        send: a callable taking a :class:`Message` and returning a :class:`Delivery` (or a
            list of them); default: the senders ``spec`` asks for.
        clock: seconds; injectable for tests.

    Example:
        >>> notifier = Notifier(stage.notify, stage=stage.stage)  # doctest: +SKIP
        >>> for verdict in checker.watch():
        ...     notifier.observe(verdict, flow_run_url=url)
    """

    def __init__(
        self,
        spec: NotifySpec,
        *,
        stage: str,
        send: Sender | Iterable[Sender] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.spec = spec
        self.stage = stage
        if send is None:
            self._senders: list[Sender] = senders_from_spec(spec)
        elif callable(send):
            self._senders = [send]
        else:
            self._senders = list(send)
        self._clock = clock
        self._on = frozenset(State(s) for s in spec.on)
        self._effective: State | None = None  # the state that counts (unknown blips excluded)
        self._unknown_since: float | None = None
        # Set while `_effective` is a notified problem still in force (one that gets reminders):
        # when that problem began, and when the last message about it went out.
        self._notified_since: float | None = None
        self._last_sent = 0.0  # meaningful only while `_notified_since` is set
        self.sent: list[Sent] = []  # everything sent, for callers and tests

    def __repr__(self) -> str:
        return f"Notifier(stage={self.stage!r}, state={self._effective}, open={self._open()})"

    def _open(self) -> State | None:
        """The notified problem still in force, if any."""
        return self._effective if self._notified_since is not None else None

    def observe(self, verdict: Verdict, *, flow_run_url: str | None = None) -> list[Sent]:
        """Take one verdict; return the messages it caused (usually none)."""
        messages = self.decide(verdict, flow_run_url=flow_run_url)
        out = [self._deliver(m) for m in messages]
        self.sent.extend(out)
        return out

    def decide(self, verdict: Verdict, *, flow_run_url: str | None = None) -> list[Message]:
        """The pure policy step: update the state machine and return messages to send."""
        now = self._clock()
        state = verdict.state
        if state is State.UNKNOWN:
            if self._unknown_since is None:
                self._unknown_since = now
            since = self._unknown_since  # an unknown state began when the host stopped answering
            if now - since < self.spec.unknown_after:
                return []  # not news yet; whatever held before still holds
        else:
            self._unknown_since = None
            since = now

        if state != self._effective:
            return self._transition(verdict, now, since, flow_run_url)

        notified = self._notified_since
        if notified is not None and now - self._last_sent >= self.spec.remind_every:
            self._last_sent = now
            return [
                build_message(verdict, kind="reminder", held_for=now - notified, flow_run_url=flow_run_url)
            ]
        return []

    def _transition(self, verdict: Verdict, now: float, since: float, url: str | None) -> list[Message]:
        state = verdict.state
        was, notified = self._effective, self._notified_since
        # Any open problem gives way to the new state: no reminders for a state no longer
        # current, and no "resolved" for one that did not clear.
        self._effective, self._notified_since = state, None
        if notified is not None and was in _RESOLVABLE and state in _CLEARS:
            held = now - notified
            return [build_message(verdict, kind="resolved", previous=was, held_for=held, flow_run_url=url)]
        if state not in self._on:
            return []  # not news for this reader
        if state in _REMINDABLE:
            self._notified_since, self._last_sent = since, now
        held = now - since if state is State.UNKNOWN else None
        return [build_message(verdict, kind="transition", held_for=held, flow_run_url=url)]

    def _deliver(self, message: Message) -> Sent:
        deliveries: list[Delivery] = []
        for send in self._senders:
            channel = getattr(send, "channel", "notification")
            try:
                result = send(message)
            except Exception as exc:  # a custom sender failed: still never the wait loop's problem
                result = Delivery(channel, False, None, 0, _describe(exc)[1])
            if result is None:
                result = Delivery(channel, True)
            for delivery in [result] if isinstance(result, Delivery) else list(result):
                if not delivery.ok:
                    _log_failure(message, delivery)
                deliveries.append(delivery)
        return Sent(message, tuple(deliveries))
