"""Types shared by every part of the stage schema: durations, user regexes, absolute paths.

pydantic stays at the config boundary: these validate what a stage file (or a dict given in
Python) says; inside, the values are plain.
"""

from __future__ import annotations

import re
import warnings
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationInfo

from sensors._regex import FALLBACK_SCAN, BacktrackingRegexWarning, compile_user_regex

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds from ``500ms``, ``30s``, ``15m``, ``2h``, ``1d`` or a plain number of seconds.

    Example:
        >>> parse_duration("15m")
        900.0
    """
    if isinstance(value, bool):
        raise ValueError("expected a duration like 30s, 15m, 2h or a number of seconds")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    else:
        raise ValueError(f"{value!r} is not a duration (use 500ms, 30s, 15m, 2h, or a number of seconds)")
    if seconds <= 0:
        raise ValueError("must be greater than 0")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


_REGEX_SECTION = {"match": "process", "complete": "log", "error": "log", "progress": "log"}


def _regex(value: Any, info: ValidationInfo) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected a non-empty regular expression")
    try:
        rx = compile_user_regex(value)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {value!r}: {exc}") from None
    if not rx.linear:
        name = info.field_name or "regex"
        where = f"{_REGEX_SECTION.get(name, '?')}.{name}"
        file = (info.context or {}).get("file")
        # Located at the stage file (no source line: lineno 0), not at pydantic's frame;
        # no registry, so each load says it again (a watch started later warns too).
        warnings.warn_explicit(
            f"{where}: {value!r} uses {rx.why}, which RE2 cannot run: it is matched with "
            f"Python's backtracking re (only the last {FALLBACK_SCAN} characters of each "
            "line), and its time per check depends on the pattern and the job's output",
            BacktrackingRegexWarning,
            filename=file or "<stage>",
            lineno=0,
        )
    return value


Regex = Annotated[str, BeforeValidator(_regex)]


def _absolute_path(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected an absolute path")
    if "\0" in value or "\n" in value:
        raise ValueError("a path may not contain NUL or newline characters")
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is a relative path; use an absolute path")
    return value


AbsPath = Annotated[str, BeforeValidator(_absolute_path)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
