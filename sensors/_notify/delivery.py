"""One delivery, as a value: what both senders share.

A sender prepares its channel (a URL, a block), then hands :meth:`RetryingSender._deliver`
one attempt and a "transient?" predicate. Retrying (tenacity, on timeouts, connection errors,
5xx, and 429 with ``Retry-After`` honoured), the total time budget (:class:`Deadline`, and
:func:`within` for an attempt that would outlive it) and turning any error into a failed
:class:`Delivery` live here, so every channel follows the same rules. A delivery never raises
and never formats an exception's text: httpx puts the URL, the credential, in its messages.
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import email.utils
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import tenacity

from sensors._base.errors import NotificationError
from sensors._notify.message import Message

__all__ = ["Delivery", "Sender", "Sent", "retry_after_seconds"]

log = logging.getLogger("crosscheck.notify")

_T = TypeVar("_T")


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
RETRY_EXC = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


def retryable_status(status: int | None) -> bool:
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


class Deadline:
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


class RetryableStatus(Exception):
    """An HTTP answer worth retrying (5xx, 429); carries status and Retry-After, not the URL."""

    def __init__(self, status: int, retry_after: str | None) -> None:
        self.status = status
        self.retry_after = retry_after
        super().__init__(f"HTTP {status}")


class _TotalTimeout(httpx.TimeoutException):
    """The delivery's total deadline passed while an attempt was still running."""


def within(limit: float, call: Callable[[], _T], abandon: Callable[[], None] | None = None) -> _T:
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
    if isinstance(exc, RetryableStatus):
        return exc.status, exc.retry_after
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code, exc.response.headers.get("retry-after")
    return None, None


def describe(exc: BaseException) -> tuple[int | None, str]:
    """Status and words for an error, never ``str(exc)``: httpx puts the URL in its messages."""
    if isinstance(exc, RetryableStatus):
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


class RetryingSender:
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
        attempt: Callable[[Deadline], int | None],
        transient: Callable[[BaseException], bool],
        *,
        before_sleep: Callable[[tenacity.RetryCallState], None] | None = None,
    ) -> Delivery:
        """Run ``attempt`` until it succeeds, fails for good, or the budget is spent.

        ``attempt`` gets the deadline (to bound its own request) and returns the HTTP status,
        or ``None`` where the channel has none; a non-2xx status it returns is a failure that
        is not retried.
        """
        deadline = Deadline(
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
            code, words = describe(exc)
            return Delivery(self.channel, False, code, attempts, words)
        if status is None or 200 <= status < 300:
            return Delivery(self.channel, True, status, attempts)
        return Delivery(self.channel, False, status, attempts, f"HTTP {status}")
