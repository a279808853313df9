"""Stand-ins for an NVIDIA driver in tests: a fake ``libnvidia-ml.so.1`` and ``nvidia-smi``.

The library is C built from ``fake_nvml.c`` with the system ``gcc`` and loaded by the real
nvidia-ml-py bindings (``CDLL("libnvidia-ml.so.1")`` searched through ``LD_LIBRARY_PATH``);
its state file format is documented at the top of the C source.

Example:
    >>> lib_dir = build_fake_nvml(tmp_path)          # doctest: +SKIP
    >>> env = {"LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_STATE": "/tmp/state"}  # doctest: +SKIP
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_nvml.c"
FAKE_SMI = HERE / "nvidia-smi"


def build_fake_nvml(dest: Path) -> Path:
    """Compile the fake library as ``dest/libnvidia-ml.so.1`` and return ``dest``.

    Raises:
        RuntimeError: no C compiler, or the source does not compile (with gcc's message).
    """
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise RuntimeError("no C compiler (gcc) on PATH to build the fake libnvidia-ml.so.1")
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / "libnvidia-ml.so.1"
    proc = subprocess.run(
        [gcc, "-shared", "-fPIC", "-O1", "-Wall", "-o", str(out), str(SOURCE)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"building the fake libnvidia-ml.so.1 failed:\n{proc.stderr}")
    return dest


def install_fake_smi(bin_dir: Path) -> Path:
    """Copy the fake ``nvidia-smi`` into ``bin_dir`` with an empty ``smi-state`` beside it.

    Returns the state directory (write ``gpu.csv``, ``apps.csv``, ``rc``, ``stderr`` there).
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(FAKE_SMI, bin_dir / "nvidia-smi")
    state = bin_dir / "smi-state"
    state.mkdir(exist_ok=True)
    return state
