"""One probe per check: a POSIX sh script that reads every raw fact in one round trip.

The same script runs on the local host and over SSH (``/bin/sh -s``, script on stdin), so
both produce the same readings by construction. It needs only POSIX sh, /proc and coreutils
(python3 may be absent remotely). This module is the frame: the shell helpers, the monitored
host's clocks (the ``meta`` section) and the sections' framing; each signal adds its own
snippet (``sensors._signals``). Rules every snippet keeps:

- Nothing from the stage file is interpolated unquoted: paths and globs go through
  :func:`shlex.quote`, numbers are formatted from validated ints, and regexes never leave
  this process at all — command lines come back raw and are matched here.
- Output is tagged sections ``@@crosscheck <nonce> <name>``, each header a line of its own
  that only the probe's shell prints (``sec``, a shell function: no command line holds it).
  No secret frames the answer: every byte a job or another user controls (command lines, log
  text, file names, GPU process names, an exit record) reaches the output through
  :data:`ESCAPE`, which puts a ``\\`` before each of its lines that starts with ``@`` or
  ``\\``. So no line of job text can start a header (``@``), and :func:`sections_of` takes
  that ``\\`` back off. The nonce only tells one check's answer from another's. A section
  named twice, or not one the probe writes, makes the whole answer garbled (``unknown``),
  never "the last one wins". Big sections are capped with ``head -c``; a section that is
  missing, capped or garbled makes *its* signal ``unknown``, never a wrong answer.
- Read-only: the script writes nothing on the monitored host.
"""

from __future__ import annotations

import functools
import re
import secrets
import shlex
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from sensors._base.tolerances import WHOLE_SECOND

_TAG = b"@@crosscheck "

#: The sh function every byte of job text goes through on its way out (``CMD | __cc_esc``):
#: a ``\\`` before each line that starts with ``@`` or ``\\``, so that no line of it can be
#: taken for a section header; :func:`sections_of` takes it off again. Used at the start of a
#: line of the answer (after a header, or after a newline), as every snippet does.
ESCAPE = "__cc_esc"

#: The sh function that prints one value holding job text (``__cc_put "$v"``) as its own
#: line(s), through :data:`ESCAPE` when it has to be.
PUT = "__cc_put"


