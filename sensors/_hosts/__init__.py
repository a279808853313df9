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

May import :mod:`sensors._base` and :mod:`sensors._config`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from sensors._base.errors import ProbeError
from sensors._base.trust import TRUST_FN, parse_untrusted, trust_sh_definition
from sensors._hosts.local import PROBE_ENV, LocalHost

__all__ = ["PROBE_ENV", "Host", "Launched", "LocalHost", "launch_script", "parsed_launch", "spawn_script"]


class Launched(NamedTuple):
    """A job started by :meth:`Host.launch`: its PID (the launch wrapper's, the job its
    child) and the file on the host where the wrapper records the job's exit status."""

    pid: int
    exit_file: str


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

    def launch(self, argv: Sequence[str], *, log_path: str, name: str, cwd: str | None = None) -> Launched:
        """:meth:`spawn` under a wrapper that records the job's exit status (see
        :func:`launch_script`)."""
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


#: What a launch wrapper's exit file is named after (a stage name and a random suffix).
_EXIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,200}")

#: The launch wrapper: runs the job (its argv, after the file name), then records its exit
#: status and the host's clock in that file, written aside and renamed in (never seen half
#: written). A POSIX shell reports death by signal N as 128 + N: a SIGKILLed job is 137.
#: The file aside has a name nobody can foretell (mktemp's, freed at once: only this shell
#: writes in its directory) and is created with noclobber (``set -C``: O_EXCL, which dash,
#: bash and BusyBox sh all refuse on any existing name, a symbolic link to a file or to
#: nothing included): the wrapper never writes through a link someone put there (with root's
#: rights, over any file of root's). No mktemp: its PID's name, still created exclusively.
_WRAPPER = (
    # umask 077 for the record only (the job ran with the user's own): a record writable by
    # the user's group (umask 002, RHEL's default) is one the probe does not trust.
    '"$@"; s=$?; umask 077; set -C; t=$(mktemp "$0.XXXXXXXXXX" 2>/dev/null) && rm -f "$t" || t="$0.$$.part";'
    ' printf "%s %s\\n" "$s" "$(date +%s.%N 2>/dev/null || date +%s)" >"$t" && mv -f "$t" "$0"'
)


def launch_script(argv: Sequence[str], *, log_path: str, cwd: str | None, name: str) -> bytes:
    """A sh script that starts ``argv`` detached under a wrapper that records its exit.

    The job's exit status goes to ``$XDG_STATE_HOME/crosscheck/exits/NAME`` on the host
    (``~/.local/state/...``; a directory of crosscheck's own, mode 0700, never a user's file)
    once it ends; the probe only reads it. Prints ``pid N`` and ``exit PATH``. An exit and a
    kill look alike from /proc: this is what tells them apart.

    A directory of exit records that another user could write (one they made first where
    HOME is shared, a symbolic link, one with group or other write, a directory above it so)
    is refused before anything starts: ``untrusted ...`` (see ``sensors._base.trust``) and
    exit 96. Such a user could write a record of "0" for a job that fails.
    """
    if not _EXIT_NAME.fullmatch(name):
        raise ValueError(f"not a name for an exit record: {name!r}")
    cd = f"cd {shlex.quote(cwd)} 2>&1 || exit 97\n" if cwd else ""
    cmd = " ".join(shlex.quote(a) for a in argv)
    return (
        "set -u\n"
        'd="${XDG_STATE_HOME:-${HOME:-}/.local/state}"\n'
        'case $d in /*) ;; *) echo "no home directory to record the exit status in"; exit 96 ;; esac\n'
        'd="$d/crosscheck/exits"\n'
        '(umask 077 && mkdir -p "$d") 2>&1 || exit 96\n'
        f"{trust_sh_definition()}"
        f'w=$({TRUST_FN} "$d") && [ -n "$w" ] || w="untrusted stat dir - - - $d"\n'
        '[ "$w" = ok ] || { printf \'%s\\n\' "$w"; exit 96; }\n'
        f'f="$d"/{shlex.quote(name)}\n'
        f"{cd}"
        f'nohup setsid sh -c {shlex.quote(_WRAPPER)} "$f" {cmd} </dev/null >>{shlex.quote(log_path)} 2>&1 &\n'
        # The PID printed once it is the wrapper (nohup, setsid or the wrapper's sh: the exit
        # file is an argument of each; not the fork before their exec): a watch takes a PID
        # without it for another process's, the wrapper gone (see exit_record_lines). A second
        # at most; a wrapper already over (gone, a zombie) is waited for no more.
        "p=$! n=0\n"
        'while [ $n -lt 100 ] && read -r l 2>/dev/null </proc/$p/stat && l=${l##*) } && [ "${l%% *}" != Z ]'
        " && ! tr '\\000' '\\n' 2>/dev/null </proc/$p/cmdline | grep -Fxq -- \"$f\"; do"
        " n=$((n + 1)); sleep 0.01 2>/dev/null || n=$((n + 10)); done\n"
        'echo "pid $p"\n'
        'echo "exit $f"\n'
    ).encode()


