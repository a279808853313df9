"""A stage file drafted from surveys of a live job (``crosscheck init``), as YAML text.

Every guess carries a comment saying where it came from. Job text (a path, an argument, a
log line) enters the YAML only as a quoted scalar (:func:`_scalar`, PyYAML's own quoting) or
inside a comment made one inert line (:func:`_comment`): it can neither end a value nor
start a key. The drafted file is loaded back by the caller (``validate``), never trusted.
"""

from __future__ import annotations

import collections
import fnmatch
import posixpath
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from sensors._base.text import inert, redact, redact_argv
from sensors._config.stage import PolicySpec
from sensors._draft.survey import NODE_FLAGS, RANK_FLAGS, Proc, Survey, arg_value
from sensors._signals.outputs import DEFAULT_EXCLUDES

__all__ = ["EXPECTED_PLACEHOLDER", "Draft", "draft"]

#: ``outputs.expected`` where nothing said the total: a count no job reaches, so a draft
#: left as it is never opens the gate on a partial set (a false ``complete`` is the worst bug).
EXPECTED_PLACEHOLDER = 999999999

#: ``policy.exit_grace`` as the stage file has it by default.
EXIT_GRACE: float = PolicySpec.model_fields["exit_grace"].default

#: A completion line by convention: a line that *ends* with the word (``Extraction complete``,
#: ``INFO all done.``); not ``epoch 3 done, loss 0.3``.
CONVENTION_COMPLETE = r"(?i)\b(complete|completed|done|finished|success|succeeded)[.!]?$"
#: An error line: a Python traceback's first line, an exception line, a CUDA error.
CONVENTION_ERROR = r"^Traceback \(most recent call last\)|^[A-Za-z_][\w.]*(Error|Exception): |CUDA error"

_INTERPRETERS = re.compile(
    r"^(python[0-9.]*|pypy[0-9.]*|bash|sh|dash|zsh|env|nohup|setsid|stdbuf|nice|ionice|time)$"
)
_INTERPRETER_FLAGS_WITH_VALUE = {"-W", "-X", "-c", "-Q"}
_LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".stdout", ".stderr")
_EXPECTED_FLAGS = re.compile(
    r"^--?(num|n|total|max)[-_]?(samples|examples|files|items|shards|parts|outputs|records|steps|chunks)$"
    r"|^--?(count|expected|total)$"
)
_COMPLETE_WORD = re.compile(r"(?i)\b(complete|completed|done|finished|saved|success|succeeded)\b")
_PROGRESS_TOTAL = re.compile(r"\b(\d{1,12})\s*/\s*(\d{1,12})\b")


@dataclass(frozen=True)
class Draft:
    """The draft's text, and what a person must still do before ``wait``."""

    text: str
    todo: tuple[str, ...]


def _scalar(value: str) -> str:
    """``value`` as one YAML scalar (quoted as PyYAML needs: job text is never markup)."""
    dumped = yaml.safe_dump(value, default_style="'", width=1 << 30, allow_unicode=False)
    return dumped.removesuffix("\n...\n").rstrip("\n")


def _comment(text: str, limit: int = 200) -> str:
    """An inert, redacted, one-line comment."""
    return "# " + inert(redact(text), limit=limit)


def _line(indent: int, key: str, value: str, why: str) -> str:
    return f"{' ' * indent}{key}: {value}  {_comment(why)}"


_SPECIAL = re.compile(r"([.^$*+?{}\[\]\\|()])")


def _escape(text: str) -> str:
    """``text`` as a regex that matches it literally (only the metacharacters escaped:
    ``re.escape`` would write ``--out`` as ``\\-\\-out``)."""
    return _SPECIAL.sub(r"\\\1", text)