@dataclass(frozen=True)
class Static:
    """What does not change while the host is up, read once (on the first check)."""

    clk_tck: int | None = None
    hostname: str | None = None
    uptime_virtualised: bool = False
    #: The host's sed starts a line after a NUL too (BusyBox's): ESCAPE then puts its ``\``
    #: after a NUL as well, and :func:`sections_of` takes that off too.
    sed_nul: bool = False


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
        # Every byte of job text passes through this on its way out (see ESCAPE).
        ESCAPE + "() { sed 's/^[@\\\\]/\\\\&/'; }",
        # A value holding job text, on a line of its own: escaped only where it has to be
        # (a newline in it, or its own first byte), so the common case costs no process.
        "__cc_nl='\n'",
        PUT + '() { case $1 in *"$__cc_nl"* | [@\\\\]*) printf \'%s\\n\' "$1" | ' + ESCAPE + " ;;"
        " *) printf '%s\\n' \"$1\" ;; esac; }",
        # meta: the monitored host's clocks, read together in this one script. Shell
        # builtins (read) instead of a process per file: forks are most of a probe's cost.
        "sec meta",
        'echo "pid $$"',
        # /proc/uptime read on both sides of `date`: the wall clock of the boot is known to
        # the span between the two reads (a fork under load can take a tenth of a second),
        # and a process's start read from /proc is as exact as that span (see procfs).
        'read -r up0 _ </proc/uptime 2>/dev/null && echo "uptime_before $up0"',
        'echo "now $(date +%s.%N 2>/dev/null)"',
        'read -r up _ </proc/uptime 2>/dev/null && echo "uptime $up"',
        'read -r bid </proc/sys/kernel/random/boot_id 2>/dev/null && echo "boot_id $bid"',
        'while read -r k v _; do [ "$k" = btime ] && { echo "btime $v"; break; }; done'
        " </proc/stat 2>/dev/null",
        # What the probe can see of the host's processes (read every probe, never
        # remembered: another user or another namespace may run the next one). Its user and
        # groups (builtins: the shell reads its own status), its PID namespace, and the
        # options of the /proc it reads (hidepid, subset=pid).
        'while read -r k a b c; do case $k in Uid:) echo "euid $b" ;; Groups:) echo "groups $a $b $c" ;;'
        " esac; done </proc/self/status 2>/dev/null",
        'echo "pidns $(readlink /proc/self/ns/pid 2>/dev/null)"',
        'while read -r _ _ _ _ m o; do [ "$m" = /proc ] && echo "procmount $o"; done'
        " </proc/self/mountinfo 2>/dev/null",
    ]
    if static is None or static.clk_tck is None:
        out += [
            # The clock tick rate: getconf where there is one (BusyBox has none), else the
            # kernel's own word for it, AT_CLKTCK (17) in the auxiliary vector, which is
            # where libc's sysconf(_SC_CLK_TCK) reads it (64-bit words: a 32-bit host's
            # vector reads as no number, and the tick rate stays unknown).
            'c=$(getconf CLK_TCK 2>/dev/null); isnum "$c" || c=$(od -An -v -tu8 /proc/self/auxv 2>/dev/null'
            ' | while read -r k v; do [ "$k" = 17 ] && { echo "$v"; break; }; done)',
            'echo "clk_tck $c"',
            'echo "hostname $(uname -n 2>/dev/null)"',
            # lxcfs (and the like) mount a virtual file over /proc/uptime in containers: the
            # trigger of procps' garbled etime (see the process signal). Count such mounts.
            "echo \"uptime_mounts $(grep -c ' /proc/uptime ' /proc/self/mountinfo 2>/dev/null)\"",
            # Whether this host's sed (ESCAPE's) takes a NUL for a line's end: BusyBox's does.
            "echo \"sed_nul $(printf 'a\\000@\\n' | " + ESCAPE + ' | wc -c)"',
        ]
    body: list[str] = []
    requested: dict[str, None] = {}  # the paths of the shared stat, in order, once each
    holding: dict[str, None] = {}  # the paths whose holders the shared scan finds, once each
    helpers: dict[str, None] = {}  # the sh functions the snippets call, once each
    guarded = 0
    first: list[str] = []  # lines to run before the shared stat (FIRST), with their part's P
    for lines in snippets:
        into, own, budget = body, requested, None
        back, prefix = body, "P="
        for line in lines:
            if line[:2] != "#@":
                if line[:2] == "P=" and into is body:
                    prefix = line
                into.append(line)
            elif line == FIRST:
                first.append(prefix)
                back, into = into, first
            elif line == REST:
                into = back
            elif line[:7] == _STAT_REQUEST:
                own[line[7:]] = None
            elif line[:7] == _HELPER_REQUEST:
                helpers[line[7:]] = None
            elif line[:7] == _HOLD_REQUEST:
                # Read from /proc alone, never from the file's own file system: one scan for
                # the whole probe, guarded parts' files included.
                holding[line[7:]] = None
            elif line[:8] == _GUARD_REQUEST:
                # What follows runs in a part of its own, with its own stat (see guard()).
                budget, into, own = int(line[8:]), [], {}
            else:
                into.append(line)
        if budget is not None:
            guarded += 1
            fn = f"__cc_part{guarded}"
            body += [f"{fn}() {{", *_shared_stat(list(own)), *into, "}", f"__cc_guard {budget} {fn}"]
    if guarded:
        out += _GUARD
    for name in helpers:
        out += _HELPERS[name]
    if first:
        out += [*first, "P="]
    out += _shared_stat(list(requested))
    out += _holders_scan(list(holding))
    out += body
    out += [
        "sec end",
        # The clock again once every file was read: a file time later than this cannot be
        # true on this host's clock (a file server's own clock ahead of it).
        'echo "now $(date +%s.%N 2>/dev/null)"',
        "}",
        # stdin /dev/null: the script itself is the shell's stdin (a pipe or here-document),
        # and no command of the probe may read it.
        "if command -v dd >/dev/null 2>&1; then __cc_probe </dev/null | dd ibs=65536 obs=1048576 2>/dev/null;"
        " else __cc_probe </dev/null; fi",
    ]
    return ("\n".join(out) + "\n").encode()


# --------------------------------------------------------------------------- guarded parts
#
# A stage whose files live on a network or FUSE file system may find its reads blocked (a hard
# NFS mount whose server is gone, an sshfs whose peer froze). In a batch that would hold every
# other stage of the host until the probe's deadline. Such a stage's part of the probe runs in
# a subshell of its own, with its own stat of its files (the shared stat never touches them),
# and a watchdog that ends the part and every process it started at its budget: the stage is
# then ``unknown`` (its section ``timed_out``) and the probe goes on with the next stage. A
# process the kernel will not kill (a read stuck in a FUSE request) stays behind, but holds
# nothing the probe waits for: its output is a pipe into a process that was killed.

