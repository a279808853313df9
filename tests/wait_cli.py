"""``crosscheck wait STAGE --json`` run as a user runs it, its verdict lines read as they come:
the real-CLI trials' and the span tests' one way to watch a gate (tests/test_span.py,
tests/test_user_43.py, tests/test_user_44.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


class WaitCli:
    """``crosscheck wait PATH --json ARGS``: every check's verdict, with when it came (this
    machine's monotonic clock), and what it printed on stderr once it ended."""

    def __init__(self, path: Path, *args: str) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sensors", "wait", str(path), "--json", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self.verdicts: list[dict[str, Any]] = []
        self.times: list[float] = []
        self.stderr = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.verdicts.append(json.loads(line))
                self.times.append(time.monotonic())

    def until(self, test: Callable[[dict[str, Any]], bool], timeout: float = 60.0) -> dict[str, Any]:
        """The first verdict ``test`` accepts; fails with the story so far if none comes."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for verdict in list(self.verdicts):
                if test(verdict):
                    return verdict
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.02)
        raise AssertionError(self.story())

    def end(self, timeout: float = 120.0) -> int:
        """Its exit code, once it ends (killed if it has not by ``timeout``)."""
        try:
            rc = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(5)
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()
        return rc

    def story(self) -> list[tuple[str, str]]:
        """Each change of verdict with its first reason: what a person watching saw."""
        out: list[tuple[str, str]] = []
        for v in self.verdicts:
            said = (v["verdict"], v["reasons"][0] if v["reasons"] else "")
            if not out or out[-1] != said:
                out.append(said)
        return out

    def reasons(self) -> list[str]:
        """Every distinct reason shown, in order."""
        seen: dict[str, None] = {}
        for v in self.verdicts:
            for r in v["reasons"]:
                seen.setdefault(r)
        return list(seen)

    def first(self, state: str) -> float | None:
        """When the first verdict of ``state`` came (None: none did)."""
        return next(
            (t for v, t in zip(self.verdicts, self.times, strict=True) if v["verdict"] == state), None
        )
