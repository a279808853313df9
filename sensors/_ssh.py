"""The SSH host: one persistent paramiko connection per host, one round trip per check.

This is the only module that imports paramiko. Each connection keeps remote shells started
by ``exec /bin/sh -s`` and sends one probe per check on stdin (see :class:`_Session`), so the
remote side needs only POSIX sh, and the remote *login* shell (bash, tcsh, fish) parses
nothing but those three words. Spawning a job goes through the same shells. Failure modes
and how they are handled (field notes, "SSH with paramiko"):

- paramiko's keepalive never notices a dead server and ``is_active()`` can stay True, so
  every check has a wall-clock deadline of its own; a transport error drops the connection
  and the next check reconnects, with a bounded tenacity backoff; a timeout fails the check
  alone while the connection still answers.
- paramiko does not set TCP_NODELAY; without it every exec stalls ~40 ms (Nagle + delayed
  ACK), so the socket is created here and the option set before paramiko sees it.
- ``SSHClient`` parses nothing of ``~/.ssh/config``; HostName, Port, User, IdentityFile,
  IdentitiesOnly and ProxyJump are applied here, explicit stage fields winning.
- Host keys: known_hosts is loaded explicitly (a missing file is an error, not "trust
  everything"), unknown or changed keys are refused, and the file is never written.

Example:
    >>> from sensors._config import SSHSpec
    >>> host = get_host(SSHSpec(ssh="gpu-box", user="root"))  # doctest: +SKIP
    >>> host.run_script(b"echo hi\\n", timeout=10)  # doctest: +SKIP
    b'hi\\n'
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import secrets
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import paramiko
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from sensors._config import SSHSpec
from sensors._errors import ConfigError, ConnectError, HostKeyError, ProbeError
from sensors._hosts import spawn_script
from sensors._secrets import resolve_secret

__all__ = ["SSHHost", "close_all", "get_host", "resolve_secret"]

log = logging.getLogger("crosscheck.ssh")

#: The whole remote command line. Every login shell in use parses it the same way
#: (no redirections, quotes or variables: tcsh and fish differ from sh on all of those).
REMOTE_COMMAND = "exec /bin/sh -s"

#: Connect attempts per check; with the exponential wait below, a host that is down costs a
#: check about 0.75 s plus the connect timeouts, and a check never waits longer than
#: ``connect_timeout`` in backoff.
CONNECT_ATTEMPTS = 3

#: After a check timed out, how long a fresh channel open may take to prove the connection
#: still alive (a slow remote command must not cost the other stages on this host their
#: connection; a dead server fails this and the connection is dropped).
LIVENESS_TIMEOUT = 2.0

#: Channels open at once per connection. sshd's MaxSessions defaults to 10 and a refused
#: channel open is indistinguishable from a dying connection to paramiko: stay below it.
MAX_CHANNELS = 8

SecretResolver = Callable[[str], str]
_T = TypeVar("_T")


@dataclass(frozen=True)
class _Endpoint:
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
class _Route:
    target: _Endpoint
    jumps: tuple[_Endpoint, ...] = field(default=())


def _load_ssh_config(path: str | None) -> paramiko.SSHConfig:
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


def _endpoint(
    cfg: paramiko.SSHConfig,
    alias: str,
    *,
    port: int | None = None,
    user: str | None = None,
    key: str | None = None,
) -> tuple[_Endpoint, str | None]:
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
    ep = _Endpoint(
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


def _route(spec: SSHSpec) -> _Route:
    """Resolve the stage's host section (and ssh config) into endpoints; no network."""
    cfg = _load_ssh_config(spec.config)
    target, jump_value = _endpoint(cfg, spec.ssh, port=spec.port, user=spec.user, key=spec.key)
    jumps: list[_Endpoint] = []
    # ProxyJump lists hops in order, comma-separated; each hop's own ssh config applies
    # (but not its own ProxyJump, unlike OpenSSH: keep the chain what the user wrote).
    for hop in (jump_value or "").split(","):
        hop = hop.strip()
        if not hop:
            continue
        m = _JUMP.match(hop.removeprefix("ssh://"))
        if not m:
            raise ConfigError(f"cannot parse ProxyJump {hop!r}", field="host.ssh")
        ep, _ = _endpoint(
            cfg,
            m["host"].strip("[]"),
            port=int(m["port"]) if m["port"] else None,
            user=m["user"],
        )
        jumps.append(ep)
    return _Route(target=target, jumps=tuple(jumps))


