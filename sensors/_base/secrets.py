"""Secret references: ``env:NAME`` and ``block:NAME``, validated and resolved in one place.

A stage file never holds a secret, only a reference to one: ``env:NAME`` (an environment
variable) or ``block:NAME`` (a saved Prefect block). This module owns

- the reference syntax (:data:`SECRET_REF`) and the one validator the config uses for every
  secret field (:func:`check_secret_ref`), which never echoes a rejected value;
- resolution: :func:`resolve_secret` for SSH passwords and passphrases (errors are
  :class:`~sensors._base.errors.ConfigError`), :func:`resolve_slack_webhook` for the Slack webhook
  (errors are :class:`~sensors._base.errors.NotificationError`; ``block:`` also accepts a
  prefect-slack ``SlackWebhook`` block), both built on :func:`env_value` and
  :func:`secret_block_value`;
- keeping resolved values out of logs: a resolved webhook is a :class:`SlackWebhookURL`, whose
  ``repr``/``str`` hide it, and :func:`register_secret` redacts it from the records that httpx,
  slack_sdk and apprise log about requests.

Prefect is imported lazily, only where a ``block:`` reference is resolved (nothing under
``sensors/`` but ``sensors/prefect.py`` imports it at module level).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import re
import threading
from typing import Any

from sensors._base.errors import ConfigError, NotificationError

__all__ = [
    "SECRET_REF",
    "SlackWebhookURL",
    "check_secret_ref",
    "env_value",
    "register_secret",
    "resolve_secret",
    "resolve_slack_webhook",
    "run_sync",
    "secret_block_value",
]

#: ``env:NAME`` or ``block:NAME``; a name is letters, digits, ``_``, ``.`` and ``-``.
SECRET_REF = re.compile(r"^(env|block):[A-Za-z0-9_.\-]+$")

#: What a hidden webhook URL shows instead of itself (in reprs and redacted log records).
_PLACEHOLDER = "<the Slack webhook>"


def check_secret_ref(value: str | None, message: str) -> str | None:
    """The config's validator for a secret field: ``None`` or a reference, else ``ValueError``.

    ``message`` says what is wrong; the value is never part of it (it may be the secret itself).

    Example:
        >>> check_secret_ref("env:GPU_BOX_PASSPHRASE", "use env:NAME or block:NAME")
        'env:GPU_BOX_PASSPHRASE'
    """
    if value is not None and not SECRET_REF.match(value):
        raise ValueError(message)
    return value


def env_value(name: str) -> str | None:
    """The environment variable ``name`` as it is, or ``None`` when unset."""
    return os.environ.get(name)


def secret_block_value(name: str) -> Any:
    """The value held by the Prefect ``Secret`` block ``name`` (raises whatever loading raises)."""
    from prefect.blocks.system import Secret

    return run_sync(Secret.load(name)).get()


def run_sync(result: Any) -> Any:
    """Prefect's dual sync/async methods return a coroutine inside async contexts: run it."""
    if inspect.iscoroutine(result):
        from prefect.utilities.asyncutils import run_coro_as_sync

        return run_coro_as_sync(result)
    return result


# --------------------------------------------------------------------------- SSH


def resolve_secret(ref: str) -> str:
    """Resolve an ``env:NAME`` or ``block:NAME`` (a Prefect Secret block) reference.

    The value is never logged and never put into an error message.

    Raises:
        ConfigError: the variable is unset or the block cannot be loaded.

    Example:
        >>> os.environ["GPU_BOX_PASSPHRASE"] = "s3cret"
        >>> resolve_secret("env:GPU_BOX_PASSPHRASE")
        's3cret'
    """
    kind, _, name = ref.partition(":")
    if kind == "env":
        value = env_value(name)
        if value is None:
            raise ConfigError(f"environment variable {name} is not set", field="host")
        return value
    if kind == "block":
        try:
            value = secret_block_value(name)
        except Exception as exc:
            # The exception text of a failed load names the block, never its value.
            raise ConfigError(
                f"cannot load Prefect Secret block {name!r}: {type(exc).__name__}", field="host"
            ) from None
        return str(value)
    raise ConfigError("secrets are referenced as env:NAME or block:NAME", field="host")


# --------------------------------------------------------------------------- Slack webhook


