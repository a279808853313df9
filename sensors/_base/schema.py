"""Types shared by every part of the stage schema: durations, user regexes, absolute paths.

pydantic stays at the config boundary: these validate what a stage file (or a dict given in
Python) says; inside, the values are plain.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationInfo, WithJsonSchema

from sensors._base.regex import ENGINE, FALLBACK_SCAN, BacktrackingRegexWarning, compile_user_regex

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
#: Every duration of a stage file lies in [1 ms, 365 d]: a finite number a clock, a heap and a
#: sleep can take (``.nan`` stopped ``crosscheck serve``, ``.inf`` left a stage due never and
#: a wait unending).
MIN_DURATION, MAX_DURATION = 0.001, 365 * 86400.0
#: The shortest check interval (``policy.interval``), and the scheduler's floor for any.
MIN_INTERVAL = 0.1


def parse_duration(value: Any) -> float:
    """Seconds from ``500ms``, ``30s``, ``15m``, ``2h``, ``1d`` or a plain number of seconds.

    Example:
        >>> parse_duration("15m")
        900.0
    """
    if isinstance(value, bool):
        raise ValueError("expected a duration like 30s, 15m, 2h or a number of seconds")
    if isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:  # an int past any float (a YAML integer of 400 digits)
            raise ValueError(f"{value!r:.40} is not a duration: give a finite one") from None
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    else:
        raise ValueError(f"{value!r} is not a duration (use 500ms, 30s, 15m, 2h, or a number of seconds)")
    if not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a duration: give a finite one")
    if seconds <= 0:
        raise ValueError("must be greater than 0")
    return seconds


def bounded_duration(value: Any) -> float:
    """:func:`parse_duration`, within [1 ms, 365 d]: every duration of a stage file and of
    the watchers' options (``--since`` takes longer ones: a run that began years ago).

    Example:
        >>> bounded_duration("400d")
        Traceback (most recent call last):
        ...
        ValueError: '400d' is longer than 365d
    """
    seconds = parse_duration(value)
    if seconds < MIN_DURATION:
        raise ValueError(f"{value!r} is shorter than 1ms")
    if seconds > MAX_DURATION:
        raise ValueError(f"{value!r} is longer than 365d")
    return seconds


#: What a duration may be written as, for the published JSON Schema (``schema/``): a number of
#: seconds or a number with a unit. The bounds (1 ms to 365 d) are the validator's.
DURATION_JSON_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "number", "exclusiveMinimum": 0},
        {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d)?\s*$"},
    ],
    "description": "a duration: 500ms, 30s, 15m, 2h, 1d, or a number of seconds (1ms to 365d)",
}

Duration = Annotated[float, BeforeValidator(bounded_duration), WithJsonSchema(DURATION_JSON_SCHEMA)]


_REGEX_SECTION = {"match": "process", "complete": "log", "error": "log", "progress": "log"}


def _regex(value: Any, info: ValidationInfo) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected a non-empty regular expression")
    try:
        rx = compile_user_regex(value)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {value!r}: {exc}") from None
    if not rx.bounded:
        name = info.field_name or "regex"
        where = f"{_REGEX_SECTION.get(name, '?')}.{name}"
        file = (info.context or {}).get("file")
        uses = f"uses {rx.why}, which RE2 cannot run" if ENGINE == "re2" else f"cannot run here ({rx.why})"
        # Located at the stage file (no source line: lineno 0), not at pydantic's frame;
        # no registry, so each load says it again (a watch started later warns too).
        warnings.warn_explicit(
            f"{where}: {value!r} {uses}: it is matched with "
            f"Python's backtracking re (only the last {FALLBACK_SCAN} characters of each "
            "line), and its time per check depends on the pattern and the job's output",
            BacktrackingRegexWarning,
            filename=file or "<stage>",
            lineno=0,
        )
    return value


Regex = Annotated[
    str,
    BeforeValidator(_regex),
    # Python's re syntax (named groups (?P<name>...)), not ECMA 262: no "format": "regex".
    WithJsonSchema(
        {"type": "string", "minLength": 1, "description": "a regular expression (Python's re syntax)"}
    ),
]


def _absolute_path(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected an absolute path")
    if "\0" in value or "\n" in value:
        raise ValueError("a path may not contain NUL or newline characters")
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is a relative path; use an absolute path")
    return value


AbsPath = Annotated[
    str,
    BeforeValidator(_absolute_path),
    WithJsonSchema({"type": "string", "pattern": "^/", "description": "an absolute path"}),
]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
