"""The outputs signal: how many outputs exist against the expected number, and whether they
stopped changing.

A directory's entries (an unsorted ``ls -f`` filtered by the glob; temp names and dotfiles
excluded; a newline in a name counts once) or the records of a JSONL file (its newlines,
counted incrementally). Outputs may predate the run (resumable jobs skip what exists), so
the count stays a count: what ties them to the run is said by ``written_this_run``.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, TypedDict

from pydantic import Field, field_validator, model_validator

from sensors._model import Reading, Says
from sensors._probe import (
    Meta,
    helper,
    regular_file_type,
    settled,
    shareable,
    shared_stats,
    stat_request,
    unchanged,
)
from sensors._run import FINGERPRINT_BYTES
from sensors._schema import AbsPath, Section
from sensors._signals.base import CheckFacts, ProbeInputs, Reread, Signal, evolve

DEFAULT_EXCLUDES = (".*", "*.tmp", "*.part", "*.partial", "*.swp", "*~")
MAX_EXCLUDES = 64


def _name_glob(value: str) -> bool:
    """A glob over one directory entry's name: non-empty, at most NAME_MAX bytes, and free of
    '/', NUL, newline and carriage return."""
    return (
        bool(value)
        and len(value.encode("utf-8", "surrogateescape")) <= 255
        and not any(c in value for c in "/\0\n\r")
    )


class OutputsSpec(Section):
    files: AbsPath | None = Field(None, description="directory whose entries are counted")
    pattern: str = "*"
    exclude: tuple[str, ...] = DEFAULT_EXCLUDES
    lines: AbsPath | None = Field(None, description="file whose newline-terminated records count")
    expected: int = Field(gt=0)

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, value: str) -> str:
        if not _name_glob(value):
            raise ValueError("a file name pattern like '*.pt' (no '/')")
        return value

    @field_validator("exclude")
    @classmethod
    def _exclude(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # Each glob reaches the probe's grep -E and find -name: a newline would split the
        # grep pattern and an empty alternative excludes every name (the count silently 0).
        if len(value) > MAX_EXCLUDES:
            raise ValueError(f"at most {MAX_EXCLUDES} exclude patterns")
        for glob in value:
            if not _name_glob(glob):
                raise ValueError(f"{glob!r} is not a file name pattern like '*.tmp' (no '/')")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> OutputsSpec:
        if (self.files is None) == (self.lines is None):
            raise ValueError("give exactly one of files or lines")
        return self


@functools.lru_cache(maxsize=1024)  # the same few patterns at every check of every stage
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


@dataclass(frozen=True)
class OutputsMemory:
    count: int | None = None
    lines_inode: int | None = None
    lines_size: int = 0
    lines_fingerprint: str | None = None  # hex of the bytes before lines_size
    checked_at: float | None = None  # the monitored host's clock at this check
    first_count: int | None = None  # the count at this watch's first reading
    written_this_run: bool = False  # an output written since the run began was seen
    at_expected: bool = False  # the count was at the expected number
    # The directory's (or JSONL file's) stamp in the shared stat just before ``count`` was
    # read (None: not to be trusted to change with the next write, see sensors._probe).
    stamp: str | None = None


class OutputsEvidence(TypedDict, total=False):
    """The outputs reading's evidence (the JSON the CLI prints, key for key)."""

    path: str | None
    expected: int
    pattern: str
    count: int | None
    previous_count: int | None
    in_place_writes: str | None  # a file modified since the last check (directories)
    partial_record: bool  # a JSONL file not ending with a newline
    size: int
    rewritten: bool  # a JSONL file rewritten in place: counted again from the start
    written_this_run: bool  # an output written while this run went on


# --------------------------------------------------------------------------- probe snippet


def snippet(spec: OutputsSpec, memory: OutputsMemory, probe: ProbeInputs) -> list[str]:
    """The count, and (once it is at the expected number) the in-place and run-tie checks.

    Below the expected number, a directory (or JSONL file) the probe's shared stat finds as
    it was before the last count (the same inode, size, mtime and ctime: no entry added,
    removed or renamed, no record written) is not listed again: that count stands. A count
    kept so can only be short of the truth, never past it: the shortcut ends where the
    count could decide completion.
    """
    path = spec.files or spec.lines or ""
    shared = not memory.at_expected and shareable(path)
    if spec.lines:
        lines = _lines_section(spec.lines, memory)
    else:
        d, count, names = _count_words(spec.files, spec.pattern, tuple(spec.exclude))
        lines = ["sec outputs", *count]
        since = _in_place_since(memory, probe)
        if since is not None:
            # Same count is not enough: a file written in place (no temp name) changes while
            # the count stands still. One entry modified since the last check suffices.
            lines += _newer_entry("outputs_recent", d, names, since)
        run_since = _run_tie_since(memory, probe)
        if run_since is not None:
            # What ties outputs to the run when no log or process can: one entry written
            # since the run began.
            lines += _newer_entry("outputs_run", d, names, run_since)
        shared = shared and since is None and run_since is None
    head = [] if spec.lines else [_COUNT_FILES]  # the helper the count calls, defined once
    if not shared:
        return [*head, *lines]
    if memory.stamp is None or memory.count is None:
        return [*head, stat_request(path), *lines]
    return [*head, *_unless_unchanged(path, memory.stamp, tuple(lines))]


