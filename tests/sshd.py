"""A real OpenSSH server on 127.0.0.1 for tests and the bench.

Everything lives in one temporary directory: ed25519 host and user keys, ``sshd_config``
(key auth only, no PAM), ``authorized_keys/<user>`` and a ``known_hosts`` naming the
server as ``[127.0.0.1]:PORT``. The server runs as ``/usr/sbin/sshd -D -e -f CFG`` in its
own session; :meth:`SSHD.stop` kills it *and* its per-connection children (they call
``setsid()``, so they are not in its process group), which is what a host going down looks
like to a client, and :meth:`SSHD.start` brings it back on the same port.

Use the fixtures (``sshd_server`` session-scoped, ``ssh_spec`` a fresh dict per test,
``sshd_private`` a function-scoped server a test may stop and restart) or, outside pytest::

    with running_sshd() as server:
        spec = server.spec()          # {"ssh": "127.0.0.1", "port": ..., "user": ..., ...}

Example:
    >>> with running_sshd() as server:  # doctest: +SKIP
    ...     SSHHost(SSHSpec(**server.spec())).run_script(b"echo hi\\n", timeout=10)
    b'hi\\n'
"""

from __future__ import annotations

import contextlib
import getpass
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

SSHD_BIN = "/usr/sbin/sshd"

#: A local user whose login shell is tcsh: ``exec /bin/sh -s`` must work through it.
TCSH_USER = "crosscheck-tcsh"
TCSH = "/bin/tcsh"
#: A local user whose login shell takes ``SLOW_LOGIN_S`` to start (rc files such as
#: ``pyenv init`` or ``conda init`` in ~/.bashrc): a script in its home that sleeps, then
#: runs /bin/sh with sshd's arguments.
SLOW_USER = "crosscheck-slowrc"
SLOW_LOGIN_S = 1.5


def sshd_available() -> bool:
    return os.access(SSHD_BIN, os.X_OK)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_keypair(path: Path, *, passphrase: bytes | None = None) -> str:
    """Write an ed25519 private key (OpenSSH format) to ``path``; return the public line."""
    key = Ed25519PrivateKey.generate()
    enc: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase) if passphrase else serialization.NoEncryption()
    )
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, enc))
    path.chmod(0o600)  # sshd refuses host keys others can read
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    line = public.decode() + "\n"
    path.with_name(path.name + ".pub").write_text(line)
    return line