_GUARD_REQUEST = "#@guard "

#: A snippet's first line that puts it (to the end of its list) before the shared stat: what
#: a later read must not be older than (a launched job's exit record: see the checker).
FIRST = "#@first"
#: The line that ends what FIRST began.
REST = "#@rest"

#: The section a guarded part whose budget ran out writes (its budget, in seconds).
TIMED_OUT = "timed_out"

_GUARD = (
    # __cc_guard SECONDS FUNCTION: a sleep for the budget, and FUNCTION in the background,
    # which ends the sleep (TERM) when it is over. So the sleep ends at the part's end or at
    # the budget, whichever comes first, and how it ended says which: at the budget, the
    # part and every process it started are killed and the section says so. Both are this
    # shell's children, never reaped before it waits for them: no PID here can be another
    # process's. The sleep holds nothing the probe waits for.
    "__cc_guard() {",
    '  sleep "$1" >/dev/null 2>&1 &',
    "  __gs=$!",
    '  { "$2"; kill $__gs 2>/dev/null; } &',
    "  __gp=$!",
    "  wait $__gs",
    "  if [ $? = 0 ]; then",
    "    __cc_kill_tree $__gp",
    "    wait $__gp",
    "    sec " + TIMED_OUT + '; echo "$1"',
    "  else",
    "    wait $__gp",
    "  fi",
    "  return 0",
    "}",
    # __cc_kill_tree PID: PID and every process descended from it, by the parent each stat
    # names (the PID from the file's path: no byte of a comm can name another process).
    "__cc_kill_tree() {",
    '  __kt=" $1 " __kn=1 __kd=0',
    "  while [ $__kn = 1 ] && [ $__kd -lt 16 ]; do",
    "    __kn=0 __kd=$((__kd + 1))",
    "    for __s in /proc/[0-9]*/stat; do",
    "      __k=${__s#/proc/}; __k=${__k%/stat}",
    '      case $__kt in *" $__k "*) continue ;; esac',
    '      read -r __l <"$__s" 2>/dev/null || continue',
    '      case $__l in *") "*) ;; *) continue ;; esac',
    "      set -f; set -- ${__l##*) }; set +f",
    '      case $__kt in *" $2 "*) __kt="$__kt$__k " __kn=1 ;; esac',
    "    done",
    "  done",
    "  kill -KILL $__kt 2>/dev/null",
    "}",
)


def guard(seconds: float) -> str:
    """The snippet line that makes the rest of a part (a stage's lines in a batch, after its
    ``P=``) run guarded, ``seconds`` at most (see above); its stat requests go to its own
    stat, which it prints as its own ``stats`` and ``statfs`` sections."""
    return _GUARD_REQUEST + str(max(1, int(seconds)))


# --------------------------------------------------------------------------- the shared stat
#
# A log nobody wrote to since the last check need not be read again, nor an output directory
# nobody added to be listed again: one ``stat`` for every such file of the probe (not a few
# processes per stage: forks are most of a probe's cost on the monitored host) tells which
# are as the last check left them. A snippet asks for a file with ``stat_request(path)`` (a
# comment line the frame gathers) and tests it with ``unchanged(path, stamp)``; its reader
# finds the line in the ``stats`` section (``shared_stats``).

#: One file's line: inode, size, mtime (s), birth, mtime and ctime to the nanosecond, type
#: (a birth the filesystem does not keep prints as 0). The ctime changes with every write
#: and every ``touch``: it cannot be set back.
STAT_FORMAT = "%i %s %Y %.9W %.9Y %.9Z %F"
_STAT_REQUEST = "#@stat "
_STAT_CHUNK = 200  # paths per stat process (each at most PATH_MAX: far below ARG_MAX)
#: The file types GNU stat's %F prints (the last field; it has spaces, the name follows).
_FILE_TYPES = (
    "regular file", "regular empty file", "directory", "symbolic link", "fifo", "socket",
    "character special file", "block special file", "weird file", "unknown?",
    "message queue", "semaphore", "shared memory object", "typed memory object",
)  # fmt: skip


# --------------------------------------------------------------------------- the shared holders scan
#
# Which processes hold a file open is read from every process's descriptors (/proc/PID/fd),
# whatever the file: the cost is the host's, not the file's. A probe that asks for several
# files' holders (a batch of stages whose logs were first seen at once) reads every
# descriptor once, and each file's reader (``holders_of``) keeps the links that name it.

