"""One read-only probe of a live job on a host, for ``crosscheck init``.

The script is the probe's own frame (:func:`~sensors._base.probe.build_script`: its nonce,
its ``meta`` section, its escaping), plus the process table the process signal reads and one
section, ``survey``, of NUL-ended records about the job's processes: every byte a job controls
(an argument, a file name, a log line) is inside one record and holds no NUL, so none of it
can end a record or start another, and it reaches the answer through the probe's
:data:`~sensors._base.probe.ESCAPE`, so no line of it can start a section. Log tails come
as hex (``od``): nothing in them is read as framing at all.

Which processes are read closely is decided in the script, so the whole reading is one round
trip: ``--pid`` names one; ``--match`` is narrowed by a fixed string every match must hold
(:func:`~sensors._base.regex.required_text`), given to ``grep -F -f -`` by the shell's
builtin ``printf`` (on no command line of the host), and the regex itself is matched here.
The script then takes their descendants (DataLoader workers, ranks under a launcher).

Records (``KIND REST``, each ended by a NUL):

- ``pid P``: what follows is about process P, until the next ``pid``;
- ``cwd PATH``; ``fd N FLAGS TARGET`` (fds 0-2, and those open for writing or on a
  directory; FLAGS octal, from ``/proc/P/fdinfo/N``); ``fddenied`` (``/proc/P/fd`` cannot be
  read: another user's process); ``env NAME=DIGITS`` (rank variables only, where
  ``/proc/P/environ`` can be read);
- ``cand arg|fd P PATH``: a directory an argument of P names, or one it writes in;
- ``tail PATH`` then ``hex HEX``: the last :data:`TAIL_BYTES` of a file open for writing;
- ``dir PATH`` then ``entry NAME`` each (at most :data:`MAX_ENTRIES`) and ``count N``.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sensors._base.errors import CrosscheckError, HostError
from sensors._base.probe import ESCAPE, Meta, build_script, new_nonce, parse_meta, split_sections
from sensors._base.regex import compile_user_regex, required_literal
from sensors._base.text import inert, redact
from sensors._hosts import Host
from sensors._signals.gpu import GpuSnapshot, GpuSpec, parse_remote, read_local, remote_sections
from sensors._signals.process import table_lines
from sensors._signals.procfs import ProcStat, ancestors, descendants, parse_cmdlines, parse_stats

__all__ = ["Fd", "JobNotVisible", "Proc", "Survey", "survey", "survey_script"]

#: How much of the end of each file the job writes is read (O(tail), never the file).
TAIL_BYTES = 65536
#: At most this many processes are read closely (a job with its workers and ranks).
MAX_PROCS = 512
#: At most this many files written, and directories listed, per host.
MAX_FILES = 16
#: Entries named per directory (its count is exact).
MAX_ENTRIES = 100000

#: Environment variables that say which rank a process is (torchrun, DeepSpeed, accelerate).
RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK")


class JobNotVisible(CrosscheckError):
    """The job cannot be seen or read from the probe (no such process, hidepid, another PID
    namespace, another user's files): one line saying which and why."""


@dataclass(frozen=True)
class Fd:
    num: int
    flags: int
    target: str

    @property
    def writing(self) -> bool:
        return bool(self.flags & 3)  # O_WRONLY or O_RDWR

    @property
    def directory(self) -> bool:
        return bool(self.flags & 0o200000)  # O_DIRECTORY


@dataclass(frozen=True)
class Proc:
    """One process of the job, as the survey read it."""

    pid: int
    ppid: int
    argv: tuple[str, ...]
    cwd: str | None = None
    fds: tuple[Fd, ...] = ()
    fd_denied: bool = False
    env: Mapping[str, int] = field(default_factory=dict)

    @property
    def cmdline(self) -> str:
        return " ".join(self.argv)


@dataclass(frozen=True)
class Survey:
    """A job on one host: its processes (root first), the files they write (their tails),
    the directories their arguments name (their entries), and the GPUs (or why not)."""

    host: str
    meta: Meta
    root: int
    procs: Mapping[int, Proc]
    #: Processes of the host the drafted ``match`` must not find: pid → command line.
    others: Mapping[int, str]
    tails: Mapping[str, bytes]
    dirs: Mapping[str, tuple[tuple[str, ...], int]]
    #: (kind, pid, path) of each candidate outputs directory, as the script found it.
    candidates: tuple[tuple[str, int, str], ...]
    gpu: GpuSnapshot | None


def _prefilter(pattern: str) -> str | None:
    """The longest run, without a space, of the text every match of ``pattern`` holds (the
    command line's arguments are NUL-separated on the host, spaces here)."""
    literal = required_literal(pattern)
    if literal is None or "\n" in literal or "\0" in literal:
        return None
    piece = max(literal.split(" "), key=len)
    return piece if len(piece) >= 2 else None


_DIR_SKIP = ("/", "/proc", "/sys", "/dev", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/boot", "/run")


def _job_lines(pid: int | None, prefilter: str | None) -> list[str]:
    if pid is not None:
        seeds = f"S={int(pid)}"
    else:
        assert prefilter is not None
        # printf is the shell's builtin: the text is on no command line of the host.
        seeds = (
            f"S=$(printf '%s\\n' {shlex.quote(prefilter)} | grep -l -a -F -f - /proc/[0-9]*/cmdline"
            " 2>/dev/null | head -n 4096 | sed 's,^/proc/,,;s,/cmdline$,,')"
        )
    skip = " | ".join(f"{d} | {d}/*" if d != "/" else d for d in _DIR_SKIP)
    return [
        seeds,
        # The seeds and their descendants, by the parent each stat names (a comm of 15 bytes
        # cannot hold head's header; a record is cut at the last ') ').
        'D=$(head -c 4096 /dev/null /proc/[0-9]*/stat 2>/dev/null | awk -v s="$S" \''
        '/^==> \\/proc\\/[0-9]+\\/stat <==$/ { p = $2; gsub(/[^0-9]/, "", p); next } '
        'p != "" && /[)] / { r = $0; sub(/.*[)] /, "", r); split(r, f, " "); par[p] = f[2] } '
        'END { n = split(s, a, " "); for (i = 1; i <= n; i++) sel[a[i]] = 1; '
        "for (k = 0; k < 64; k++) { more = 0; for (q in par) if (!(q in sel) && (par[q] in sel)) "
        "{ sel[q] = 1; more = 1 } if (!more) break } "
        f'c = 0; for (q in sel) if (c++ < {MAX_PROCS}) printf "%s ", q }}\')',
        "sec survey",
        "{",
        "W=; L=; set -f",
        "for p in $D; do",
        '  isnum "$p" || continue',
        "  printf 'pid %s\\000' \"$p\"",
        "  c=$(readlink /proc/$p/cwd 2>/dev/null) && printf 'cwd %s\\000' \"$c\"",
        "  if [ -r /proc/$p/fd ] && [ -x /proc/$p/fd ]; then",
        "    set +f",
        "    for f in /proc/$p/fd/*; do",
        '      n=${f##*/}; isnum "$n" || continue',
        '      fl=; while read -r k v; do [ "$k" = flags: ] && { fl=$v; break; }; done 2>/dev/null </proc/$p/fdinfo/$n',  # noqa: E501  (one line of the script, as the shell reads it)
        '      isnum "$fl" || continue',
        "      w=$(( 0$fl & 3 )); dd=$(( 0$fl & 0200000 ))",
        '      [ "$w" -ne 0 ] || [ "$dd" -ne 0 ] || [ "$n" -le 2 ] || continue',
        '      t=$(readlink "$f" 2>/dev/null) || continue',
        '      printf \'fd %s %s %s\\000\' "$n" "$fl" "$t"',
        '      case $t in *"$__cc_nl"* | "") continue ;; esac',
        # -ef: the path names the very file the fd holds (a removed log reads "PATH (deleted)",
        # and a file of that name, anyone's, is not it).
        '      if [ "$w" -ne 0 ] && [ -f "$t" ] && [ "$f" -ef "$t" ]; then',
        '        case "$__cc_nl$W" in *"$__cc_nl$t$__cc_nl"*) ;; *) [ ${#W} -lt 65536 ] && W="$W$t$__cc_nl" ;; esac',  # noqa: E501  (one line of the script, as the shell reads it)
        '        t=${t%/*}; [ -n "$t" ] || continue; k=fd',
        '      elif [ "$dd" -ne 0 ]; then k=fd; else continue; fi',
        f"      case $t in {skip}) continue ;; esac",
        '      case "$__cc_nl$L" in *"$__cc_nl$t$__cc_nl"*) ;; *) L="$L$t$__cc_nl"; printf \'cand %s %s %s\\000\' "$k" "$p" "$t" ;; esac',  # noqa: E501  (one line of the script, as the shell reads it)
        "    done",
        "    set -f",
        "  else printf 'fddenied\\000'; fi",
        "  tr '\\000' '\\n' </proc/$p/environ 2>/dev/null | grep -E "
        f"'^({'|'.join(RANK_VARS)})=[0-9]{{1,7}}$' | while read -r e; do printf 'env %s\\000' \"$e\"; done",
        # The directories its arguments name (--out=/x, --out /x, a path relative to its cwd).
        "  IFS=$__cc_nl",
        "  for a in $(tr '\\000' '\\n' </proc/$p/cmdline 2>/dev/null | tail -n +2 | head -n 512); do",
        "    case $a in -*=*) a=${a#*=} ;; esac",
        '    case $a in /*) ;; "") continue ;; *) [ -n "$c" ] || continue; a="$c/$a" ;; esac',
        f"    case $a in {skip}) continue ;; esac",
        '    [ -d "$a" ] || continue',
        '    case "$__cc_nl$L" in *"$__cc_nl$a$__cc_nl"*) ;; *) L="$L$a$__cc_nl"; printf \'cand arg %s %s\\000\' "$p" "$a" ;; esac',  # noqa: E501  (one line of the script, as the shell reads it)
        "  done",
        "  unset IFS",
        "done",
        "IFS=$__cc_nl; m=0",
        "for t in $W; do",
        f"  m=$((m + 1)); [ $m -le {MAX_FILES} ] || break",
        "  printf 'tail %s\\000hex ' \"$t\"",
        f"  tail -c {TAIL_BYTES} -- \"$t\" 2>/dev/null | od -An -v -tx1 | tr -d ' \\n'",
        "  printf '\\000'",
        "done",
        "m=0",
        "for d in $L; do",
        f"  m=$((m + 1)); [ $m -le {MAX_FILES} ] || break",
        "  printf 'dir %s\\000' \"$d\"; n=0; set +f; unset IFS",
        '  for f in "$d"/* "$d"/.[!.]* "$d"/..?*; do',
        '    [ -e "$f" ] || [ -L "$f" ] || continue',
        f"    n=$((n + 1)); [ $n -le {MAX_ENTRIES} ] && printf 'entry %s\\000' \"${{f##*/}}\"",
        "  done",
        "  set -f; IFS=$__cc_nl",
        "  printf 'count %s\\000' \"$n\"",
        "done",
        "unset IFS; set +f",
        f"}} | {ESCAPE}",
    ]


def survey_script(nonce: str, *, pid: int | None, prefilter: str | None, nvml: bool) -> bytes:
    """The one script of a survey (read-only; see the module docstring)."""
    snippets: list[list[str]] = [list(table_lines()), _job_lines(pid, prefilter)]
    if not nvml:
        for name, text in remote_sections(None).items():
            snippets.append([f"sec {name}", text])
    return build_script(nonce, None, snippets)


def _records(body: bytes) -> list[tuple[str, str]]:
    out = []
    for raw in body.split(b"\0")[:-1]:  # a last piece without its NUL was cut: not a record
        text = raw.decode("utf-8", "surrogateescape")
        kind, _, rest = text.partition(" ")
        out.append((kind, rest))
    return out


def _matcher(pattern: str) -> Callable[[str], bool]:
    regex = compile_user_regex(pattern)
    return lambda text: regex.search(text) is not None


def survey(
    host: Host,
    *,
    pid: int | None = None,
    match: str | None = None,
    node: int | None = None,
    timeout: float = 60.0,
) -> Survey:
    """Read the job on ``host`` (one round trip): by ``pid``, or by ``match`` (a regex over
    the command line; with ``node``, only processes whose node rank, where one is shown, is
    ``node``: host k of a stage over several hosts runs node k).

    Raises:
        JobNotVisible: no such process, or one the probe cannot read (one line: why).
        HostError: the host could not be asked.
        ValueError: ``match`` has no literal text to narrow the host's processes with.
    """
    prefilter = None
    if pid is None:
        assert match is not None
        prefilter = _prefilter(match)
        if prefilter is None:
            raise ValueError(
                f"--match {match!r}: the pattern needs some literal text (e.g. 'train\\.py'),"
                " which every match holds; or give --pid"
            )
    nonce = new_nonce()
    script = survey_script(nonce, pid=pid, prefilter=prefilter, nvml=host.nvml)
    out = host.run_script(script, timeout=timeout)
    sections = split_sections(out, nonce)
    if "end" not in sections:
        raise HostError("the survey did not run to its end (garbled or cut answer)", host=host.name)
    meta = parse_meta(sections.get("meta"), None, sections.get("end"))
    stats = parse_stats(sections.get("stat"))
    cmdlines = parse_cmdlines(sections.get("cmdline")).text
    probe = meta.script_pid
    # The probe, what runs it (this command, locally; sshd's shell) and what it started.
    mine: set[int] = set()
    if probe is not None:
        mine = {probe} | ancestors(probe, stats) | set(descendants([probe], stats))
    if pid is not None:
        root = pid
        if root not in stats or root in mine:
            raise JobNotVisible(_not_seen(f"no process {pid}", host.name, meta))
        roots = [root]
    else:
        assert match is not None
        found = _matcher(match)
        hits = {
            p for p, text in cmdlines.items()
            if p in stats and p not in mine and found(text) and not _asks_for(text, match)
        }  # fmt: skip
        roots = sorted(p for p in hits if stats[p].ppid not in hits)
        if node is not None:
            roots = [p for p in roots if _node_rank(p, sections, cmdlines) in (None, node)] or roots
        if not roots:
            raise JobNotVisible(_not_seen(f"no process matches {match!r}", host.name, meta))
        _one_job(roots, cmdlines, match, host.name)
        root = roots[0]
    procs = _procs(sections.get("survey") or b"", stats, cmdlines, roots)
    if root not in procs:
        raise JobNotVisible(_not_seen(f"process {root} ended before it could be read", host.name, meta))
    denied = [p for p in procs.values() if p.fd_denied]
    if any(p.pid in roots for p in denied):
        raise JobNotVisible(
            f"{host.name}: cannot read /proc/{denied[0].pid}/fd (permission denied: another user's"
            " process): run crosscheck init as the job's user, or as root"
        )
    others = {
        p: text for p, text in cmdlines.items() if p not in procs and p not in mine and p in stats and text
    }
    tails, dirs, candidates = _files(sections.get("survey") or b"")
    gpu = read_local(GpuSpec()) if host.nvml else parse_remote(sections)
    return Survey(host.name, meta, root, procs, others, tails, dirs, candidates, gpu)


def _one_job(roots: list[int], cmdlines: Mapping[int, str], match: str, host: str) -> None:
    """Several matched processes are one job's ranks only where their command lines differ in
    nothing but numbers (``--rank 1``, a port); an editor on ``train.py`` beside the job is
    another process, and a draft over both (one's ``match``, the other's log, "2 ranks") says
    false things: a usage error naming them, never a pick."""
    shapes = {re.sub(r"\d+", "#", cmdlines.get(p, "")) for p in roots}
    if len(shapes) <= 1:
        return
    shown = "; ".join(f"pid {p}: {inert(redact(cmdlines.get(p, '')), limit=80)}" for p in roots[:4])
    more = f" (and {len(roots) - 4} more)" if len(roots) > 4 else ""
    raise ValueError(
        f"--match {match!r} matches {len(roots)} processes on {host} that are not one job ({shown}{more}):"
        " give --pid, or a --match only the job's command line holds"
    )


def _asks_for(cmdline: str, match: str) -> bool:
    """Whether ``cmdline`` is a ``crosscheck init`` given this very pattern (this command,
    seen from a host over SSH that is this machine): it names the job, it is not the job."""
    return " init " in f" {cmdline} " and (f"--match {match}" in cmdline or f"--match={match}" in cmdline)


def _not_seen(what: str, host: str, meta: Meta) -> str:
    if meta.hidden:
        # What to do differs by the cause blindness() names: hidepid hides other users'.
        where = (
            "as the job's user, or as root" if "hidepid" in meta.hidden
            else "in the job's PID namespace (on the host, not in a container of its own)"
        )  # fmt: skip
        return f"{host}: {what} the probe can see: {meta.hidden}; run crosscheck init {where}"
    return f"{host}: {what}"


def _node_rank(pid: int, sections: Mapping[str, bytes], cmdlines: Mapping[int, str]) -> int | None:
    """A process's node rank as its environment (GROUP_RANK, NODE_RANK) or arguments
    (``--node N``, ``--node_rank N``, ``--node-rank=N``) say, or None."""
    proc = None
    for kind, rest in _records(sections.get("survey") or b""):
        if kind == "pid":
            proc = rest
        elif kind == "env" and proc == str(pid):
            name, _, value = rest.partition("=")
            if name in ("GROUP_RANK", "NODE_RANK") and value.isdigit():
                return int(value)
    return arg_value(cmdlines.get(pid, "").split(" "), NODE_FLAGS)


NODE_FLAGS = ("--node", "--node_rank", "--node-rank", "--nodeid", "--node-id")
RANK_FLAGS = ("--local_rank", "--local-rank", "--rank")


def arg_value(argv: list[str] | tuple[str, ...], flags: tuple[str, ...]) -> int | None:
    """The whole number after one of ``flags`` (``--flag N`` or ``--flag=N``), or None."""
    for k, word in enumerate(argv):
        name, eq, value = word.partition("=")
        if name in flags:
            if not eq:
                value = argv[k + 1] if k + 1 < len(argv) else ""
            if value.isdigit():
                return int(value)
    return None


def _procs(
    body: bytes, stats: Mapping[int, ProcStat], cmdlines: Mapping[int, str], roots: list[int]
) -> dict[int, Proc]:
    """The roots and their descendants, by this process's own reading of the table (the
    script's choice only decides what was read closely)."""
    wanted = [*roots, *(p for p in descendants(roots, stats) if p not in roots)]
    raw: dict[int, dict[str, object]] = {}
    current: dict[str, object] | None = None
    for kind, rest in _records(body):
        if kind == "pid":
            current = raw.setdefault(int(rest), {"fds": [], "env": {}}) if rest.isdigit() else None
        elif current is None:
            continue
        elif kind == "cwd":
            current["cwd"] = rest
        elif kind == "fddenied":
            current["denied"] = True
        elif kind == "fd":
            num, flags, target = [*rest.split(" ", 2), "", ""][:3]
            if num.isdigit() and flags.isdigit():
                current["fds"].append(Fd(int(num), int(flags, 8), target))  # type: ignore[attr-defined]
        elif kind == "env":
            name, _, value = rest.partition("=")
            if name in RANK_VARS and value.isdigit():
                current["env"][name] = int(value)  # type: ignore[index]
    procs: dict[int, Proc] = {}
    for p in wanted:
        if p not in raw or p not in stats:
            continue
        r = raw[p]
        procs[p] = Proc(
            p,
            stats[p].ppid,
            tuple(cmdlines.get(p, "").split(" ")) if cmdlines.get(p) else (),
            r.get("cwd"),  # type: ignore[arg-type]
            tuple(r["fds"]),  # type: ignore[arg-type]
            bool(r.get("denied")),
            dict(r["env"]),  # type: ignore[call-overload]
        )
    return procs


def _files(
    body: bytes,
) -> tuple[dict[str, bytes], dict[str, tuple[tuple[str, ...], int]], tuple[tuple[str, int, str], ...]]:
    tails: dict[str, bytes] = {}
    dirs: dict[str, tuple[tuple[str, ...], int]] = {}
    candidates: list[tuple[str, int, str]] = []
    tail: str | None = None
    folder: str | None = None
    entries: list[str] = []
    for kind, rest in _records(body):
        if kind == "tail":
            tail, folder = rest, None
        elif kind == "hex" and tail is not None:
            with contextlib.suppress(ValueError):  # cut: no tail rather than a wrong one
                tails[tail] = bytes.fromhex(rest)
            tail = None
        elif kind == "dir":
            folder, entries = rest, []
        elif kind == "entry" and folder is not None:
            entries.append(rest)
        elif kind == "count" and folder is not None and rest.isdigit():
            dirs[posixpath.normpath(folder)] = (tuple(entries), int(rest))
            folder = None
        elif kind == "cand":
            how, _, more = rest.partition(" ")
            p, _, path = more.partition(" ")
            if p.isdigit() and how in ("arg", "fd"):
                candidates.append((how, int(p), posixpath.normpath(path) if path else path))
    return tails, dirs, tuple(candidates)
