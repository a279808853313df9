"""A real PostgreSQL server on 127.0.0.1 for tests and the bench, from Debian's ``postgresql``
package (binaries in ``/usr/lib/postgresql/<ver>/bin``, not on PATH).

Its own cluster in a temporary directory, never the package's default one: ``initdb -A
trust -U crosscheck`` (as ``postgres`` when we are root: initdb refuses root), then ``pg_ctl
start`` listening on a free port with its socket in the same directory. :meth:`stop` is
``pg_ctl -m fast stop``, then SIGKILL by the postmaster's PID if that did not work.

Example:
    >>> with running_postgres() as server:  # doctest: +SKIP
    ...     url = server.create_database()   # a fresh, empty database per caller
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def pg_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<ver>/bin`` that has initdb and pg_ctl."""
    found = sorted(
        (
            Path(p).parent
            for p in glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")
            if Path(p).with_name("initdb").exists()
        ),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    return found[-1] if found else None


def why_unavailable() -> str | None:
    """None when a server can be started here, else the reason (for pytest.skip)."""
    try:
        import psycopg  # noqa: F401
        import sqlalchemy  # noqa: F401
    except ImportError as exc:
        return f"PostgreSQL tests need SQLAlchemy and psycopg ({exc}): pip install -e '.[dev]'"
    if pg_bin() is None:
        return "PostgreSQL is not installed (apt-get install -y postgresql, or make system-deps as root)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root but there is no 'postgres' user to run initdb as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """One throwaway cluster; see the module docstring."""

    def __init__(self, *, fsync: bool = False, password: str | None = None) -> None:
        # With a password, the cluster asks every connection for it (scram-sha-256) instead
        # of trusting it: a test can tell that a password was given, and where from.
        self.password = password
        self.bin = pg_bin()
        assert self.bin is not None, why_unavailable()
        self.root = Path(tempfile.mkdtemp(prefix="crosscheck-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "log"
        self.port = _free_port()
        # fsync=off only speeds tests up; the bench keeps the server's durable defaults.
        self.options = f"-k {self.root} -h 127.0.0.1 -p {self.port}" + ("" if fsync else " -c fsync=off")
        self._names = itertools.count(1)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        else:
            self._as = []

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=timeout, check=False, cwd=self.root
        )

    def start(self) -> None:
        auth = ["-A", "trust"]
        if self.password is not None:
            pwfile = self.root / "pwfile"
            pwfile.write_text(self.password + "\n")
            if self._as:
                shutil.chown(pwfile, "postgres")
            auth = ["-A", "scram-sha-256", f"--pwfile={pwfile}"]
        done = self._run(str(self.bin / "initdb"), "-D", str(self.data), *auth, "-U", "crosscheck", "-N")
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip() or done.stdout.strip()}")
        done = self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            self.options,
            "-l",
            str(self.log),
            "-w",
            "start",
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            self.stop()
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()}\n{log}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://crosscheck@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A fresh empty database; its URL."""
        import psycopg

        name = f"t{next(self._names)}"
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="crosscheck", dbname="postgres", password=self.password
        ) as conn:
            conn.autocommit = True
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.data.exists():
            done = self._run(
                str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop", timeout=30
            )
            pidfile = self.data / "postmaster.pid"
            if done.returncode != 0 and pidfile.exists():
                with contextlib.suppress(ValueError, OSError):
                    os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def running_postgres(*, fsync: bool = False) -> Iterator[Postgres]:
    server = Postgres(fsync=fsync)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    """One PostgreSQL cluster for the session (about 1.5 s to start); skips when unavailable."""
    reason = why_unavailable()
    if reason:
        pytest.skip(reason)
    with running_postgres() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: Postgres) -> str:
    """A fresh, empty database on the session's server."""
    return postgres_server.create_database()