_HOLD_REQUEST = "#@hold "

#: sh: a path on stdin, escaped for find's -lname pattern (its glob characters, backslash).
_LNAME_ESCAPE = r"sed 's/[][*?\\]/\\&/g'"


def holders_request(path: str) -> str:
    """The snippet line that puts ``path`` in this probe's holders scan (a sh comment). The
    snippet's sh then calls ``holders_of PATH CAP``, which sets ``__hl`` to the links
    (/proc/PID/fd/N, oldest PID first, CAP + 1 at most) that name it, open to write (or
    with no access mode: ``O_PATH``; a read-only one is left out), or to ``-`` where that
    cannot be said (it does not exist or cannot be resolved). A holder that ended since the
    scan (of this file or another) sends it to a scan of its own: the links as they are now."""
    return _HOLD_REQUEST + shlex.quote(path)


def _holders_scan(quoted: list[str]) -> list[str]:
    if not quoted:
        return []
    return [
        # Every descriptor's link read once (find's %l: a readlink; no file behind a
        # descriptor is opened or stat'ed, so a dead file server cannot hang it, and nothing
        # but /proc is read: a guarded stage's file system is not touched). awk keeps the
        # links whose text is one of the paths asked, as given. Nothing of it is printed: the
        # links' text (the job's, any user's file names) only goes to awk, one record a link
        # (a newline in it made a `?`), and what is kept is /proc paths, each read again by
        # its file's reader. A find without -printf (BusyBox's) finds none.
        # A descriptor open only to read (its link's mode is 0500: the kernel sets u+r for
        # a read, u+w for a write) writes nothing and decides nothing: left out, so that
        # readers (`tail -f`, or a user who opens the log 300 times) cannot push the list
        # past its cap and leave the run's own `> log` unseen.
        "__cc_hl=$(find /proc/[0-9]*/fd -mindepth 1 -maxdepth 1 -printf '%p %m %l\\0' 2>/dev/null"
        " | tr '\\n\\000' '?\\n' | awk 'BEGIN { for (i = 1; i < ARGC; i++) want[ARGV[i]]; ARGC = 1 }"
        r' $1 ~ /^\/proc\/[0-9]+\/fd\/[0-9]+$/ && $2 != "500"'
        r" && substr($0, length($1) + length($2) + 3) in want { print $1 }' " + " ".join(quoted) + ")",
        # A file's own links: those of the scan named by its path, read again (one find over
        # the few the scan found, its pattern escaped), where the path is the file's own
        # (resolved, it is unchanged); where it is not (a symlink on its way), a scan of its own.
        "holders_of() {",
        '  __hl=-; __hn=$2; [ -e "$1" ] || return 0',
        '  __q=$(readlink -f -- "$1" 2>/dev/null) || return 0',
        "  __e=$(printf '%s\\n' \"$__q\" | " + _LNAME_ESCAPE + ")",
        '  if [ "$__q" != "$1" ]; then',
        '    __hl=$(find /proc/[0-9]*/fd -mindepth 1 -maxdepth 1 ! -perm 500 -lname "$__e" 2>/dev/null)',
        '  elif [ -n "$__cc_hl" ]; then',
        "    set -f; set -- $__cc_hl; set +f",
        # A link gone since the scan fails find (a holder, of this file or of another asked
        # in the probe, that ended meanwhile: a job's short-lived children inherit its
        # stdout): the scan is no longer the whole of it, and this file's own scan is read.
        '    __hl=$(find "$@" -maxdepth 0 -lname "$__e" 2>/dev/null) ||',
        '      __hl=$(find /proc/[0-9]*/fd -mindepth 1 -maxdepth 1 ! -perm 500 -lname "$__e" 2>/dev/null)',
        "  else __hl=; fi",
        '  [ -z "$__hl" ] || __hl=$(printf \'%s\\n\' "$__hl"'
        ' | sort -t/ -k3,3n -k5,5n | head -n "$((__hn + 1))")',
        "}",
    ]


# --------------------------------------------------------------------------- helper functions
#
# What every stage of a kind runs (a log's stat and tail) is a sh function the script defines
# once, called with the stage's own words (quoted): a batch of 40 stages sent ~1.5 KB of sh per
# stage, most of it the same for each (this process's CPU sends it, the host's shell parses it).

_HELPER_REQUEST = "#@func "
_HELPERS: dict[str, tuple[str, ...]] = {}


