"""Where an SSH stage connects: ``~/.ssh/config``, ProxyJump and the stage's own fields.

paramiko's ``SSHClient`` parses nothing of ``~/.ssh/config``; HostName, Port, User,
IdentityFile, IdentitiesOnly and ProxyJump are applied here, explicit stage fields winning.
ProxyCommand is refused rather than ignored (ignoring it would connect directly, bypassing
what the user configured), and so is a ``Match exec`` the lookup reaches: a config is data,
and paramiko would run the command through a shell (with the stage's alias as ``%h``) while
resolving a route, in ``crosscheck validate`` too. ``Include`` is followed as OpenSSH does
(paramiko's parser keeps it as an unknown keyword: every host it defines was silently
missing). Resolving a route touches no network.

Example:
    >>> from sensors._config.stage import SSHSpec
    >>> route = route_for(SSHSpec(ssh="gpu-box", user="root", port=2222, config="/dev/null"))
    >>> route.target.label, route.target.user, route.jumps
    ('gpu-box:2222', 'root', ())
"""

from __future__ import annotations

import errno
import getpass
import glob
import os
import re
import shlex
import stat
from dataclasses import dataclass, field
from typing import Any

import paramiko

from sensors._base.errors import ConfigError
from sensors._config.stage import SSHSpec

__all__ = ["Endpoint", "Route", "endpoint", "load_ssh_config", "route_for"]


@dataclass(frozen=True)
class Endpoint:
    """One SSH server to authenticate to, after ssh config was applied."""

    alias: str
    hostname: str
    port: int
    user: str
    key_files: tuple[str, ...] = ()
    identities_only: bool = False

    @property
    def label(self) -> str:
        return f"{self.hostname}:{self.port}"

    @property
    def known_hosts_name(self) -> str:
        # known_hosts spells non-default ports as [host]:port (sshd(8) "SSH_KNOWN_HOSTS").
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


@dataclass(frozen=True)
class Route:
    """The target and the ProxyJump hops before it, in the order they are connected."""

    target: Endpoint
    jumps: tuple[Endpoint, ...] = field(default=())


def load_ssh_config(path: str | None) -> paramiko.SSHConfig:
    """The ssh config at ``path`` (None: ``~/.ssh/config``, or an empty one if that is absent)."""
    if path is None:
        default = os.path.expanduser("~/.ssh/config")
        if not os.path.exists(default):
            return _InertSSHConfig()
        path = default
    path = os.path.expanduser(path)
    try:
        text = "\n".join(_with_includes(path))
    except OSError as exc:
        raise ConfigError(f"cannot read ssh config {path}: {exc.strerror}", field="host.config") from exc
    try:
        return _InertSSHConfig.from_text(text)
    except Exception as exc:  # paramiko raises bare ConfigParseError / ValueError
        raise ConfigError(f"cannot parse ssh config {path}: {exc}", field="host.config") from None


class _InertSSHConfig(paramiko.SSHConfig):  # type: ignore[misc]  # paramiko ships no types: Any
    """paramiko's ssh config, minus the one thing a lookup would do beyond reading: run a
    ``Match exec`` command (paramiko runs it with invoke, a shell, ``%h`` replaced by the
    alias). A lookup that reaches one (the criteria before it on its line match, as ssh
    evaluates them) is refused, as ProxyCommand is: ignoring it either way would apply, or
    drop, what the user configured for that host."""

    def _does_match(
        self,
        match_list: list[dict[str, Any]],
        target_hostname: str,
        canonical: bool,
        final: bool,
        options: Any,
    ) -> Any:
        at = next((i for i, c in enumerate(match_list) if c["type"] == "exec"), None)
        if at is None:
            return super()._does_match(match_list, target_hostname, canonical, final, options)
        before = match_list[:at]
        if before and super()._does_match(before, target_hostname, canonical, final, options) is False:
            return False  # ssh stops at the first criterion that fails: it would not run it
        raise ConfigError(
            f"ssh config for {target_hostname!r} reaches Match exec {match_list[at]['param']!r},"
            " which crosscheck does not run (a config is read, never executed): put a criterion"
            " this host fails before exec (Match host ... exec ...), or give the stage a"
            " host.config without it",
            field="host.config",
        )


