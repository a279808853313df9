"""Opening one SSH connection: the TCP socket, host keys, authentication, the ProxyJump chain.

What :class:`~sensors._hosts.ssh.SSHHost` calls to connect (and reconnect, with a bounded
tenacity backoff on :class:`Transient` failures). How paramiko's defaults are corrected here:

- paramiko does not set TCP_NODELAY; without it every exec stalls ~40 ms (Nagle + delayed
  ACK), so the socket is created here and the option set before paramiko sees it.
- Host keys: known_hosts is loaded explicitly (a missing file is an error, not "trust
  everything"), unknown or changed keys are refused with the offered key's fingerprint and
  the command that would trust it, and the file is never written. A stage from a
  ``CrosscheckSSHHost`` block (``SSHSpec.material``) brings the key and known_hosts as text:
  they reach paramiko from memory, never through a file, and are verified the same way.
- Every paramiko timeout (banner, auth, channel) is the stage's ``connect_timeout``;
  paramiko's own channel timeout default is an hour.
- A failed authentication is permanent (retrying the same credentials only fills the
  server's auth log); a refused, reset or timed-out connection or handshake is
  :class:`Transient`.
"""

from __future__ import annotations

import io
import os
import shlex
import socket
import time
from collections.abc import Callable
from typing import NoReturn

import paramiko

from sensors._base.errors import ConnectError, HostError, HostKeyError
from sensors._config.stage import SSHMaterial, SSHSpec
from sensors._hosts.ssh_config import Endpoint, Route

__all__ = [
    "SecretResolver",
    "Transient",
    "authenticate",
    "known_hosts_file",
    "open_route",
    "open_socket",
    "private_key",
]

SecretResolver = Callable[[str], str]


class Transient(Exception):
    """A connect failure worth retrying (refused, reset, timeout); wraps a ConnectError."""

    def __init__(self, error: ConnectError):
        self.error = error
        super().__init__(str(error))


class _Unknown(Exception):
    """Raised from the missing-host-key policy, carrying the key the server offered."""

    def __init__(self, name: str, key: paramiko.PKey):
        self.name = name
        self.key = key
        super().__init__(name)


