"""A Checker's memory as JSON text, and back: what the durable store keeps for a stage.

Every memory is a small frozen dataclass of plain values (one per signal, the verdict's, the
run's). JSON keeps what the dataclasses say: tuples, frozensets, mappings with int keys and
enums are tagged, and only the types listed here are ever built from stored text — a store
is data, never code. Anything else (a foreign, corrupt or newer document) is a
:class:`MemoryFormatError`, and the watch starts with fresh memory.

What is restored is never trusted more than a fresh check: ``restore`` resets the settle
streak, so ``complete`` is always earned again by checks made after the restore.

Example:
    >>> from sensors._signals.log import LogMemory
    >>> loads(dumps({"log": LogMemory(inode=7, size=10)}))["log"].size
    10
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from sensors._base.model import Reading, Says, State, Stuck, Verdict
from sensors._base.probe import Static
from sensors._run.run import Run
from sensors._signals.gpu import GpuMemory, GpuWindow
from sensors._signals.log import LogMemory
from sensors._signals.outputs import OutputsMemory
from sensors._signals.process import ProcessMemory
from sensors._signals.supervisor import SupervisorMemory
from sensors._verdict import VerdictMemory
from sensors._verdict.across import AcrossMemory

#: Bumped when a memory's shape changes incompatibly: an older document is then fresh memory.
VERSION = 1

_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        ProcessMemory,
        LogMemory,
        OutputsMemory,
        GpuMemory,
        SupervisorMemory,
        GpuWindow,
        VerdictMemory,
        AcrossMemory,
        Reading,
        Verdict,
        Stuck,
        Run,
        Static,
    )
}
_ENUMS: dict[str, type[enum.Enum]] = {"Says": Says, "State": State}


class MemoryFormatError(ValueError):
    """Stored memory that this version cannot read (corrupt, foreign, or newer)."""


def dumps(value: Any) -> str:
    """JSON text for a memory (a dataclass, or a mapping of them)."""
    outer = getattr(_readings, "seen", None)
    _readings.seen = {}
    try:
        return json.dumps({"version": VERSION, "memory": _enc(value)}, separators=(",", ":"))
    finally:
        _readings.seen = outer


#: Per thread, while :func:`dumps` runs: each Reading encoded so far, by identity. A
#: checker's memory holds this check's readings twice (the verdict's memory of them, and the
#: last verdict): encoded once, written twice. A Reading is frozen, so its encoding stands.
_readings = threading.local()


def loads(text: str) -> Any:
    """The memory :func:`dumps` wrote.

    Raises:
        MemoryFormatError: the text is not such a document, or of another version.
    """
    try:
        doc = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise MemoryFormatError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION or "memory" not in doc:
        raise MemoryFormatError(f"not a crosscheck memory of version {VERSION}")
    try:
        return _dec(doc["memory"])
    except MemoryFormatError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise MemoryFormatError(f"unreadable memory: {exc}") from None


def _enc(value: Any) -> Any:
    """``value`` as JSON values, tagged (see the module docstring).

    A memory is saved after every check of every stage: the encoder for each type is looked
    up by the value's exact type (a dict), not found by a chain of ``isinstance`` checks, and
    a dataclass's field names are listed once per class.
    """
    kind = type(value)
    if kind in _PLAIN:
        return value
    encode = _ENCODERS.get(kind)
    if encode is None:
        encode = _ENCODERS[kind] = _encoder_for(kind)
    return encode(value)


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _enc_all(values: Any) -> list[Any]:
    return [v if type(v) in _PLAIN else _enc(v) for v in values]


def _enc_mapping(value: Mapping[Any, Any]) -> dict[str, Any]:
    plain = _PLAIN
    return {
        "@m": [
            [k if type(k) in plain else _enc(k), v if type(v) in plain else _enc(v)] for k, v in value.items()
        ]
    }


def _encoder_for(kind: type) -> Callable[[Any], Any]:
    """The encoder of one type: the first tag that fits it, tried in this order (an enum, a
    dataclass, a mapping, a tuple, a set, a list, a scalar)."""
    if issubclass(kind, enum.Enum):
        name = kind.__name__
        return lambda value: {"@e": name, "v": value.value}
    if dataclasses.is_dataclass(kind):
        name = kind.__name__
        if name not in _TYPES:
            raise TypeError(f"{name} is not a memory type")
        names = tuple(f.name for f in dataclasses.fields(kind))
        plain = _PLAIN

        def encode_dataclass(value: Any) -> dict[str, Any]:
            fields = {}
            for field_name in names:
                v = getattr(value, field_name)
                fields[field_name] = v if type(v) in plain else _enc(v)
            return {"@dc": name, "f": fields}

        if kind is not Reading:
            return encode_dataclass

        def encode_reading(value: Reading) -> dict[str, Any]:
            seen = getattr(_readings, "seen", None)
            if seen is None:
                return encode_dataclass(value)
            hit: tuple[Reading, dict[str, Any]] | None = seen.get(id(value))  # (reading, its encoding)
            if hit is None or hit[0] is not value:
                # The reading is held with its encoding: its id is not reused meanwhile.
                hit = seen[id(value)] = (value, encode_dataclass(value))
            return hit[1]

        return encode_reading
    if issubclass(kind, (Mapping, MappingProxyType)):
        return _enc_mapping
    if issubclass(kind, tuple):
        return lambda value: {"@t": _enc_all(value)}
    if issubclass(kind, (frozenset, set)):
        return lambda value: {"@fs": sorted((_enc(v) for v in value), key=repr)}
    if issubclass(kind, list):
        return _enc_all
    if issubclass(kind, (str, int, float, bool)):
        return lambda value: value
    raise TypeError(f"{kind.__name__} cannot be stored")


_ENCODERS: dict[type, Callable[[Any], Any]] = {}


def _dec(value: Any) -> Any:
    if isinstance(value, list):
        return [_dec(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "@dc" in value:
        cls = _TYPES.get(value["@dc"])
        if cls is None:
            raise MemoryFormatError(f"unknown memory type {value['@dc']!r}")
        fields = {f.name for f in dataclasses.fields(cls)}
        given = {k: _dec(v) for k, v in dict(value["f"]).items()}
        if not set(given) <= fields:
            raise MemoryFormatError(f"{cls.__name__}: unknown fields {sorted(set(given) - fields)}")
        return cls(**given)
    if "@e" in value:
        kind = _ENUMS.get(value["@e"])
        if kind is None:
            raise MemoryFormatError(f"unknown enum {value['@e']!r}")
        return kind(value["v"])
    if "@m" in value:
        return {_dec(k): _dec(v) for k, v in value["@m"]}
    if "@t" in value:
        return tuple(_dec(v) for v in value["@t"])
    if "@fs" in value:
        return frozenset(_dec(v) for v in value["@fs"])
    raise MemoryFormatError("an untagged object in stored memory")


def fingerprint(parts: Mapping[str, Any]) -> dict[str, str]:
    """A short digest per part of a stage definition (each signal's spec, the policy...).

    A changed part resets only the memory that depends on it.

    Example:
        >>> fingerprint({"log": {"path": "/x.log"}})
        {'log': '06a2a3df3af6bab2'}
    """
    return {
        name: hashlib.sha256(json.dumps(part, sort_keys=True, default=str).encode()).hexdigest()[:16]
        for name, part in parts.items()
    }
