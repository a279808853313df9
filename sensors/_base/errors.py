"""The one exception tree of crosscheck.

::

    CrosscheckError
     ├── ConfigError            a stage file or option is wrong (file, field, message)
     ├── HostError              a host could not be asked (host)
     │    ├── HostKeyError      the host key is unknown or changed: never trusted silently
     │    ├── ConnectError      could not connect or authenticate, or the connection dropped
     │    └── ProbeError        the probe ran but its answer was unusable (timeout, garbage)
     ├── StageFailed           a gate saw `failed` or timed out (carries the verdict)
     │    └── StageStuck       a gate saw `unknown` for good: this run can never complete
     └── NotificationError     a notification could not be delivered (never changes a verdict)

Low-level errors (OSError, paramiko, yaml, pydantic) are translated where they are raised,
with ``raise ... from exc``, so callers only ever catch these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sensors._base.model import Verdict


class CrosscheckError(Exception):
    """Base of every error crosscheck raises."""


class ConfigError(CrosscheckError):
    """A stage file, or a value given in Python, is invalid.

    ``str(err)`` is one line naming the file, the field path and what is wrong, e.g.
    ``stage.yaml: outputs.expected: must be greater than 0``.
    """

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None):
        self.file = file
        self.field = field
        self.message = message
        parts = [p for p in (file, field) if p]
        super().__init__(": ".join([*parts, message]))


class HostError(CrosscheckError):
    """The monitored host could not be asked. Readings from that check are ``unknown``."""

    def __init__(self, message: str, *, host: str):
        self.host = host
        super().__init__(f"{host}: {message}")


class HostKeyError(HostError):
    """The host key offered by an SSH server is not in known_hosts, or differs from it."""


class ConnectError(HostError):
    """Connecting or authenticating failed, or the connection dropped mid-check."""


class ProbeError(HostError):
    """The probe ran but took too long or answered something unusable."""


class StageFailed(CrosscheckError):
    """Raised by a gate when the stage failed or the wait timed out.

    Carries the last verdict (with all its evidence) as ``verdict``.
    """

    def __init__(self, message: str, *, verdict: Verdict | None = None, timed_out: bool = False):
        self.verdict = verdict
        self.timed_out = timed_out
        super().__init__(message)


class StageStuck(StageFailed):
    """Raised by a gate at once when the stage is stuck: ``unknown`` for good, so this run can
    never be found complete (``verdict.stuck`` says why and the fix). A :class:`StageFailed`,
    so code that stops a pipeline on one stops on this too, without waiting for a timeout."""


class NotificationError(CrosscheckError):
    """A notification could not be delivered after its retries."""

    def __init__(self, message: str, *, status: int | None = None, detail: Any = None):
        self.status = status
        self.detail = detail
        super().__init__(message)