def helper(name: str, body: list[str]) -> str:
    """Define the sh function ``name`` (``body``: its lines); returns the snippet line that
    puts the definition in a probe that calls it (a sh comment; defined once per probe)."""
    if not re.fullmatch(r"__cc_[a-z_]+", name):
        raise ValueError(f"helper names are __cc_ and lowercase letters: {name!r}")
    definition = (f"{name}() {{", *(f"  {line}" for line in body), "}")
    if _HELPERS.setdefault(name, definition) != definition:
        raise ValueError(f"helper {name} is defined twice, differently")
    return _HELPER_REQUEST + name


def stat_request(path: str) -> str:
    """The snippet line that puts ``path`` in this probe's shared stat (a sh comment)."""
    return _STAT_REQUEST + shlex.quote(path)


def unchanged(path: str, stamp: str) -> str:
    """sh condition: the shared stat printed exactly ``stamp`` for ``path`` (its whole line)."""
    return "seen " + shlex.quote(f"{stamp} {path}")


def shareable(path: str) -> bool:
    """Whether ``path`` can be told apart in the shared stat's lines (one line per file)."""
    return "\n" not in path and "\r" not in path


def _shared_stat(quoted: list[str]) -> list[str]:
    if not quoted:
        return ["seen() { return 1; }"]
    lines = [
        "NL='\n'",
        # A match is a whole line, the name included: a path that only ends like another
        # cannot pass for it; a file stat could not read is not in it (never "unchanged").
        'seen() { case $SEEN in *"$NL$1$NL"*) return 0 ;; esac; return 1; }',
        "sec stats",
        "SEEN=",
    ]
    chunks = [" ".join(quoted[first : first + _STAT_CHUNK]) for first in range(0, len(quoted), _STAT_CHUNK)]
    for names in chunks:
        lines.append(f"SEEN=\"$SEEN$(stat -L -c '{STAT_FORMAT} %n' -- {names} 2>/dev/null)$NL\"")
    lines += ['printf %s "$SEEN"', 'SEEN="$NL$SEEN"', "sec statfs"]
    # The file system each file lives on (its magic number, the same in GNU's and BusyBox's
    # stat): whether a stamp can be trusted to move with the next change (keeps_times).
    lines += [f"stat -f -L -c '%t %n' -- {names} 2>/dev/null" for names in chunks]
    return lines


@functools.lru_cache(maxsize=8)
def shared_stats(body: bytes | None) -> dict[str, str]:
    """The shared stat's lines: each file's stamp (the line before its name), by path.

    Keyed by the section's bytes: the stages of a batch share one parse.
    """
    stamps: dict[str, str] = {}
    for line in (body or b"").decode("utf-8", "surrogateescape").split("\n"):
        fields = line.split(" ", 6)
        if len(fields) < 7:
            continue
        for kind in _FILE_TYPES:
            if fields[6].startswith(kind + " "):
                stamps[fields[6][len(kind) + 1 :]] = line[: len(line) - len(fields[6]) + len(kind)]
                break
    return stamps


@functools.lru_cache(maxsize=8)
def _stat_fs(body: bytes | None) -> dict[str, str]:
    """The shared stat's file systems: each file's (its magic number in hex), by path."""
    found: dict[str, str] = {}
    for line in (body or b"").decode("utf-8", "surrogateescape").split("\n"):
        magic, _, path = line.partition(" ")
        if path and re.fullmatch(r"[0-9a-f]{1,8}", magic):
            found[path] = magic
    return found


def trusted_stamp(path: str | None, sections: Mapping[str, bytes], now: float | None) -> str | None:
    """``path``'s line in this probe's shared stat when a later change will give it another
    (None: it may not, so nothing may be kept on it): the file system keeps its times as POSIX
    says (:data:`TIMES_KEPT`), and nothing wrote the file in the moments before ``now``."""
    stamp = shared_stats(sections.get("stats")).get(path or "")
    if stamp is None or not keeps_times(path, sections):
        return None
    return stamp if settled(stamp, now) else None


def on_local_fs(path: str | None, sections: Mapping[str, bytes]) -> bool:
    """Whether ``path``'s file system, as this probe's shared stat found it, is a local one
    (:data:`LOCAL_FILE_SYSTEMS`; False where it was not found)."""
    return _stat_fs(sections.get("statfs")).get(path or "") in LOCAL_FILE_SYSTEMS


