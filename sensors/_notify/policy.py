"""When to send: :class:`Notifier`, a small pure state machine with an injected clock.

A verdict is news on a transition into ``notify.on``; ``unknown`` only once it has lasted
``unknown_after``; a reminder every ``remind_every`` while a notified problem persists; and
"resolved" when a notified stall, contradiction or unknown clears; one "stuck" message, at
once and never reminded of, for an unknown that can never become complete (``Verdict.stuck``:
it says why and the fix) where ``unknown`` or ``failed`` is in ``notify.on``. A failed delivery is logged
once (in the Prefect run's log inside a run) and returned, never raised.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable

from sensors._base.model import State, Verdict
from sensors._config.stage import NotifySpec, Stage
from sensors._notify.delivery import Delivery, Sender, Sent, describe, log
from sensors._notify.message import Message, build_message
from sensors._notify.senders import senders_from_spec

__all__ = ["Notifier"]

# Problems that persist get reminders; of those, the ones that can "clear" get a resolved message.
# `failed` gets reminders (a flow may keep watching a failed stage) but is not "resolved" by a
# later running verdict: a restarted job is a new transition, announced as such.
_REMINDABLE = frozenset({State.STALLED, State.CONTRADICTION, State.UNKNOWN, State.FAILED})
_RESOLVABLE = frozenset({State.STALLED, State.CONTRADICTION, State.UNKNOWN})
_CLEARS = frozenset({State.RUNNING, State.COMPLETE})


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
        >>> for verdict in checker.watch():  # doctest: +SKIP
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
        # This run was found stuck (told once, or not news for this reader): no more about it
        # while its verdicts stay unknown.
        self._stuck = False
        self.sent: list[Sent] = []  # everything sent, for callers and tests

    def __repr__(self) -> str:
        return f"Notifier(stage={self.stage!r}, state={self._effective}, open={self._open()})"

    def _open(self) -> State | None:
        """The notified problem still in force, if any."""
        return self._effective if self._notified_since is not None else None

    def resume(self, verdict: Verdict | None) -> None:
        """Go on from a verdict an earlier watch of this run reached and announced (restored
        from the state store): it is not news again. A watcher restarted on a stage settled
        complete says nothing; a stall it finds still there is reminded of, not announced anew.
        """
        if verdict is not None and verdict.stuck is not None and self._effective is None:
            self._effective, self._stuck = State.UNKNOWN, True  # told by the watch that found it
            return
        if verdict is None or verdict.state is State.UNKNOWN or self._effective is not None:
            return
        self._effective = verdict.state
        if verdict.state in self._on and verdict.state in _REMINDABLE:
            self._notified_since = self._last_sent = self._clock()

    def observe(self, verdict: Verdict, *, flow_run_url: str | None = None) -> list[Sent]:
        """Take one verdict; return the messages it caused (usually none)."""
        return self.deliver(self.decide(verdict, flow_run_url=flow_run_url))

    def deliver(self, messages: Iterable[Message]) -> list[Sent]:
        """Send what :meth:`decide` returned (``observe`` is the two in one call; a watcher
        decides in its loop and delivers from a thread of its own)."""
        out = [self._deliver(m) for m in messages]
        self.sent.extend(out)
        return out

    def decide(self, verdict: Verdict, *, flow_run_url: str | None = None) -> list[Message]:
        """The pure policy step: update the state machine and return messages to send."""
        now = self._clock()
        state = verdict.state
        if state is not State.UNKNOWN:
            self._stuck = False
        elif self._stuck:
            return []  # told once: a stuck run stays stuck (a host blip meanwhile is no news)
        elif verdict.stuck is not None:
            return self._stuck_now(verdict, now, flow_run_url)
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

    def _stuck_now(self, verdict: Verdict, now: float, url: str | None) -> list[Message]:
        """A run found stuck: one message at once (no ``unknown_after``: nothing will clear),
        never a reminder; an open problem gives way to it, unresolved."""
        self._effective, self._notified_since, self._stuck = State.UNKNOWN, None, True
        self._unknown_since = self._unknown_since if self._unknown_since is not None else now
        if not self._on & {State.UNKNOWN, State.FAILED}:
            return []
        return [build_message(verdict, kind="stuck", flow_run_url=url)]

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
        held_for = now - since if state is State.UNKNOWN else None
        return [build_message(verdict, kind="transition", held_for=held_for, flow_run_url=url)]

    def _deliver(self, message: Message) -> Sent:
        deliveries: list[Delivery] = []
        for send in self._senders:
            channel = getattr(send, "channel", "notification")
            try:
                result = send(message)
            except Exception as exc:  # a custom sender failed: still never the wait loop's problem
                result = Delivery(channel, False, None, 0, describe(exc)[1])
            if result is None:
                result = Delivery(channel, True)
            for delivery in [result] if isinstance(result, Delivery) else list(result):
                if not delivery.ok:
                    _log_failure(message, delivery)
                deliveries.append(delivery)
        return Sent(message, tuple(deliveries))


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


def notifier_for(stage: Stage) -> Notifier | None:
    """The stage's :class:`Notifier`: the one factory the CLI, the watcher and the Prefect
    gate build it with (None: the stage notifies nobody)."""
    if stage.notify is None:
        return None
    return Notifier(stage.notify, stage=stage.stage)