class _Unknown(Exception):
    """Raised from the missing-host-key policy, carrying the key the server offered."""

    def __init__(self, name: str, key: paramiko.PKey):
        self.name = name
        self.key = key
        super().__init__(name)


class _RefuseUnknown(paramiko.RejectPolicy):
    """RejectPolicy that keeps the offered key, so the error can show its fingerprint."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey):
        raise _Unknown(hostname, key)


class _Transient(Exception):
    """A connect failure worth retrying (refused, reset, timeout); wraps a ConnectError."""

    def __init__(self, error: ConnectError):
        self.error = error
        super().__init__(str(error))


def _key_text(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.fingerprint}"


class SSHHost:
    """A remote host reached over SSH, implementing the :class:`~sensors._hosts.Host` seam.

    One persistent connection, opened on first use and reused by every check and by every
    stage sharing this object (use :func:`get_host` to share it); channels on it are opened
    concurrently from several threads, connecting and reconnecting happen under a lock.

    Args:
        spec: the stage's ``host:`` section.
        name: label for evidence and errors; defaults to ``spec.ssh``.
        secret_resolver: turns ``env:NAME`` / ``block:NAME`` into a secret;
            defaults to :func:`resolve_secret`.
        sleep: used for the reconnect backoff (tests pass a no-op).

    Example:
        >>> from sensors._config import SSHSpec
        >>> host = SSHHost(SSHSpec(ssh="gpu-box", user="root", connect_timeout=5))
        >>> out = host.run_script(b"uname -n\\n", timeout=10)  # doctest: +SKIP
        >>> host.close()
    """

    nvml = False

    def __init__(
        self,
        spec: SSHSpec,
        *,
        name: str | None = None,
        secret_resolver: SecretResolver | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.spec = spec
        self.name = name or spec.ssh
        self.route = _route(spec)
        self._resolve = secret_resolver or resolve_secret
        self._sleep = sleep
        self._lock = threading.Lock()
        self._clients: list[paramiko.SSHClient] = []  # jump hops first, target last
        self._transport: paramiko.Transport | None = None
        # Idle shells (see _Session), reused check after check on the current transport.
        self._idle: list[_Session] = []
        # Channels open on this connection (busy or idle shells, one-shot execs), at most
        # MAX_CHANNELS; waiters are woken when a shell goes idle or a channel closes.
        # Lock order: self._lock (connecting) before self._slots, never the other way round.
        self._slots = threading.Condition(threading.RLock())
        self._channels_open = 0
        # The last connect failure and when: threads that waited on the lock meanwhile share
        # it instead of each paying the whole backoff again (the check's deadline holds).
        self._failed: tuple[float, ConnectError] | None = None
        #: Connections opened so far (tests and the bench read it to prove reuse).
        self.connects = 0

    # -- connection -----------------------------------------------------------------------

    def _known_hosts(self) -> str:
        path = os.path.expanduser(self.spec.known_hosts)
        if not os.path.isfile(path):
            # paramiko's load_system_host_keys() ignores a missing file; then every key
            # would be "unknown" and the only way forward would be trusting blindly.
            raise HostKeyError(
                f"known_hosts file {path} does not exist; refusing to trust any host key "
                f"(create it with: ssh-keyscan -p {self.route.target.port} "
                f"{self.route.target.hostname} >> {shlex.quote(path)}, after verifying the key)",
                host=self.name,
            )
        return path

    def _socket(self, ep: _Endpoint) -> socket.socket:
        timeout = self.spec.connect_timeout
        try:
            sock = socket.create_connection((ep.hostname, ep.port), timeout=timeout)
        except OSError as exc:
            raise _Transient(ConnectError(f"cannot connect to {ep.label}: {exc}", host=self.name)) from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _authenticate(
        self, ep: _Endpoint, sock: socket.socket | paramiko.Channel, known_hosts: str
    ) -> paramiko.SSHClient:
        timeout = self.spec.connect_timeout
        client = paramiko.SSHClient()
        # get_host_keys().load() instead of load_host_keys(): the latter remembers the file
        # name, and save_host_keys() or any auto-add policy could then write to it.
        try:
            client.get_host_keys().load(known_hosts)
        except (OSError, paramiko.SSHException) as exc:
            raise HostKeyError(f"cannot read known_hosts {known_hosts}: {exc}", host=self.name) from exc
        client.set_missing_host_key_policy(_RefuseUnknown())
        is_target = ep is self.route.target
        password = passphrase = None
        if is_target and self.spec.password:
            password = self._resolve(self.spec.password)
        if is_target and self.spec.passphrase:
            passphrase = self._resolve(self.spec.passphrase)
        try:
            client.connect(
                ep.hostname,
                port=ep.port,
                username=ep.user,
                password=password,
                passphrase=passphrase,
                key_filename=list(ep.key_files) or None,
                look_for_keys=not ep.key_files,
                allow_agent=not ep.identities_only,
                sock=sock,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                channel_timeout=timeout,  # paramiko's default is an hour
            )
        except _Unknown as exc:
            client.close()
            raise HostKeyError(
                f"host key for {ep.label} is not in {known_hosts} (looked up as {exc.name}); "
                f"the server offered {_key_text(exc.key)}. After verifying that fingerprint "
                f"out of band, trust it with: ssh-keyscan -p {ep.port} {ep.hostname} "
                f">> {shlex.quote(known_hosts)}",
                host=self.name,
            ) from None
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostKeyError(
                f"host key for {ep.label} does not match {known_hosts}: the server offered "
                f"{_key_text(exc.key)}, known_hosts has {_key_text(exc.expected_key)}. "
                "Possibly a man-in-the-middle; if the host was reinstalled, verify the new "
                f"key, remove the old entry (ssh-keygen -R '{ep.known_hosts_name}' -f "
                f"{shlex.quote(known_hosts)}) and trust the new one with: ssh-keyscan -p "
                f"{ep.port} {ep.hostname} >> {shlex.quote(known_hosts)}",
                host=self.name,
            ) from None
        except paramiko.AuthenticationException as exc:
            client.close()
            # Permanent: retrying the same credentials only fills the server's auth log.
            raise ConnectError(
                f"authentication as {ep.user}@{ep.label} failed: {type(exc).__name__}",
                host=self.name,
            ) from None
        except (paramiko.SSHException, EOFError, OSError) as exc:
            client.close()
            raise _Transient(
                ConnectError(f"SSH handshake with {ep.label} failed: {exc}", host=self.name)
            ) from exc
        except Exception:
            client.close()
            raise
        return client

    def _open(self) -> None:
        """Connect through the jump hops to the target; called with the lock held."""
        known_hosts = self._known_hosts()
        clients: list[paramiko.SSHClient] = []
        try:
            sock: socket.socket | paramiko.Channel | None = None
            for ep in (*self.route.jumps, self.route.target):
                if sock is None:
                    sock = self._socket(ep)
                client = self._authenticate(ep, sock, known_hosts)
                clients.append(client)
                sock = None
                if ep is not self.route.target:
                    nxt = self._next_hop(ep)
                    try:
                        sock = client.get_transport().open_channel(
                            "direct-tcpip",
                            (nxt.hostname, nxt.port),
                            ("127.0.0.1", 0),
                            timeout=self.spec.connect_timeout,
                        )
                    except (paramiko.SSHException, EOFError, OSError) as exc:
                        raise _Transient(
                            ConnectError(
                                f"jump host {ep.label} cannot reach {nxt.label}: {exc}",
                                host=self.name,
                            )
                        ) from exc
        except BaseException:
            for c in clients:
                c.close()
            raise
        self._clients = clients
        self._transport = clients[-1].get_transport()
        self.connects += 1
        log.debug("connected to %s (%s)", self.name, self.route.target.label)

    def _next_hop(self, ep: _Endpoint) -> _Endpoint:
        hops = (*self.route.jumps, self.route.target)
        return hops[hops.index(ep) + 1]

    def _connect(self) -> paramiko.Transport:
        """The live transport, connecting (with bounded backoff) when there is none."""
        transport = self._transport
        if transport is not None and transport.is_active():
            return transport
        asked = time.monotonic()
        with self._lock:
            # Another thread may have reconnected while this one waited for the lock.
            if self._transport is not None and self._transport.is_active():
                return self._transport
            if self._failed is not None and self._failed[0] >= asked:
                # ...or failed to, after this one asked: that answer is this one's too.
                raise self._failed[1]
            self._drop_locked()
            retrying = Retrying(
                stop=stop_after_attempt(CONNECT_ATTEMPTS) | stop_after_delay(self.spec.connect_timeout),
                wait=wait_exponential(multiplier=0.25, max=2.0),
                retry=retry_if_exception_type(_Transient),
                sleep=self._sleep,
                reraise=True,
            )
            try:
                retrying(self._open)
            except _Transient as exc:
                self._failed = (time.monotonic(), exc.error)
                raise exc.error from exc.__cause__
            self._failed = None
            assert self._transport is not None
            return self._transport

    def _drop(self, transport: paramiko.Transport | None = None) -> None:
        """Drop the connection (only if it still is ``transport``, when given)."""
        with self._lock:
            if transport is None or transport is self._transport:
                self._drop_locked()

    def _drop_locked(self) -> None:
        with self._slots:
            idle, self._idle = self._idle, []
        for session in idle:
            session.close()
        clients, self._clients, self._transport = self._clients, [], None
        for client in reversed(clients):
            try:
                client.close()
            except Exception:  # closing a broken connection may raise anything; it is gone
                log.debug("error closing connection to %s", self.name, exc_info=True)

    # -- Host protocol --------------------------------------------------------------------

    def run_script(self, script: bytes, *, timeout: float) -> bytes:
        """Run ``script`` with ``/bin/sh -s`` on the host and return its stdout.

        ``timeout`` is a wall-clock deadline for the exchange itself; connecting is bounded
        separately by ``connect_timeout``.

        Raises:
            HostKeyError: the host key is unknown or changed, or known_hosts is missing.
            ConnectError: connecting or authenticating failed, or the connection dropped.
            ProbeError: the script did not finish within ``timeout``.
        """
        out, status = self._run_in_shell(script, timeout=timeout)
        if status in (124, 137):
            # Killed on the host at the deadline; the shell itself is fine and kept.
            raise ProbeError(
                f"probe did not finish within {timeout:g}s (stopped on the host)", host=self.name
            )
        return out

    def _run_in_shell(self, script: bytes, *, timeout: float) -> tuple[bytes, int | None]:
        """``script`` on a kept remote shell: its stdout and exit status."""
        deadline = time.monotonic() + timeout
        transport = self._connect()
        for attempt in range(2):
            session, reused = self._take_session(transport, deadline)
            try:
                out, status = session.run(script, deadline)
            except _Deadline:
                session.close()
                self._check_alive(transport)
                raise ProbeError(f"probe did not finish within {timeout:g}s", host=self.name) from None
            except (paramiko.SSHException, EOFError, OSError) as exc:
                session.close()
                if reused and attempt == 0 and transport.is_active():
                    # An idle shell may have been ended meanwhile (killed, OOM) while the
                    # connection lives: one more try on a fresh shell, same deadline.
                    continue
                self._drop(transport)
                raise ConnectError(f"connection lost during the check: {exc}", host=self.name) from exc
            with self._slots:
                keep = transport is self._transport
                if keep:
                    self._idle.append(session)
                    self._slots.notify()
            if not keep:
                session.close()
            return out, status
        raise AssertionError("unreachable")  # pragma: no cover

    def _take_session(self, transport: paramiko.Transport, deadline: float) -> tuple[_Session, bool]:
        """An idle shell on ``transport``, or a new one in a free channel slot (below sshd's
        MaxSessions), waiting for either until the deadline. True: the shell was idle."""
        with self._slots:
            while True:
                if transport is self._transport and self._idle:
                    return self._idle.pop(), True
                if self._channels_open < MAX_CHANNELS:
                    self._channels_open += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ProbeError(
                        f"all {MAX_CHANNELS} channels to the host are busy (checks stuck on the host?)",
                        host=self.name,
                    )
                self._slots.wait(min(left, 1.0))
        released = threading.Event()

        def release() -> None:
            if not released.is_set():
                released.set()
                with self._slots:
                    self._channels_open -= 1
                    self._slots.notify()

        try:
            chan = self._open_channel(transport, deadline)
        except BaseException:
            release()
            raise
        return _Session(chan, release), False

    def _open_channel(self, transport: paramiko.Transport, deadline: float) -> paramiko.Channel:
        try:
            return transport.open_session(
                timeout=min(max(deadline - time.monotonic(), 0.1), self.spec.connect_timeout)
            )
        except paramiko.ChannelException as exc:
            # The server said no to this channel (MaxSessions, policy), over a live
            # connection: this check fails, the connection and the other stages stay.
            raise ProbeError(f"the server refused a channel: {exc}", host=self.name) from exc
        except (paramiko.SSHException, EOFError, OSError) as exc:
            self._drop(transport)
            raise ConnectError(f"connection lost: cannot open a channel: {exc}", host=self.name) from exc

    def _check_alive(self, transport: paramiko.Transport) -> None:
        """After a timeout: keep the connection only if the server still answers."""
        with self._slots:
            if self._channels_open >= MAX_CHANNELS:
                return  # every slot is in use by other checks: nothing to learn from one more
            self._channels_open += 1
        try:
            chan = transport.open_session(timeout=min(LIVENESS_TIMEOUT, self.spec.connect_timeout))
        except paramiko.ChannelException:
            pass  # refused, but answered: the connection is alive
        except Exception:  # dead or wedged, whatever paramiko says: reconnect next time
            log.info("dropping the connection to %s after a timeout", self.name)
            self._drop(transport)
        else:
            chan.close()
        finally:
            with self._slots:
                self._channels_open -= 1
                self._slots.notify()

    def spawn(self, argv: Sequence[str], *, log_path: str, cwd: str | None = None) -> int:
        """Start ``argv`` detached on the host (nohup, own session); return its PID.

        ``argv`` is quoted word by word (never parsed by a shell), so ``["/bin/echo",
        "; touch /tmp/x"]`` only echoes.
        """
        script = spawn_script(argv, log_path=log_path, cwd=cwd)
        out, status = self._run_in_shell(script, timeout=self.spec.check_timeout)
        m = re.search(rb"^pid (\d+)$", out, re.MULTILINE)
        if not m:
            why = "cannot cd to the working directory" if status == 97 else f"exit {status}"
            detail = out.decode("utf-8", "replace").strip()[-300:]  # spawn_script puts errors here
            raise ProbeError(f"spawn failed ({why}): {detail or 'no output'}", host=self.name)
        return int(m.group(1))

    def close(self) -> None:
        self._drop()

    def __enter__(self) -> SSHHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        t = self.route.target
        return f"SSHHost({self.name!r}, {t.user}@{t.label})"


class _Deadline(Exception):
    pass


class _Session:
    """A long-lived ``exec /bin/sh -s`` on one channel that runs one script after another.

    sshd starts every command through the user's login shell, and a login shell's rc files
    (``conda init``, ``pyenv init`` in ~/.bashrc) can cost 100-300 ms of the monitored
    host's CPU per exec. Keeping the ``sh`` started by one exec and feeding it a script per
    check pays that once per connection instead of once per check, and still costs one
    round trip per check. Each script runs in a brace group with stdin from /dev/null (no
    command can eat the next script) and is followed by a marker with a fresh nonce that
    ends the answer. A shell that timed out or misbehaved is closed, never reused. The shell
    keeps variables between scripts: every probe sets all it uses.
    """

    def __init__(self, chan: paramiko.Channel, release: Callable[[], None]) -> None:
        self.chan = chan
        self.started = False
        self._release = release  # gives the connection's channel slot back, once

    def run(self, script: bytes, deadline: float) -> tuple[bytes, int | None]:
        """Run ``script``; return its stdout and exit status (137: stopped on the host)."""
        marker = secrets.token_hex(12).encode()
        end = b"\n@@crosscheck-done " + marker + b" "
        # The host enforces the deadline too, a second early: a probe stuck on the host (a
        # stat on a hung NFS mount) is killed there with its process group, the shell answers,
        # and sshd's channel slot (MaxSessions) is not held by a command nobody waits for.
        limit = max(1, int(deadline - time.monotonic()) - 1)
        wrapped = (
            b"s=$(cat <<'@@crosscheck-script-" + marker + b"'\n"
            + script
            + b"\n@@crosscheck-script-" + marker + b"\n)\n"
            b"if command -v timeout >/dev/null 2>&1; then timeout -s KILL "
            + str(limit).encode()
            + b' /bin/sh -c "$s" </dev/null 2>/dev/null; else /bin/sh -c "$s" </dev/null 2>/dev/null; fi\n'
            b"printf '\\n@@crosscheck-done %s %s\\n' " + marker + b' "$?"\n'
        )  # fmt: skip
        return _with_watchdog(self.chan, deadline, lambda: self._converse(wrapped, end, deadline))

    def _converse(self, wrapped: bytes, end: bytes, deadline: float) -> tuple[bytes, int | None]:
        chan = self.chan

        def remaining() -> float:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Deadline
            return left

        chan.settimeout(remaining())
        if not self.started:
            chan.exec_command(REMOTE_COMMAND)
            self.started = True
        try:
            chan.sendall(wrapped)
        except TimeoutError:
            raise _Deadline from None
        buf = bytearray()
        fd = chan.fileno()
        while True:
            while chan.recv_ready():
                buf += chan.recv(1 << 20)
            while chan.recv_stderr_ready():
                chan.recv_stderr(1 << 20)  # the login shell's noise; the scripts' is discarded
            # The marker is searched only in what arrived since the last look (and its tail).
            at = buf.find(end, max(0, len(buf) - (1 << 20) - len(end)))
            if at >= 0 and buf.endswith(b"\n") and buf.find(b"\n", at + len(end)) == len(buf) - 1:
                status = buf[at + len(end) : -1].decode("ascii", "replace").strip()
                return bytes(buf[:at]), int(status) if status.isdigit() else None
            if chan.eof_received or chan.closed:
                if chan.recv_ready() or chan.recv_stderr_ready():
                    continue
                raise EOFError("the remote shell ended before the script finished")
            select.select([fd], [], [], remaining())

    def close(self) -> None:
        try:
            self.chan.close()
        except Exception:  # closing a broken channel may raise anything; it is gone
            log.debug("error closing a channel", exc_info=True)
        finally:
            self._release()


def _with_watchdog(chan: paramiko.Channel, deadline: float, body: Callable[[], _T]) -> _T:
    """Run ``body`` with a watchdog that closes ``chan`` at the deadline.

    paramiko's exec_command() waits for the server's reply with no timeout at all, and a
    dead server never replies: closing the channel wakes every wait on it
    (Channel._set_closed sets its events). A close by the watchdog reads as ``_Deadline``.
    """
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        chan.close()

    watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), expire)
    watchdog.daemon = True  # it may block sending CLOSE on a wedged transport
    watchdog.start()
    try:
        result = body()
    except (paramiko.SSHException, EOFError, OSError):
        if fired.is_set():
            raise _Deadline from None
        raise
    finally:
        watchdog.cancel()
    if fired.is_set():
        raise _Deadline
    return result


_pool: dict[tuple[object, ...], SSHHost] = {}
_pool_lock = threading.Lock()


def get_host(spec: SSHSpec, **kwargs: object) -> SSHHost:
    """The shared :class:`SSHHost` for ``spec``'s endpoint and credentials, created on demand.

    Stages on one host share one connection when user, host, port, key, known_hosts, route
    and secret references agree; the first such spec decides the timeouts.

    Example:
        >>> from sensors._config import SSHSpec
        >>> a = get_host(SSHSpec(ssh="gpu-box", user="root"))
        >>> a is get_host(SSHSpec(ssh="gpu-box", user="root", port=22))
        True
    """
    route = _route(spec)
    t = route.target
    # Stages share a connection only when they would open the same one: same endpoint, and
    # the same key, trust store and route (a second stage never silently inherits the
    # first one's known_hosts or credentials).
    key = (
        t.user,
        t.hostname,
        t.port,
        t.key_files,
        route.jumps,
        os.path.expanduser(spec.known_hosts),
        spec.password,
        spec.passphrase,
    )
    with _pool_lock:
        host = _pool.get(key)
        if host is None:
            host = _pool[key] = SSHHost(spec, **kwargs)  # type: ignore[arg-type]
        return host


def close_all() -> None:
    """Close and forget every pooled connection (at exit, or between tests)."""
    with _pool_lock:
        hosts = list(_pool.values())
        _pool.clear()
    for host in hosts:
        host.close()
