"""The stage file: pydantic at the config boundary, translated errors, plain values inside.

A stage file is YAML; every section but ``stage`` and ``host`` is optional, unknown keys are
errors (a typo like ``proces:`` must not silently drop a signal), and each error is one line
naming the file, the field path and what is wrong.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    Field,
    SecretStr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from sensors._base.errors import ConfigError
from sensors._base.schema import MIN_INTERVAL, AbsPath, Duration, Regex, Section, parse_duration
from sensors._base.secrets import check_secret_ref
from sensors._signals.gpu import GpuSpec
from sensors._signals.log import LogSpec
from sensors._signals.outputs import DEFAULT_EXCLUDES, OutputsSpec
from sensors._signals.process import ProcessSpec
from sensors._signals.supervisor import SupervisorSpec

__all__ = [
    "DEFAULT_CHECK_TIMEOUT",
    "DEFAULT_EXCLUDES",
    "AbsPath",
    "Duration",
    "GpuSpec",
    "HostsPattern",
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
    "SupervisorSpec",
    "load_stage",
    "load_stage_bytes",
    "load_stage_text",
    "parse_duration",
    "stage_from_dict",
    "stage_json_schema",
]


class PolicySpec(Section):
    # At least 100 ms: a stage checked more often would keep a watcher busy for nothing.
    interval: Duration = Field(30.0, ge=MIN_INTERVAL)
    stall_after: Duration = 900.0
    success: Literal["all", "chief"] = Field(
        "all",
        description="a stage over several hosts: all (every host's signals say done) or chief"
        " (node 0's signals say done and every other host's job processes are gone)",
    )
    settle: int = Field(2, ge=1, le=1000)
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


#: The wall-clock deadline of one check, in seconds, where the stage file names none: an SSH
#: host's ``check_timeout`` default and the deadline of every check on the local host.
DEFAULT_CHECK_TIMEOUT = 60.0


class SSHSpec(Section):
    ssh: str = Field(min_length=1, description="hostname or ~/.ssh/config alias")
    port: int | None = Field(None, gt=0, lt=65536)
    user: str | None = None
    key: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    config: str | None = Field(None, description="ssh config file; default ~/.ssh/config")
    connect_timeout: Duration = 10.0
    check_timeout: Duration = Field(DEFAULT_CHECK_TIMEOUT, description="wall-clock deadline of one check")
    password: str | None = Field(
        None, description="env:NAME or block:NAME (a Prefect Secret); never a literal"
    )
    passphrase: str | None = Field(None, description="env:NAME or block:NAME for the key")
    proxy_jump: str | None = Field(
        None, description="ProxyJump hops, [user@]host[:port],... (default: the ssh config's)"
    )
    # Not in the published JSON Schema: a stage file never holds it.
    material: SkipJsonSchema[SSHMaterial | None] = Field(
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


class HostsPattern(SSHSpec):
    """Hosts named by a pattern: ``ssh: gpu-{n:02d}`` with ``count: 4`` and ``first: 1`` is
    gpu-01 … gpu-04, each with the other settings given here."""

    count: int = Field(ge=1, le=4096, description="how many hosts")
    first: int = Field(0, ge=0, le=10**9, description="the number of the first host ({n} in ssh)")

    @field_validator("ssh")
    @classmethod
    def _has_n(cls, value: str) -> str:
        if not _N_FIELD.search(value) or "{" in _N_FIELD.sub("", value):
            raise ValueError("a hosts pattern names its hosts with {n} or {n:0Nd} (e.g. gpu-{n:02d})")
        return value

    def expand(self) -> tuple[SSHSpec, ...]:
        base = self.model_dump(exclude={"count", "first", "ssh"}, exclude_unset=True)
        return tuple(
            SSHSpec.model_validate({**base, "ssh": _numbered(self.ssh, n)})
            for n in range(self.first, self.first + self.count)
        )


def _fill(text: str, node: int, host: Literal["local"] | SSHSpec, *, regex: bool) -> str:
    """``{node}`` and ``{host}`` in ``text`` as node ``node`` on ``host`` has them (the host's
    name escaped where ``text`` is a regex: matched as text)."""
    name = "local" if host == "local" else host.ssh
    return _TEMPLATE.sub(
        lambda m: str(node) if m[1] == "node" else (re.escape(name) if regex else name), text
    )


def _numbered(pattern: str, n: int) -> str:
    return _N_FIELD.sub(lambda m: format(n, m[1] or ""), pattern)


#: ``{n}`` or ``{n:02d}`` in a hosts pattern.
_N_FIELD = re.compile(r"\{n(?::(0\d{1,2}d))?\}")

#: What a per-host template may name: the host (its ``ssh`` name) and its node rank (0, 1, …);
#: in ``log.path`` also a rank (``{rank}``: the job's global rank, ``node * per_host + local``).
_TEMPLATE = re.compile(r"\{(host|node)\}")
_RANK = re.compile(r"\{rank\}")


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

    command: Annotated[
        tuple[str, ...],
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    {"type": "string", "minLength": 1},
                ]
            }
        ),
    ] = Field(min_length=1, description="argv of the job (a list, or one string split as a shell would)")
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
    hosts: tuple[Literal["local"] | SSHSpec, ...] | HostsPattern | None = Field(
        None,
        description="a stage over several hosts (instead of host): a list, or a pattern with a count;"
        " {host} and {node} in log.path and process.match name each host and its node rank;"
        " {rank} in log.path a log per rank (with process.per_host)",
    )
    supervisor: SupervisorSpec | None = Field(
        None,
        description="the supervisor that runs the job (docker, systemd, slurm): its record is the"
        " run's identity, its end and its processes (docs/supervisors.md)",
    )
    process: ProcessSpec | None = None
    log: LogSpec | None = None
    outputs: OutputsSpec | None = None
    gpu: GpuSpec | None = None
    policy: PolicySpec = PolicySpec()
    notify: NotifySpec | None = None
    launch: LaunchSpec | None = None

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A stage over several hosts is written without ``host`` (its default, written too,
        would be read back as both forms, which is refused: a gate's handoff, a flow's
        parameter)."""
        data = handler(self)
        if self.hosts is not None and isinstance(data, dict):
            data.pop("host", None)
        return data

    @model_validator(mode="after")
    def _some_signal(self) -> Stage:
        if self.gpu is not None and self.gpu.idle_for * 1.5 < self.policy.interval:
            # GPU idleness is shown by samples no further apart than 1.5 x idle_for
            # (sensors/_signals/gpu/__init__.py, "Gaps"): checks further apart could never show it.
            raise ValueError(
                f"gpu.idle_for ({self.gpu.idle_for:g}s) is too short for policy.interval "
                f"({self.policy.interval:g}s): use at least {self.policy.interval / 1.5:g}s"
            )
        if not any((self.supervisor, self.process, self.log, self.outputs, self.gpu)):
            raise ValueError(
                "no signal configured: give at least one of supervisor, process, log, outputs, gpu"
            )
        if self.process is not None and self.process.supervised and self.supervisor is None:
            raise ValueError(
                "process: give match or pid (with neither, the job's processes are its supervisor's:"
                " give a supervisor section)"
            )
        if self.hosts is None:
            if self.process is not None and self.process.per_host is not None:
                raise ValueError("process.per_host is for a stage over several hosts (hosts:)")
            if self.policy.success != "all":
                raise ValueError("policy.success is for a stage over several hosts (hosts:)")
            return self
        return self._spans()

    def _spans(self) -> Stage:
        if "host" in self.model_fields_set:
            raise ValueError("give host (one host) or hosts (several), not both")
        if isinstance(self.hosts, HostsPattern):
            object.__setattr__(self, "hosts", self.hosts.expand())
        assert isinstance(self.hosts, tuple)
        if not self.hosts:
            raise ValueError("hosts: name at least one host")
        labels = [_label(h, self.hosts) for h in self.hosts]
        if len(set(labels)) != len(labels):
            raise ValueError("hosts: a host is named twice")
        if self.launch is not None:
            raise ValueError("launch: is for a stage on one host (a launch across hosts is not built)")
        if self.supervisor is not None:
            raise ValueError(
                "supervisor: names a job on one host (a stage over several hosts reads its processes)"
            )
        if self.process is None or self.process.match is None:
            # Every host must show its ranks gone, and a PID names a process of one host only.
            raise ValueError(
                "a stage over several hosts needs process.match (with {node} or {host} where one"
                " host's ranks must be told from another's): every host must show its ranks gone"
            )
        templated = {
            "log.complete": self.log.complete if self.log else None,
            "log.error": self.log.error if self.log else None,
            "log.progress": self.log.progress if self.log else None,
            "outputs.files": self.outputs.files if self.outputs else None,
            "outputs.lines": self.outputs.lines if self.outputs else None,
            "outputs.pattern": self.outputs.pattern if self.outputs else None,
        }
        for where, text in templated.items():
            if text is not None and _TEMPLATE.search(text):
                raise ValueError(f"{where}: only log.path and process.match take {{host}} and {{node}}")
        for where, text in {**templated, "process.match": self.process.match}.items():
            if text is not None and _RANK.search(text):
                raise ValueError(f"{where}: only log.path takes {{rank}} (a log per rank)")
        if self.log is not None and _RANK.search(self.log.path) and self.process.per_host is None:
            raise ValueError(
                "log.path names {rank}: give process.per_host (how many ranks each host runs),"
                " so that each host's ranks, node * per_host to node * per_host + per_host - 1, are known"
            )
        # Two hosts of one name (one address, two ports), not a ':' in a label: an IPv6
        # address has its own, and two of them were told they named one host. The field that
        # says {host} is named: a person looks for it in the file.
        names = ["local" if h == "local" else h.ssh for h in self.hosts]
        fields = {"process.match": self.process.match, "log.path": self.log.path if self.log else ""}
        using = [where for where, text in fields.items() if text and "{host}" in text]
        if using and len(set(names)) != len(names):
            raise ValueError(
                f"{' and '.join(using)}: {{host}} would name two hosts alike (one name, two ports):"
                " use {node}, each host's rank"
            )
        return self

    @property
    def nodes(self) -> tuple[Stage, ...]:
        """A stage over several hosts as one stage per host, node 0 first (one host: itself).

        Each node's stage reads the process and GPU signals of its host, and its own log where
        ``log.path`` names ``{host}`` or ``{node}``; the outputs (shared storage) and a log
        without a template are read once, on node 0. ``{host}`` and ``{node}`` in
        ``process.match`` and ``log.path`` become the node's host name and rank.
        """
        if self.hosts is None:
            return (self,)
        assert isinstance(self.hosts, tuple)
        return tuple(self._node(k, host) for k, host in enumerate(self.hosts))

    def _node(self, k: int, host: Literal["local"] | SSHSpec) -> Stage:
        assert isinstance(self.hosts, tuple)
        label = _label(host, self.hosts)

        def fill(text: str, *, regex: bool) -> str:
            return _fill(text, k, host, regex=regex)

        process = self.process
        if process is not None:
            update: dict[str, Any] = {"per_host": None}
            if process.match is not None:
                update["match"] = fill(process.match, regex=True)
            process = process.model_copy(update=update)
        log = self.log
        if log is not None:
            if _TEMPLATE.search(log.path) or _RANK.search(log.path):
                # A log per rank: the node's own is its first rank's (local rank 0).
                log = log.model_copy(update={"path": self._rank_path(fill(log.path, regex=False), k, 0)})
            elif k:
                log = None
        return self.model_copy(
            update={
                # Not a name a stage file may give (``#``): a node's memory in the state store
                # is never another stage's.
                "stage": f"{self.stage}#{label}",
                "host": host,
                "hosts": None,
                "process": process,
                "log": log,
                "outputs": self.outputs if k == 0 else None,
                "policy": self.policy.model_copy(update={"success": "all"}),
            }
        )

    def _rank_path(self, path: str, node: int, local: int) -> str:
        per_host = self.process.per_host if self.process is not None else None
        return _RANK.sub(lambda _: str(node * (per_host or 1) + local), path)

    @property
    def rank_logs(self) -> tuple[tuple[Stage, ...], ...]:
        """For each node, the logs of its other ranks where ``log.path`` names ``{rank}``:
        one stage of that log alone per local rank 1 … ``per_host`` - 1, on the node's host
        (its first rank's log is the node's own). Empty tuples otherwise."""
        nodes = self.nodes
        if self.hosts is None or self.log is None or not _RANK.search(self.log.path):
            return tuple(() for _ in nodes)
        assert self.process is not None and self.process.per_host is not None
        per_host = self.process.per_host
        out = []
        for k, node in enumerate(nodes):
            assert isinstance(self.hosts, tuple) and node.log is not None
            label = _label(self.hosts[k], self.hosts)
            path = _fill(self.log.path, k, self.hosts[k], regex=False)
            out.append(
                tuple(
                    node.model_copy(
                        update={
                            "stage": f"{self.stage}#{label}#rank{k * per_host + local}",
                            "process": None,
                            "outputs": None,
                            "gpu": None,
                            "log": node.log.model_copy(update={"path": self._rank_path(path, k, local)}),
                        }
                    )
                    for local in range(1, per_host)
                )
            )
        return tuple(out)

    @property
    def host_labels(self) -> tuple[str, ...]:
        """Each host's name as the verdict writes it (``name:port`` where two share a name)."""
        if self.hosts is None:
            return (self.host_name,)
        assert isinstance(self.hosts, tuple)
        return tuple(_label(h, self.hosts) for h in self.hosts)

    @property
    def signals(self) -> tuple[str, ...]:
        return tuple(n for n in ("supervisor", "process", "log", "outputs", "gpu") if getattr(self, n))

    @property
    def host_name(self) -> str:
        """Where the stage runs, in words: its host, or every host of a stage over several."""
        if self.hosts is not None:
            return ", ".join(self.host_labels)
        return "local" if self.host == "local" else self.host.ssh

    @property
    def check_timeout(self) -> float:
        """The wall-clock deadline of one check of this stage, in seconds: the SSH host's
        ``check_timeout``, or :data:`DEFAULT_CHECK_TIMEOUT` on the local host."""
        return DEFAULT_CHECK_TIMEOUT if self.host == "local" else self.host.check_timeout


