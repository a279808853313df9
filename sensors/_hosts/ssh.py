"""The SSH host: one persistent paramiko connection per host, one round trip per check.

Each connection keeps remote shells started by ``exec /bin/sh -s`` and sends one probe per
check on stdin (spawning a job goes through the same shells); every check has a wall-clock
deadline, at most :data:`MAX_CHANNELS` channels are open per connection, and stages on one
host share one connection (:func:`get_host`) only when they would open the same one.
Paramiko is imported by this module and the three beside it, and by nothing else:
:mod:`~sensors._hosts.ssh_config` (where to connect: ``~/.ssh/config``, ProxyJump),
:mod:`~sensors._hosts.ssh_connect` (socket, host keys, authentication) and
:mod:`~sensors._hosts.ssh_shell` (the kept remote shells). The failure modes and how they are
handled: docs/ssh.md, "How a connection is kept".

Example:
    >>> from sensors._config.stage import SSHSpec
    >>> host = get_host(SSHSpec(ssh="gpu-box", user="root"))  # doctest: +SKIP
    >>> host.run_script(b"echo hi\\n", timeout=10)  # doctest: +SKIP
    b'hi\\n'
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence

import paramiko
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from sensors._base.errors import ConnectError, ProbeError
from sensors._base.secrets import resolve_secret
from sensors._config.stage import SSHSpec
from sensors._hosts import Launched, launch_script, parsed_launch, spawn_script
from sensors._hosts.ssh_config import route_for
from sensors._hosts.ssh_connect import SecretResolver, Transient, open_route
from sensors._hosts.ssh_exits import RemoteExitWatch
from sensors._hosts.ssh_shell import REMOTE_COMMAND, Deadline, Session, with_watchdog

__all__ = ["SSHHost", "close_all", "get_host", "resolve_secret"]

log = logging.getLogger("crosscheck.ssh")

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
        >>> from sensors._config.stage import SSHSpec
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
        self._sent = threading.local()  # when each thread's last script left (see sent_at)
        self.route = route_for(spec)
        self._resolve = secret_resolver or resolve_secret
        self._sleep = sleep
        self._lock = threading.Lock()
        self._clients: list[paramiko.SSHClient] = []  # jump hops first, target last
        self._transport: paramiko.Transport | None = None
        # Idle shells (see Session), reused check after check on the current transport.
        self._idle: list[Session] = []
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
        self._exits: RemoteExitWatch | None = None

    # -- connection -----------------------------------------------------------------------

    def _open(self) -> None:
        """Connect through the jump hops to the target; called with the lock held."""
        clients = open_route(self.route, self.spec, name=self.name, resolve=self._resolve)
        self._clients = clients
        self._transport = clients[-1].get_transport()
        self.connects += 1
        log.debug("connected to %s (%s)", self.name, self.route.target.label)
        if self._exits is not None:
            self._exits.connected()  # a warm watch opens its channel beside the first probe's

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
                retry=retry_if_exception_type(Transient),
                sleep=self._sleep,
                reraise=True,
            )
            try:
                retrying(self._open)
            except Transient as exc:
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

    def sent_at(self) -> float | None:
        """When this thread's last script was sent on its channel (this machine's clock),
        after the connecting that preceded it."""
        return getattr(self._sent, "at", None)

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
                self._sent.at = session.sent_at
            except Deadline:
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

    def _take_session(self, transport: paramiko.Transport, deadline: float) -> tuple[Session, bool]:
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
        release = self._releaser()

        try:
            chan = self._open_channel(transport, deadline)
        except BaseException:
            release()
            raise
        return Session(chan, release), False

    def _releaser(self) -> Callable[[], None]:
        """Gives back one of the channel slots taken (at most once, however often called)."""
        released = threading.Event()

        def release() -> None:
            if not released.is_set():
                released.set()
                with self._slots:
                    self._channels_open -= 1
                    self._slots.notify()

        return release

    def _open_channel(self, transport: paramiko.Transport, deadline: float) -> paramiko.Channel:
        try:
            chan = transport.open_session(
                timeout=min(max(deadline - time.monotonic(), 0.1), self.spec.connect_timeout)
            )
        except paramiko.ChannelException as exc:
            # The server said no to this channel (MaxSessions, policy), over a live
            # connection: this check fails, the connection and the other stages stay. The
            # exit watch gives its channel up to the next check (a server of one session).
            if self._exits is not None:
                self._exits.make_way()
            raise ProbeError(f"the server refused a channel: {exc}", host=self.name) from exc
        except (paramiko.SSHException, EOFError, OSError) as exc:
            self._drop(transport)
            raise ConnectError(f"connection lost: cannot open a channel: {exc}", host=self.name) from exc
        if self._exits is not None:
            self._exits.seated()
        return chan

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

    def exit_watch(self) -> RemoteExitWatch:
        """This host's one exit watch (``sensors._hosts.ssh_exits``), shared by every stage
        on this connection: one channel of it, however many processes it watches."""
        with self._slots:
            if self._exits is None:
                self._exits = RemoteExitWatch(self._watch_channel, name=self.name)
            return self._exits

    def _watch_channel(self) -> tuple[paramiko.Channel, Callable[[], None]] | None:
        """A channel for the exit watch on the live connection, its shell started, with the
        function that gives its slot back; None where there is no live connection (the watch
        never connects: checks do) or no free slot now. Called by the watch's own thread."""
        transport = self._transport
        if transport is None or not transport.is_active():
            return None
        with self._slots:
            if self._channels_open >= MAX_CHANNELS:
                return None
            self._channels_open += 1
        release = self._releaser()

        chan: paramiko.Channel | None = None
        try:
            chan = transport.open_session(timeout=self.spec.connect_timeout)
            deadline = time.monotonic() + self.spec.connect_timeout
            # exec_command waits for the server's reply with no timeout of its own.
            with_watchdog(chan, deadline, lambda: chan.exec_command(REMOTE_COMMAND))
        except Exception:  # refused, or the connection is going: no watch now, the checks say why
            log.debug("%s: no channel for the exit watch", self.name, exc_info=True)
            if chan is not None:
                chan.close()
            release()
            return None
        return chan, release

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

    def launch(self, argv: Sequence[str], *, log_path: str, name: str, cwd: str | None = None) -> Launched:
        """Start ``argv`` detached on the host under the launch wrapper, which records the
        job's exit status there (``sensors._hosts.launch_script``)."""
        script = launch_script(argv, log_path=log_path, cwd=cwd, name=name)
        out, status = self._run_in_shell(script, timeout=self.spec.check_timeout)
        return parsed_launch(out, status, self.name)

    def close(self) -> None:
        if self._exits is not None:
            self._exits.close()
        self._drop()

    def __enter__(self) -> SSHHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        t = self.route.target
        return f"SSHHost({self.name!r}, {t.user}@{t.label})"


_pool: dict[tuple[object, ...], SSHHost] = {}
_pool_lock = threading.Lock()


def get_host(spec: SSHSpec, **kwargs: object) -> SSHHost:
    """The shared :class:`SSHHost` for ``spec``'s endpoint and credentials, created on demand.

    Stages on one host share one connection when user, host, port, key, known_hosts, route
    and secret references agree; the first such spec decides the timeouts.

    Example:
        >>> from sensors._config.stage import SSHSpec
        >>> a = get_host(SSHSpec(ssh="gpu-box", user="root"))
        >>> a is get_host(SSHSpec(ssh="gpu-box", user="root", port=22))
        True
    """
    route = route_for(spec)
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
        spec.material,
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
