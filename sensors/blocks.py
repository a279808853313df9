"""Prefect blocks: a stage, an SSH host and notification settings, saved on the Prefect server.

A worker with only prefect-crosscheck and a ``PREFECT_API_URL`` gates a stage on an SSH host
with nothing mounted: the stage, the private key and the host keys to trust are blocks, and
every place that takes a stage takes ``block:NAME`` too (docs/blocks.md).
:class:`CrosscheckStage` holds the stage (``definition``, a stage file's schema), with an
optional :class:`CrosscheckSSHHost` (hostname, port, user, the private key and passphrase as
``SecretStr``, known_hosts, a ProxyJump) and :class:`CrosscheckNotifications` (the
``notify:`` section) replacing its ``host`` and ``notify``. Register the types once per server
with ``prefect block register -m prefect_crosscheck``. Part of the Prefect layer: nothing in
the core imports this module.

Example:
    >>> stage = CrosscheckStage(
    ...     definition={"stage": "extract", "host": "local", "process": {"match": "extract.py"}}
    ... )
    >>> stage.to_stage().stage
    'extract'
    >>> stage.save("extract")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from prefect.blocks.core import Block
from pydantic import Field, SecretStr, model_validator

from sensors._base.errors import ConfigError
from sensors._base.secrets import run_sync
from sensors._config.stage import DEFAULT_CHECK_TIMEOUT, SSHMaterial, Stage, stage_from_dict

__all__ = [
    "BLOCK_PREFIX",
    "CrosscheckNotifications",
    "CrosscheckSSHHost",
    "CrosscheckStage",
    "is_block_ref",
    "load_stage_block",
]

#: How a stage is named by its block where a path is expected: ``block:extract``.
BLOCK_PREFIX = "block:"

_DOCS = "https://github.com/crosscheck/prefect-crosscheck#blocks"


class CrosscheckSSHHost(Block):
    """An SSH host a gate reads signals on: where it is, the key to log in with, the host
    keys to trust. Nothing of it needs to be on the worker's disk.

    Attributes:
        hostname: the host's name or address.
        port: the SSH port.
        user: the user to log in as.
        private_key: the private key, OpenSSH or PEM text (Ed25519, ECDSA, RSA).
        passphrase: the private key's passphrase, if it has one.
        known_hosts: known_hosts content: the host keys to trust (``ssh-keyscan`` output,
            checked out of band). Unknown or changed keys are refused, never added.
        proxy_jump: ProxyJump hops, ``[user@]host[:port]`` comma-separated; the same key
            and known_hosts serve them.
        connect_timeout: seconds for each connect, handshake and authentication.
        check_timeout: the wall-clock deadline of one check, in seconds.
    """

    _block_type_name: ClassVar[str] = "Crosscheck SSH Host"
    _block_type_slug: ClassVar[str] = "crosscheck-ssh-host"
    _description: ClassVar[str] = "An SSH host crosscheck gates stages on: address, key, trusted host keys."
    # Prefect declares it HttpUrl | None; its BlockType validates this str into one (prefect-slack's
    # blocks give a str too).
    _documentation_url: ClassVar[str] = _DOCS  # type: ignore[assignment]

    hostname: str = Field(min_length=1, description="The host's name or address.")
    port: int = Field(22, gt=0, lt=65536, description="The SSH port.")
    user: str = Field(min_length=1, description="The user to log in as.")
    private_key: SecretStr | None = Field(
        None, description="The private key (OpenSSH or PEM text). Empty: password authentication."
    )
    passphrase: SecretStr | None = Field(None, description="The private key's passphrase, if any.")
    known_hosts: str = Field(
        min_length=1,
        description="known_hosts lines: the host keys to trust (verify them out of band). "
        "Unknown or changed keys are refused.",
    )
    proxy_jump: str | None = Field(None, description="ProxyJump hops: [user@]host[:port],...")
    connect_timeout: float = Field(10.0, gt=0, description="Seconds for each connect and handshake.")
    check_timeout: float = Field(
        DEFAULT_CHECK_TIMEOUT, gt=0, description="Wall-clock deadline of one check, seconds."
    )

    def host_section(self, source: str) -> dict[str, Any]:
        """The stage's ``host:`` section for this host, its key material held in memory."""
        material = SSHMaterial(
            source=source,
            known_hosts=self.known_hosts,
            private_key=self.private_key,
            passphrase=self.passphrase,
        )
        section: dict[str, Any] = {
            "ssh": self.hostname,
            "port": self.port,
            "user": self.user,
            "connect_timeout": self.connect_timeout,
            "check_timeout": self.check_timeout,
            "material": material,
        }
        if self.proxy_jump:
            section["proxy_jump"] = self.proxy_jump
        return section


def _default_news() -> list[Literal["complete", "running", "stalled", "failed", "contradiction", "unknown"]]:
    """``CrosscheckNotifications.on`` by default: the verdicts worth a message."""
    return ["stalled", "contradiction", "failed", "unknown", "complete"]