def local_fs(path: str | None, sections: Mapping[str, bytes]) -> bool | None:
    """Whether ``path``'s file system is a local one (its times the host's own clock's), as
    this probe's shared stat found it; None where it did not find it."""
    magic = _stat_fs(sections.get("statfs")).get(path or "")
    return None if magic is None else magic in LOCAL_FILE_SYSTEMS


def keeps_times(path: str | None, sections: Mapping[str, bytes]) -> bool:
    """Whether ``path``'s file system, as this probe's shared stat found it, is one whose
    times move with every change (:data:`TIMES_KEPT`)."""
    return _stat_fs(sections.get("statfs")).get(path or "") in TIMES_KEPT


#: How old a file's last change must be before its stamp is trusted to change with the next
#: one: file times come from the kernel's coarse clock (a tick, up to 10 ms, behind); a
#: stamp with no fraction may be a filesystem's whole seconds (FAT keeps two).
_SETTLED_FINE, _SETTLED_COARSE = 0.1, 2.5


def settled(stamp: str, now: float | None) -> bool:
    """Whether a later write will give ``stamp``'s file another stamp (nothing wrote it in the
    last moments before ``now``, the probe's start: a write in the same clock tick as the
    stat that read it could leave the same times behind)."""
    trusted_from = _trusted_from(stamp)
    return now is not None and trusted_from is not None and trusted_from < now


@functools.lru_cache(maxsize=8192)
def _trusted_from(stamp: str) -> float | None:
    """When ``stamp`` becomes trustworthy (its last change plus the margin); None: never."""
    fields = stamp.split(" ", 6)
    if len(fields) < 7:
        return None
    try:
        last = max(float(fields[4]), float(fields[5]))
    except ValueError:
        return None
    exact = "." in fields[4] and "." in fields[5] and not fields[5].endswith(".000000000")
    return last + (_SETTLED_FINE if exact else _SETTLED_COARSE)


#: Local file systems, by the magic number ``stat -f -c %t`` prints for them (GNU's and
#: BusyBox's stat alike; the names ``%T`` prints differ between them): (name, times kept).
#: Their file times come from this host's own clock. On any other — NFS, SMB, Ceph, Lustre,
#: FUSE, one not listed — file times come from a server's clock, which may be ahead of this
#: host's by any amount up to the tolerance beyond which they are seen to be wrong.
#:
#: "Times kept": the kernel's own code for the file system moves a directory's mtime and
#: ctime with every entry added, removed or renamed, and a file's with every write, as POSIX
#: requires (open(2) with O_CREAT, rename(2), unlink(2), write(2)). Only there may a stamp
#: unchanged since the last check stand for "nothing changed" (the shared stat's shortcut).
#: A FUSE daemon or an object-store mount may keep a directory's times fixed for good (the
#: field notes): there, every check lists and reads again.
FILE_SYSTEMS: dict[str, tuple[str, bool]] = {
    "ef53": ("ext2/ext3/ext4", True), "58465342": ("xfs", True), "9123683e": ("btrfs", True),
    "1021994": ("tmpfs", True), "858458f6": ("ramfs", True), "2fc12fc1": ("zfs", True),
    "f2f52010": ("f2fs", True), "794c7630": ("overlayfs", True), "3153464a": ("jfs", True),
    "52654973": ("reiserfs", True), "3434": ("nilfs", True), "ca451a4e": ("bcachefs", True),
    "61756673": ("aufs", False), "73717368": ("squashfs", False), "4d44": ("msdos/vfat", False),
    "2011bab0": ("exfat", False), "5346544e": ("ntfs", False), "7366746e": ("ntfs3", False),
    "4244": ("hfs", False), "482b": ("hfsplus", False), "9660": ("isofs", False),
    "15013346": ("udf", False),
}  # fmt: skip

#: The magic numbers of the local file systems (:data:`FILE_SYSTEMS`).
LOCAL_FILE_SYSTEMS = frozenset(FILE_SYSTEMS)

#: The magic numbers of the file systems whose times move with every change (see above).
TIMES_KEPT = frozenset(magic for magic, (_, kept) in FILE_SYSTEMS.items() if kept)


def own_clock(fstype: bytes | str | None) -> bool:
    """Whether file times on a file system of this type (``fstype_request``'s answer: the
    magic number in hex) come from this host's clock."""
    text = fstype.decode("ascii", "replace") if isinstance(fstype, bytes) else (fstype or "")
    return text.strip() in LOCAL_FILE_SYSTEMS


def fstype_request(path: str) -> str:
    """sh: the type of the file system ``path`` (already quoted) lives on (its magic number)."""
    return f"stat -f -L -c %t -- {path} 2>/dev/null"


