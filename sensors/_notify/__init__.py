"""Notifications that carry the evidence: Slack incoming webhooks and any Prefect notification block.

Three parts, each usable alone, each in its own module behind this small face:

- :mod:`~sensors._notify.message`, what to send: ``build_message(verdict, ...)`` turns a
  :class:`~sensors._base.model.Verdict` into a :class:`Message` (Slack Block Kit, and a
  plain-text fallback).
- :mod:`~sensors._notify.policy`, when to send: :class:`Notifier`, a small pure state machine
  with an injected clock, decides when a verdict is news.
- :mod:`~sensors._notify.senders`, how to send: :class:`SlackWebhookSender` and
  :class:`PrefectBlockSender`, retried within a bounded total time
  (:mod:`~sensors._notify.delivery`).

A delivery never raises into the caller's wait loop and never changes a verdict, and the
Slack webhook URL is a secret. What a message holds, when it is sent, how a failure and the
secret are handled: docs/notifications.md, "Inside the notifications".

May import :mod:`sensors._base`, :mod:`sensors._config` and :mod:`sensors._present`.
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