# --------------------------------------------------------------------------- Include

#: OpenSSH's limit on nested Include (``READCONF_MAX_DEPTH`` in readconf.c): deeper is a loop.
MAX_INCLUDE_DEPTH = 16
#: ``Keyword value`` or ``Keyword=value``, as paramiko splits a line.
_LINE = re.compile(r"^\s*(\w+)(?:\s*=\s*|\s+)(.+)$")


@dataclass(frozen=True)
class _Block:
    """The block lines fall in: its criteria as ``Match`` words (empty: every host) and the
    header line that opens it again."""

    criteria: tuple[str, ...] = ()
    header: str = "Host *"


def _with_includes(path: str) -> list[str]:
    """The lines of the ssh config at ``path`` with every ``Include`` replaced by the files it
    names, as OpenSSH reads them (ssh_config(5), readconf.c), for paramiko's parser:

    - several paths per line, ``~`` and globs (each glob's files in lexical order; one that
      matches nothing is skipped, as ssh does); a relative path is under ``~/.ssh``;
    - an included file's lines before its first ``Host``/``Match`` belong to the block the
      ``Include`` stands in, and after the file that block goes on (its header is written
      again);
    - an ``Include`` inside a ``Host`` or ``Match`` block is conditional: a ``Host``/``Match``
      in the included file applies only where the includer's block applies too (written as
      one ``Match`` with both blocks' criteria; ``Host a b`` is ``originalhost a,b``);
    - nested up to :data:`MAX_INCLUDE_DEPTH` deep (deeper is refused: a loop).

    Raises:
        OSError: ``path`` cannot be read.
        ConfigError: an included file cannot be read, or Includes nest too deep.

    Example:
        >>> import pathlib, tempfile
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "inner").write_text("HostName 10.0.0.7\\nHost other\\n  Port 2200\\n")
        >>> _ = (d / "config").write_text(f"Host gpu\\n  Include {d}/inner\\n  User ml\\n")
        >>> print("\\n".join(_with_includes(str(d / "config"))))
        Host gpu
        HostName 10.0.0.7
        Match originalhost gpu originalhost other
          Port 2200
        Host gpu
          User ml
    """
    out: list[str] = []
    _splice(path, _Block(), out, depth=0, top=True)
    return out


def _splice(path: str, outer: _Block, out: list[str], *, depth: int, top: bool = False) -> bool:
    """Append ``path``'s lines to ``out``, in the block ``outer`` (the includer's), following
    its Includes. Returns whether it opened a block of its own (the includer's header must
    then be written again)."""
    lines = _read_config(path).splitlines()
    block, opened = outer, False
    for number, raw in enumerate(lines, 1):
        m = _LINE.match(raw)  # a comment or a blank line: None
        key, value = (m[1].lower(), m[2]) if m else ("", "")
        if key in ("host", "match"):
            criteria = _criteria(key, value)
            if not outer.criteria:  # an unconditional place: the line as written
                block = _Block(criteria, raw.strip())
            else:  # inside the includer's block: both must match
                both = outer.criteria + criteria
                block = _Block(both, f"Match {' '.join(both)}")
            out.append(block.header)
            opened = True
        elif key == "include":
            for included in _include_paths(value, path, number):
                if depth + 1 > MAX_INCLUDE_DEPTH:
                    raise ConfigError(
                        f"ssh config {path} line {number}: Include nested more than"
                        f" {MAX_INCLUDE_DEPTH} deep (does it include itself?)",
                        field="host.config",
                    )
                try:
                    reopen = _splice(included, block, out, depth=depth + 1)
                except OSError as exc:
                    raise ConfigError(
                        f"cannot read ssh config {included} (Include in {path} line {number}):"
                        f" {exc.strerror or exc}",
                        field="host.config",
                    ) from None
                if reopen:
                    out.append(block.header)
        else:
            out.append(raw)
    return opened and not top


#: An ssh config is a few KiB; one larger than this is not one.
MAX_CONFIG_BYTES = 1024 * 1024


