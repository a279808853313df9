"""Stage regexes: RE2 where it can, Python's re where it cannot, the same answers either way."""

from __future__ import annotations

import re
import time
import unicodedata
import warnings

import pytest

from sensors import stage_from_dict
from sensors._base import regex as _regex
from sensors._base.regex import (
    FALLBACK_SCAN,
    BacktrackingRegexWarning,
    compile_user_regex,
    required_text,
    to_re2,
    to_utf8,
)

# (pattern, text): each row's RE2 answer must be re.search's, group for group.
SAME_ANSWER = [
    (r"^Extraction complete", "Extraction complete: 37312 files"),
    (r"^Extraction complete", " Extraction complete"),
    (r"done\Z", "all done"),
    (r"done\Z", "done twice"),
    (r"x{,3}y", "xxxxy"),
    (r"a{,}b", "aaab"),
    (r"(?P<done>\d+)/(?P<total>\d+)", "step ٣/10"),  # Arabic-Indic 3: \d is Unicode in re
    (r"\d+", "½ ²"),  # not decimal digits: neither matches
    (r"[\w.-]+@", "José.ü-x@host"),
    (r"\W+", "ab  cd"),
    (r"\s+\S", "a\u00a0\u2003b"),  # no-break and em spaces are \s in re
    (r"\u00e9t\N{LATIN SMALL LETTER E WITH ACUTE}", "été"),
    (r"[\b]", "a\bb"),
    (r"(?i)cuda ERROR", "CUDA error: out of memory"),
    (r"(?s)a.b", "a\nb"),
    (r"Traceback|CUDA error", "RuntimeError: CUDA error"),
    (r"\bloss\b", "val_loss loss=0.1"),
]


@pytest.mark.parametrize(("pattern", "text"), SAME_ANSWER)
def test_re2_answers_as_re_search_does(pattern: str, text: str) -> None:
    rx = compile_user_regex(pattern)
    assert rx.engine == "re2" and rx.linear, rx.why
    want, got = re.search(pattern, text), rx.search(text)
    assert (want is None) == (got is None), to_re2(pattern)
    if want:
        assert got.group(0) == want.group(0) and got.groupdict() == want.groupdict()


def test_unicode_classes_match_re_on_every_assigned_code_point() -> None:
    # Python's tables (unicodedata) may be older than RE2's: compare where Python knows.
    chars = "".join(
        chr(c) for c in range(0x3000) if unicodedata.category(chr(c)) != "Cn" and not 0xD800 <= c <= 0xDFFF
    )
    for cls in (r"\d", r"\D", r"\w", r"\W", r"\s", r"\S"):
        assert compile_user_regex(cls).engine == "re2"
        mine = [bool(compile_user_regex(cls).search(c)) for c in chars]
        theirs = [bool(re.search(cls, c)) for c in chars]
        assert mine == theirs, cls


def test_multiline_is_re_multiline() -> None:
    rx = compile_user_regex(r"^done$", multiline=True)
    assert rx.engine == "re2" and rx.search("x\ndone\ny") and not rx.search("x\nundone\n")


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"(?<!no )error", "lookbehind"),
        (r"^(?!.*harmless).*Error", "negative lookahead"),
        (r"(a)\1", "backreference"),
        (r"(?x) a b", "verbose"),
        (r"a{1001}", "over 1000"),
        (r"[\W]", r"\W inside a character class"),
        (r"[[:alpha:]]", "nested set"),
    ],
)
def test_what_re2_cannot_say_falls_back_to_re(pattern: str, why: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        rx = compile_user_regex(pattern)
    assert rx.engine == "re" and not rx.linear and why in (rx.why or "")


def test_fallback_sees_only_the_last_part_of_a_long_line() -> None:
    rx = compile_user_regex(r"(?<!no )error")
    head = "error " + "x" * (2 * FALLBACK_SCAN)
    assert rx.search(head) is None  # beyond the window: the price of a backtracking pattern
    assert rx.search("x" * (2 * FALLBACK_SCAN) + " error").group(0) == "error"
    assert compile_user_regex(r"^error").engine == "re2"  # RE2 has no window at all
    assert compile_user_regex(r"^error").search(head)


def test_compiled_once_per_pattern() -> None:
    assert compile_user_regex(r"step (\d+)") is compile_user_regex(r"step (\d+)")


def test_never_raises_on_text_that_is_not_utf8_encodable() -> None:
    assert compile_user_regex("b").search("a\udcffb").group(0) == "b"


def _stage(**log: str) -> dict:
    return {"stage": "s", "log": {"path": "/x.log", "complete": "^done", **log}}


def test_config_warns_naming_the_field_and_the_construct() -> None:
    with pytest.warns(BacktrackingRegexWarning, match=r"log\.error: .*lookbehind.*backtracking") as rec:
        stage_from_dict(_stage(error=r"(?<!no )error"), file="stages/a.yaml")
    assert rec[0].filename == "stages/a.yaml"
    with pytest.warns(BacktrackingRegexWarning, match=r"process\.match"):
        stage_from_dict({"stage": "s", "process": {"match": r"train(?=\.py)"}})


def test_config_is_silent_for_patterns_re2_runs() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stage_from_dict(_stage(error=r".*(Traceback|CUDA error)", progress=r"(?P<done>\d+)/(?P<total>\d+)"))


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        ("a.c", "xxabc"),
        ("^b", "ab"),
        (r"\d+$", "x12"),
        (r"\d+\Z", "x\u0663"),
        ("(?=a)a", "ba"),
        ("é", "café"),
        ("x", "lone \udcff x"),
        ("^$", ""),
        (r"\bsleep 1\b", "/bin/sleep 1"),
        ("nope", "sleep 100000.1"),
    ],
)
def test_found_is_whether_search_matches(pattern: str, text: str) -> None:
    rx = compile_user_regex(pattern)
    assert rx.found(text) is (rx.search(text) is not None)
    assert rx.found(text, to_utf8(text)) is (rx.search(text) is not None)