@functools.lru_cache(maxsize=8192)
def _unless_unchanged(path: str, stamp: str, lines: tuple[str, ...]) -> tuple[str, ...]:
    """``lines`` run only when the shared stat does not find ``path`` as ``stamp`` said (the
    same for every check of a directory nobody adds to)."""
    return (
        stat_request(path),
        f"if {unchanged(path, stamp)}; then sec outputs_same; else",
        *(f"  {x}" for x in lines),
        "fi",
    )


# The count, the same for every directory: a sh function the probe defines once, called with
# the stage's quoted directory, the excluded names' and the pattern's EREs.
_COUNT_FILES = helper(
    "__cc_count",
    [
        'if [ -d "$1" ] && [ -r "$1" ] && [ -x "$1" ]; then',
        # `ls -f` (unsorted, no stat per entry) is ~3x faster than `find -name` on 100k
        # entries; -q turns control characters (a newline in a name) into '?', so each entry
        # is exactly one line. The glob is translated to an anchored ERE (_count_words).
        '  ls -f -q -- "$1" 2>/dev/null | grep -v -E "$2" | grep -c -E "$3"',
        'elif [ -e "$1" ]; then echo unreadable; else echo missing; fi',
    ],
)


@functools.lru_cache(maxsize=8192)
def _count_words(files: str, pattern: str, exclude: tuple[str, ...]) -> tuple[str, tuple[str, ...], str]:
    """The parts of the outputs snippet a stage's definition alone decides (the same every
    check): the quoted directory, the count's lines, the ``find`` name tests."""
    q = shlex.quote
    d = q(files)
    excludes = "|".join(["^[.][.]?$", *(f"({glob_to_ere(p)})" for p in exclude)])
    count = (f"__cc_count {d} {q(excludes)} {q(glob_to_ere(pattern))}",)
    names = f"-name {q(pattern)} " + " ".join(f"! -name {q(p)}" for p in exclude)
    return d, count, names


def _in_place_since(memory: OutputsMemory, probe: ProbeInputs) -> float | None:
    """The in-place-write check stats every entry (O(n)): only worth it when outputs may
    decide completion, i.e. the count at the expected number and the job not alive (while
    it runs the verdict is running anyway, e.g. a long CPU phase after the last output)."""
    if memory.at_expected and not probe.job_alive:
        return memory.checked_at
    return None


def _run_tie_since(memory: OutputsMemory, probe: ProbeInputs) -> float | None:
    """Ask for an output written during the run only when nothing else can tie the outputs to
    it (no log, no process signal) and they could decide completion."""
    if not probe.outputs_tie or memory.written_this_run or not memory.at_expected:
        return None
    return probe.run_start


def _lines_section(path: str, memory: OutputsMemory) -> list[str]:
    """JSONL records: count only the bytes added since the last check, unless rewritten.

    O(new data) per check instead of O(file). The previous end's last bytes must still be
    there, else the file was rewritten (same inode, truncated, regrown) and is counted
    again from the start. Bounded by the size read here, so a record written meanwhile is
    counted next time, once.
    """
    f = shlex.quote(path)
    n = FINGERPRINT_BYTES
    prev_ino, prev_size = int(memory.lines_inode or 0), int(memory.lines_size)
    same = f'[ "$1" = {prev_ino} ] && [ "$2" -ge {prev_size} ]'
    if prev_size > 0 and memory.lines_fingerprint and re.fullmatch(r"[0-9a-f]+", memory.lines_fingerprint):
        k = min(prev_size, n)
        same += (
            f' && [ "$(tail -c +{prev_size - k + 1} -- {f} 2>/dev/null | head -c {k}'
            f" | od -An -v -tx1 | tr -d ' \\n')\" = {memory.lines_fingerprint} ]"
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
        f"elif [ -e {f} ]; then {regular_file_type(f)}; else echo missing; fi",
    ]


