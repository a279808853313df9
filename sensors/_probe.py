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
from sensors._run import FINGERPRINT_BYTES

#: Caps on what one section may carry back (bytes). Sized for hosts with ~20k processes.
STAT_CAP = 16 * 1024 * 1024
#: A command line is read whole up to this (Linux's default limit on argv + environment is
#: a quarter of the 8 MiB stack limit); a longer one is "cut", and its match unknown.
CMDLINE_PER_PROCESS = 2 * 1024 * 1024
CMDLINE_CAP = 64 * 1024 * 1024
TASKS_CAP = 4 * 1024 * 1024

_TAG = b"@@crosscheck "


@dataclass(frozen=True)
class ProbeState:
    """What the previous check learnt that makes this one cheaper or possible."""

    pids: tuple[int, ...] = ()  # the job's PIDs last time: their /proc/PID/io is read
    lines_inode: int | None = None  # outputs.lines: count only the bytes added since
    lines_size: int = 0
    outputs_since: float | None = None  # count at expected last time: look for in-place writes
    outputs_run_since: float | None = None  # outputs must be tied to the run: one written since?
    lines_fingerprint: str | None = None  # hex of the bytes before lines_size
    log_inode: int | None = None  # the log at the last check: are its bytes still there?
    log_size: int = 0
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
        # Every per-process record is framed by head's "==> NAME <==" header, and NAME starts
        # with a path prefix drawn from this check's nonce (see nonce_path): no byte a
        # process controls (argv, or a comm holding a newline) can start or end a record.
        pre = nonce_path(nonce)
        out += [
            "sec stat",
            # A thread-group leader that called pthread_exit shows Z while its threads run:
            # awk passes every line through and, for zombie leaders (rare), dumps their
            # threads' stat into the next section. It only chooses what to read: the records
            # are parsed here by their headers. $1 must be digits: a comm may hold a newline,
            # and nothing a process wrote may reach system().
            f"head -c 4096 /dev/null {pre}/proc/[0-9]*/stat 2>/dev/null | head -c {STAT_CAP}"
            ' | awk -v N="$N" \''
            "{ print } "
            # Only zombie leaders that still count threads (field 20 > 1): plain zombies are
            # common where PID 1 does not reap (containers) and must cost nothing.
            '/[)] Z / && $1 ~ /^[0-9]+$/ { r = $0; sub(/.*[)] /, "", r); split(r, f, " "); '
            'if (f[1] == "Z" && f[18] > 1) z = z " " $1 } '
            'END { n = split(z, a, " "); s = ""; c = ""; '
            f'for (i = 1; i <= n; i++) {{ s = s " {pre}/proc/" a[i] "/task/*/stat"; '
            f'c = c " {pre}/proc/" a[i] "/task/*/cmdline" }} '
            'printf "\\n@@crosscheck %s tasks\\n", N; '
            f'if (n) system("head -c 4096 /dev/null" s " 2>/dev/null | head -c {TASKS_CAP}"); '
            # A zombie leader's own cmdline reads empty; its live threads still show it.
            'printf "\\n@@crosscheck %s taskcmd\\n", N; '
            f'if (n) system("head -c {CMDLINE_PER_PROCESS + 1} /dev/null" c " 2>/dev/null'
            f" | head -c {TASKS_CAP}\") }}'",
            "sec cmdline",
            # The whole command line (up to CMDLINE_PER_PROCESS; one byte more tells a longer
            # one, which is then unknown, never "no match"). /dev/null first makes head print
            # a header even when one process exists.
            f"head -c {CMDLINE_PER_PROCESS + 1} /dev/null {pre}/proc/[0-9]*/cmdline 2>/dev/null"
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
        out += _log_section(stage.log.path, int(stage.log.tail_bytes), state)
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
        names = f"-name {q(stage.outputs.pattern)} " + " ".join(
            f"! -name {q(p)}" for p in stage.outputs.exclude
        )
        if state.outputs_since is not None:
            # Same count is not enough: a file written in place (no temp name) changes while
            # the count stands still. One entry modified since the last check suffices.
            out += _newer_entry("outputs_recent", d, names, state.outputs_since)
        if state.outputs_run_since is not None:
            # What ties outputs to the run when no log or process can: one entry written
            # since the run began.
            out += _newer_entry("outputs_run", d, names, state.outputs_run_since)
    if stage.outputs and stage.outputs.lines:
        out += _lines_section(stage.outputs.lines, state)
    for name, snippet in (extra_sections or {}).items():
        out += [f"sec {q(name)}", snippet]
    out.append("sec end")
    return ("\n".join(out) + "\n").encode()


def _regular_file_type(path: str) -> str:
    """sh: print why ``path`` is not read (it is not a regular file), or nothing."""
    return f"stat -L -c 'notregular %F' -- {path} 2>&1 | head -c 200"


def _log_section(path: str, tail_bytes: int, state: ProbeState) -> list[str]:
    """stat, the tail (bounded by the size stat saw), and the bytes before the last check's end.

    Only a regular file is read: a FIFO would block ``tail`` and a device never ends. The
    bytes before the previous end show a file rewritten in place even when it regrew past
    its old size.
    """
    log = shlex.quote(path)
    t = tail_bytes
    lines = [
        "sec log_stat",
        f"st=$(stat -L -c '%i %s %Y %W %F' -- {log} 2>&1 | head -c 4096); printf '%s\\n' \"$st\"",
        "set -f; set -- $st; set +f",
        'if [ "$5" = regular ] && isnum "$1" && isnum "$2"; then',
        "  sec log_tail",
        f"  tail -c +$(($2 > {t} ? $2 - {t} + 1 : 1)) -- {log} 2>/dev/null"
        f" | head -c $(($2 > {t} ? {t} : $2))",
    ]
    if state.log_inode is not None and state.log_size > 0:
        n = min(state.log_size, FINGERPRINT_BYTES)
        start = state.log_size - n + 1
        lines += [
            f'  if [ "$1" = {int(state.log_inode)} ] && [ "$2" -ge {int(state.log_size)} ]; then',
            "    sec log_prev",
            f"    tail -c +{start} -- {log} 2>/dev/null | head -c {n}",
            "  fi",
        ]
    return [*lines, "fi"]


def _lines_section(path: str, state: ProbeState) -> list[str]:
    """JSONL records: count only the bytes added since the last check, unless rewritten.

    O(new data) per check instead of O(file). The previous end's last bytes must still be
    there, else the file was rewritten (same inode, truncated, regrown) and is counted
    again from the start. Bounded by the size read here, so a record written meanwhile is
    counted next time, once.
    """
    f = shlex.quote(path)
    n = FINGERPRINT_BYTES
    prev_ino, prev_size = int(state.lines_inode or 0), int(state.lines_size)
    same = f'[ "$1" = {prev_ino} ] && [ "$2" -ge {prev_size} ]'
    if prev_size > 0 and state.lines_fingerprint and re.fullmatch(r"[0-9a-f]+", state.lines_fingerprint):
        k = min(prev_size, n)
        same += (
            f' && [ "$(tail -c +{prev_size - k + 1} -- {f} 2>/dev/null | head -c {k}'
            f" | od -An -v -tx1 | tr -d ' \\n')\" = {state.lines_fingerprint} ]"
        )
    elif prev_size > 0:
        same = "false"
    return [
        "sec lines",
        f"if [ -f {f} ]; then",
        f"  set -f; set -- $(stat -L -c '%i %s %Y' -- {f} 2>/dev/null); set +f",
        '  if isnum "$1" && isnum "$2"; then',
        f"  base=0; if {same}; then base={prev_size}; fi",
        f"  c=$(tail -c +$((base + 1)) -- {f} 2>/dev/null | head -c $(($2 - base)) | wc -l)",
        f"  fp=$(tail -c +$(($2 > {n} ? $2 - {n} + 1 : 1)) -- {f} 2>/dev/null"
        f" | head -c $(($2 > {n} ? {n} : $2)) | od -An -v -tx1 | tr -d ' \\n')",
        '  echo "$1 $2 $3 $base $c ${fp:-none}"',
        "  else echo unreadable; fi",
        f"elif [ -e {f} ]; then {_regular_file_type(f)}; else echo missing; fi",
    ]


def _newer_entry(section: str, d: str, names: str, since: float) -> list[str]:
    """sh: the first entry of ``d`` modified after ``since`` (``ok`` + name; ``ok`` alone: none)."""
    return [
        f"sec {section}",
        f"if r=$(find {d} -mindepth 1 -maxdepth 1 {names} "
        f"-newermt @{since:.6f} -print -quit 2>/dev/null); "
        "then printf 'ok%s\\n' \"$r\" | head -c 4096; else echo failed; fi",
    ]


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


def _records(body: bytes | None, nonce: str, name: str) -> Iterator[tuple[int, bytes]]:
    """(PID, raw bytes) for each ``/proc/PID/NAME`` (or ``/proc/PID/task/TID/NAME``) file in
    ``head`` output whose header carries this check's :func:`nonce_path`.

    head writes ``\\n==> FILE <==\\n`` before every file but the first (``/dev/null``), so a
    record is exactly the bytes between two such headers. Headers without the prefix are
    content: a process cannot end its record early or start another one.
    """
    data = b"\n" + (body or b"")
    header = re.compile(
        rb"\n==> "
        + re.escape(nonce_path(nonce).encode())
        + rb"/proc/(\d+)(?:/task/\d+)?/"
        + re.escape(name.encode())
        + rb" <==\n"
    )
    matches = list(header.finditer(data))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(data)
        yield int(m.group(1)), data[m.end() : end]


def parse_stats(body: bytes | None, nonce: str) -> dict[int, ProcStat]:
    stats: dict[int, ProcStat] = {}
    for pid, raw in _records(body, nonce, "stat"):
        st = parse_stat_line(raw.decode("utf-8", "replace").rstrip("\n"))
        if st is not None and st.pid == pid:
            stats[pid] = st
    return stats


def parse_task_stats(body: bytes | None, nonce: str) -> dict[int, list[ProcStat]]:
    """Leader PID → its threads' stat (read for zombie leaders that still have threads)."""
    tasks: dict[int, list[ProcStat]] = {}
    for leader, raw in _records(body, nonce, "stat"):
        st = parse_stat_line(raw.decode("utf-8", "replace").rstrip("\n"))
        if st is not None:
            tasks.setdefault(leader, []).append(st)
    return tasks


def _argv_text(raw: bytes) -> str:
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")


@dataclass(frozen=True)
class Cmdlines:
    """PID → argv joined by spaces (as ``ps -o args`` and ``pgrep -f`` show it), whole.

    ``cut``: PIDs whose command line is longer than the probe reads (CMDLINE_PER_PROCESS):
    for those, "does not match" cannot be known.
    """

    text: Mapping[int, str]
    cut: frozenset[int]


def parse_cmdlines(body: bytes | None, nonce: str) -> Cmdlines:
    text: dict[int, str] = {}
    cut: set[int] = set()
    for pid, raw in _records(body, nonce, "cmdline"):
        if len(raw) > CMDLINE_PER_PROCESS:
            cut.add(pid)
            raw = raw[:CMDLINE_PER_PROCESS]
        text[pid] = _argv_text(raw)
    return Cmdlines(text, frozenset(cut))


def parse_task_cmdlines(body: bytes | None, nonce: str) -> Cmdlines:
    """Leader PID → the command line its threads show (for zombie leaders with live threads)."""
    text: dict[int, str] = {}
    cut: set[int] = set()
    for leader, raw in _records(body, nonce, "cmdline"):
        if len(raw) > CMDLINE_PER_PROCESS:
            cut.add(leader)
            raw = raw[:CMDLINE_PER_PROCESS]
        if raw and leader not in text:
            text[leader] = _argv_text(raw)
    return Cmdlines(text, frozenset(cut))


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