# --------------------------------------------------------------------------- required text

# (pattern, the text every match must hold, or None): what lets a table of command lines be
# searched once per pattern (sensors._signals.process) instead of once per line.
REQUIRED = [
    (r"^sleep 100000[.]3$", b"sleep 100000.3"),
    (r"--tag simjob-1( |$)", b"--tag simjob-1"),
    (r"python .*train\.py", b"train.py"),  # the longest run outside the repeat
    (r"ab*cd", b"cd"),  # b is repeated (zero times, too): not required
    (r"x{,3}yz", b"yz"),
    (r"(?x) extract \. py  # verbose", b"extract.py"),  # the parse drops what re drops
    (r"é\.pt", "é.pt".encode()),
    (r"a|bcd", None),  # either side may match
    (r"(?:extract|train)", None),
    (r"(?i)extract\.py", None),  # a case-insensitive match need not spell it
    (r"\d+", None),
    (r"a", None),  # too short to be worth a pass
    (r"[", None),  # not a pattern at all
]


@pytest.mark.parametrize(("pattern", "needed"), REQUIRED)
def test_required_text(pattern: str, needed: bytes | None) -> None:
    assert required_text(pattern) == needed


HAYSTACK = [
    "python -u train.py --tag simjob-1",
    "python3 -m extract --tag simjob-12",
    "sleep 100000.3",
    "/usr/bin/sleep 100000.3 ",
    "TRAIN.PY --TAG SIMJOB-1",
    "x" * 5000 + " train.py",
    "é.pt extract.py",
    "a\x00b",
]


@pytest.mark.parametrize("pattern", [p for p, _ in REQUIRED if p != "["] + [r"train\.py$", r"(?<!-)tag"])
def test_a_line_without_the_required_text_never_matches(pattern: str) -> None:
    """Soundness: whatever the engine (RE2, or re with its FALLBACK_SCAN), every line it
    finds holds the required text."""
    rx, needed = compile_user_regex(pattern), required_text(pattern)
    for line in HAYSTACK:
        if rx.found(line, to_utf8(line)):
            assert needed is None or needed in to_utf8(line), (pattern, line)


# A log tail as the log signal searches it once before looking at lines (\r read as \n).
TAILS = [
    "",
    "[3/10] step 3\n",
    "loading\nExtraction complete\n",
    "epoch 1\nextraction COMPLETE\n",
    "tqdm 99%\nTraining done after 3 epochs",
    "done\nstep 4\n",
    "x\n" * 3000 + "done",
    "é.pt written\nall done\n",
]


@pytest.mark.parametrize(
    "pattern",
    [r"^done$", r"Extraction complete", r"(?i)extraction complete", r"^Training done", r"done|complete",
     r"é\.pt", r"step \d+$", r"\Adone", r"done\Z", r"(?<!all )done$"],
)  # fmt: skip
def test_a_log_tail_without_the_required_text_is_not_searched_and_answers_as_a_search_would(
    pattern: str,
) -> None:
    from sensors._signals.log import _may_match, _multiline

    for tail in TAILS:
        searched = _multiline(pattern).found(tail)
        if "\\A" in pattern or "\\Z" in pattern:
            assert _may_match(pattern, tail)  # anchored to the whole text: never skipped
        else:
            assert _may_match(pattern, tail) is searched, (pattern, tail)