def _newer_entry(section: str, d: str, names: str, since: float) -> list[str]:
    """sh: the first entry of ``d`` modified after ``since`` (``ok`` + name; ``ok`` alone: none)."""
    return [
        f"sec {section}",
        f"if r=$(find {d} -mindepth 1 -maxdepth 1 {names} "
        f"-newermt @{since:.6f} -print -quit 2>/dev/null); "
        "then printf 'ok%s\\n' \"$r\" | head -c 4096; else echo failed; fi",
    ]


# --------------------------------------------------------------------------- reading


def _recently_modified(raw: bytes | None, evidence: dict[str, object]) -> str | None:
    """What the probe's in-place-write check found: a file modified since the last check."""
    if raw is None:
        return None  # not asked this time (the count is not yet at the expected number)
    text = raw.decode("utf-8", "replace")
    if not text.startswith("ok"):
        # No GNU find (-newermt) on the host: the count alone decides, and the evidence says so.
        evidence["in_place_writes"] = "not checked: find -newermt unavailable on the host"
        return None
    name = text[2:].strip()
    evidence["in_place_writes"] = name or None
    return f"{name.rsplit('/', 1)[-1]} was modified since the last check" if name else None


def _written_since_run(raw: bytes | None) -> bool:
    """Whether the probe found an output modified since the run began."""
    text = (raw or b"").decode("utf-8", "replace")
    return text.startswith("ok") and bool(text[2:].strip())


class _Count(NamedTuple):
    """One check's count, what changed besides it, and the memory it leaves."""

    count: int
    changed: str | None  # why an unchanged count is not yet done
    written: bool  # an output was seen written since the run began
    memory: OutputsMemory


def _count_files(
    spec: OutputsSpec,
    sections: Mapping[str, bytes],
    meta: Meta,
    memory: OutputsMemory,
    evidence: OutputsEvidence,
) -> _Count | str:
    """The directory's count, or why it cannot be read."""
    if "outputs_same" in sections:
        return _same(memory, sections, spec.files, evidence, spec.pattern)
    stamp = _stamp(spec.files, sections, meta)
    raw = sections.get("outputs")
    if raw is None:
        return "the probe's outputs section is missing"
    text = raw.decode("utf-8", "replace").strip()
    if text in ("missing", "unreadable"):
        return f"output directory {text}: {spec.files}"
    try:
        count = int(text)
    except ValueError:
        return f"output count unreadable: {text[:100]!r}"
    evidence["pattern"] = spec.pattern
    changed = _recently_modified(sections.get("outputs_recent"), evidence)  # type: ignore[arg-type]
    written = _written_since_run(sections.get("outputs_run"))
    return _Count(count, changed, written, OutputsMemory(count=count, checked_at=meta.now, stamp=stamp))


def _stamp(path: str | None, sections: Mapping[str, bytes], meta: Meta) -> str | None:
    """The path's line in the shared stat, read before the count, when it can be trusted."""
    stamp = shared_stats(sections.get("stats")).get(path or "")
    return stamp if stamp is not None and settled(stamp, meta.now) else None


def _same(
    memory: OutputsMemory,
    sections: Mapping[str, bytes],
    path: str | None,
    evidence: OutputsEvidence,
    pattern: str | None = None,
) -> _Count | str:
    """The last count again: the shared stat printed the stamp it was read under."""
    stamp = shared_stats(sections.get("stats")).get(path or "")
    if memory.count is None or stamp is None or stamp != memory.stamp:
        return "the probe's outputs section is missing"  # not what this check asked for
    if pattern is not None:
        evidence["pattern"] = pattern
    return _Count(memory.count, None, False, memory)  # checked_at is set by read_outputs


