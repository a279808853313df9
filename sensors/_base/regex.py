"""User regexes in linear time: RE2 first, Python's ``re`` only where RE2 cannot say it.

The stage file's regexes (``process.match``, ``log.complete``, ``log.error``,
``log.progress``) run on text the job controls. :func:`compile_user_regex` reads a pattern as
Python's ``re`` does and runs it under RE2 (google-re2: time linear in the text), translated
where the two spell the same thing differently. What RE2 cannot express falls back to ``re``
(:class:`BacktrackingRegexWarning`; each line's last :data:`FALLBACK_SCAN` characters); where
google-re2 is not installed, every pattern runs under the ``regex`` module, each search
stopped after :data:`FALLBACK_TIMEOUT` seconds (:data:`ENGINE` says which runs). The
translations, the fallbacks and why: docs/signals.md, "How the regexes run".

Example:
    >>> rx = compile_user_regex(r"step (?P<done>\\d+)/(?P<total>\\d+)")
    >>> rx.engine, rx.search("step 3/10").groupdict()
    ('re2', {'done': '3', 'total': '10'})
"""

from __future__ import annotations

import functools
import logging
import re
import time
import unicodedata
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

try:
    import re2
except ImportError:  # no google-re2 here (docs/signals.md, "How the regexes run"): ENGINE says what runs
    re2 = None
try:
    import regex
except ImportError:  # a declared dependency; without it, Python's re with the window below
    regex = None

log = logging.getLogger("crosscheck.regex")

#: What runs the stage regexes in this process: ``"re2"`` (google-re2, linear time),
#: ``"regex"`` (no google-re2: the regex module, each search bounded by FALLBACK_TIMEOUT), or
#: ``"re"`` (neither: Python's re, each line's last FALLBACK_SCAN characters).
ENGINE: Literal["re2", "regex", "re"] = "re2" if re2 is not None else "regex" if regex is not None else "re"

#: Without RE2: the longest one search of a stage regex may run (the regex module's timeout).
FALLBACK_TIMEOUT = 0.1

#: Without RE2: how long a pattern whose search was stopped is not searched again.
FALLBACK_COOLDOWN = 60.0

#: How much of each line (the last characters) a fallback (backtracking) pattern searches.
#: A completion marker or an error is a short line, or ends a long one (the last ``\r``
#: segment of a tqdm line); 4 KiB keeps a quadratic pattern at ~16M steps per line.
FALLBACK_SCAN = 4096

#: RE2's memory budget per compiled pattern (its default is 8 MiB). Big enough for any
#: hand-written pattern; a pattern that needs more falls back (and warns) instead of failing.
RE2_MAX_MEM = 64 << 20

_WORD = r"\p{L}\p{N}_"
_SPACE = r"\t\n\v\f\r\x1c-\x1f\x85\p{Z}"
_DIGIT = r"\p{Nd}"
_QUANT_NO_MIN = re.compile(r"\{,(\d*)\}")


class BacktrackingRegexWarning(UserWarning):
    """A stage regex RE2 cannot run: it is matched with Python's backtracking ``re``."""


class Match(Protocol):
    """What crosscheck uses of a match (``re.Match`` and RE2's match both have it)."""

    def group(self, *args: Any) -> Any: ...

    def groupdict(self) -> dict[str, Any]: ...


class _Searcher(Protocol):
    """What :meth:`UserRegex.search` calls on a compiled pattern (``re``'s and RE2's have it)."""

    def search(self, text: str, pos: int = ..., /) -> Match | None: ...


class _Untranslatable(Exception):
    pass


