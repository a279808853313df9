"""The stage file: pydantic at the config boundary, translated errors, plain values inside.

A stage file is YAML; every section but ``stage`` and ``host`` is optional, unknown keys are
errors (a typo like ``proces:`` must not silently drop a signal), and each error is one line
naming the file, the field path and what is wrong.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sensors._errors import ConfigError
from sensors._regex import FALLBACK_SCAN, BacktrackingRegexWarning, compile_user_regex
from sensors._secrets import check_secret_ref

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds from ``500ms``, ``30s``, ``15m``, ``2h``, ``1d`` or a plain number of seconds.

    Example:
        >>> parse_duration("15m")
        900.0
    """
    if isinstance(value, bool):
        raise ValueError("expected a duration like 30s, 15m, 2h or a number of seconds")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    else:
        raise ValueError(f"{value!r} is not a duration (use 500ms, 30s, 15m, 2h, or a number of seconds)")
    if seconds <= 0:
        raise ValueError("must be greater than 0")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


_REGEX_SECTION = {"match": "process", "complete": "log", "error": "log", "progress": "log"}


def _regex(value: Any, info: ValidationInfo) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected a non-empty regular expression")
    try:
        rx = compile_user_regex(value)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {value!r}: {exc}") from None
    if not rx.linear:
        name = info.field_name or "regex"
        where = f"{_REGEX_SECTION.get(name, '?')}.{name}"
        file = (info.context or {}).get("file")
        # Located at the stage file (no source line: lineno 0), not at pydantic's frame;
        # no registry, so each load says it again (a watch started later warns too).
        warnings.warn_explicit(
            f"{where}: {value!r} uses {rx.why}, which RE2 cannot run: it is matched with "
            f"Python's backtracking re (only the last {FALLBACK_SCAN} characters of each "
            "line), and its time per check depends on the pattern and the job's output",
            BacktrackingRegexWarning,
            filename=file or "<stage>",
            lineno=0,
        )
    return value


Regex = Annotated[str, BeforeValidator(_regex)]


def _absolute_path(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected an absolute path")
    if "\0" in value or "\n" in value:
        raise ValueError("a path may not contain NUL or newline characters")
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is a relative path; use an absolute path")
    return value


AbsPath = Annotated[str, BeforeValidator(_absolute_path)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProcessSpec(_Section):
    """Which process is the job: a regex over the full command line, or a PID."""

    match: Regex | None = Field(
        None, description="regex searched in the command line (argv joined by spaces)"
    )
    pid: int | None = Field(None, gt=0, description="the job's PID, instead of match")

    @model_validator(mode="after")
    def _one_of(self) -> ProcessSpec:
        if (self.match is None) == (self.pid is None):
            raise ValueError("give exactly one of match or pid")
        return self


class LogSpec(_Section):
    path: AbsPath
    complete: Regex = Field(description="regex that a whole line must match")
    error: Regex | None = None
    progress: Regex | None = Field(None, description="regex; named groups done and total are reported")
    tail_bytes: int = Field(
        256 * 1024, ge=4096, le=64 * 1024 * 1024, description="how much of the end is read"
    )


DEFAULT_EXCLUDES = (".*", "*.tmp", "*.part", "*.partial", "*.swp", "*~")
MAX_EXCLUDES = 64


def _name_glob(value: str) -> bool:
    """A glob over one directory entry's name: non-empty, at most NAME_MAX bytes, and free of
    '/', NUL, newline and carriage return."""
    return (
        bool(value)
        and len(value.encode("utf-8", "surrogateescape")) <= 255
        and not any(c in value for c in "/\0\n\r")
    )


class OutputsSpec(_Section):
    files: AbsPath | None = Field(None, description="directory whose entries are counted")
    pattern: str = "*"
    exclude: tuple[str, ...] = DEFAULT_EXCLUDES
    lines: AbsPath | None = Field(None, description="file whose newline-terminated records count")
    expected: int = Field(gt=0)

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, value: str) -> str:
        if not _name_glob(value):
            raise ValueError("a file name pattern like '*.pt' (no '/')")
        return value

    @field_validator("exclude")
    @classmethod
    def _exclude(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # Each glob reaches the probe's grep -E and find -name: a newline would split the
        # grep pattern and an empty alternative excludes every name (the count silently 0).
        if len(value) > MAX_EXCLUDES:
            raise ValueError(f"at most {MAX_EXCLUDES} exclude patterns")
        for glob in value:
            if not _name_glob(glob):
                raise ValueError(f"{glob!r} is not a file name pattern like '*.tmp' (no '/')")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> OutputsSpec:
        if (self.files is None) == (self.lines is None):
            raise ValueError("give exactly one of files or lines")
        return self


def _devices(value: Any) -> Any:
    if value == "all":
        return "all"
    if isinstance(value, (int, str)):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ValueError("expected 'all', a GPU index, a UUID, or a list of them")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise ValueError(f"{item!r} is neither a GPU index nor a UUID")
        if isinstance(item, int) and item < 0:
            raise ValueError("a GPU index is 0 or more")
    return tuple(value)


class GpuSpec(_Section):
    devices: Annotated[Literal["all"] | tuple[int | str, ...], BeforeValidator(_devices)] = "all"
    idle_below: float = Field(5.0, ge=0, le=100, description="percent utilisation")
    idle_for: Duration = Field(60.0, description="idle in every sample for this long")


class PolicySpec(_Section):
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


class SSHSpec(_Section):
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

    @field_validator("password", "passphrase")
    @classmethod
    def _secret_ref(cls, value: str | None) -> str | None:
        return check_secret_ref(value, "secrets are referenced, never written: use env:NAME or block:NAME")

    @field_validator("ssh", "user")
    @classmethod
    def _no_control(cls, value: str | None) -> str | None:
        if value is not None and any(c in value for c in "\0\n\r"):
            raise ValueError("may not contain NUL or newline characters")
        return value


class NotifySpec(_Section):
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


class LaunchSpec(_Section):
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


class Stage(_Section):
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
        >>> stage = load_stage("stages/extract.yaml")  # doctest: +SKIP
        >>> stage.policy.interval
        30.0
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
