"""Kept remote shells: one ``exec /bin/sh -s`` per SSH channel, one script after another.

:class:`Session` is how :class:`~sensors._hosts.ssh.SSHHost` runs every probe and spawn: the
remote side needs only POSIX sh, and the remote *login* shell (bash, tcsh, fish) parses
nothing but :data:`REMOTE_COMMAND`. Every exchange has a wall-clock deadline of its own
(:func:`with_watchdog`): paramiko's keepalive never notices a dead server, ``is_active()``
can stay True, and ``exec_command()`` waits for a reply with no timeout at all.
"""

from __future__ import annotations

import logging
import secrets
import select
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import paramiko

__all__ = ["REMOTE_COMMAND", "Deadline", "Session", "with_watchdog"]

log = logging.getLogger("crosscheck.ssh")

#: The whole remote command line. Every login shell in use parses it the same way
#: (no redirections, quotes or variables: tcsh and fish differ from sh on all of those).
REMOTE_COMMAND = "exec /bin/sh -s"

_T = TypeVar("_T")


#: How the kept shell runs one script (``__cc_run LIMIT``, the script on stdin), so that the
#: whole of it — every process it started — is SIGKILLed on the host at the limit:
#:
#: - GNU ``timeout -s KILL``: it kills its own process group, the script's children too;
#: - else ``setsid`` (util-linux and BusyBox both have one): the script runs in a session of
#:   its own, whose process group holds every process it starts, beside a watchdog that
#:   SIGKILLs that whole group at the limit (and is ended, with its ``sleep``, when the script
#:   ends first; in a rare race the ``sleep`` outlives it, and ends at the limit, killing
#:   nothing; it costs two forks and two execs more than ``timeout`` per script). BusyBox's
#:   ``timeout`` kills only the shell it started: a ``tail`` blocked reading /proc/kmsg (as
#:   root) lived on, orphaned, with the probe's ``dd``, an hour after its watch had ended
#:   (issue 34);
#: - else any ``timeout`` (the script's shell at least), else nothing on the host bounds it:
#:   the channel is closed at the deadline.
#:
#: Which one is looked up once per kept shell (it keeps its variables between scripts).
_RUNNER = (
    b'[ -n "${__cc_g+x}" ] || { case $(timeout --version 2>/dev/null) in *"GNU coreutils"*) __cc_g=g ;;'
    b" *) if command -v setsid >/dev/null 2>&1; then __cc_g=s;"
    b" elif command -v timeout >/dev/null 2>&1; then __cc_g=t; else __cc_g=; fi ;; esac; }\n"
    b"__cc_run() { case $__cc_g in"
    b' g | t) timeout -s KILL "$1" /bin/sh -s ;;'
    b' s) setsid /bin/sh -c \'(trap "kill \\$w 2>/dev/null; exit" TERM; sleep "$1" & w=$!;'
    b" wait $w && kill -KILL 0) </dev/null >/dev/null 2>&1 & w=$!;"
    b' /bin/sh -s; r=$?; kill $w 2>/dev/null; exit $r\' sh "$1" ;;'
    b" *) /bin/sh -s ;; esac; }\n"
)


def wrapped(script: bytes, marker: bytes, limit: int) -> bytes:
    """What the kept shell is sent to run ``script`` within ``limit`` seconds (:data:`_RUNNER`),
    its status printed after the marker line."""
    # The script reaches its sh as a here-document on stdin, not as an argument: an
    # argument is at most 128 KiB on Linux (MAX_ARG_STRLEN; a host with ~110 stages
    # reached it and every probe failed), and a probe reads its own command line back
    # with the process table (it held three copies of the script per check).
    return (
        _RUNNER
        + b"__cc_run " + str(limit).encode()
        + b" 2>/dev/null <<'@@crosscheck-script-" + marker + b"'\n"
        + script
        + b"\n@@crosscheck-script-" + marker + b"\n"
        b"printf '\\n@@crosscheck-done %s %s\\n' " + marker + b' "$?"\n'
    )  # fmt: skip


class Deadline(Exception):
    """The exchange ran past its deadline (or the watchdog closed the channel at it)."""


