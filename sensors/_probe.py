"""One probe per check: a POSIX sh script that reads every raw fact in one round trip.

The same script runs on the local host and over SSH (``/bin/sh -s``, script on stdin), so
both produce the same readings by construction. It needs only POSIX sh, /proc and coreutils
(python3 may be absent remotely). This module is the frame: the shell helpers, the monitored
host's clocks (the ``meta`` section) and the sections' framing; each signal adds its own
snippet (``sensors._signals``). Rules every snippet keeps:

- Nothing from the stage file is interpolated unquoted: paths and globs go through
  :func:`shlex.quote`, numbers are formatted from validated ints, and regexes never leave
  this process at all — command lines come back raw and are matched here.
- Output is tagged sections ``@@crosscheck <nonce> <name>``; the nonce is fresh per check so
  log content cannot forge a section. Big sections are capped with ``head -c``; a section
  that is missing, capped or garbled makes *its* signal ``unknown``, never a wrong answer.
- Read-only: the script writes nothing on the monitored host.
"""

from __future__ import annotations

import functools
import re
import secrets
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

_TAG = b"@@crosscheck "


@dataclass(frozen=True)
class Static:
    """What does not change while the host is up, read once (on the first check)."""

    clk_tck: int | None = None
    hostname: str | None = None
    uptime_virtualised: bool = False


def build_script(nonce: str, static: Static | None, snippets: Iterable[list[str]]) -> bytes:
    """The sh script for one check: the frame, the meta section, each signal's snippet."""
    out: list[str] = [
        "export LC_ALL=C LANG=C",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin; export PATH",
        f"N={shlex.quote(nonce)}",
        # The body is a function whose output goes through dd when there is one: dd with
        # ibs != obs keeps its input's many small writes (a printf, a head, a cat per file)
        # until 1 MiB or the end, so the answer reaches the pipe (sshd: the channel) in a few
        # large writes, not hundreds of packets. Nothing is written on the host: dd's buffer
        # is memory. The frame around it (the kept shell's marker and status) is unchanged.
        "__cc_probe() {",
        # P prefixes a section with its stage when one probe reads several stages of a host.
        'P=; sec() { printf \'\\n@@crosscheck %s %s%s\\n\' "$N" "$P" "$1"; }',
        "isnum() { case $1 in '' | *[!0-9]*) return 1 ;; esac; }",
        # meta: the monitored host's clocks, read together in this one script. Shell
        # builtins (read) instead of a process per file: forks are most of a probe's cost.
        "sec meta",
        'echo "pid $$"',
        'echo "now $(date +%s.%N 2>/dev/null)"',
        'read -r up _ </proc/uptime 2>/dev/null && echo "uptime $up"',
        'read -r bid </proc/sys/kernel/random/boot_id 2>/dev/null && echo "boot_id $bid"',
        'while read -r k v _; do [ "$k" = btime ] && { echo "btime $v"; break; }; done'
        " </proc/stat 2>/dev/null",
    ]
    if static is None or static.clk_tck is None:
        out += [
            'echo "clk_tck $(getconf CLK_TCK 2>/dev/null)"',
            'echo "hostname $(uname -n 2>/dev/null)"',
            # lxcfs (and the like) mount a virtual file over /proc/uptime in containers: the
            # trigger of procps' garbled etime (see the process signal). Count such mounts.
            "echo \"uptime_mounts $(grep -c ' /proc/uptime ' /proc/self/mountinfo 2>/dev/null)\"",
        ]
    for lines in snippets:
        out += lines
    out += [
        "sec end",
        "}",
        # stdin /dev/null: the script itself is the shell's stdin (a pipe or here-document),
        # and no command of the probe may read it.
        "if command -v dd >/dev/null 2>&1; then __cc_probe </dev/null | dd ibs=65536 obs=1048576 2>/dev/null;"
        " else __cc_probe </dev/null; fi",
    ]
    return ("\n".join(out) + "\n").encode()


def regular_file_type(path: str) -> str:
    """sh: print why ``path`` (already quoted) is not read: it is not a regular file."""
    return f"stat -L -c 'notregular %F' -- {path} 2>&1 | head -c 200"


# A batch builds one snippet per stage with the same nonce: the prefix is computed once.
@functools.lru_cache(maxsize=16)
def nonce_path(nonce: str) -> str:
    """A path prefix equal to ``/`` that spells this check's nonce in ``/.`` and ``/`` steps.

    ``head`` names each file it prints (``==> NAME <==``); the names it prints carry the
    prefix, which no process on the host can know, so a record boundary cannot be forged
    by a command line (or a comm) that contains a look-alike header. 40 bits suffice for
    a nonce that lives one check.

    Example:
        >>> nonce_path("000000000f")
        '/./././././///////////////////////////////////'
    """
    bits = int(nonce[:10], 16)
    return "/." + "".join("/." if bits >> i & 1 else "/" for i in range(40))


def new_nonce() -> str:
    return secrets.token_hex(12)


def split_sections(output: bytes, nonce: str) -> dict[str, bytes]:
    """Tagged sections of the probe's output. ``end`` is present only if it ran to the end."""
    tag = b"\n" + _TAG + nonce.encode() + b" "
    sections: dict[str, bytes] = {}
    parts = (b"\n" + output).split(tag)
    for part in parts[1:]:
        name, _, body = part.partition(b"\n")
        sections[name.decode("ascii", "replace").strip()] = body
    return sections


@dataclass(frozen=True)
class Meta:
    """The monitored host's clocks and identity, read in the same probe."""

    now: float | None
    uptime: float | None
    btime: int | None
    boot_id: str | None
    clk_tck: int | None
    script_pid: int | None
    hostname: str | None
    uptime_virtualised: bool


def parse_meta(body: bytes | None, known: Static | None = None) -> Meta:
    """The meta section; static facts the script skipped come from ``known``."""
    fields: dict[str, str] = {}
    for line in (body or b"").decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(" ")
        fields[key] = value.strip()

    def num(key: str, conv: type = float):  # type: ignore[no-untyped-def]
        try:
            return conv(fields[key].split()[0])
        except (KeyError, ValueError, IndexError):
            return None

    now = num("now")
    if now is None:
        # busybox date has no %N: "1700000000.%N" or "1700000000.N"
        m = re.match(r"(\d+)", fields.get("now", ""))
        now = float(m.group(1)) if m else None
    return Meta(
        now=now,
        uptime=num("uptime"),
        btime=num("btime", int),
        boot_id=fields.get("boot_id") or None,
        clk_tck=num("clk_tck", int) or (known.clk_tck if known else None),
        script_pid=num("pid", int),
        hostname=fields.get("hostname") or (known.hostname if known else None),
        uptime_virtualised=(
            (num("uptime_mounts", int) or 0) > 0
            if "uptime_mounts" in fields
            else bool(known and known.uptime_virtualised)
        ),
    )