def _read_config(path: str) -> str:
    """The text of the ssh config file at ``path``: at most :data:`MAX_CONFIG_BYTES`, and not
    a FIFO or a socket (``/dev/null``, ``ssh -F``'s "no config", reads as empty).
    ``/dev/zero`` (as ``host.config`` or an Include's glob) was read until memory ran out, and
    a FIFO's open() waited for a writer forever.

    Raises:
        OSError: it cannot be read, is a FIFO or a socket, or is too large (``strerror`` says).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO: no wait for a writer
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            raise OSError(errno.EINVAL, "a pipe or a socket, not a file", path)
        with open(fd, "rb", closefd=False) as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise OSError(errno.EFBIG, f"larger than {MAX_CONFIG_BYTES // 1024} KiB: not an ssh config", path)
    return data.decode("utf-8", errors="replace")


def _criteria(key: str, value: str) -> tuple[str, ...]:
    """A ``Host`` or ``Match`` line's criteria as ``Match`` words (``all`` matches every host:
    no words)."""
    try:
        words = shlex.split(value)
    except ValueError:
        words = value.split()
    if key == "host":
        return ("originalhost", shlex.quote(",".join(words)))
    return tuple(shlex.quote(w) for w in words if w.lower() != "all")


def _include_paths(value: str, where: str, number: int) -> list[str]:
    """The files an ``Include`` line names: globs expanded, each in lexical order."""
    try:
        patterns = shlex.split(value)
    except ValueError:
        raise ConfigError(
            f"ssh config {where} line {number}: cannot parse Include", field="host.config"
        ) from None
    found: list[str] = []
    for pattern in patterns:
        pattern = os.path.expanduser(pattern)
        if not os.path.isabs(pattern):
            pattern = os.path.join(os.path.expanduser("~/.ssh"), pattern)
        found.extend(sorted(glob.glob(pattern)))
    return found


def endpoint(
    cfg: paramiko.SSHConfig,
    alias: str,
    *,
    port: int | None = None,
    user: str | None = None,
    key: str | None = None,
) -> tuple[Endpoint, str | None]:
    """Apply ssh config to ``alias``; explicit values win. Returns the ProxyJump value too."""
    entry = cfg.lookup(alias)
    if "proxycommand" in entry and "proxyjump" not in entry:
        # Silently connecting directly instead would bypass what the user configured.
        raise ConfigError(
            f"ssh config for {alias!r} uses ProxyCommand, which is not supported; use ProxyJump",
            field="host.ssh",
        )
    try:
        cfg_port = int(entry["port"]) if "port" in entry else None
    except ValueError:
        raise ConfigError(f"ssh config for {alias!r}: bad Port", field="host.ssh") from None
    keys = (
        (os.path.expanduser(key),)
        if key
        else tuple(os.path.expanduser(k) for k in entry.get("identityfile", ()))
    )
    ep = Endpoint(
        alias=alias,
        hostname=entry.get("hostname", alias),
        port=port or cfg_port or 22,
        user=user or entry.get("user") or getpass.getuser(),
        key_files=keys,
        identities_only=entry.get("identitiesonly", "no").lower() == "yes",
    )
    jump = entry.get("proxyjump")
    return ep, (None if jump in (None, "none") else jump)


_JUMP = re.compile(r"^(?:(?P<user>[^@]+)@)?(?P<host>\[[^\]]+\]|[^:]+)(?::(?P<port>\d+))?$")


def route_for(spec: SSHSpec) -> Route:
    """Resolve the stage's host section (and ssh config) into endpoints; no network."""
    cfg = load_ssh_config(spec.config)
    target, jump_value = endpoint(cfg, spec.ssh, port=spec.port, user=spec.user, key=spec.key)
    jump_value = spec.proxy_jump or jump_value
    jumps: list[Endpoint] = []
    # ProxyJump lists hops in order, comma-separated; each hop's own ssh config applies
    # (but not its own ProxyJump, unlike OpenSSH: keep the chain what the user wrote).
    for hop in (jump_value or "").split(","):
        hop = hop.strip()
        if not hop:
            continue
        m = _JUMP.match(hop.removeprefix("ssh://"))
        if not m:
            raise ConfigError(f"cannot parse ProxyJump {hop!r}", field="host.ssh")
        ep, _ = endpoint(
            cfg,
            m["host"].strip("[]"),
            port=int(m["port"]) if m["port"] else None,
            user=m["user"],
        )
        jumps.append(ep)
    return Route(target=target, jumps=tuple(jumps))
