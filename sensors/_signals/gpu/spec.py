"""The GPU signal's schema fragment: which GPUs, and what idle means."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema

from sensors._base.schema import Duration, Section


def _devices(value: Any) -> Any:
    if value == "all":
        return "all"
    if isinstance(value, (int, str)):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ValueError("expected 'all', a GPU index, a UUID, or a list of them")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise ValueError(f"{item!r} is neither a GPU index nor a UUID")
        if isinstance(item, int) and not 0 <= item < 1024:
            raise ValueError("a GPU index is 0 to 1023")
    return tuple(value)


_DEVICE = [{"type": "integer", "minimum": 0, "maximum": 1023}, {"type": "string", "minLength": 1}]
#: For the published JSON Schema: what ``_devices`` takes (one GPU, or a list of them).
_DEVICES_JSON_SCHEMA = {
    "anyOf": [
        {"const": "all"},
        *_DEVICE,
        {"type": "array", "items": {"anyOf": _DEVICE}, "minItems": 1},
    ],
    "description": "all, a GPU index, a GPU UUID, or a list of them",
}


class GpuSpec(Section):
    devices: Annotated[
        Literal["all"] | tuple[int | str, ...],
        BeforeValidator(_devices),
        WithJsonSchema(_DEVICES_JSON_SCHEMA),
    ] = "all"
    idle_below: float = Field(5.0, ge=0, le=100, description="percent utilisation")
    idle_for: Duration = Field(60.0, description="idle in every sample for this long")
