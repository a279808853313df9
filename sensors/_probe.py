"""One probe per check: a POSIX sh script that reads every raw fact in one round trip.

The same script runs on the local host and over SSH (``/bin/sh -s``, script on stdin), so
both produce the same readings by construction. It needs only POSIX sh, /proc and coreutils
(python3 may be absent remotely). Rules it keeps:

- Nothing from the stage file is interpolated unquoted: paths and globs go through
  :func:`shlex.quote`, numbers are formatted from validated ints, and regexes never leave
  this process at all — command lines come back raw and are matched here, so the pattern is
  on no command line on the monitored host (``pgrep -f`` would match its own shell:
  field-notes.md, "Finding by pattern").
- Output is tagged sections ``@@crosscheck <nonce> <name>``; the nonce is fresh per check so
  log content cannot forge a section. Big sections are capped with ``head -c``; a section
  that is missing, capped or garbled makes *its* signal ``unknown``, never a wrong answer.
- Read-only: the script writes nothing on the monitored host.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shlex
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from sensors._config import Stage

#: Caps on what one section may carry back (bytes). Sized for hosts with ~20k processes.
STAT_CAP = 16 * 1024 * 1024
CMDLINE_PER_PROCESS = 4096
CMDLINE_CAP = 32 * 1024 * 1024
TASKS_CAP = 4 * 1024 * 1024

_TAG = b"@@crosscheck "


@dataclass(frozen=True)
class ProbeState:
    """What the previous check learnt that makes this one cheaper or possible."""

    pids: tuple[int, ...] = ()  # the job's PIDs last time: their /proc/PID/io is read
    lines_inode: int | None = None  # outputs.lines: count only the bytes added since
    lines_size: int = 0
    outputs_since: float | None = None  # count at expected last time: look for in-place writes
    clk_tck: int | None = None  # read once: static while the host is up
    hostname: str | None = None
    uptime_virtualised: bool = False


def build_script(
    stage: Stage,
    nonce: str,
    state: ProbeState = ProbeState(),
    extra_sections: Mapping[str, str] | None = None,
) -> bytes:
    """The sh script for one check of ``stage``."""
    q = shlex.quote
    out: list[str] = [
        "export LC_ALL=C LANG=C",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin; export PATH",
        f"N={q(nonce)}",
        'sec() { printf \'\\n@@crosscheck %s %s\\n\' "$N" "$1"; }',
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
    if state.clk_tck is None:
        # What does not change while the host is up is read once, on the first check.
        out += [
            'echo "clk_tck $(getconf CLK_TCK 2>/dev/null)"',
            'echo "hostname $(uname -n 2>/dev/null)"',
            # lxcfs (and the like) mount a virtual file over /proc/uptime in containers:
            # the procps etime bug's trigger (field-notes.md). Count such mounts.
            "echo \"uptime_mounts $(grep -c ' /proc/uptime ' /proc/self/mountinfo 2>/dev/null)\"",
        ]
    if stage.process:
        out += [
            "sec stat",
            # A thread-group leader that called pthread_exit shows Z while its threads run:
            # awk passes every line through and, for zombie leaders (rare), dumps their
            # threads' stat into the next section.
            f'cat /proc/[0-9]*/stat 2>/dev/null | head -c {STAT_CAP} | awk -v N="$N" \''
            "{ print } "
            # Only zombie leaders that still count threads (field 20 > 1): plain zombies are
            # common where PID 1 does not reap (containers) and must cost nothing.
            '/[)] Z / { r = $0; sub(/.*[)] /, "", r); split(r, f, " "); '
            'if (f[1] == "Z" && f[18] > 1) z = z " " $1 } '
            'END { n = split(z, a, " "); s = ""; c = ""; '
            'for (i = 1; i <= n; i++) { s = s " /proc/" a[i] "/task/*/stat"; '
            'c = c " /proc/" a[i] "/task/*/cmdline" } '
            'printf "\\n@@crosscheck %s tasks\\n", N; '
            f'if (n) system("head -c 4096 /dev/null" s " 2>/dev/null | head -c {TASKS_CAP}"); '
            # A zombie leader's own cmdline reads empty; its live threads still show it.
            'printf "\\n@@crosscheck %s taskcmd\\n", N; '
            f'if (n) system("head -c {CMDLINE_PER_PROCESS} /dev/null" c " 2>/dev/null'
            f" | head -c {TASKS_CAP}\") }}'",
            "sec cmdline",
            # /dev/null first makes head print a header even when one process matches.
            f"head -c {CMDLINE_PER_PROCESS} /dev/null /proc/[0-9]*/cmdline 2>/dev/null"
            f" | head -c {CMDLINE_CAP}",
        ]
        if state.pids:
            pids = " ".join(str(int(p)) for p in state.pids[:64])
            out += [
                "sec io",
                f"for p in {pids}; do",
                '  echo "== $p"',
                "  while IFS=': ' read -r k v; do case $k in rchar|wchar) echo \"$k: $v\";; esac;"
                " done </proc/$p/io 2>/dev/null",
                "done",
            ]
    if stage.log:
        log = q(stage.log.path)
        out += [
            # Only a regular file (or a symlink to one) is read: tail on a FIFO blocks until
            # a writer comes, on a device it may never end. Anything else is said by type
            # ("not a regular file: fifo") and the log is unknown. Missing: stat says so.
            "sec log_stat",
            f"if [ -f {log} ] || [ ! -e {log} ]; then stat -L -c '%i %s %Y' -- {log} 2>&1 | head -c 4096;"
            f" else stat -L -c 'not a regular file: %F' -- {log} 2>&1 | head -c 4096; fi",
            "sec log_tail",
            f"[ -f {log} ] && tail -c {int(stage.log.tail_bytes)} -- {log} 2>/dev/null",
        ]
    if stage.outputs and stage.outputs.files:
        d = q(stage.outputs.files)
        # `ls -f` (unsorted, no stat per entry) is ~3x faster than `find -name` on 100k
        # entries; -q turns control characters (a newline in a name) into '?', so each entry
        # is exactly one line. The glob is translated to an anchored ERE here.
        excludes = "|".join(["^[.][.]?$", *(f"({glob_to_ere(p)})" for p in stage.outputs.exclude)])
        out += [
            "sec outputs",
            f"if [ -d {d} ] && [ -r {d} ] && [ -x {d} ]; then",
            f"  ls -f -q -- {d} 2>/dev/null | grep -v -E {q(excludes)}"
            f" | grep -c -E {q(glob_to_ere(stage.outputs.pattern))}",
            f"elif [ -e {d} ]; then echo unreadable; else echo missing; fi",
        ]
        if state.outputs_since is not None:
            # Same count is not enough: a file written in place (no temp name) changes while
            # the count stands still. One entry modified since the last check suffices.
            names = f"-name {q(stage.outputs.pattern)} " + " ".join(
                f"! -name {q(p)}" for p in stage.outputs.exclude
            )
            out += [
                "sec outputs_recent",
                f"if r=$(find {d} -mindepth 1 -maxdepth 1 {names} "
                f"-newermt @{state.outputs_since:.6f} -print -quit 2>/dev/null); "
                "then printf 'ok%s\\n' \"$r\" | head -c 4096; else echo failed; fi",
            ]
    if stage.outputs and stage.outputs.lines:
        f = q(stage.outputs.lines)
        prev_ino = int(state.lines_inode or 0)
        prev_size = int(state.lines_size)
        # Count only the bytes added since the last check (same inode, not shrunk): O(new
        # data) per check instead of O(file). Bounded by the size read here, so a record
        # written meanwhile is counted next time, once.
        out += [
            "sec lines",
            f"if [ -f {f} ]; then",
            f"  set -- $(stat -L -c '%i %s %Y' -- {f} 2>/dev/null)",
            f'  base=0; if [ "$1" = {prev_ino} ] && [ "$2" -ge {prev_size} ]; then base={prev_size}; fi',
            f"  n=$(tail -c +$((base + 1)) -- {f} 2>/dev/null | head -c $(($2 - base)) | wc -l)",
            f"  last=$(tail -c 1 -- {f} 2>/dev/null | od -An -tx1 | tr -d ' \\n')",
            '  echo "$1 $2 $3 $base $n ${last:-none}"',
            f"elif [ -e {f} ]; then stat -L -c 'not a regular file: %F' -- {f} 2>/dev/null"
            " || echo unreadable; else echo missing; fi",
        ]
    for name, snippet in (extra_sections or {}).items():
        out += [f"sec {q(name)}", snippet]
    out.append("sec end")
    return ("\n".join(out) + "\n").encode()


def glob_to_ere(pattern: str) -> str:
    """An anchored POSIX ERE matching the names that ``fnmatch``-style ``pattern`` matches.

    Example:
        >>> glob_to_ere("sample_*.pt")
        '^sample_.*[.]pt$'
    """
    out = ["^"]
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = i
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:  # no closing bracket: a literal '['
                out.append("[[]")
            else:
                body = pattern[i:j]
                i = j + 1
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
        elif c.isalnum() or c in "_-,:;@%/=~<>'\"\t #&":
            out.append(c)
        else:
            out.append("[" + c + "]" if c not in "^\\" else "\\" + c)
    out.append("$")
    return "".join(out)


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


def parse_meta(body: bytes | None, known: ProbeState | None = None) -> Meta:
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


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/PID/stat that crosscheck uses (parsed after the last ')')."""

    pid: int
    comm: str
    state: str
    ppid: int
    utime: int
    stime: int
    num_threads: int
    starttime: int