class CrosscheckNotifications(Block):
    """Where and when a gate speaks: the stage file's ``notify:`` section as a block.

    Attributes:
        slack_webhook: ``env:NAME`` or ``block:NAME`` (a Prefect Secret or a prefect-slack
            SlackWebhook block holding the URL); never the URL itself.
        prefect_block: the name of any Prefect notification block (email, Teams, ...).
        on: the verdicts worth a message.
        unknown_after: seconds ``unknown`` must last before it is news.
        remind_every: seconds between reminders while a problem lasts.
    """

    _block_type_name: ClassVar[str] = "Crosscheck Notifications"
    _block_type_slug: ClassVar[str] = "crosscheck-notifications"
    _description: ClassVar[str] = "When and where crosscheck gates send messages (Slack, other blocks)."
    # Prefect declares it HttpUrl | None; its BlockType validates this str into one (prefect-slack's
    # blocks give a str too).
    _documentation_url: ClassVar[str] = _DOCS  # type: ignore[assignment]

    slack_webhook: str | None = Field(
        None, description="env:NAME or block:NAME (a Secret or SlackWebhook block), never the URL."
    )
    prefect_block: str | None = Field(None, description="The name of a Prefect notification block.")
    on: list[Literal["complete", "running", "stalled", "failed", "contradiction", "unknown"]] = Field(
        default_factory=_default_news,
        description="The verdicts worth a message.",
    )
    unknown_after: float = Field(300.0, ge=0, description="Seconds unknown must last before it is news.")
    remind_every: float = Field(3600.0, gt=0, description="Seconds between reminders while a problem lasts.")

    def notify_section(self) -> dict[str, Any]:
        """The stage's ``notify:`` section."""
        fields = {"slack_webhook", "prefect_block", "on", "unknown_after", "remind_every"}
        section = self.model_dump(include=fields)
        return {k: v for k, v in section.items() if v is not None}


class CrosscheckStage(Block):
    """A stage: what the job is, where it runs, what "complete" means. The same schema as a
    stage file, so a file can become a block and back.

    Attributes:
        definition: the stage as in a stage file (``stage``, ``host``, ``process``, ``log``,
            ``outputs``, ``gpu``, ``policy``, ``notify``, ``launch``).
        ssh_host: the SSH host the stage runs on (replaces the definition's ``host``).
        notifications: the notification settings (replace the definition's ``notify``).
    """

    _block_type_name: ClassVar[str] = "Crosscheck Stage"
    _block_type_slug: ClassVar[str] = "crosscheck-stage"
    _description: ClassVar[str] = (
        "A pipeline stage crosscheck gates: its process, log, outputs and GPU signals, as in a stage file."
    )
    # Prefect declares it HttpUrl | None; its BlockType validates this str into one (prefect-slack's
    # blocks give a str too).
    _documentation_url: ClassVar[str] = _DOCS  # type: ignore[assignment]

    definition: dict[str, Any] = Field(
        description="The stage, the same schema as a stage file (stage, host, process, log, outputs, ...)."
    )
    ssh_host: CrosscheckSSHHost | None = Field(
        None, description="The SSH host the stage runs on; replaces the definition's host."
    )
    notifications: CrosscheckNotifications | None = Field(
        None, description="The notification settings; replace the definition's notify."
    )

    @model_validator(mode="after")
    def _valid_stage(self) -> CrosscheckStage:
        # A block that could never gate is refused when it is built (or saved), not at 3 a.m.
        try:
            self.to_stage()
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    def to_stage(self) -> Stage:
        """The :class:`~sensors.Stage` this block describes.

        Raises:
            ConfigError: the definition does not validate (the field and what is wrong).
        """
        data = dict(self.definition)
        if self.ssh_host is not None:
            name = getattr(self.ssh_host, "_block_document_name", None)
            source = f"block crosscheck-ssh-host/{name}" if name else "its CrosscheckSSHHost block"
            data["host"] = self.ssh_host.host_section(source)
        if self.notifications is not None:
            data["notify"] = self.notifications.notify_section()
        return stage_from_dict(data)


def is_block_ref(value: object) -> bool:
    """Whether ``value`` names a stage block (``block:NAME``) rather than a stage file.

    Example:
        >>> is_block_ref("block:extract"), is_block_ref("stages/extract.yaml")
        (True, False)
    """
    return isinstance(value, str) and value.startswith(BLOCK_PREFIX)


def load_stage_block(ref: str) -> Stage:
    """The stage saved as the :class:`CrosscheckStage` block ``ref`` (``block:NAME`` or ``NAME``).

    Raises:
        ConfigError: no such block (or the server cannot be reached), or it does not validate.
    """
    name = ref.removeprefix(BLOCK_PREFIX)
    api = _api_url()
    try:
        block = run_sync(CrosscheckStage.load(name))
    except ConfigError:
        raise
    except ImportError as exc:
        # No PREFECT_API_URL: Prefect starts a local API for this process, which needs the
        # server's packages (`prefect-client` alone has none: asyncpg, ...).
        raise ConfigError(
            f"cannot load the CrosscheckStage block {name!r}: no Prefect API is set and this"
            f" environment cannot start a local one (no module {exc.name!r}): set PREFECT_API_URL"
            " to your server's API (e.g. http://127.0.0.1:4200/api), or pip install prefect",
            file=f"{BLOCK_PREFIX}{name}",
        ) from None
    except Exception as exc:  # not found, server down, wrong type: one line, no traceback
        where = (
            f" (on {api})"
            if api
            else " (no PREFECT_API_URL is set: looked in Prefect's local database; set it to your"
            " server's API, e.g. http://127.0.0.1:4200/api)"
        )
        raise ConfigError(
            f"cannot load the CrosscheckStage block {name!r}{where}: {type(exc).__name__}: {exc}",
            file=f"{BLOCK_PREFIX}{name}",
        ) from None
    return block.to_stage()


def _api_url() -> str | None:
    """The Prefect API this process talks to (the setting: environment or profile), or None."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or None
