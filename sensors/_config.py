"""The stage file: pydantic at the config boundary, translated errors, plain values inside.

A stage file is YAML; every section but ``stage`` and ``host`` is optional, unknown keys are
errors (a typo like ``proces:`` must not silently drop a signal), and each error is one line
naming the file, the field path and what is wrong.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sensors._errors import ConfigError
from sensors._schema import AbsPath, Duration, Regex, Section, parse_duration
from sensors._secrets import check_secret_ref
from sensors._signals.gpu import GpuSpec
from sensors._signals.log import LogSpec
from sensors._signals.outputs import DEFAULT_EXCLUDES, OutputsSpec
from sensors._signals.process import ProcessSpec

__all__ = [
    "DEFAULT_EXCLUDES",
    "AbsPath",
    "Duration",
    "GpuSpec",
    "LaunchSpec",
    "LogSpec",
    "NotifySpec",
    "OutputsSpec",
    "PolicySpec",
    "ProcessSpec",
    "Regex",
    "SSHMaterial",
    "SSHSpec",
    "Stage",
    "load_stage",
    "parse_duration",
    "stage_from_dict",
]


class PolicySpec(Section):
    interval: Duration = 30.0
    stall_after: Duration = 900.0
    settle: int = Field(2, ge=1)
    timeout: Duration = 48 * 3600.0
    stuck_in_d_after: Duration = Field(
        120.0, description="state D this long counts as no progress (the kernel's hung-task time)"
    )
    exit_grace: Duration = Field(
        60.0,
        description="after the process exits, how long the log and outputs may lag "
        "(buffered writes, NFS attribute caching) before a disagreement is news",
    )


class SSHMaterial(Section):
    """A private key and known_hosts held in memory: what a ``CrosscheckSSHHost`` block gives
    (:mod:`sensors.blocks`), so a worker needs no key or known_hosts file on its disk.

    Never part of a stage file (a stage file references secrets, it never holds them).
    ``source`` names the holder in messages, e.g. ``block crosscheck-ssh-host/gpu-box``.
    """

    source: str
    known_hosts: str = Field(description="known_hosts content, the host keys to trust")
    private_key: SecretStr | None = Field(None, description="the private key (OpenSSH or PEM text)")
    passphrase: SecretStr | None = Field(None, description="the private key's passphrase")


class SSHSpec(Section):
    ssh: str = Field(min_length=1, description="hostname or ~/.ssh/config alias")
    port: int | None = Field(None, gt=0, lt=65536)
    user: str | None = None
    key: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    config: str | None = Field(None, description="ssh config file; default ~/.ssh/config")
    connect_timeout: Duration = 10.0
    check_timeout: Duration = Field(60.0, description="wall-clock deadline of one check")
    password: str | None = Field(
        None, description="env:NAME or block:NAME (a Prefect Secret); never a literal"
    )
    passphrase: str | None = Field(None, description="env:NAME or block:NAME for the key")
    proxy_jump: str | None = Field(
        None, description="ProxyJump hops, [user@]host[:port],... (default: the ssh config's)"
    )
    material: SSHMaterial | None = Field(
        None, description="key and known_hosts in memory, from a CrosscheckSSHHost block; never in a file"
    )

    @field_validator("material")
    @classmethod
    def _not_in_a_file(cls, value: SSHMaterial | None, info: ValidationInfo) -> SSHMaterial | None:
        if value is not None and (info.context or {}).get("file"):
            raise ValueError("key material belongs in a CrosscheckSSHHost block, never in a stage file")
        return value

    @field_validator("password", "passphrase")
    @classmethod
    def _secret_ref(cls, value: str | None) -> str | None:
        return check_secret_ref(value, "secrets are referenced, never written: use env:NAME or block:NAME")

    @field_validator("ssh", "user", "proxy_jump")
    @classmethod
    def _no_control(cls, value: str | None) -> str | None:
        if value is not None and any(c in value for c in "\0\n\r"):
            raise ValueError("may not contain NUL or newline characters")
        return value


class NotifySpec(Section):
    slack_webhook: str | None = Field(None, description="env:NAME or block:NAME")
    prefect_block: str | None = Field(None, description="name of a Prefect notification block")
    on: tuple[Literal["complete", "running", "stalled", "failed", "contradiction", "unknown"], ...] = (
        "stalled",
        "contradiction",
        "failed",
        "unknown",
        "complete",
    )
    unknown_after: Duration = 300.0
    remind_every: Duration = 3600.0

    @field_validator("slack_webhook")
    @classmethod
    def _secret_ref(cls, value: str | None) -> str | None:
        # Do not echo the value: it may be the webhook URL itself.
        return check_secret_ref(value, "the Slack webhook is a secret: use env:NAME or block:NAME")


class LaunchSpec(Section):
    """How the pipeline flow starts the stage's job (detached, on the stage's host)."""

    command: tuple[str, ...] = Field(min_length=1, description="argv of the job")
    cwd: AbsPath | None = None
    log: AbsPath | None = Field(None, description="stdout+stderr go here; default: log.path")

    @field_validator("command", mode="before")
    @classmethod
    def _argv(cls, value: Any) -> Any:
        if isinstance(value, str):
            import shlex

            return tuple(shlex.split(value))
        return value


class Stage(Section):
    """A stage: what to watch, where, and the policy that turns readings into a verdict."""

    stage: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    host: Literal["local"] | SSHSpec = "local"
    process: ProcessSpec | None = None
    log: LogSpec | None = None
    outputs: OutputsSpec | None = None
    gpu: GpuSpec | None = None
    policy: PolicySpec = PolicySpec()
    notify: NotifySpec | None = None
    launch: LaunchSpec | None = None

    @model_validator(mode="after")
    def _some_signal(self) -> Stage:
        if self.gpu is not None and self.gpu.idle_for * 1.5 < self.policy.interval:
            # GPU idleness is shown by samples no further apart than 1.5 x idle_for
            # (sensors/_gpu.py, "Gaps"): checks further apart could never show it.
            raise ValueError(
                f"gpu.idle_for ({self.gpu.idle_for:g}s) is too short for policy.interval "
                f"({self.policy.interval:g}s): use at least {self.policy.interval / 1.5:g}s"
            )
        if not any((self.process, self.log, self.outputs, self.gpu)):
            raise ValueError("no signal configured: give at least one of process, log, outputs, gpu")
        return self

    @property
    def signals(self) -> tuple[str, ...]:
        return tuple(n for n in ("process", "log", "outputs", "gpu") if getattr(self, n))

    @property
    def host_name(self) -> str:
        return "local" if self.host == "local" else self.host.ssh


class _YAMLLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: only true/false.

    YAML 1.1 (PyYAML's default) reads on/off/yes/no as booleans, so the documented
    ``notify: {on: [stalled]}`` would load as ``{True: [...]}``.
    """


_YAMLLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_YAMLLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_stage(path: str | os.PathLike[str]) -> Stage:
    """Read and validate a stage file.

    Raises:
        ConfigError: one line naming the file, the field and what is wrong.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "extract.yaml"
        >>> _ = path.write_text("stage: extract\\nhost: local\\nprocess: {match: extract.py}\\n")
        >>> stage = load_stage(path)
        >>> stage.stage, stage.policy.interval
        ('extract', 30.0)
    """
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=name) from None
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", file=name) from None
    try:
        data = yaml.load(text, Loader=_YAMLLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{where}{problem}", file=name) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping with at least 'stage' and 'host'", file=name)
    return stage_from_dict(data, file=name)


def stage_from_dict(data: dict[str, Any], *, file: str | None = None) -> Stage:
    """Validate a stage given as a dict (the same schema as the YAML file)."""
    try:
        return Stage.model_validate(data, context={"file": file} if file else None)
    except ValidationError as exc:
        raise _translate(exc, file) from None


def _translate(exc: ValidationError, file: str | None) -> ConfigError:
    err = exc.errors(include_url=False, include_input=False)[0]
    loc = [str(p) for p in err["loc"] if not str(p).startswith(("function-", "literal["))]
    # pydantic puts union branch names ("SSHSpec") into the path: drop them.
    loc = [p for p in loc if not p[:1].isupper()]
    field = ".".join(loc) or None
    kind = err["type"]
    msg = err["msg"]
    if kind == "extra_forbidden":
        msg = "unknown key (check its spelling)"
    elif kind == "missing":
        msg = "required"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return ConfigError(msg, file=file, field=field)
