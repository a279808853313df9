"""Notifications that carry the evidence: Slack incoming webhooks and any Prefect notification block.

Three parts, each usable alone, each in its own module behind this small face:

- :mod:`~sensors._notify.message`, what to send: ``build_message(verdict, ...)`` turns a
  :class:`~sensors._base.model.Verdict` into a :class:`Message`: a Slack Block Kit payload (stage
  and host, the verdict at a glance, the reasons, one evidence line per signal, since when, the
  flow-run link) and a plain-text fallback with the same essentials. The evidence in words
  comes from :mod:`sensors._present.evidence`, shared with the terminal and Prefect.
- :mod:`~sensors._notify.policy`, when to send: :class:`Notifier`, a small pure state machine
  with an injected clock, decides *when* a verdict is news (transitions into ``notify.on``;
  ``unknown`` only once it has lasted ``unknown_after``; reminders every ``remind_every``;
  "resolved" when a problem clears).
- :mod:`~sensors._notify.senders`, how to send: :class:`SlackWebhookSender` (httpx) and
  :class:`PrefectBlockSender` (any saved Prefect notification block), both retried with
  tenacity within a bounded total time (:mod:`~sensors._notify.delivery`).

A delivery never raises into the caller's wait loop and never changes a verdict: a failure is
logged once, with its HTTP status, and returned as a failed :class:`Delivery`.

The Slack webhook URL is a secret (:mod:`sensors._base.secrets`): its holder's ``repr`` and ``str``
hide it, it is never formatted into a message, log record or exception (errors say "the Slack
webhook"), and the records httpx/slack_sdk/apprise log about requests are redacted.

Prefect is imported lazily, only where a ``block:`` secret or a ``prefect_block`` is used (the
contract: nothing under ``sensors/`` but ``sensors/prefect.py`` imports it at module level).
"""

from __future__ import annotations

from sensors._base.secrets import resolve_slack_webhook
from sensors._notify.delivery import Delivery, Sender, Sent, retry_after_seconds
from sensors._notify.message import Message, MessageKind, build_message
from sensors._notify.policy import Notifier, notifier_for
from sensors._notify.senders import PrefectBlockSender, SlackWebhookSender, senders_from_spec
from sensors._present.evidence import COLOUR, EMOJI, evidence_line, fmt_duration
from sensors._present.evidence import outputs_values as _outputs_values  # noqa: F401 (tests read the Slack percentage)

__all__ = [
    "COLOUR",
    "EMOJI",
    "Delivery",
    "Message",
    "MessageKind",
    "Notifier",
    "PrefectBlockSender",
    "Sender",
    "Sent",
    "SlackWebhookSender",
    "build_message",
    "evidence_line",
    "fmt_duration",
    "notifier_for",
    "resolve_slack_webhook",
    "retry_after_seconds",
    "senders_from_spec",
]