def regular_file_type(path: str) -> str:
    """sh: print why ``path`` (already quoted) is not read: it is not a regular file."""
    return f"stat -L -c 'notregular %F' -- {path} 2>&1 | head -c 200"


def new_nonce() -> str:
    return secrets.token_hex(12)


#: The section a garbled answer is given under (:func:`split_sections`): its body says why.
GARBLED = "garbled"


def split_sections(output: bytes, nonce: str, sed_nul: bool | None = None) -> dict[str, bytes]:
    """Tagged sections of the probe's output. ``end`` is present only if it ran to the end.

    A section named twice garbles the whole answer: the result is ``{GARBLED: why}`` alone
    (no ``end``: every signal ``unknown``), never the last body of a repeated name. (A batch
    also refuses a name no stage of it writes: ``sensors._check.batch._views``.)
    """
    found: dict[str, bytes] = {}
    for name, body in sections_of(output, nonce, sed_nul):
        if name in found:
            return {GARBLED: f"the section {name!r} appears twice".encode()}
        found[name] = body
    return found


def sections_of(output: bytes, nonce: str, sed_nul: bool | None = None) -> Iterator[tuple[str, bytes]]:
    """Each tagged section's name and body (job text unescaped), in the order written.

    A header is a line that starts with the tag: no line of job text can (see ESCAPE). A
    header of another nonce is not this check's: its section is garbled (the name says so).
    ``sed_nul``: the host's sed escapes after a NUL too (:attr:`Static.sed_nul`; None: as this
    answer's own meta section says, when it says).
    """
    tag = b"\n" + _TAG
    own = nonce.encode() + b" "
    parts = []
    for part in (b"\n" + output).split(tag)[1:]:
        header, _, body = part.partition(b"\n")
        if not header.startswith(own):
            parts.append(("(another check's section)", b""))
            continue
        parts.append((header[len(own) :].decode("ascii", "replace").strip(), body))
    if sed_nul is None:
        meta = next((body for name, body in parts if name == "meta"), b"")
        sed_nul = b"\nsed_nul 5\n" in b"\n" + meta
    for name, body in parts:
        if b"\n\\" in body or body[:1] == b"\\":
            body = body.replace(b"\n\\", b"\n")
            if body[:1] == b"\\":
                body = body[1:]
        if sed_nul and b"\0\\" in body:
            body = body.replace(b"\0\\", b"\0")
        yield name, body


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
    #: The host's clock at the end of the probe (after every file was read).
    now_end: float | None = None
    #: Why the probe cannot see every process of the host (None: it can; see
    #: :func:`blindness`).
    hidden: str | None = None
    #: The host's sed escapes after a NUL too (see :attr:`Static.sed_nul`).
    sed_nul: bool = False
    #: Who looks, and through which /proc: the probe's PID namespace, user and /proc mount
    #: options. Two probes with the same view see the same processes; what one saw says
    #: nothing of what another, with another view, can see.
    view: str | None = None
    #: /proc/uptime read just before the clock (``uptime`` is read just after it): the span
    #: between the two bounds how exactly a /proc start maps onto the host's clock.
    uptime_before: float | None = None
    #: ``now`` is whole seconds, rounded down (a ``date`` without ``%N``: BusyBox's prints
    #: it as it is): a start read against it is good to a second, whatever /proc/uptime says.
    now_coarse: bool = False
    #: The probe's effective uid (None: not read). Another user's /proc/PID/fd is closed to
    #: a probe that is not root: which process holds a file open is then not shown.
    euid: int | None = None
    #: The probe's PID namespace (``pid:[INODE]``; None: not read).
    pidns: str | None = None
    #: Why /proc's ``hidepid`` hides other users' processes from this probe (None: it does
    #: not), whatever its PID namespace (see :func:`blindness`).
    hidepid: str | None = None


#: The inode of the host's (the initial) PID namespace: a fixed constant of the kernel
#: (PROC_PID_INIT_INO, include/linux/proc_ns.h, since Linux 3.8).
_INIT_PID_NS = "pid:[4026531836]"
_HIDEPID = re.compile(r"(?:^|,)hidepid=(1|2|4|noaccess|invisible|ptraceable)(?:,|$)")
_PROC_GID = re.compile(r"(?:^|,)gid=(\d+)(?:,|$)")