def _label(host: Literal["local"] | SSHSpec, hosts: tuple[Literal["local"] | SSHSpec, ...]) -> str:
    if host == "local":
        return "local"
    same = [h for h in hosts if h != "local" and h.ssh == host.ssh]
    return host.ssh if len(same) == 1 else f"{host.ssh}:{host.port or 22}"


#: Where the stage file's JSON Schema is published (``schema/stage.schema.json`` of the
#: repository; ``crosscheck schema`` prints the same): an editor with yaml-language-server
#: checks and completes a stage file that starts with
#: ``# yaml-language-server: $schema=<this URL>``.
SCHEMA_URL = "https://raw.githubusercontent.com/crosscheck/prefect-crosscheck/main/schema/stage.schema.json"

#: Sections that take exactly one of two keys (their models' validators say so too).
#: ``process`` takes at most one of ``match`` and ``pid`` (neither: its supervisor's processes).
_ONE_OF = {
    "OutputsSpec": ("files", "lines"),
    "SupervisorSpec": ("docker", "systemd", "slurm"),
}


def stage_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a stage file, generated from :class:`Stage`.

    What an editor can check as you type: the sections and their keys (unknown keys are
    errors), types, bounds, durations as numbers or ``30s``-like strings, absolute paths, at
    least one signal, ``match`` or ``pid`` (not both; neither only under a ``supervisor``), ``files`` or
    ``lines``. What it cannot (a regex
    that does not compile, a duration past 365 d, ``gpu.idle_for`` against
    ``policy.interval``) the models check: ``crosscheck validate``. Key material (a block's)
    is never part of a stage file, nor of the schema.

    Example:
        >>> schema = stage_json_schema()
        >>> schema["required"], sorted(schema["properties"])[:3]
        (['stage'], ['gpu', 'host', 'hosts'])
    """
    schema = Stage.model_json_schema()
    for name, keys in _ONE_OF.items():
        schema["$defs"][name]["oneOf"] = [{"required": [key]} for key in keys]
    schema["$defs"]["ProcessSpec"]["not"] = {"required": ["match", "pid"]}
    schema["anyOf"] = [
        {"required": [signal]} for signal in ("supervisor", "process", "log", "outputs", "gpu")
    ]
    # ``process: {}`` (the supervisor's record names the job's processes) only with a supervisor.
    schema["if"] = {"not": {"required": ["supervisor"]}}
    schema["then"] = {"properties": {"process": {"anyOf": [{"required": ["match"]}, {"required": ["pid"]}]}}}
    schema["title"] = "crosscheck stage file"
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_URL, **schema}


class _YAMLLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans (only true/false) and no duplicate keys.

    YAML 1.1 (PyYAML's default) reads on/off/yes/no as booleans, so the documented
    ``notify: {on: [stalled]}`` would load as ``{True: [...]}``. PyYAML keeps the last of two
    equal keys without a word (``expected:`` twice: the second wins); YAML 1.2 says keys are
    unique, so a second one is an error naming its line, at any depth. Keys merged in with
    ``<<: *anchor`` may be overridden, as YAML's merge says.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    line = first.get(key)
                except TypeError:
                    continue  # an unhashable key: the constructor below says so
                if line is not None:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"duplicate key {key!r} (first given on line {line + 1})",
                        key_node.start_mark,
                    )
                first[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


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
        with open(path, "rb") as f:
            data = f.read(MAX_STAGE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=name) from None
    return load_stage_bytes(data, file=name)


#: A stage file is a few hundred bytes; one larger than this is not one (a log or a data file
#: named *.yaml in a watched directory must not be read whole into memory).
MAX_STAGE_BYTES = 1024 * 1024


def load_stage_bytes(data: bytes, *, file: str) -> Stage:
    """The stage a stage file's bytes define (at most :data:`MAX_STAGE_BYTES` of them are
    read; ``file`` names it in errors): :func:`load_stage` once the file is read
    (``crosscheck serve`` reads each file once, to compare its bytes and to load them)."""
    if len(data) > MAX_STAGE_BYTES:
        raise ConfigError(f"larger than {MAX_STAGE_BYTES // 1024} KiB: not a stage file", file=file)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", file=file) from None
    return load_stage_text(text, file=file)


#: A run of digits longer than Python reads as an int (its default limit, 4300 digits).
_LONG_DIGITS = re.compile(r"\d{4300}")


def load_stage_text(text: str, *, file: str) -> Stage:
    """The stage a stage file's ``text`` defines (``file`` names it in errors)."""
    name = file
    try:
        data = yaml.load(text, Loader=_YAMLLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{where}{problem}", file=name) from None
    except RecursionError:
        # Lists or mappings nested thousands deep: PyYAML's composer recurses per level.
        raise ConfigError("nested too deeply to be a stage file", file=name) from None
    except ValueError as exc:
        # What PyYAML's constructors raise past their YAMLErrors: int() of a number past
        # Python's digit limit (sys.get_int_max_str_digits), a date like 2001-13-45.
        line = next((n for n, row in enumerate(text.splitlines(), 1) if _LONG_DIGITS.search(row)), None)
        if line is not None:
            why = str(exc).split(":")[0]
            raise ConfigError(f"line {line}: a number too large ({why})", file=name) from None
        raise ConfigError(f"not a value YAML can hold ({exc})", file=name) from None
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
    errors = exc.errors(include_url=False, include_input=False)
    # A union (host: 'local' or an SSH section) reports one error per branch: the deepest
    # is the branch the input was meant for (a bad host.check_timeout, not "host: Input
    # should be 'local'"); on a tie, the first.
    err = max((e for e in errors if e["loc"][:1] == errors[0]["loc"][:1]), key=lambda e: len(e["loc"]))
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
