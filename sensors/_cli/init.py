"""``crosscheck init``: point at a running job, get a stage file to review.

The job is read read-only, one round trip per host (:mod:`sensors._draft.survey`), and the
draft (:mod:`sensors._draft.draft`) is printed on stdout: a stage file, nothing else, so
``crosscheck init --pid 4242 > extract.yaml`` works. What a person reads about it goes to
stderr: the ``validate`` result of the draft (loaded in this process from its text), what
is still to fill in, and the ``crosscheck wait`` command to run next. Nothing is written
anywhere unless ``--write FILE`` asks, and never over an existing file.

Exit codes: 0 drafted; 1 the job cannot be seen or read (no such process, hidepid, another
PID namespace, another user's process, a host that cannot be asked), one line; 2 a usage
error (a ``--write`` file that exists, a ``--match`` with no literal text).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import warnings
from typing import Any

from sensors._base.errors import ConfigError, CrosscheckError
from sensors._base.text import inert
from sensors._cli.validate import describe, warnings_of
from sensors._config.stage import SSHSpec, load_stage_text

__all__ = ["add_parser", "init"]

EXIT_DRAFTED, EXIT_NOT_SEEN, EXIT_USAGE = 0, 1, 2

_DEST = re.compile(
    r"^(?:(?P<user>[^@\s]+)@)?(?P<host>[^@\s:\[\]]+|\[[0-9A-Fa-f:.]+\])(?::(?P<port>\d{1,5}))?$"
)


def add_parser(sub: Any, duration: Any) -> None:
    init = sub.add_parser(
        "init",
        help="read a running job (by --pid or --match) and print a stage file for it to review",
    )
    which = init.add_mutually_exclusive_group(required=True)
    which.add_argument("--pid", type=_pid, help="the job's PID (on each --host)")
    which.add_argument(
        "--match", metavar="REGEX", help="a regex over the job's command line (with literal text)"
    )
    init.add_argument(
        "--host",
        action="append",
        metavar="DEST",
        help="local (default) or an SSH host, [user@]host[:port] or a ~/.ssh/config alias; give it"
        " once per host for a job over several hosts (node 0 first)",
    )
    init.add_argument("--key", metavar="FILE", help="SSH private key for every --host")
    init.add_argument(
        "--known-hosts", metavar="FILE", help="known_hosts for every --host (default ~/.ssh/known_hosts)"
    )
    init.add_argument("--ssh-config", metavar="FILE", help="ssh config file (default ~/.ssh/config)")
    init.add_argument("--interval", type=duration, help="policy.interval to write (default: the stage's 30s)")
    init.add_argument(
        "--write", metavar="FILE", help="also write the draft to FILE (never over an existing file)"
    )


def _pid(value: str) -> int:
    if not value.isdigit() or not 0 < int(value) <= 2**31 - 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a PID")
    return int(value)


def _host_entry(dest: str, args: argparse.Namespace) -> str | dict[str, object]:
    """``local``, or the stage file's SSH section for ``dest`` and the shared options."""
    if dest == "local":
        return "local"
    m = _DEST.match(dest)
    if m is None:
        raise ConfigError(f"--host {dest!r}: expected local, or [user@]host[:port]")
    entry: dict[str, object] = {"ssh": m["host"].strip("[]")}
    if m["port"]:
        entry["port"] = int(m["port"])
    if m["user"]:
        entry["user"] = m["user"]
    if args.key:
        entry["key"] = os.path.abspath(args.key)
    if args.known_hosts:
        entry["known_hosts"] = os.path.abspath(args.known_hosts)
    if args.ssh_config:
        entry["config"] = os.path.abspath(args.ssh_config)
    SSHSpec.model_validate(entry)  # a bad port or user is one line now, not a traceback later
    return entry


def _host(entry: str | dict[str, object]) -> Any:
    from sensors._hosts import LocalHost

    if entry == "local":
        return LocalHost()
    from sensors._hosts import ssh  # paramiko only when a host is remote

    assert isinstance(entry, dict)
    return ssh.get_host(SSHSpec.model_validate(entry))


def init(args: argparse.Namespace) -> int:
    """The subcommand (see the module docstring)."""
    from sensors._draft.draft import draft
    from sensors._draft.survey import JobNotVisible, survey

    if args.write and os.path.lexists(args.write):
        print(
            f"crosscheck: {inert(args.write)} exists: init never overwrites a file"
            " (remove it, or name another)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    entries = [_host_entry(dest, args) for dest in (args.host or ["local"])]
    multi = len(entries) > 1
    try:
        surveys = [
            survey(_host(e), pid=args.pid, match=args.match, node=k if multi else None)
            for k, e in enumerate(entries)
        ]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    except JobNotVisible as exc:
        print(f"crosscheck: {inert(exc)}", file=sys.stderr)
        return EXIT_NOT_SEEN
    drafted = draft(surveys, entries, interval=args.interval)
    if args.write:
        try:
            with open(args.write, "x", encoding="utf-8") as f:  # O_EXCL: never over a file
                f.write(drafted.text)
        except FileExistsError:
            print(f"crosscheck: {inert(args.write)} exists: init never overwrites a file", file=sys.stderr)
            return EXIT_USAGE
        except OSError as exc:  # no such folder, not a folder, not ours: one line, not a traceback
            why = inert(exc.strerror or exc)
            print(f"crosscheck: cannot write {inert(args.write)}: {why}", file=sys.stderr)
            return EXIT_USAGE
    sys.stdout.write(drafted.text)
    sys.stdout.flush()
    name = args.write or "STAGE.yaml"
    _report(drafted.text, name, drafted.todo, written=bool(args.write))
    return EXIT_DRAFTED


def _report(text: str, name: str, todo: tuple[str, ...], *, written: bool) -> None:
    """``validate``'s answer for the draft, what to fill in, and the next command (stderr)."""
    err = sys.stderr
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stage = load_stage_text(text, file=name)
    except CrosscheckError as exc:
        print(f"crosscheck validate: {inert(exc)}", file=err)
    else:
        print(f"crosscheck validate {inert(name)}: stage {stage.stage}: valid", file=err)
        for part, what in describe(stage):
            print(f"  {part:<8} {inert(what)}", file=err)
        for note in [*(str(w.message) for w in caught), *warnings_of(stage)]:
            print(f"  warning  {inert(note)}", file=err)
    for item in todo:
        print(f"to do: {inert(item)}", file=err)
    save = "" if written else f"save it (crosscheck init ... --write {shlex.quote(name)}), review it, then: "
    print(f"next: {save}crosscheck wait {shlex.quote(name)}", file=err)