def blindness(fields: dict[str, str], hidepid: str | None) -> str | None:
    """Why a probe with these facts cannot see every process of the host, or None.

    - In a PID namespace of its own (crosscheck in a container, the job on the host), /proc
      lists that namespace's processes only.
    - /proc mounted with ``hidepid`` (1/noaccess, 2/invisible, 4/ptraceable) hides other
      users' processes from a probe that is not root and not in the mount's ``gid=`` group.

    A fact the probe could not read (an old kernel, no readlink) is no claim either way.
    ``hidepid``: :func:`hidepid_blindness` of the same facts (read once per probe).
    """
    pidns = fields.get("pidns", "")
    if pidns.startswith("pid:[") and pidns != _INIT_PID_NS:
        return (
            f"the probe runs in a PID namespace of its own ({pidns}), not the host's: processes"
            " outside it are not in its /proc"
        )
    return hidepid


def hidepid_blindness(fields: dict[str, str], procmounts: list[str]) -> str | None:
    """Why /proc's ``hidepid`` hides other users' processes from a probe with these facts, or
    None (see :func:`blindness`)."""
    if not procmounts:
        return None
    # The last /proc mount in mountinfo is the one on top (the one the probe reads).
    options = procmounts[-1].rpartition(" - ")[2].split()
    superopts = options[2] if len(options) >= 3 else ""
    hidepid = _HIDEPID.search(superopts)
    euid = fields.get("euid", "").strip()
    if hidepid is None or euid == "0":
        return None
    gid = _PROC_GID.search(superopts)
    if gid is not None and gid.group(1) in fields.get("groups", "").split():
        return None
    return (
        f"/proc is mounted with hidepid={hidepid.group(1)} and the probe runs as uid {euid or '?'}:"
        " other users' processes are not in its /proc"
    )


def parse_meta(body: bytes | None, known: Static | None = None, end: bytes | None = None) -> Meta:
    """The meta section; static facts the script skipped come from ``known``; ``end``: the
    end section (the clock read last)."""
    fields: dict[str, str] = {}
    procmounts: list[str] = []
    for line in (body or b"").decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(" ")
        if key == "procmount":
            procmounts.append(value)
            continue
        fields[key] = value.strip()

    def num(key: str, conv: type = float):  # type: ignore[no-untyped-def]
        try:
            return conv(fields[key].split()[0])
        except (KeyError, ValueError, IndexError):
            return None

    now = num("now")
    # GNU date prints %N as nine digits; BusyBox's as "%N" or "N": whole seconds.
    coarse = now is not None and "." not in fields.get("now", "")
    if now is None:
        # busybox date has no %N: "1700000000.%N" or "1700000000.N"
        m = re.match(r"(\d+)", fields.get("now", ""))
        now = float(m.group(1)) if m else None
        coarse = now is not None
    hidepid = hidepid_blindness(fields, procmounts)
    return Meta(
        now=now,
        uptime=num("uptime"),
        uptime_before=num("uptime_before"),
        now_coarse=coarse,
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
        sed_nul=fields["sed_nul"] == "5" if "sed_nul" in fields else bool(known and known.sed_nul),
        now_end=_end_clock(end),
        hidden=blindness(fields, hidepid),
        view=_view(fields, procmounts),
        euid=num("euid", int),
        pidns=fields.get("pidns") or None,
        hidepid=hidepid,
    )


def _view(fields: dict[str, str], procmounts: list[str]) -> str:
    """The probe's view of the host's processes (see :attr:`Meta.view`)."""
    options = procmounts[-1].rpartition(" - ")[2].split() if procmounts else []
    superopts = options[2] if len(options) >= 3 else ""
    groups = " ".join(sorted(fields.get("groups", "").split()))
    return f"{fields.get('pidns', '')} uid {fields.get('euid', '')} groups {groups} proc {superopts}"


def _end_clock(end: bytes | None) -> float | None:
    """The clock read last (``Meta.now_end``), at the latest it can have been: every use of
    it is an upper bound (no file time, no sighting, no read is later). Whole seconds (a
    ``date`` without ``%N``: BusyBox's) are rounded down: up to a second later, then (a run
    begun, written and gone inside one probe read as begun after its log was read: fuzzer
    seed 6000214's false failed on such a clock)."""
    for line in (end or b"").decode("ascii", "replace").splitlines():
        key, _, value = line.partition(" ")
        m = re.match(r"\d+(\.\d+)?", value.strip()) if key == "now" else None
        if m:
            return float(m.group(0)) + (0.0 if m.group(1) else WHOLE_SECOND)
    return None
