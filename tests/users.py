"""A second, unprivileged user on this machine, and processes run as it (the tests of what
another user's job can and cannot do to a stage): shared by the test modules that need one."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest


def second_user(name: str) -> pwd.struct_passwd:
    """The user ``name``, created when running as root (CI does); else the test is skipped."""
    if os.geteuid() != 0:
        pytest.skip("a second user's processes need root here (useradd, setpriv)")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed: no way to run a process as another user")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    if shutil.which("useradd") is None:
        pytest.skip("useradd is not installed: no second user can be created")
    useradd(name, "--no-create-home", "--shell", "/usr/sbin/nologin")
    return pwd.getpwnam(name)


@contextlib.contextmanager
def users_locked() -> Iterator[None]:
    """Held while this machine's users change (not reentrant: one hold per process)."""
    # make test runs the modules in several processes (pytest-xdist): two of them may create
    # the same user, or two users at once, and useradd fails on a user that appeared since
    # the check, and on /etc/passwd locked by the other useradd.
    with open("/tmp/crosscheck-tests-useradd.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def useradd(name: str, *options: str) -> None:
    """``useradd OPTIONS NAME`` unless ``name`` exists; one creation at a time on this machine."""
    with users_locked():
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", *options, name], check=True, capture_output=True)


def run_as(user: pwd.struct_passwd, *argv: str, **kw: Any) -> subprocess.Popen[Any]:
    """``argv`` run as ``user`` by setpriv, which execs it: no parent of root's is left holding
    the command line (runuser's would match a pattern too). Its own session, from ``/``."""
    ids = [f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    return subprocess.Popen(["setpriv", *ids, "--", *argv], start_new_session=True, cwd="/", **kw)