def test_a_process_table_is_searched_once_per_pattern_and_answers_as_every_line_would() -> None:
    from sensors._signals.process import _matching, _ProcessTable

    cmdlines = {100 + i: line for i, line in enumerate(HAYSTACK)}
    table = _ProcessTable(stats={}, cmdlines=cmdlines, cut=frozenset({107}), tasks={})
    for pattern in [p for p, _ in REQUIRED if p != "["] + ["simjob-1", "sleep", "3", "3 "]:
        rx = compile_user_regex(pattern)
        every_line = {pid for pid, cmd, utf8 in table.searchable if rx.found(cmd, utf8)}
        assert _matching(pattern, table) == every_line, pattern
    # Each holding line once, in order, even when the text occurs twice in it.
    assert [pid for pid, _, _ in table.holding(b"simjob-1")] == [100, 101]
    assert [pid for pid, _, _ in table.holding(b"x" * 10)] == [105]
    assert table.holding(b"nowhere") == []


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        (r"\[(?P<done>\d+)/(?P<total>\d+)\]", "epoch 3 [12/500] loss 0.1"),
        (r"(?P<done>\d+)/(?P<total>\d+)(?: \((?P<eta>[^)]*)\))?", "step 7/9"),  # a group not taken
        (r"(?P<done>\d+)/(?P<total>\d+)(?: \((?P<eta>[^)]*)\))?", "step 7/9 (ETA 0 minutes)"),
        (r"étape (?P<n>\d+) — (?P<what>\w+)", "x étape 42 — extraction ünd more"),  # UTF-8 offsets
        (r"ETA \d+ minutes", "ETA 0 minutes"),  # no named group
        (r"(?P<a>x)|(?P<b>y)", "zzy"),
        (r"(?P<done>\d+)/(?P<total>\d+)", "no progress here"),
        (r"(?<=\[)(?P<done>\d+)", "[5/6]"),  # lookbehind: the re fallback
        (r"(?P<n>\d+)", "lone \udcff surrogate 12"),
    ],
)
def test_named_groups_are_what_re_finds(pattern: str, text: str) -> None:
    rx = compile_user_regex(pattern)
    m = re.search(pattern, text.encode("utf-8", "replace").decode("utf-8"))
    expected = None if m is None else (m.group(0), m.groupdict())
    assert rx.named_groups(text) == expected


# --------------------------------------------------------------------------- without google-re2


def _without_re2(pattern: str, multiline: bool = False):
    """``pattern`` compiled as it is where google-re2 is not installed (ENGINE "regex")."""
    flags = re.MULTILINE if multiline else 0
    return _regex._without_re2(pattern, flags, multiline, re.compile(pattern, flags))


@pytest.mark.parametrize(("pattern", "text"), SAME_ANSWER)
def test_without_re2_the_regex_module_answers_as_re_search_does(pattern: str, text: str) -> None:
    rx = _without_re2(pattern)
    assert rx.engine == "regex" and rx.bounded and not rx.linear and rx.why is None
    want, got = re.search(pattern, text), rx.search(text)
    assert (want is None) == (got is None)
    assert rx.found(text) == (want is not None)
    if want:
        assert got.group(0) == want.group(0) and got.groupdict() == want.groupdict()
        assert rx.named_groups(text) == (want.group(0), want.groupdict())


def test_without_re2_what_re2_cannot_say_is_bounded_too() -> None:
    rx = _without_re2(r"(?<!no )error")
    assert rx.engine == "regex" and rx.search("no error, an error").start() == 13
    assert _without_re2(r"^done$", multiline=True).search("x\ndone\ny")


def test_without_re2_a_catastrophic_search_is_stopped_and_the_pattern_rests(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rx = _without_re2(r"(a|aa)+$")
    line = "a" * 64 + "b"  # exponential for a backtracking engine: hours for Python's re
    started = time.monotonic()
    with caplog.at_level("WARNING", logger="crosscheck.regex"):
        assert rx.search(line) is None  # stopped: no match is claimed from it
    assert time.monotonic() - started < 2.0
    assert "was stopped after 0.1 s" in caplog.text and "(a|aa)+$" in caplog.text
    # Resting: not searched at all (a check pays for one stopped search per pattern), and a
    # live job is never taken for gone: found() says "may match".
    started = time.monotonic()
    assert rx.search("aa") is None and rx.found(line) and rx.named_groups("aa") is None
    assert time.monotonic() - started < 0.05
    # Rested: searched again.
    monkeypatch.setattr(rx._stopped, "until", 0.0)
    assert rx.search("aa").group(0) == "aa"


def test_without_re2_or_regex_python_re_with_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_regex, "regex", None)
    rx = _without_re2(r"^error")
    assert rx.engine == "re" and not rx.bounded and "not installed" in (rx.why or "")
