"""Where an SSH stage connects: ``~/.ssh/config``, ProxyJump and the stage's own fields.

paramiko's ``SSHClient`` parses nothing of ``~/.ssh/config``; HostName, Port, User,
IdentityFile, IdentitiesOnly and ProxyJump are applied here, explicit stage fields winning.
ProxyCommand is refused rather than ignored (ignoring it would connect directly, bypassing
what the user configured). Resolving a route touches no network.

Example:
    >>> from sensors._config import SSHSpec
    >>> route = route_for(SSHSpec(ssh="gpu-box", user="root", port=2222, config="/dev/null"))
    >>> route.target.label, route.target.user, route.jumps
    ('gpu-box:2222', 'root', ())
"""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass, field

import paramiko

from sensors._config import SSHSpec
from sensors._errors import ConfigError

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
            return paramiko.SSHConfig()
        path = default
    path = os.path.expanduser(path)
    try:
        return paramiko.SSHConfig.from_path(path)
    except OSError as exc:
        raise ConfigError(f"cannot read ssh config {path}: {exc.strerror}", field="host.config") from exc
    except Exception as exc:  # paramiko raises bare ConfigParseError / ValueError
        raise ConfigError(f"cannot parse ssh config {path}: {exc}", field="host.config") from None


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
