"""The host seam: where a probe script runs. Probes receive a host, never a hostname.

A host runs one POSIX ``sh`` script per check (``/bin/sh -s``, script on stdin) and returns
its stdout; the same script runs locally and over SSH, so both hosts produce the same
readings by construction.

- :mod:`sensors._hosts.local`: :class:`LocalHost`, the machine crosscheck runs on.
- :mod:`sensors._hosts.ssh`: ``SSHHost``, its connection pool (``get_host``, ``close_all``)
  and the kept remote shells (:mod:`~sensors._hosts.ssh_shell`); connecting and host keys
  in :mod:`~sensors._hosts.ssh_connect`, ``~/.ssh/config`` and ProxyJump in
  :mod:`~sensors._hosts.ssh_config`. These are the only modules importing paramiko, and
  nothing imports them until a stage names an SSH host: ``import sensors`` does not.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from sensors._hosts.local import PROBE_ENV, LocalHost

__all__ = ["PROBE_ENV", "Host", "LocalHost", "spawn_script"]


@runtime_checkable
class Host(Protocol):
    """What a probe needs from a host.

    ``name`` labels evidence; ``nvml`` says whether GPUs are read in this Python process
    through NVML (local) rather than by ``nvidia-smi`` inside the script (remote).
    """

    name: str
    nvml: bool

    def run_script(self, script: bytes, *, timeout: float) -> bytes:
        """Run ``script`` with ``/bin/sh -s`` and return its stdout.

        Raises:
            HostError: the host could not be asked (its subclasses say why). Never returns
                partial output silently: a timeout is an error.
        """
        ...

    def spawn(self, argv: Sequence[str], *, log_path: str, cwd: str | None = None) -> int:
        """Start ``argv`` detached (nohup, own session), output to ``log_path``; return its PID."""
        ...

    def close(self) -> None: ...


def spawn_script(argv: Sequence[str], *, log_path: str, cwd: str | None) -> bytes:
    """A sh script that starts ``argv`` detached and prints its PID (for remote hosts).

    Every value is quoted with :func:`shlex.quote`; the script runs under ``/bin/sh -s``,
    never under the user's login shell.
    """
    # Diagnostics go to stdout: the caller reads only stdout and the exit status.
    cd = f"cd {shlex.quote(cwd)} 2>&1 || exit 97\n" if cwd else ""
    cmd = " ".join(shlex.quote(a) for a in argv)
    return (
        f'set -u\n{cd}nohup setsid {cmd} </dev/null >>{shlex.quote(log_path)} 2>&1 &\necho "pid $!"\n'
    ).encode()
