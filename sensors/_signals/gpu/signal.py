"""The GPU signal's registration: its probe snippet and its reader."""

from __future__ import annotations

from collections.abc import Mapping

from sensors._base.model import Reading
from sensors._signals.base import CheckFacts, ProbeInputs, Signal
from sensors._signals.gpu.reading import GpuMemory, read_gpu
from sensors._signals.gpu.smi import remote_sections
from sensors._signals.gpu.spec import GpuSpec


def snippet(spec: GpuSpec, memory: GpuMemory, probe: ProbeInputs) -> list[str]:
    """nvidia-smi queries inside the probe, for a remote host (locally NVML is read here)."""
    if probe.nvml:
        return []
    lines: list[str] = []
    for name, text in remote_sections(spec).items():
        lines += [f"sec {name}", text]
    return lines


def _read(
    spec: GpuSpec, sections: Mapping[str, bytes], memory: GpuMemory, facts: CheckFacts
) -> tuple[Reading, GpuMemory, CheckFacts]:
    reading, new_memory = read_gpu(
        spec, sections, memory, nvml=facts.nvml, now=facts.meta.now, host=facts.host, job_pids=facts.job_pids
    )
    return reading, new_memory, facts


SIGNAL: Signal[GpuSpec, GpuMemory] = Signal("gpu", GpuMemory, snippet, _read)
