"""The GPU signal: NVML utilisation over a window, and the job's own GPU processes.

Its schema fragment, probe snippet (``nvidia-smi`` inside the probe on a remote host; NVML
in this process locally) and its registration. The reading itself (samples, idle window,
PID attribution) lives in ``sensors._gpu``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from sensors import _gpu
from sensors._model import Reading
from sensors._schema import Duration, Section
from sensors._signals.base import CheckFacts, ProbeInputs, Signal


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
        if isinstance(item, int) and item < 0:
            raise ValueError("a GPU index is 0 or more")
    return tuple(value)


class GpuSpec(Section):
    devices: Annotated[Literal["all"] | tuple[int | str, ...], BeforeValidator(_devices)] = "all"
    idle_below: float = Field(5.0, ge=0, le=100, description="percent utilisation")
    idle_for: Duration = Field(60.0, description="idle in every sample for this long")


def snippet(spec: GpuSpec, memory: _gpu.GpuMemory, probe: ProbeInputs) -> list[str]:
    """nvidia-smi queries inside the probe, for a remote host (locally NVML is read here)."""
    if probe.nvml:
        return []
    lines: list[str] = []
    for name, text in _gpu.remote_sections(spec).items():
        lines += [f"sec {name}", text]
    return lines


def _read(
    spec: GpuSpec, sections: Mapping[str, bytes], memory: _gpu.GpuMemory, facts: CheckFacts
) -> tuple[Reading, _gpu.GpuMemory, CheckFacts]:
    reading, new_memory = _gpu.read_gpu(
        spec, sections, memory, nvml=facts.nvml, now=facts.meta.now, host=facts.host, job_pids=facts.job_pids
    )
    return reading, new_memory, facts


SIGNAL: Signal[GpuSpec, _gpu.GpuMemory] = Signal("gpu", _gpu.GpuMemory, snippet, _read)