def to_re2(pattern: str) -> str:
    """``pattern`` (Python ``re`` syntax) in RE2's syntax, meaning the same.

    Raises:
        _Untranslatable: a construct with no RE2 spelling (the message names it).

    Example:
        >>> to_re2(r"done\\Z")
        'done\\\\z'
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    class_start = False  # just after '[' or '[^': a ']' here is a literal
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            text, i = _escape(pattern, i + 2, pattern[i + 1], in_class)
            out.append(text)
            class_start = False
            continue
        if in_class:
            if c == "]" and not class_start:
                in_class = False
            class_start = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = class_start = True
            out.append(c)
            i += 1
            if pattern[i : i + 1] == "^":
                out.append("^")
                i += 1
            continue
        if c == "{" and (m := _QUANT_NO_MIN.match(pattern, i)):
            out.append("{0," + m.group(1) + "}")
            i = m.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _escape(pattern: str, i: int, e: str, in_class: bool) -> tuple[str, int]:
    """RE2's spelling of the escape ``\\e`` (its argument starts at ``i``), and where it ends."""
    if e in "uU":
        width = 4 if e == "u" else 8
        return r"\x{" + pattern[i : i + width] + "}", i + width
    if e == "N":
        end = pattern.index("}", i)
        code = ord(unicodedata.lookup(pattern[i + 1 : end]))
        return f"\\x{{{code:x}}}", end + 1
    if e == "Z":
        return r"\z", i
    if e == "d":
        return _DIGIT, i
    if e == "D":
        return r"\P{Nd}", i
    if e in "ws":
        body = _WORD if e == "w" else _SPACE
        return (body if in_class else f"[{body}]"), i
    if e in "WS":
        if in_class:
            raise _Untranslatable(f"\\{e} inside a character class")
        return f"[^{_WORD if e == 'W' else _SPACE}]", i
    if e == "b" and in_class:
        return r"\x08", i
    return "\\" + e, i


def engine_summary() -> str:
    """What runs the stage regexes here, in words (``crosscheck --version``).

    Example:
        >>> engine_summary() in ("re2 (linear time)",
        ...                      "regex (no google-re2 here: each search stopped after 0.1 s)",
        ...                      "re (neither google-re2 nor regex here: the last 4096 characters of a line)")
        True
    """
    if ENGINE == "regex":
        return f"regex (no google-re2 here: each search stopped after {FALLBACK_TIMEOUT:g} s)"
    if ENGINE == "re":
        return f"re (neither google-re2 nor regex here: the last {FALLBACK_SCAN} characters of a line)"
    return "re2 (linear time)"


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every rejected pattern on stderr
    options.max_mem = RE2_MAX_MEM
    return options


