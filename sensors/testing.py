"""Test helpers for users' own gates: a real simulated job and reading builders.

``SimulatedJob`` starts a real process that behaves like a long extraction stage — it writes a
log with progress lines and one output file per sample — in one of the scenarios that fool
single-signal checks:

- ``complete``: writes every output, logs ``Extraction complete``, exits 0.
- ``crash``: writes half, logs a Traceback (``CUDA error``), exits 1.
- ``stall``: writes half, then sleeps forever: alive, nothing moves.
- ``eta0_spin``: logs ``ETA 0 minutes`` with one output left, spins on the CPU (incident 2),
  then writes the rest, logs completion and exits.
- ``post_process``: writes everything, logs completion, then spins on the CPU before exiting.
- ``no_marker``: writes everything and exits 0 without a completion line.

Example:
    >>> job = SimulatedJob(tmp_path, scenario="eta0_spin", total=20)  # doctest: +SKIP
    >>> job.start()  # doctest: +SKIP
    >>> stage = stage_from_dict(job.stage_dict(interval="200ms"))  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from sensors._base.model import Reading, Says

SCENARIOS = ("complete", "crash", "stall", "eta0_spin", "post_process", "no_marker")
COMPLETE_LINE = "Extraction complete"


class SimulatedJob:
    """A real process imitating a long pipeline stage (see the module docstring)."""

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        *,
        scenario: str = "complete",
        total: int = 20,
        step: float = 0.05,
        spin: float = 2.0,
        tag: str | None = None,
        python: str = sys.executable,
    ) -> None:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
        self.workdir = Path(workdir).resolve()
        self.scenario = scenario
        self.total = total
        self.step = step
        self.spin = spin
        self.tag = tag or f"simjob-{uuid.uuid4().hex[:12]}"
        self.python = python
        self.log_path = self.workdir / f"{self.tag}.log"
        self.outputs_dir = self.workdir / f"{self.tag}-out"
        self.pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def command(self) -> list[str]:
        return [
            self.python, "-u", "-m", "sensors.testing", "run",
            "--scenario", self.scenario, "--total", str(self.total), "--step", str(self.step),
            "--spin", str(self.spin), "--outputs", str(self.outputs_dir),
            "--tag", self.tag,
        ]  # fmt: skip

    def start(self, host: Any = None) -> int:
        """Start the job (locally, or detached on ``host`` via ``host.spawn``)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if host is not None:
            self.pid = host.spawn(self.command, log_path=str(self.log_path), cwd=_repo_root())
            return self.pid
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_repo_root(), env.get("PYTHONPATH")]))
        with open(self.log_path, "ab") as log, open(os.devnull, "rb") as devnull:
            self._proc = subprocess.Popen(
                self.command, stdin=devnull, stdout=log, stderr=subprocess.STDOUT,
                env=env, start_new_session=True,
            )  # fmt: skip
        self.pid = self._proc.pid
        return self.pid

    def stage_dict(self, *, name: str | None = None, **policy: Any) -> dict[str, Any]:
        """A stage (as a dict, the YAML schema) watching this job; ``policy`` overrides."""
        return {
            "stage": name or self.tag,
            "host": "local",
            "process": {"match": f"--tag {self.tag}( |$)"},
            "log": {
                "path": str(self.log_path),
                "complete": f"^{COMPLETE_LINE}",
                "error": "Traceback|CUDA error",
                "progress": r"\[(?P<done>\d+)/(?P<total>\d+)\]",
            },
            "outputs": {"files": str(self.outputs_dir), "pattern": "*.pt", "expected": self.total},
            "policy": {"interval": "200ms", "stall_after": "3s", "settle": 2, "exit_grace": "1s",
                       "timeout": "2m", **policy},
        }  # fmt: skip

    def write_stage(self, path: str | os.PathLike[str], **policy: Any) -> Path:
        path = Path(path)
        path.write_text(yaml.safe_dump(self.stage_dict(**policy), sort_keys=False))
        return path

    @property
    def running(self) -> bool:
        """Whether the job started here (not on a host) still runs."""
        return self._proc is not None and self._proc.poll() is None

    def wait(self, timeout: float = 30.0) -> int | None:
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """Kill the job (and its session) if it still runs."""
        if self.pid is None:
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signal.SIGKILL)
        if self._proc is not None:
            self._proc.wait(5)


def reading(signal_name: str, says: str | Says, detail: str = "", **evidence: Any) -> Reading:
    """Build a :class:`Reading` for table-driven tests of your own gate logic."""
    return Reading(signal_name, Says(says), detail or str(says), evidence, time.time(), "test")


def _repo_root() -> str:
    return str(Path(__file__).resolve().parent.parent)


# --------------------------------------------------------------------------- the job itself


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        for i in range(10_000):
            x += i * i
    del x


def _run(args: argparse.Namespace) -> int:
    out = Path(args.outputs)
    out.mkdir(parents=True, exist_ok=True)
    total, scenario = args.total, args.scenario
    print(f"Loading model for {args.tag}...", flush=True)

    def write(i: int) -> None:
        tmp = out / f"sample_{i:06d}.pt.tmp"
        tmp.write_bytes(os.urandom(64))
        tmp.rename(out / f"sample_{i:06d}.pt")
        left = total - i - 1
        # Rounded up, as progress bars do: "ETA 0 minutes" only once nothing seems left.
        eta = math.ceil(left * args.step / 60)
        print(f"[{i + 1}/{total}] {i + 1} extracted, ETA {eta} minutes", flush=True)

    stop_at = total // 2 if scenario in ("crash", "stall") else total
    if scenario == "eta0_spin":
        stop_at = total - 1
    for i in range(stop_at):
        write(i)
        time.sleep(args.step)
    if scenario == "crash":
        print("Traceback (most recent call last):", flush=True)
        print("RuntimeError: CUDA error: an illegal memory access was encountered", flush=True)
        return 1
    if scenario == "stall":
        while True:
            time.sleep(3600)
    if scenario == "eta0_spin":
        print(f"[{stop_at}/{total}] {stop_at} extracted, ETA 0 minutes", flush=True)
        _spin(args.spin)  # CPU-bound serialisation: GPU idle, log quiet, process in R
        for i in range(stop_at, total):
            write(i)
    if scenario == "no_marker":
        return 0
    print(f"{COMPLETE_LINE}: {total} samples", flush=True)
    if scenario == "post_process":
        print("building sample_lengths.json", flush=True)
        _spin(args.spin)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sensors.testing")
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run a simulated extraction job")
    run.add_argument("--scenario", choices=SCENARIOS, default="complete")
    run.add_argument("--total", type=int, default=20)
    run.add_argument("--step", type=float, default=0.05)
    run.add_argument("--spin", type=float, default=2.0)
    run.add_argument("--outputs", required=True)
    run.add_argument("--tag", required=True)
    args = parser.parse_args(argv)
    return _run(args)


if __name__ == "__main__":
    raise SystemExit(main())