def _words(proc: Proc) -> list[str]:
    """The command line's distinctive words: the interpreter and its flags left out."""
    argv = list(proc.argv)
    k = 0
    while k < len(argv) and _INTERPRETERS.match(posixpath.basename(argv[k])):
        k += 1
        while k < len(argv) and argv[k].startswith("-") and argv[k] != "-m":
            k += 2 if argv[k] in _INTERPRETER_FLAGS_WITH_VALUE else 1
        if k < len(argv) and argv[k] == "-m":
            break
    return argv[k:] or argv


def _match_for(proc: Proc, node_template: bool) -> tuple[str, str]:
    """``process.match`` for the job whose root is ``proc``, and where it came from: the
    program and the words after it, up to 3 (over several hosts, up to the node's number,
    which becomes ``{node}``), stopping at a rank's own number; a secret is any word."""
    words = _words(proc)
    shown = redact_argv(words)
    node_at = next((k for k, w in enumerate(words) if w.partition("=")[0] in NODE_FLAGS), None)
    last = (
        node_at + (0 if node_at is None or "=" in words[node_at] else 1)
        if node_template and node_at is not None
        else 2
    )
    parts: list[str] = []
    for k, (word, safe) in enumerate(zip(words[: min(last + 1, 16)], shown, strict=False)):
        name = word.partition("=")[0]
        if name in RANK_FLAGS:
            break  # a rank's own number: the ranks' lines differ from here on
        if k == 0 and "/" in word:
            parts.append(_escape(posixpath.basename(word)))
        elif node_template and node_at is not None and k == node_at and "=" in word:
            parts.append(_escape(name) + "={node}( |$)")
        elif node_template and node_at is not None and k == node_at + 1:
            parts.append("{node}( |$)")
        elif word != safe or "\n" in word or len(word) > 200:
            parts.append(r"\S+")  # a secret, or text no pattern should carry
        else:
            parts.append(_escape(word))
    return " ".join(
        parts
    ), f"from /proc/{proc.pid}/cmdline: the program and its first arguments, interpreter left out"


def _rank_of(proc: Proc) -> int | None:
    if "LOCAL_RANK" in proc.env:
        return proc.env["LOCAL_RANK"]
    return arg_value(proc.argv, RANK_FLAGS)


def _log_for(s: Survey) -> tuple[str, str] | None:
    """The file the job logs to: a redirected stdout/stderr first, then a file with a log's
    name, then any file it writes; with where it was seen."""
    best: tuple[int, str, str] | None = None
    for proc in s.procs.values():
        for fd in proc.fds:
            if not fd.writing or not fd.target.startswith("/") or fd.target not in s.tails:
                continue
            if fd.num in (1, 2):
                rank, why = 0, f"from /proc/{proc.pid}/fd/{fd.num} ({'stdout' if fd.num == 1 else 'stderr'})"
            elif fd.target.endswith(_LOG_SUFFIXES):
                rank, why = 1, f"from /proc/{proc.pid}/fd/{fd.num} (open for writing)"
            else:
                rank, why = 2, f"from /proc/{proc.pid}/fd/{fd.num} (open for writing)"
            rank = rank * 2 + (0 if proc.pid == s.root else 1)
            if best is None or rank < best[0]:
                best = (rank, fd.target, why)
    if best is None:
        return None
    # A log of its own besides a redirected stdout/stderr (logging to a file, a progress bar on
    # stderr): the stdout file holds the tracebacks, the other one the job's own lines. Which
    # one its last line goes to only the person knows; the comment names the other.
    other = next(
        (
            (proc.pid, fd)
            for proc in s.procs.values()
            for fd in proc.fds
            if fd.writing and fd.num > 2 and fd.target.endswith(".log") and fd.target != best[1]
            and fd.target in s.tails
        ),
        None,
    )  # fmt: skip
    why = best[2]
    if other is not None and best[0] < 2:
        pid, fd = other
        why += (
            f"; it also writes {fd.target} (/proc/{pid}/fd/{fd.num}): CHECK which one its last line goes to"
        )
    return best[1], why


