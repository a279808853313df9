"""The local host: probes run as ``/bin/sh -s`` children of this process, in their own session."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sensors._base.errors import ProbeError

if TYPE_CHECKING:
    from sensors._hosts import Launched

#: Environment for every probe: C locale so tool output is parseable, a sane PATH so a
#: user's PATH cannot put a fake tool first (the probe uses only POSIX utilities anyway).
PROBE_ENV = {
    "LC_ALL": "C",
    "LANG": "C",
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
}


class LocalHost:
    """The machine crosscheck runs on."""

    nvml = True
    #: The probe's shell, reading the script on stdin (a subclass may start it otherwise:
    #: in another PID namespace, as another user).
    shell: tuple[str, ...] = ("/bin/sh", "-s")

    def __init__(self, name: str = "local") -> None:
        self.name = name

    def run_script(self, script: bytes, *, timeout: float) -> bytes:
        # Its own session, so its process group holds the probe and every child it starts:
        # on a timeout the whole group is killed. subprocess.run(timeout=) kills only the
        # shell, and its children (a `tail` blocked on a FIFO) would live on under init.
        try:
            proc = subprocess.Popen(
                list(self.shell),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=PROBE_ENV,
                start_new_session=True,
            )
        except OSError as exc:
            raise ProbeError(f"cannot run {self.shell[0]}: {exc}", host=self.name) from exc
        try:
            out, _ = proc.communicate(script, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            _kill_group(proc)
            raise ProbeError(f"probe did not finish within {timeout:g}s", host=self.name) from exc
        except BaseException:
            _kill_group(proc)
            raise
        return out

    def spawn(self, argv: Sequence[str], *, log_path: str, cwd: str | None = None) -> int:
        with open(log_path, "ab") as log, open(os.devnull, "rb") as devnull:
            proc = subprocess.Popen(
                list(argv),
                stdin=devnull,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                start_new_session=True,
            )
        return proc.pid

    def launch(self, argv: Sequence[str], *, log_path: str, name: str, cwd: str | None = None) -> Launched:
        """Start ``argv`` detached under the launch wrapper (``sensors._hosts.launch_script``),
        the same script as over SSH: the job's exit status is recorded on this machine."""
        from sensors._hosts import launch_script, parsed_launch

        script = launch_script(argv, log_path=log_path, cwd=cwd, name=name)
        try:
            # The user's environment, as spawn gives it: the job needs its PATH, CUDA, ...
            done = subprocess.run(["/bin/sh", "-s"], input=script, capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ProbeError(f"cannot launch: {exc}", host=self.name) from exc
        return parsed_launch(done.stdout + done.stderr, done.returncode, self.name)

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"LocalHost({self.name!r})"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the probe's process group, reap the shell, close the pipes.

    The shell is not reaped before the kill, so its PID (the group's ID) cannot have been
    reused. The pipes are closed without reading them: a process that left the group
    (setsid) could hold them open forever.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