def parse_stat_line(line: str) -> ProcStat | None:
    # The command name may hold spaces and parentheses: split after the *last* ')'
    # (psutil _pslinux.py does the same).
    head, sep, rest = line.rpartition(")")
    if not sep:
        return None
    pid_s, _, comm = head.partition(" (")
    fields = rest.split()
    try:
        return ProcStat(
            pid=int(pid_s),
            comm=comm,
            state=fields[0],
            ppid=int(fields[1]),
            utime=int(fields[11]),
            stime=int(fields[12]),
            num_threads=int(fields[17]),
            starttime=int(fields[19]),
        )
    except (ValueError, IndexError):
        return None


def parse_stats(body: bytes | None) -> dict[int, ProcStat]:
    stats: dict[int, ProcStat] = {}
    for line in (body or b"").decode("utf-8", "replace").split("\n"):
        st = parse_stat_line(line)
        if st is not None:
            stats[st.pid] = st
    return stats


_CMD_HEADER = re.compile(rb"(?:^|\n)==> /proc/(\d+)/cmdline <==\n")
_TASK_CMD_HEADER = re.compile(rb"(?:^|\n)==> /proc/(\d+)/task/\d+/cmdline <==\n")


def _head_files(data: bytes, header: re.Pattern[bytes]) -> Iterator[tuple[int, str]]:
    """(PID, argv joined by spaces) for each file in ``head -c N FILE...`` output.

    head separates files with ``\n==> NAME <==\n``; the header regex consumes the newline.
    """
    matches = list(header.finditer(data))
    for i, m in enumerate(matches):
        last = i + 1 == len(matches)
        raw = data[m.end() : len(data) if last else matches[i + 1].start()]
        if last:
            raw = raw.rstrip(b"\n")
        yield int(m.group(1)), raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")