def _lines(tail: bytes) -> list[str]:
    text = tail.decode("utf-8", "replace").replace("\r", "\n")
    lines = text.split("\n")
    return (
        [line for line in lines[1:-1] if line.strip()]
        if len(tail) >= 65536
        else [x for x in lines[:-1] if x.strip()]
    )


def _patterns(lines: list[str]) -> tuple[str, str, str, str]:
    """``complete`` and ``error`` and where each came from."""
    complete, complete_why = (
        CONVENTION_COMPLETE,
        (
            "PLACEHOLDER by convention (no line of the log says done yet): a line ending in"
            " complete/done/finished; better: your job's own last line"
        ),
    )
    already = [line for line in lines if re.search(CONVENTION_COMPLETE, line)]
    if already:
        complete_why = (
            f"CHECK: lines already in the log match it while the job runs, e.g. {already[-1]!r}:"
            " make it your job's own last line"
        )
    error, error_why = CONVENTION_ERROR, "by convention: a Python traceback, an exception line, a CUDA error"
    seen = [line for line in lines if re.search(CONVENTION_ERROR, line)]
    if seen:
        error_why = f"CHECK: matches a line already in the log ({seen[-1]!r}): the gate would say failed"
    return complete, complete_why, error, error_why


def _outputs_for(s: Survey, log: str | None) -> tuple[str, str] | None:
    """An outputs directory: one an argument names (not the log's, nor the cwd), else one
    the job writes in (not the log's).

    The script names each directory once, after the first process that named it, and it reads
    every process that holds the ``--match`` text: on a host that runs two nodes' ranks (or a
    loopback test host) that first process may be another node's rank. Which of *this* job's
    processes names a directory, and how, is decided here, from their own arguments and fds."""
    log_dir = posixpath.dirname(log) if log else None
    cwd = s.procs[s.root].cwd
    found: list[tuple[bool, bool, str, str]] = []
    for path in dict.fromkeys(c[2] for c in s.candidates):
        if path not in s.dirs or path == log_dir:
            continue
        named = next(((p, w) for p in s.procs.values() if (w := _arg_naming(p, path)) is not None), None)
        if named is not None:
            proc, word = named
            found.append((False, path == cwd, path, f"from an argument of pid {proc.pid} ({word})"))
            continue
        writer = next((p for p in s.procs.values() if _writes_in(p, path)), None)
        if writer is not None:
            found.append((True, path == cwd, path, f"from /proc/{writer.pid}/fd (a file it writes is there)"))
    if not found:
        return None
    _, _, path, why = min(found, key=lambda f: (f[0], f[1]))
    return path, why


def _arg_naming(proc: Proc, path: str) -> str | None:
    """The argument of ``proc`` that names the directory ``path`` (``--out=/x``, ``/x``, or a
    path relative to its working directory), or None."""
    for k, word in enumerate(proc.argv[1:], 1):
        value = word.partition("=")[2] if word.startswith("-") and "=" in word else word
        if value and posixpath.normpath(posixpath.join(proc.cwd or "/", value)) == path:
            before = proc.argv[k - 1]
            return f"{before} {word}" if k > 1 and before.startswith("-") and "=" not in before else word
    return None


def _writes_in(proc: Proc, path: str) -> bool:
    """Whether ``proc`` writes a file in ``path``, or holds the directory itself open."""
    return any(
        (fd.writing and posixpath.dirname(fd.target) == path) or (fd.directory and fd.target == path)
        for fd in proc.fds
    )


def _pattern(entries: Sequence[str]) -> tuple[str, int]:
    """The dominant name pattern of ``entries`` (temporary names left out) and its count."""
    names = [n for n in entries if not any(fnmatch.fnmatchcase(n, x) for x in DEFAULT_EXCLUDES)]
    if not names:
        return "*", 0
    shapes = collections.Counter(re.sub(r"\d+", "*", n) for n in names)
    shape, count = shapes.most_common(1)[0]
    if count * 2 >= len(names) and "*" in shape:
        glob = re.sub(r"\*+", "*", shape)
    else:
        suffixes = collections.Counter(posixpath.splitext(n)[1] for n in names)
        ext, _ = suffixes.most_common(1)[0]
        glob = f"*{ext}" if ext else "*"
    glob = glob.replace("[", "[[]") if "[" in glob else glob
    return glob, sum(1 for n in names if fnmatch.fnmatchcase(n, glob))