class _RefuseUnknown(paramiko.RejectPolicy):  # type: ignore[misc]  # paramiko ships no types: Any
    """RejectPolicy that keeps the offered key, so the error can show its fingerprint."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> NoReturn:
        raise _Unknown(hostname, key)


def _key_text(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.fingerprint}"


def known_hosts_file(spec: SSHSpec, route: Route, name: str) -> str:
    """The stage's known_hosts path (or, with key material in memory, what holds its
    known_hosts); raises HostKeyError when the file does not exist."""
    if spec.material is not None:
        return f"the known_hosts of {spec.material.source}"
    path = os.path.expanduser(spec.known_hosts)
    if not os.path.isfile(path):
        # paramiko's load_system_host_keys() ignores a missing file; then every key
        # would be "unknown" and the only way forward would be trusting blindly.
        raise HostKeyError(
            f"known_hosts file {path} does not exist; refusing to trust any host key "
            f"(create it with: ssh-keyscan -p {route.target.port} "
            f"{route.target.hostname} >> {shlex.quote(path)}, after verifying the key)",
            host=name,
        )
    return path


def open_socket(ep: Endpoint, *, timeout: float, name: str) -> socket.socket:
    """A TCP connection to ``ep`` with TCP_NODELAY set; a failure is :class:`Transient`."""
    try:
        sock = socket.create_connection((ep.hostname, ep.port), timeout=timeout)
    except OSError as exc:
        raise Transient(ConnectError(f"cannot connect to {ep.label}: {exc}", host=name)) from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def authenticate(
    ep: Endpoint,
    sock: socket.socket | paramiko.Channel,
    known_hosts: str,
    *,
    spec: SSHSpec,
    name: str,
    resolve: SecretResolver,
    is_target: bool,
) -> paramiko.SSHClient:
    """An SSH client authenticated to ``ep`` over ``sock``, host key checked against
    ``known_hosts``. The stage's password and passphrase are resolved (and used) for the
    target only, never sent to a jump host."""
    timeout = spec.connect_timeout
    client = paramiko.SSHClient()
    # get_host_keys().load() instead of load_host_keys(): the latter remembers the file
    # name, and save_host_keys() or any auto-add policy could then write to it.
    try:
        if spec.material is not None:
            _add_host_keys(client.get_host_keys(), spec.material.known_hosts)
        else:
            client.get_host_keys().load(known_hosts)
    except (OSError, paramiko.SSHException) as exc:
        raise HostKeyError(f"cannot read known_hosts {known_hosts}: {exc}", host=name) from exc
    client.set_missing_host_key_policy(_RefuseUnknown())
    password = passphrase = None
    if is_target and spec.password:
        password = resolve(spec.password)
    if is_target and spec.passphrase:
        passphrase = resolve(spec.passphrase)
    pkey = None
    if spec.material is not None and spec.material.private_key is not None:
        # Public-key authentication sends a jump host a signature, never the key: the same
        # key serves every hop (a worker has no other key to offer).
        pkey = private_key(spec.material, name=name)
    began = time.monotonic()
    try:
        client.connect(
            ep.hostname,
            port=ep.port,
            username=ep.user,
            password=password,
            passphrase=passphrase,
            pkey=pkey,
            key_filename=(list(ep.key_files) or None) if spec.material is None else None,
            look_for_keys=not ep.key_files and spec.material is None,
            allow_agent=not ep.identities_only and spec.material is None,
            sock=sock,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            channel_timeout=timeout,  # paramiko's default is an hour
        )
    except Exception as exc:
        transport = client.get_transport()
        banner = getattr(transport, "remote_version", "") if transport is not None else ""
        client.close()
        error = _connect_failure(exc, ep, known_hosts, name, timeout, time.monotonic() - began, banner=banner)
        if error is None:
            raise
        # A transient failure keeps its cause; the others say all there is (no secrets).
        raise error from (exc if isinstance(error, Transient) else None)
    return client


def _add_host_keys(keys: paramiko.HostKeys, text: str) -> None:
    """known_hosts content into ``keys``, as ``HostKeys.load`` reads a file (hashed names
    and markers included; lines it cannot parse are skipped, as OpenSSH does)."""
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
        if entry is not None and entry.key is not None:
            for hostname in entry.hostnames:
                keys.add(hostname, entry.key.get_name(), entry.key)


def private_key(material: SSHMaterial, *, name: str) -> paramiko.PKey:
    """The private key held in ``material`` (OpenSSH or PEM text), decrypted in memory."""
    assert material.private_key is not None
    text = material.private_key.get_secret_value()
    password = material.passphrase.get_secret_value() if material.passphrase else None
    for kind in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return kind.from_private_key(io.StringIO(text), password=password)
        except paramiko.PasswordRequiredException:
            raise ConnectError(
                f"the private key of {material.source} is encrypted: give its passphrase", host=name
            ) from None
        except (paramiko.SSHException, ValueError, TypeError):
            continue  # not this kind of key (or a wrong passphrase): try the next
    # The key's text is never part of the message.
    raise ConnectError(
        f"the private key of {material.source} cannot be read (not an Ed25519, ECDSA or RSA key "
        "in OpenSSH or PEM form, or a wrong passphrase)",
        host=name,
    )


def _connect_failure(
    exc: Exception,
    ep: Endpoint,
    known_hosts: str,
    name: str,
    timeout: float | None = None,
    waited: float | None = None,
    banner: str = "",
) -> HostError | Transient | None:
    """What a failed ``SSHClient.connect`` means for crosscheck (None: not ours to translate)."""
    if isinstance(exc, _Unknown):
        return HostKeyError(
            f"host key for {ep.label} is not in {known_hosts} (looked up as {exc.name}); "
            f"the server offered {_key_text(exc.key)}. After verifying that fingerprint "
            f"out of band, trust it with: ssh-keyscan -p {ep.port} {ep.hostname} "
            f">> {shlex.quote(known_hosts)}",
            host=name,
        )
    if isinstance(exc, paramiko.BadHostKeyException):
        return HostKeyError(
            f"host key for {ep.label} does not match {known_hosts}: the server offered "
            f"{_key_text(exc.key)}, known_hosts has {_key_text(exc.expected_key)}. "
            "Possibly a man-in-the-middle; if the host was reinstalled, verify the new "
            f"key, remove the old entry (ssh-keygen -R '{ep.known_hosts_name}' -f "
            f"{shlex.quote(known_hosts)}) and trust the new one with: ssh-keyscan -p "
            f"{ep.port} {ep.hostname} >> {shlex.quote(known_hosts)}",
            host=name,
        )
    if isinstance(exc, paramiko.AuthenticationException):
        # Permanent: retrying the same credentials only fills the server's auth log.
        return ConnectError(
            f"authentication as {ep.user}@{ep.label} failed: {type(exc).__name__}",
            host=name,
        )
    if (
        timeout is not None
        and waited is not None
        and waited >= timeout * 0.9
        and isinstance(exc, (paramiko.SSHException, EOFError, TimeoutError))
    ):
        # A host that accepts the connection and then says nothing for the whole timeout
        # (frozen, its sshd stopped: the kernel still completes TCP handshakes). paramiko's
        # words for it vary with the moment it gave up ("Error reading SSH protocol banner",
        # "No existing session") and name none of that; the time waited does.
        # Said only where it is true: a host that sent its SSH banner did answer, then stalled.
        said = (
            f"{ep.label} sent its SSH banner, then no answer within {timeout:g} s"
            " (it stalled in the handshake"
            if banner
            else f"no answer from {ep.label} within {timeout:g} s"
            " (it accepted the connection, then said nothing"
        )
        return Transient(ConnectError(f"{said}: the host or its sshd may be frozen)", host=name))
    if isinstance(exc, (paramiko.SSHException, EOFError, OSError)):
        return Transient(ConnectError(f"SSH handshake with {ep.label} failed: {exc}", host=name))
    return None


def open_route(
    route: Route, spec: SSHSpec, *, name: str, resolve: SecretResolver
) -> list[paramiko.SSHClient]:
    """Connect through the jump hops to the target: the clients, jump hops first, target last.

    Each hop after the first is reached through a ``direct-tcpip`` channel of the one before;
    on any failure every client opened so far is closed.
    """
    known_hosts = known_hosts_file(spec, route, name)
    hops = (*route.jumps, route.target)
    clients: list[paramiko.SSHClient] = []
    try:
        sock: socket.socket | paramiko.Channel | None = None
        for ep in hops:
            if sock is None:
                sock = open_socket(ep, timeout=spec.connect_timeout, name=name)
            client = authenticate(
                ep, sock, known_hosts, spec=spec, name=name, resolve=resolve, is_target=ep is route.target
            )
            clients.append(client)
            sock = None
            if ep is not route.target:
                sock = _tunnel(client, ep, hops[hops.index(ep) + 1], timeout=spec.connect_timeout, name=name)
    except BaseException:
        for c in clients:
            c.close()
        raise
    return clients


def _tunnel(
    client: paramiko.SSHClient, ep: Endpoint, nxt: Endpoint, *, timeout: float, name: str
) -> paramiko.Channel:
    """A ``direct-tcpip`` channel from the jump host ``ep`` to the next hop ``nxt``."""
    try:
        return client.get_transport().open_channel(
            "direct-tcpip",
            (nxt.hostname, nxt.port),
            ("127.0.0.1", 0),
            timeout=timeout,
        )
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise Transient(
            ConnectError(f"jump host {ep.label} cannot reach {nxt.label}: {exc}", host=name)
        ) from exc