_TASK_STAT_HEADER = re.compile(rb"(?:^|\n)==> /proc/(\d+)/task/\d+/stat <==\n")


def parse_task_stats(body: bytes | None) -> dict[int, list[ProcStat]]:
    """Leader PID → its threads' stat (read for zombie leaders that still have threads)."""
    data = body or b""
    tasks: dict[int, list[ProcStat]] = {}
    matches = list(_TASK_STAT_HEADER.finditer(data))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(data)
        st = parse_stat_line(data[m.end() : end].decode("utf-8", "replace").strip())
        if st is not None:
            tasks.setdefault(int(m.group(1)), []).append(st)
    return tasks


def parse_cmdlines(body: bytes | None) -> dict[int, str]:
    """PID → argv joined by spaces (as ``ps -o args`` and ``pgrep -f`` show it)."""
    return dict(_head_files(body or b"", _CMD_HEADER))


def parse_task_cmdlines(body: bytes | None) -> dict[int, str]:
    """Leader PID → the command line its threads show (for zombie leaders with live threads)."""
    result: dict[int, str] = {}
    for leader, text in _head_files(body or b"", _TASK_CMD_HEADER):
        if text:
            result.setdefault(leader, text)
    return result


def parse_io(body: bytes | None) -> dict[int, int]:
    """PID → rchar + wchar (bytes read and written, all I/O incl. pipes and page cache)."""
    result: dict[int, int] = {}
    pid: int | None = None
    for line in (body or b"").decode("ascii", "replace").splitlines():
        if line.startswith("== "):
            try:
                pid = int(line[3:])
            except ValueError:
                pid = None
            continue
        key, _, value = line.partition(":")
        if pid is not None and key in ("rchar", "wchar"):
            with contextlib.suppress(ValueError):
                result[pid] = result.get(pid, 0) + int(value)
    return result


def descendants(roots: Iterable[int], stats: Mapping[int, ProcStat]) -> set[int]:
    """Live descendants of ``roots`` (not including the roots)."""
    children: dict[int, list[int]] = {}
    for st in stats.values():
        children.setdefault(st.ppid, []).append(st.pid)
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen - set(roots)


def ancestors(pid: int, stats: Mapping[int, ProcStat]) -> set[int]:
    """``pid`` and its ancestors as far as the stats reach."""
    chain: set[int] = set()
    while pid in stats and pid not in chain and pid > 0:
        chain.add(pid)
        pid = stats[pid].ppid
    chain.add(pid)
    return chain