def _expected(s: Survey, lines: list[str]) -> tuple[int, str] | None:
    for proc in s.procs.values():
        argv = list(proc.argv)
        for k, word in enumerate(argv):
            name, eq, value = word.partition("=")
            if not _EXPECTED_FLAGS.match(name):
                continue
            if not eq:
                value = argv[k + 1] if k + 1 < len(argv) else ""
            if value.isdigit() and 0 < int(value) <= 2**53:
                return int(
                    value
                ), f"from the argument {name} {value} of pid {proc.pid}: CHECK it counts files"
    for line in reversed(lines):
        m = _PROGRESS_TOTAL.search(line)
        if m and 0 < int(m.group(2)) <= 2**53 and int(m.group(1)) <= int(m.group(2)):
            return int(m.group(2)), f"from the log's progress {m.group(0)!r}: CHECK it counts files"
    return None


def _stage_name(proc: Proc) -> str:
    words = _words(proc)
    base = posixpath.basename(
        words[1] if words and words[0] == "-m" and len(words) > 1 else words[0] if words else ""
    )
    base = re.sub(r"\.(py|sh)$", "", base)
    name = re.sub(r"[^A-Za-z0-9_.\-]", "-", base).strip("-.") or "job"
    return name[:60] if name[0].isalnum() else "job-" + name[:60]


def _gpu(surveys: Sequence[Survey]) -> tuple[list[int], str] | None:
    for s in surveys:
        snap = s.gpu
        if snap is None or not snap.ok:
            continue
        used = []
        for dev in snap.devices:
            pids = [p.pid for p in dev.processes if p.pid in s.procs]
            if pids:
                used.append((dev.index, pids[0]))
        if used:
            how = "NVML" if snap.source == "nvml" else "nvidia-smi"
            shown = ", ".join(f"GPU {i} (pid {p})" for i, p in used)
            return sorted({i for i, _ in used}), f"from {how} on {s.host}: the job's processes on {shown}"
    return None


def _why_no_gpu(surveys: Sequence[Survey]) -> str:
    snap = surveys[0].gpu
    if snap is None:
        return "not read"
    if not snap.ok:
        return f"no GPU read ({snap.error})"
    return "no GPU shows the job's processes"


def _template(values: Sequence[str], names: Sequence[str] = ()) -> str | None:
    """One text for every host's ``values`` (the same, or the node's number as ``{node}``, or
    the host's name in the stage file as ``{host}``: ``names``, node 0 first)."""
    if len(set(values)) == 1:
        return values[0]
    if all(str(k) in value for k, value in enumerate(values)):
        first = values[0]
        for pos in [m.start() for m in re.finditer("0", first)]:
            candidate = first[:pos] + "{node}" + first[pos + 1 :]
            if all(candidate.replace("{node}", str(k)) == v for k, v in enumerate(values)):
                return candidate
    # {host} is filled with each host's ssh name (not the name the machine calls itself), so
    # only that name can become it; two hosts of one name cannot (validation says why).
    if (
        len(names) == len(values)
        and len(set(names)) == len(names)
        and all(n and n in v for n, v in zip(names, values, strict=True))
    ):
        candidate = values[0].replace(names[0], "{host}")
        if all(candidate.replace("{host}", n) == v for n, v in zip(names, values, strict=True)):
            return candidate
    return None


def _host_name(entry: str | dict[str, object]) -> str:
    """The name ``{host}`` becomes for a host entry (``local``, or its ``ssh`` value)."""
    return "local" if entry == "local" else str(entry["ssh"])  # type: ignore[index]