class Session:
    """A long-lived ``exec /bin/sh -s`` on one channel that runs one script after another.

    sshd starts every command through the user's login shell, and a login shell's rc files
    (``conda init``, ``pyenv init`` in ~/.bashrc) can cost 100-300 ms of the monitored
    host's CPU per exec. Keeping the ``sh`` started by one exec and feeding it a script per
    check pays that once per connection instead of once per check, and still costs one
    round trip per check. Each script runs in a child ``sh`` that reads it from a
    here-document (no command of it can read the next script from the channel; its body's
    stdin is /dev/null) and is followed by a marker with a fresh nonce that ends the answer.
    A shell that timed out or misbehaved is closed, never reused. The shell
    keeps variables between scripts: every probe sets all it uses.
    """

    def __init__(self, chan: paramiko.Channel, release: Callable[[], None]) -> None:
        self.chan = chan
        self.started = False
        self.sent_at: float | None = None
        self._release = release  # gives the connection's channel slot back, once

    def run(self, script: bytes, deadline: float) -> tuple[bytes, int | None]:
        """Run ``script``; return its stdout and exit status (137: stopped on the host)."""
        # The host enforces the deadline too, a second early: a probe stuck on the host (a
        # stat on a hung NFS mount) is killed there with its process group (_RUNNER), the
        # shell answers, and sshd's channel slot (MaxSessions) is not held by a command nobody
        # waits for.
        limit = max(1, int(deadline - time.monotonic()) - 1)

        def converse() -> tuple[bytes, int | None]:
            if not self.started:
                self._start(deadline, limit)
            return self._converse(script, deadline, limit)

        return with_watchdog(self.chan, deadline, converse)

    def _start(self, deadline: float, limit: int) -> None:
        """Start the shell and wait until it answers an empty script. The login shell's rc
        files (``pyenv init`` took 1.9 s on a test machine) and the runner's lookup run before it reads a
        first script: in the first probe's round trip they would widen, by all that time, the
        bound on how far ahead the host's clock can be (the time from ``sent_at`` to the
        host's clock read), and a watch's start placed on the host's clock by that bound
        lands after a log a job began right after it (issue 35). One more round trip, once
        per kept shell, never per check."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise Deadline
        self.chan.settimeout(left)
        self.chan.exec_command(REMOTE_COMMAND)
        self.started = True
        self._converse(b":", deadline, limit)

    def _converse(self, script: bytes, deadline: float, limit: int) -> tuple[bytes, int | None]:
        chan = self.chan
        marker = secrets.token_hex(12).encode()
        end = b"\n@@crosscheck-done " + marker + b" "
        wrapped_script = wrapped(script, marker, limit)

        def remaining() -> float:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Deadline
            return left

        chan.settimeout(remaining())
        # When the script left (this machine's clock, after any connecting and the shell's
        # start): the host's clock in its answer was read after it, which bounds how far
        # ahead that clock can be.
        self.sent_at = time.time()
        try:
            chan.sendall(wrapped_script)
        except TimeoutError:
            raise Deadline from None
        buf = bytearray()
        # poll, not select: select() refuses a descriptor past 1023, and a watcher of a fleet
        # (a connection, a pipe per channel, the store, webhooks) holds more than that.
        poller = select.poll()
        poller.register(chan.fileno(), select.POLLIN)
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
            poller.poll(remaining() * 1000)

    def close(self) -> None:
        try:
            self.chan.close()
        except Exception:  # closing a broken channel may raise anything; it is gone
            log.debug("error closing a channel", exc_info=True)
        finally:
            self._release()


def with_watchdog(chan: paramiko.Channel, deadline: float, body: Callable[[], _T]) -> _T:
    """Run ``body`` with a watchdog that closes ``chan`` at the deadline.

    paramiko's exec_command() waits for the server's reply with no timeout at all, and a
    dead server never replies: closing the channel wakes every wait on it
    (Channel._set_closed sets its events). A close by the watchdog reads as ``Deadline``.
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
            raise Deadline from None
        raise
    finally:
        watchdog.cancel()
    if fired.is_set():
        raise Deadline
    return result