@dataclass(frozen=True)
class UserRegex:
    """A stage regex, compiled once: ``search`` has ``re.search`` semantics.

    ``engine`` is ``"re2"`` (linear time), ``"regex"`` (no RE2 here: the regex module, each
    search bounded in time) or ``"re"`` (the backtracking fallback, for a pattern RE2 cannot
    express; ``why`` says what). ``multiline`` is ``re.MULTILINE``.
    """

    pattern: str
    engine: Literal["re2", "regex", "re"]
    multiline: bool = False
    why: str | None = None
    _compiled: Any = field(default=None, repr=False, compare=False)
    _stopped: _Stopped = field(default_factory=lambda: _Stopped(), repr=False, compare=False)

    @property
    def linear(self) -> bool:
        return self.engine == "re2"

    @property
    def bounded(self) -> bool:
        """Whether the time one search can take is bounded whatever the pattern and text."""
        return self.engine in ("re2", "regex")

    def search(self, text: str) -> Match | None:
        """The first match in ``text``, or None."""
        if self.engine == "regex":
            found: Match | None = self._timed(text, None)  # stopped: None, no match
            return found
        rx: _Searcher = self._compiled  # RE2's or re's compiled pattern
        if self.engine == "re2":
            try:
                return rx.search(text)
            except UnicodeEncodeError:
                # RE2 reads UTF-8; a lone surrogate cannot be encoded (decoded log text
                # never holds one, but this must never raise): match it as '?'.
                return rx.search(text.encode("utf-8", "replace").decode("utf-8"))
        if not self.multiline:
            # pos, not a slice: '^' still means the real start of the line.
            return rx.search(text, max(0, len(text) - FALLBACK_SCAN))
        for line in text.split("\n"):
            if m := rx.search(line, max(0, len(line) - FALLBACK_SCAN)):
                return m
        return None

    def named_groups(self, text: str) -> tuple[str, dict[str, str | None]] | None:
        """The first match in ``text`` and its named groups (``Match.group(0)`` and
        ``Match.groupdict()``), or None: under RE2 without building a match object (the
        binding's ``groupdict`` cost more than the search itself)."""
        raw = getattr(self._compiled, "_regexp", None) if self.engine == "re2" and _RAW_MATCH else None
        if raw is None:
            m = self.search(text)
            return None if m is None else (m.group(0), m.groupdict())
        data = to_utf8(text)
        spans = raw.Match(_UNANCHORED, data, 0, len(data))
        if spans[0] == _NULL_SPAN:
            return None

        def text_of(span: tuple[int, int]) -> str | None:
            return None if span == _NULL_SPAN else data[span[0] : span[1]].decode("utf-8", "replace")

        return text_of(spans[0]) or "", {name: text_of(spans[i]) for name, i in self._group_names}

    @functools.cached_property
    def _group_names(self) -> tuple[tuple[str, int], ...]:
        """The named groups with their numbers, in the pattern's order (as ``groupdict``)."""
        return tuple(sorted(self._compiled.groupindex.items(), key=lambda item: item[1]))

    def found(self, text: str, utf8: bytes | None = None) -> bool:
        """Whether :meth:`search` finds a match in ``text``, without building the match.

        ``utf8``: ``text`` as :func:`utf8` encodes it, for text many patterns are searched
        in (a process table's command lines): encoded once, not once per pattern. Under RE2
        this is the search the binding's ``search`` runs (unanchored, the whole text), less
        its per-call Python work.
        """
        if self.engine == "regex":
            return self._timed(text, True) is not None
        raw = getattr(self._compiled, "_regexp", None) if self.engine == "re2" and _RAW_MATCH else None
        if raw is None:
            return self.search(text) is not None
        data = utf8 if utf8 is not None else to_utf8(text)
        span: tuple[int, int] = raw.Match(_UNANCHORED, data, 0, len(data))[0]  # the whole match's
        return span != _NULL_SPAN

    def _timed(self, text: str, stopped: Any) -> Any:
        """The regex module's search, stopped after FALLBACK_TIMEOUT: ``stopped`` when it was
        (or when the pattern is cooling down after a stop)."""
        if self._stopped.until > time.monotonic():
            return stopped
        try:
            return self._compiled.search(text, timeout=FALLBACK_TIMEOUT)
        except TimeoutError:
            self._stopped.until = time.monotonic() + FALLBACK_COOLDOWN
            log.warning(
                "stage regex %r: a search of %d characters was stopped after %g s (no RE2 here:"
                " see crosscheck --version); taken as %s, and the pattern is not searched for %g s",
                self.pattern,
                len(text),
                FALLBACK_TIMEOUT,
                "a match" if stopped is not None else "no match",
                FALLBACK_COOLDOWN,
            )
            return stopped


@dataclass
class _Stopped:
    """When a pattern's searches resume after one was stopped (monotonic seconds): shared by
    the threads that search it (a plain float: a race costs one more bounded search)."""

    until: float = 0.0


@functools.lru_cache(maxsize=8192)
def required_text(pattern: str) -> bytes | None:
    """:func:`required_literal` in UTF-8, as a command line's bytes are searched for it.

    Example:
        >>> required_text(r"^python .*extract[.]py --tag (a|b)$")
        b'extract.py --tag '
    """
    text = required_literal(pattern)
    if text is None:
        return None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: RE2 reads the line with '?' there
        return None


@functools.lru_cache(maxsize=8192)
def required_literal(pattern: str) -> str | None:
    """Text that every match of ``pattern`` contains, or None (none is known).

    A line without it cannot match, so a table of command lines is searched for it once
    (a C-speed ``find``) and only the lines holding it are matched. It is read from the parse
    ``re`` itself makes of the pattern (the language the stage's patterns are written in,
    whatever engine runs them): the longest run of literal characters in the pattern's
    top-level sequence — outside groups, classes, alternations and repeats, so every match
    spells it. None for a case-insensitive pattern, a run shorter than two characters, or a
    parse this Python does not give in the expected form (then every line is matched, as
    without this).

    Example:
        >>> required_literal(r"^python .*extract[.]py --tag (a|b)$")
        'extract.py --tag '
        >>> required_literal(r"(?i)extract") is None
        True
    """
    try:
        # The parser re.compile uses; private, hence the guard (typeshed has no stub for it).
        from re import _parser  # type: ignore[attr-defined]

        parsed = _parser.parse(pattern, 0)
        if parsed.state.flags & re.IGNORECASE:
            return None
        best, run = "", []
        for op, arg in list(parsed):
            if op is _parser.LITERAL:
                run.append(chr(arg))
                continue
            best = max(best, "".join(run), key=len)
            run = []
        best = max(best, "".join(run), key=len)
    except Exception:  # no shortcut is always a correct answer: every line is matched
        return None
    if len(best) < 2 or "\0" in best:
        return None
    return best