def _children(pid: int) -> list[int]:
    """All descendants of ``pid`` (scan of /proc/*/stat; fields after the last ')')."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rpartition(")")[2].split()[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        found += kids
        frontier += kids
    return found


class SSHD:
    """One sshd on 127.0.0.1 in a temporary directory; see the module docstring."""

    def __init__(
        self, root: Path | None = None, *, port: int | None = None, wrap: list[str] | None = None
    ) -> None:
        #: A command prefix sshd runs under (e.g. ``unshare -m ...``: a host whose /proc is
        #: mounted otherwise); None: sshd as it is.
        self.wrap = list(wrap or [])
        # Not pytest's tmp_path: that is mode 0700 under /tmp/pytest-of-root, and sshd reads
        # a non-root user's authorized_keys *as that user*, who must be able to traverse.
        self.root = Path(root or tempfile.mkdtemp(prefix="crosscheck-sshd-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        self.port = port or free_port()
        self.user = getpass.getuser()
        self.host_key = self.root / "ssh_host_ed25519_key"
        self.host_pub = write_keypair(self.host_key)
        self.key = self.root / "id_ed25519"
        self.user_pub = write_keypair(self.key)
        self.auth_dir = self.root / "authorized_keys"
        self.auth_dir.mkdir(mode=0o755)
        self.authorize(self.user)
        self.known_hosts = self.root / "known_hosts"
        self.known_hosts.write_text(self.known_hosts_line())
        self.config = self.root / "sshd_config"
        self.log = self.root / "sshd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.config.write_text(
            f"Port {self.port}\n"
            "ListenAddress 127.0.0.1\n"
            f"HostKey {self.host_key}\n"
            f"PidFile {self.root / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.auth_dir}/%u\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "PermitRootLogin prohibit-password\n"
            # sshd's default MaxSessions, spelled out: the tests see what users' servers do
            # to concurrent checks on one connection. The bench opens 50 connections at
            # once, and the default MaxStartups 10:30:100 drops some.
            "MaxSessions 10\n"
            "MaxStartups 200\n"
            "AllowTcpForwarding yes\n"  # ProxyJump test: this sshd is its own jump host
            "UseDNS no\n"
            "PrintMotd no\n"
            "LogLevel ERROR\n"
            # A login shell here may run a user's ``pyenv init`` (its bashrc), whose rehash
            # waits 60 s on a lock a SIGKILLed shell left behind: every probe then timed out
            # and half a test run failed. The tests test crosscheck, not that lock. Nor its
            # cost: bash sources ~/.bashrc for a command sshd runs only at shell level 1, and
            # root's here runs `pyenv init` (several processes, and a rehash that waits up to
            # PYENV_REHASH_TIMEOUT on a lock every other login takes). Under four workers the
            # kept shells and exit watches of every SSH test then opened seconds late (10
            # failures of one run, 14 of a CI run at 2 workers: the exit watch found jobs
            # gone when it first looked). SHLVL=1 makes sshd's bash level 2: no bashrc. A
            # login that is slow on purpose is tests/sshd.py's SLOW_LOGIN_S user.
            "SetEnv PYENV_REHASH_TIMEOUT=1 SHLVL=1\n"
        )

    def known_hosts_line(self, pub: str | None = None) -> str:
        """The known_hosts line for this server (non-22 ports are spelled ``[host]:port``)."""
        return f"[127.0.0.1]:{self.port} {pub or self.host_pub}"

    def authorize(self, user: str, pub: str | None = None) -> None:
        path = self.auth_dir / user
        path.write_text(pub or self.user_pub)
        path.chmod(0o644)

    def spec(self, **overrides: Any) -> dict[str, Any]:
        """An SSHSpec-compatible dict (the stage file's ``host:`` section) for this server."""
        return {
            "ssh": "127.0.0.1",
            "port": self.port,
            "user": self.user,
            "key": str(self.key),
            "known_hosts": str(self.known_hosts),
            "connect_timeout": 5.0,
            **overrides,
        }

    def start(self, timeout: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        if os.geteuid() == 0:
            # The privilege separation directory; a distro's service unit creates it.
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.wrap, SSHD_BIN, "-D", "-e", "-f", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        end = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited ({self.proc.returncode}): {self.log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > end:
                    self.stop()
                    raise RuntimeError(f"sshd not listening: {self.log.read_text()}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop sshd and every connection it serves (like the host going down)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        for pid in [*_children(proc.pid), proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL if pid != proc.pid else signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def connections(self) -> int:
        """How many client connections sshd is serving (its direct children)."""
        if self.proc is None:
            return 0
        return sum(1 for p in _children(self.proc.pid) if _ppid(p) == self.proc.pid)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> SSHD:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError):
        return -1


@contextlib.contextmanager
def running_sshd() -> Iterator[SSHD]:
    """A started :class:`SSHD`, cleaned up on exit (for scripts such as the bench)."""
    server = SSHD()
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


def ensure_tcsh_user(server: SSHD) -> str:
    """Create (once) a local user whose login shell is tcsh, authorised with the test key.

    Needs root and ``/bin/tcsh`` (apt-get install tcsh); skips the calling test otherwise.
    """
    if os.geteuid() != 0 or not os.access(TCSH, os.X_OK):
        pytest.skip("needs root and /bin/tcsh to create a user whose login shell is tcsh")
    from tests.users import useradd, users_locked

    useradd(TCSH_USER, "--create-home", "--shell", TCSH)
    # useradd leaves the password field "!", and sshd without PAM refuses locked accounts
    # even for key auth; "*" means "no password" without "locked".
    with users_locked():
        subprocess.run(["usermod", "-p", "*", TCSH_USER], check=True, capture_output=True)
    server.authorize(TCSH_USER)
    return TCSH_USER


def ensure_slow_login_user(server: SSHD) -> str:
    """Create (once) a local user whose login shell starts ``SLOW_LOGIN_S`` late, authorised
    with the test key. Needs root; skips the calling test otherwise."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a user whose login shell is slow to start")
    home = Path("/home") / SLOW_USER
    shell = home / "slow-login-sh"
    try:
        pwd.getpwnam(SLOW_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--create-home", "--home-dir", str(home), "--shell", str(shell), SLOW_USER],
            check=True,
            capture_output=True,
        )
    shell.write_text(f'#!/bin/sh\nsleep {SLOW_LOGIN_S}\nexec /bin/sh "$@"\n')
    shell.chmod(0o755)
    # As for the tcsh user: "*" is "no password", not "locked" (sshd without PAM).
    subprocess.run(["usermod", "-p", "*", SLOW_USER], check=True, capture_output=True)
    server.authorize(SLOW_USER)
    return SLOW_USER


def _require_sshd() -> None:
    if not sshd_available():
        pytest.skip(f"{SSHD_BIN} missing (apt-get install -y openssh-server)")


_session_server: SSHD | None = None


@pytest.fixture(scope="session")
def sshd_server() -> Iterator[SSHD]:
    """One sshd for the whole session (startup is the slow part). Do not stop it.

    A module-level singleton, so that importing these fixtures both in conftest.py and in
    a test module still starts one server.
    """
    global _session_server
    _require_sshd()
    if _session_server is None:
        _session_server = SSHD()
        _session_server.start()
    yield _session_server
    server, _session_server = _session_server, None
    if server is not None:
        server.cleanup()


@pytest.fixture
def ssh_spec(sshd_server: SSHD) -> dict[str, Any]:
    """The ``host:`` section of a stage on the session sshd (a fresh dict per test)."""
    return sshd_server.spec()


@pytest.fixture
def sshd_private() -> Iterator[SSHD]:
    """An sshd of this test's own, which it may stop and start again (same port)."""
    _require_sshd()
    server = SSHD()
    server.start()
    yield server
    server.cleanup()