def draft(
    surveys: Sequence[Survey],
    hosts: Sequence[str | dict[str, object]],
    *,
    interval: float | None = None,
    now: float | None = None,
) -> Draft:
    """The stage file for the job the ``surveys`` read (one per host, node 0 first);
    ``hosts``: each host as the stage file writes it (``local`` or an SSH section)."""
    first = surveys[0]
    multi = len(surveys) > 1
    root = first.procs[first.root]
    todo: list[str] = []
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now if now is not None else time.time()))
    where = ", ".join(f"pid {s.root} on {s.host}" for s in surveys)
    out = [
        _comment(
            f"Drafted by crosscheck init from {where} at {when}. Review every guess (comments say where", 400
        ),
        "# each came from), then run crosscheck wait with this file.",
        _line(0, "stage", _scalar(_stage_name(root)), "from the program's name: rename as you like"),
    ]
    if multi:
        out.append("hosts:  # node 0 first: {node} below is each host's place in this list")
        for h in hosts:
            if h == "local":
                out.append("  - local")
            else:
                assert isinstance(h, dict)
                items = list(h.items())
                key, value = items[0]
                out.append(f"  - {key}: {_scalar(str(value))}")
                out += [f"    {k}: {_scalar(str(v)) if isinstance(v, str) else v}" for k, v in items[1:]]
    else:
        h = hosts[0]
        if h == "local":
            out.append("host: local")
        else:
            assert isinstance(h, dict)
            out.append("host:")
            out += [f"  {k}: {_scalar(str(v)) if isinstance(v, str) else v}" for k, v in h.items()]
    # process
    matches = [_match_for(s.procs[s.root], multi) for s in surveys]
    match, match_why = matches[0]
    if multi and len({m for m, _ in matches}) > 1:
        todo.append("process.match: the hosts' command lines differ; the draft takes node 0's")
        match_why = "CHECK: the hosts' command lines differ; node 0's"
    job = _job_note(first, match)
    out += ["process:", _line(2, "match", _scalar(match), f"{match_why}; {job}")]
    ranks = [s for s in surveys]
    if multi:
        per_host = _ranks(ranks[0])
        if per_host > 1 or any(_ranks(s) > 1 for s in ranks):
            out.append(_line(2, "per_host", str(per_host), f"ranks seen on {first.host}: {per_host}"))
    elif _ranks(first) > 1:
        out.append(f"  # {_ranks(first)} ranks seen (the stage's process is all of them)")
    # log
    logs = [_log_for(s) for s in surveys]
    lines: list[str] = []
    if logs[0] is None or any(x is None for x in logs):
        out.append("# log: no file the job writes was found (its output goes to a terminal or a pipe)")
        todo.append("log: none found; add one if the job writes a log")
    else:
        paths = [x[0] for x in logs if x is not None]
        path = _template(paths, [_host_name(h) for h in hosts]) if multi else paths[0]
        log_why = logs[0][1] if logs[0] else ""
        if path is None:
            path = paths[0]
            log_why = f"CHECK: each host logs elsewhere ({', '.join(paths)}); node 0's"
            todo.append("log.path: the hosts' logs differ in more than the node's number or the host's name")
        elif "{node}" in path and path != paths[0]:
            log_why += "; {node}: each host's own, by its place in hosts"
        elif "{host}" in path:
            log_why += "; {host}: each host's own, by its name in hosts"
        if "CHECK which one its last line goes to" in log_why:
            todo.append(
                "log.path: the job writes two logs; keep the one its last line goes to"
                " (the comment names both)"
            )
        lines = _lines(first.tails.get(paths[0], b""))
        complete, complete_why, error, error_why = _patterns(lines)
        if complete == CONVENTION_COMPLETE:
            todo.append("log.complete: a pattern by convention; your job's own last line is better")
        out += [
            "log:",
            _line(2, "path", _scalar(path), log_why),
            _line(2, "complete", _scalar(complete), complete_why),
            _line(2, "error", _scalar(error), error_why),
        ]
    # outputs
    found = _outputs_for(first, logs[0][0] if logs[0] else None)
    if found is None:
        out.append("# outputs: no directory named in its arguments or written in was found")
    else:
        folder, folder_why = found
        entries, total = first.dirs[folder]
        glob, count = _pattern(entries)
        expected = _expected(first, lines)
        if expected is not None and expected[0] < count:
            # "epoch 1/3" beside 5 files already there counts something else: a total below
            # today's count would have the outputs done the moment the file is saved.
            expected = None
        out += [
            "outputs:",
            _line(2, "files", _scalar(folder), folder_why),
            _line(
                2, "pattern", _scalar(glob),
                f"the most common name shape: {count} of {total} entries now"
                if total
                else "PLACEHOLDER: the directory is empty now",
            ),
        ]  # fmt: skip
        if expected is None:
            out.append(
                _line(
                    2,
                    "expected",
                    str(EXPECTED_PLACEHOLDER),
                    f"PLACEHOLDER: the total the job will write ({count} now)",
                )
            )
            todo.append(
                f"outputs.expected: a placeholder ({EXPECTED_PLACEHOLDER}); set the total the job will write"
            )
        else:
            out.append(_line(2, "expected", str(expected[0]), expected[1]))
            source = expected[1].partition(":")[0]
            todo.append(
                f"outputs.expected: {expected[0]} is a guess ({source}); check it counts"
                f" the files matching {glob} ({count} now), not samples or steps"
            )
    # GPU
    gpu = _gpu(surveys)
    idle_for = 2 * (interval if interval is not None else 30.0)
    if gpu is None:
        out.append(_comment(f"gpu: none ({_why_no_gpu(surveys)})"))
    else:
        devices, gpu_why = gpu
        out += [
            "gpu:",
            _line(2, "devices", "[" + ", ".join(map(str, devices)) + "]", gpu_why),
            _line(2, "idle_for", _duration(idle_for), "two checks' samples (2 x policy.interval)"),
        ]
    policy = []
    if interval is not None:
        policy.append(_line(2, "interval", _duration(interval), "from --interval"))
    if multi:
        # Said in the draft because it is the wait a person will see: node 0 alone would open
        # the gate at its settle count, the others hold it for this (across.py, rule 4).
        policy.append(
            _line(
                2, "exit_grace", _duration(EXIT_GRACE),
                "the default: a host but node 0 counts as done only this long after its ranks"
                " were last seen alive (a log on NFS may lag); lower it where logs are on local disks",
            )
        )  # fmt: skip
    if policy:
        out += ["policy:", *policy]
    return Draft("\n".join(out) + "\n", tuple(todo))


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


def _ranks(s: Survey) -> int:
    """How many ranks the job runs on this host: its roots (several alike), or processes that
    name a local rank."""
    roots = [p for p in s.procs.values() if p.ppid not in s.procs]
    ranked = {_rank_of(p) for p in s.procs.values()} - {None}
    return max(len(roots), len(ranked))


def _job_note(s: Survey, match: str) -> str:
    from sensors._base.regex import compile_user_regex

    try:
        regex = compile_user_regex(match.replace("{node}", "0"))
    except Exception:
        return "does not compile"
    roots = [p for p in s.procs.values() if p.ppid not in s.procs]
    found = sum(1 for p in s.procs.values() if regex.search(p.cmdline))
    others = sum(1 for text in s.others.values() if regex.search(text))
    job = f"pid {s.root}" if len(roots) == 1 else f"{len(roots)} processes"
    workers = len(s.procs) - len(roots)
    said = f"matches {job}" + (f" and {workers} of its children" if workers else "")
    if found < len(roots):
        said = f"CHECK: matches only {found} of the job's {len(s.procs)} processes"
    return said + (
        f"; CHECK: and {others} other processes of the host" if others else "; no other process of the host"
    )