def _count_lines(
    spec: OutputsSpec,
    sections: Mapping[str, bytes],
    meta: Meta,
    memory: OutputsMemory,
    evidence: OutputsEvidence,
    run_since: float | None,
) -> _Count | str:
    """The JSONL file's record count (incremental unless rewritten), or why it cannot be read."""
    if "outputs_same" in sections:
        same = _same(memory, sections, spec.lines, evidence)
        if not isinstance(same, str):
            tail_hex = memory.lines_fingerprint or "none"
            evidence["partial_record"] = tail_hex != "none" and not tail_hex.endswith("0a")
            evidence["size"] = memory.lines_size
        return same
    stamp = _stamp(spec.lines, sections, meta)
    raw = sections.get("lines")
    if raw is None:
        return "the probe's outputs section is missing"
    text = raw.decode("utf-8", "replace").strip()
    if text in ("missing", "unreadable"):
        return f"output file {text}: {spec.lines}"
    if text.startswith("notregular"):
        return f"output file is not a regular file: {text[11:].strip()} ({spec.lines})"
    try:
        ino_s, size_s, mtime_s, base_s, n_s, tail_hex = text.split()
        inode, size, mtime, base, n = int(ino_s), int(size_s), int(mtime_s), int(base_s), int(n_s)
    except ValueError:
        return f"record count unreadable: {text[:100]!r}"
    if base == 0 and memory.lines_size > 0 and memory.lines_inode == inode and size >= memory.lines_size:
        # Same inode, not shorter, but the bytes before the last end changed: rewritten in
        # place (truncated and regrown past its old size). Counted again from the start.
        evidence["rewritten"] = True
    count = ((memory.count or 0) if base > 0 else 0) + n
    partial = tail_hex != "none" and not tail_hex.endswith("0a")
    evidence["partial_record"] = partial
    evidence["size"] = size
    changed = None
    if partial:
        changed = "a record is being written (the file does not end with a newline)"
    elif memory.lines_inode is not None and (inode, size) != (memory.lines_inode, memory.lines_size):
        changed = "the file changed since the last check"
    new_memory = OutputsMemory(
        count=count,
        lines_inode=inode,
        lines_size=size,
        lines_fingerprint=None if tail_hex == "none" else tail_hex,
        checked_at=meta.now,
        stamp=stamp,
    )
    return _Count(count, changed, run_since is not None and mtime >= run_since, new_memory)


def read_outputs(
    spec: OutputsSpec,
    sections: Mapping[str, bytes],
    meta: Meta,
    memory: OutputsMemory | None,
    *,
    host: str,
    run_since: float | None = None,
) -> tuple[Reading, OutputsMemory]:
    """Read the outputs signal: the count against the expected number, and stability.

    Outputs may predate the run (resumable jobs skip what exists), so the count stays a
    count; ``written_this_run`` says whether an output was written while the run went on
    (the count moved during this watch, or one is newer than ``run_since``).
    """
    memory = memory or OutputsMemory()
    where = spec.files or spec.lines
    evidence = OutputsEvidence(path=where, expected=spec.expected)
    got = (
        _count_files(spec, sections, meta, memory, evidence)
        if spec.files
        else _count_lines(spec, sections, meta, memory, evidence, run_since)
    )
    if isinstance(got, str):
        unknown = {"path": where, "count": None, "expected": spec.expected}
        return Reading("outputs", Says.UNKNOWN, got, unknown, meta.now, host), memory
    count, expected = got.count, spec.expected
    first = memory.first_count if memory.first_count is not None else count
    written = memory.written_this_run or got.written or count != first
    new_memory = evolve(
        got.memory,
        checked_at=meta.now,
        first_count=first,
        written_this_run=written,
        at_expected=count >= expected,
    )
    # A directory as the last count left it (the shared stat found its stamp): the reading is
    # a function of this key alone (no entry listed, nothing changed in place), built once.
    unchanged = got.memory is memory and spec.files is not None
    same = (host, where, expected, spec.pattern, count, written) if unchanged else None
    if same is not None and (again := _UNCHANGED.again(same, meta.now)) is not None:
        return again, new_memory
    evidence["count"] = count
    evidence["previous_count"] = memory.count
    evidence["written_this_run"] = written
    stable = memory.count is not None and memory.count == count
    if count >= expected and stable and got.changed:
        # Same count, but written in place: a file finished only when it stops changing.
        says, detail = Says.WORKING, f"{count}/{expected} outputs, but {got.changed}"
    elif count >= expected and stable:
        says, detail = Says.DONE, f"{count}/{expected} outputs, unchanged since last check"
    elif count >= expected:
        says, detail = Says.WORKING, f"{count}/{expected} outputs; confirming they stopped changing"
    else:
        says, detail = Says.WORKING, f"{count}/{expected} outputs"
    reading = Reading("outputs", says, detail, evidence, meta.now, host)
    if same is not None:
        _UNCHANGED.keep(same, reading)
    return reading, new_memory


#: Readings of unchanged directories (see read_outputs), by what they are built from.
_UNCHANGED = Reread()


# --------------------------------------------------------------------------- the signal


def _read(
    spec: OutputsSpec, sections: Mapping[str, bytes], memory: OutputsMemory, facts: CheckFacts
) -> tuple[Reading, OutputsMemory, CheckFacts]:
    reading, new_memory = read_outputs(
        spec, sections, facts.meta, memory, host=facts.host, run_since=facts.run_start
    )
    return reading, new_memory, facts


SIGNAL: Signal[OutputsSpec, OutputsMemory] = Signal("outputs", OutputsMemory, snippet, _read)