def to_utf8(text: str) -> bytes:
    """``text`` as RE2 reads it in :meth:`UserRegex.search` (a lone surrogate as ``?``)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


# The binding's own search (re2._Regexp.search) is a generator, an encode and a match object
# per call; :meth:`UserRegex.found` calls the compiled RE2 the same way, directly, when this
# binding exposes it (else it uses search).
_re2_ext = getattr(re2, "_re2", None) if re2 is not None else None
_UNANCHORED = getattr(getattr(getattr(_re2_ext, "RE2", None), "Anchor", None), "UNANCHORED", None)
_NULL_SPAN = (-1, -1)
_RAW_MATCH = _UNANCHORED is not None


# Room for a fleet: thousands of stages, each with its own patterns (256 thrashed at 2,500
# stages: every check compiled its process regex again, ~0.16 ms). ~9 KB an entry.
@functools.lru_cache(maxsize=8192)
def compile_user_regex(pattern: str, *, multiline: bool = False) -> UserRegex:
    """Compile a stage regex (Python ``re`` syntax): RE2 if it can, else ``re``. Cached.

    Raises:
        re.error: ``pattern`` is not a valid Python regular expression.
    """
    flags = re.MULTILINE if multiline else 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fallback = re.compile(pattern, flags)
    if any(issubclass(w.category, FutureWarning) for w in caught):
        # A nested set or set operation ('[[:alpha:]]', '--', '&&'): re reads it one way
        # today, RE2 and regex (POSIX classes) another. Keep re's meaning.
        return UserRegex(pattern, "re", multiline, "a nested set or set operation in [...]", fallback)
    if re2 is None:
        return _without_re2(pattern, flags, multiline, fallback)
    try:
        translated = to_re2(pattern)
        compiled = re2.compile(("(?m)" if multiline else "") + translated, _re2_options())
    except _Untranslatable as exc:
        return UserRegex(pattern, "re", multiline, str(exc), fallback)
    except re2.error as exc:
        return UserRegex(pattern, "re", multiline, _re2_reason(exc), fallback)
    return UserRegex(pattern, "re2", multiline, None, compiled)


def _without_re2(pattern: str, flags: int, multiline: bool, fallback: re.Pattern[str]) -> UserRegex:
    """No RE2 here: the regex module (bounded in time per search), else re."""
    if regex is None:
        return UserRegex(pattern, "re", multiline, "google-re2 and regex are not installed", fallback)
    try:
        # VERSION0: re's behaviour (the language the stage file is written in).
        compiled = regex.compile(pattern, flags | regex.VERSION0)
    except Exception as exc:  # what re accepts and regex does not: re, as with RE2
        return UserRegex(pattern, "re", multiline, f"the regex module rejects it ({exc})", fallback)
    return UserRegex(pattern, "regex", multiline, None, compiled)


def _re2_reason(exc: Exception) -> str:
    """RE2's complaint in words a user can act on."""
    text = exc.args[0] if exc.args else str(exc)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = str(text)
    for needle, words in (
        ("(?=", "lookahead (?=...)"),
        ("(?!", "negative lookahead (?!...)"),
        ("(?<", "lookbehind (?<=...) / (?<!...)"),
        ("(?P=", "a backreference (?P=name)"),
        ("(?>", "an atomic group (?>...)"),
        ("(?(", "a conditional (?(...)...)"),
        ("(?x", "verbose mode (?x)"),
        ("(?#", "a comment (?#...)"),
        ("repetition size", "a repetition count over 1000"),
        ("repetition operator", "a possessive quantifier (*+, ++, ?+)"),
        ("escape sequence: \\", "a backreference or an escape RE2 lacks"),
    ):
        if needle in text:
            return words
    return text