def parsed_launch(out: bytes, status: int | None, host: str) -> Launched:
    """The :class:`Launched` a :func:`launch_script` printed; ProbeError when it failed."""
    untrusted = re.search(rb"^untrusted .*$", out, re.MULTILINE)
    found = parse_untrusted(untrusted.group(0).decode("utf-8", "surrogateescape")) if untrusted else None
    if status == 96 and found is not None:
        # One line: the directory, what is wrong with it, and what to do.
        raise ProbeError(
            f"{found.why()}: refusing it as the directory of exit records (a directory another"
            f" user controls can forge a job's exit); {found.fix} or set XDG_STATE_HOME to a"
            " private directory",
            host=host,
        )
    pid = re.search(rb"^pid (\d+)$", out, re.MULTILINE)
    exit_file = re.search(rb"^exit (/.+)$", out, re.MULTILINE)
    if not pid or not exit_file:
        why = {97: "cannot cd to the working directory", 96: "cannot make the exit-record directory"}
        detail = out.decode("utf-8", "replace").strip()[-300:]
        raise ProbeError(
            f"launch failed ({why.get(status or 0, f'exit {status}')}): {detail or 'no output'}", host=host
        )
    return Launched(int(pid.group(1)), exit_file.group(1).decode("utf-8", "surrogateescape"))


# --------------------------------------------------------------------------- supervised launch

#: What a supervised launch prints of the record it created: a container's ID, a unit's
#: InvocationID, a Slurm job's ID.
_SUPERVISED_ID = re.compile(rb"^id ([0-9A-Za-z_+]{1,128})$", re.MULTILINE)


def supervised_launch_script(
    kind: str,
    name: str | None,
    argv: Sequence[str],
    *,
    log_path: str | None,
    cwd: str | None,
    user: bool = False,
    bin: str | None = None,
) -> bytes:
    """A sh script that starts ``argv`` through a supervisor and prints ``id ID``: the
    identity of the record it created, which binds the run (``Run.supervised``).

    - docker: ``docker run -d --name NAME ARGV`` (ARGV: the image, then its arguments;
      the container's output stays docker's: ``docker logs``); prints the container's ID.
    - systemd: ``systemd-run [--user] --unit NAME -p RemainAfterExit=yes`` (the record stays
      after the exit, to be read), output appended to ``log_path``; then the unit's
      InvocationID (``systemctl show``).
    - slurm: ``sbatch --parsable -o LOG [-D CWD] --wrap ARGV``; prints the job's ID.

    The supervisor runs the job: no exit wrapper (its record is the exit).
    """

    def tool(command: str) -> str:
        return shlex.quote(f"{bin.rstrip('/')}/{command}" if bin else command)

    cmd = " ".join(shlex.quote(a) for a in argv)
    if kind == "docker":
        if not name:
            raise ValueError("a docker launch needs the container's name")
        body = (
            f"o=$({tool('docker')} run -d --name {shlex.quote(name)} {cmd} 2>&1) || "
            '{ printf "%s\\n" "$o"; exit 95; }\n'
            'printf "%s\\n" "$o" | tail -n 1 | sed "s/^/id /"\n'
        )
    elif kind == "systemd":
        if not name:
            raise ValueError("a systemd launch needs the unit's name")
        flag = " --user" if user else ""
        out = (
            f" -p StandardOutput=append:{shlex.quote(log_path)}"
            f" -p StandardError=append:{shlex.quote(log_path)}"
            if log_path
            else ""
        )
        wd = f" --working-directory={shlex.quote(cwd)}" if cwd else ""
        body = (
            f"o=$({tool('systemd-run')}{flag} --unit {shlex.quote(name)} -p RemainAfterExit=yes{out}{wd}"
            f' -- {cmd} 2>&1) || {{ printf "%s\\n" "$o"; exit 95; }}\n'
            f"i=$({tool('systemctl')}{flag} show -p InvocationID --value -- {shlex.quote(name)} 2>&1)"
            ' && echo "id $i"\n'
        )
    elif kind == "slurm":
        out = f" -o {shlex.quote(log_path)}" if log_path else ""
        wd = f" -D {shlex.quote(cwd)}" if cwd else ""
        body = (
            f"o=$({tool('sbatch')} --parsable{out}{wd} --wrap {shlex.quote(cmd)} 2>&1) || "
            '{ printf "%s\\n" "$o"; exit 95; }\n'
            # "ID" or "ID;cluster"
            'echo "id ${o%%;*}"\n'
        )
    else:
        raise ValueError(f"no such supervisor: {kind!r}")
    return ("set -u\n" + body).encode()


def parsed_supervised_launch(out: bytes, host: str) -> str:
    """The identity a :func:`supervised_launch_script` printed; ProbeError when it failed
    (the supervisor's own words: no daemon, no user manager, an image not found)."""
    found = _SUPERVISED_ID.search(out)
    if found is None:
        detail = out.decode("utf-8", "replace").strip()[-300:]
        raise ProbeError(f"supervised launch failed: {detail or 'no output'}", host=host)
    return found.group(1).decode()
