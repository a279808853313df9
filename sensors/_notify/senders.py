"""How to send: the two channels a ``notify:`` section can ask for.

- :class:`SlackWebhookSender` posts a message's Block Kit payload to a Slack incoming webhook
  (httpx); the URL is a secret (:mod:`sensors._base.secrets`), resolved at the first send and never
  formatted into a message, log record or exception.
- :class:`PrefectBlockSender` sends the plain text through any saved Prefect notification block
  (the title as its subject, the rest as its body).

Both retry and report through :class:`~sensors._notify.delivery.RetryingSender`: a delivery
never raises, it returns a :class:`~sensors._notify.delivery.Delivery`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx

from sensors._base.errors import NotificationError
from sensors._base.secrets import SlackWebhookURL, register_secret, resolve_slack_webhook, run_sync
from sensors._config.stage import NotifySpec
from sensors._notify.delivery import (
    RETRY_EXC,
    Deadline,
    Delivery,
    RetryableStatus,
    RetryingSender,
    Sender,
    describe,
    log,
    retryable_status,
    within,
)
from sensors._notify.message import Message

if TYPE_CHECKING:
    import tenacity

__all__ = ["PrefectBlockSender", "SlackWebhookSender", "senders_from_spec"]


class SlackWebhookSender(RetryingSender):
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
        self._url: SlackWebhookURL | None = None
        self.request_timeout = request_timeout
        self._transport = transport

    def __repr__(self) -> str:
        ref = self._ref if isinstance(self._ref, str) else "<callable>"
        return f"SlackWebhookSender({ref!r})"  # env:NAME / block:NAME name, never the URL

    def _resolve(self) -> SlackWebhookURL:
        if self._url is None:
            if isinstance(self._ref, str):
                self._url = resolve_slack_webhook(self._ref)
            else:
                self._url = SlackWebhookURL(self._ref())
        return self._url

    def __call__(self, message: Message) -> Delivery:
        url = self._prepare(self._resolve, "lookup failed")
        if isinstance(url, Delivery):
            return url
        payload = dict(message.payload)

        with httpx.Client(transport=self._transport, follow_redirects=False) as client:

            def attempt(deadline: Deadline) -> int:
                timeout = max(0.05, min(self.request_timeout, deadline.remaining()))
                response = within(
                    deadline.remaining(),
                    lambda: client.post(url.get(), json=payload, timeout=timeout),
                    abandon=client.close,
                )
                if retryable_status(response.status_code):
                    raise RetryableStatus(response.status_code, response.headers.get("retry-after"))
                return response.status_code

            def retrying_in(rs: tenacity.RetryCallState) -> None:
                # Retried only after an attempt that raised (retry_if_exception): its outcome
                # is there and holds the exception.
                assert rs.outcome is not None
                failure = rs.outcome.exception()
                assert failure is not None
                log.debug(
                    "the Slack webhook: attempt %d failed (%s); retrying in %.1fs",
                    rs.attempt_number,
                    describe(failure)[1],
                    rs.upcoming_sleep,
                )

            return self._deliver(
                attempt,
                lambda exc: isinstance(exc, (*RETRY_EXC, RetryableStatus)),
                before_sleep=retrying_in,
            )


class PrefectBlockSender(RetryingSender):
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
            block = run_sync(Block.load(slug))
            if not callable(getattr(block, "notify", None)):
                raise NotificationError(f"Prefect block {self.name!r} cannot notify")
            # A webhook URL in the block is as secret as ours: keep it out of httpx's logs.
            url = getattr(block, "url", None)
            if url is not None:
                url = url.get_secret_value() if hasattr(url, "get_secret_value") else url
                if isinstance(url, str):
                    register_secret(url)
            self._block = block
        return self._block

    def __call__(self, message: Message) -> Delivery:
        block = self._prepare(self._load, "could not load")
        if isinstance(block, Delivery):
            return block

        def attempt(deadline: Deadline) -> None:
            def notify() -> None:
                guard = getattr(block, "raise_on_failure", None)
                with (guard if callable(guard) else contextlib.nullcontext)():
                    # The title goes as the subject, once: the body is the text after it.
                    run_sync(block.notify(message.body, message.title))

            # The block's client (apprise, slack_sdk) is not ours to close: at the deadline
            # the attempt is abandoned, and its thread ends when that client's own timeouts
            # fire. The caller is free at the deadline either way.
            within(deadline.remaining(), notify)

        def transient(exc: BaseException) -> bool:
            if isinstance(exc, RETRY_EXC):
                return True
            return isinstance(exc, httpx.HTTPStatusError) and retryable_status(exc.response.status_code)

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