class SlackWebhookURL:
    """A webhook URL that does not show itself: ``repr``/``str``/f-strings give a placeholder.

    Made only through :func:`resolve_slack_webhook` or a sender's own callable; either way the
    value is registered for log redaction (:func:`register_secret`) as it is kept.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value
        register_secret(value)

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return _PLACEHOLDER

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a secret is not pickled")


def resolve_slack_webhook(ref: str) -> SlackWebhookURL:
    """Resolve ``env:NAME`` or ``block:NAME`` to the Slack webhook URL, kept secret.

    ``block:NAME`` tries a prefect-slack ``SlackWebhook`` block, then a Prefect ``Secret`` block.

    Raises:
        NotificationError: naming the variable or block, never the URL.

    Example:
        >>> url = resolve_slack_webhook("env:SLACK_WEBHOOK_URL")  # doctest: +SKIP
        >>> url  # doctest: +SKIP
        <the Slack webhook>
    """
    kind, _, name = ref.partition(":")
    if kind == "env":
        value = (env_value(name) or "").strip()
        if not value:
            raise NotificationError(f"the Slack webhook: environment variable {name} is not set")
        return SlackWebhookURL(value)
    if kind == "block":
        return SlackWebhookURL(_webhook_from_block(name))
    raise NotificationError("the Slack webhook must be given as env:NAME or block:NAME")


def _webhook_from_block(name: str) -> str:
    errors: list[str] = []
    try:
        from prefect_slack import SlackWebhook

        block = run_sync(SlackWebhook.load(name))
        url: str = block.url.get_secret_value()  # prefect-slack ships no types: a SecretStr's value
        return url
    except ImportError:
        errors.append("prefect-slack is not installed")
    except Exception as exc:  # not found, wrong type, server down: try the next kind
        errors.append(f"SlackWebhook: {type(exc).__name__}")
    try:
        value = secret_block_value(name)
    except Exception as exc:
        errors.append(f"Secret: {type(exc).__name__}")
        raise NotificationError(
            f"the Slack webhook: no Prefect SlackWebhook or Secret block named {name!r} "
            f"could be loaded ({'; '.join(errors)})"
        ) from None
    if not isinstance(value, str) or not value.strip():
        raise NotificationError(f"the Slack webhook: Secret block {name!r} does not hold a URL")
    return value.strip()


# --------------------------------------------------------------------------- log redaction


class _Redact(logging.Filter):
    """Redacts registered secrets from records that httpx and slack_sdk log about requests.

    httpx logs ``HTTP Request: POST <url> "HTTP/1.1 200 OK"`` at INFO: with a Slack webhook the
    URL *is* the credential. A logger-level filter sees exactly the records of that logger.
    """

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        with self.lock:
            secrets = list(self.secrets)
        if not secrets:
            return True
        try:
            text = record.getMessage()
        except Exception:
            return True
        hidden = text
        for secret in secrets:
            hidden = hidden.replace(secret, _PLACEHOLDER)
        if hidden != text:
            record.msg, record.args = hidden, ()
        return True


_REDACT = _Redact()
# apprise (behind Prefect's notification blocks) logs the URL it posts to at DEBUG.
_REDACTED_LOGGERS = (
    "httpx",
    "httpcore",
    "slack_sdk.webhook.client",
    "slack_sdk.webhook.async_client",
    "apprise",
)


def register_secret(value: str) -> None:
    """Hide ``value`` (a URL: also as httpx normalises it, and its path) in HTTP libraries' logs."""
    if not value:
        return
    import httpx  # only a webhook or a block's URL gets here, and httpx is what sends it

    forms = {value}
    # httpx logs the URL as it normalised it (lowercase scheme and host, default port
    # dropped, spaces escaped), not as given: hide that form too, and the path alone — for a
    # Slack webhook the path is the credential.
    with contextlib.suppress(Exception):
        url = httpx.URL(value)
        forms.add(str(url))
        path = url.raw_path.decode("ascii", "replace")
        if len(path) >= 8:
            forms.add(path)
    with _REDACT.lock:
        _REDACT.secrets.update(forms)
    for name in _REDACTED_LOGGERS:
        logger = logging.getLogger(name)
        if _REDACT not in logger.filters:
            logger.addFilter(_REDACT)
