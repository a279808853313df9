"""The documentation's examples, run as written: the `crosscheck` command lines (the README's
"Use", docs/cli.md's "status and wait") on stage files for real simulated jobs, and the Python
examples (the Checker loop of docs/api.md, the Prefect flow of the README and docs/prefect.md)
with the names they leave to the reader filled in."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sensors.testing import SimulatedJob

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"


def _section(title: str, text: str = README) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def _doc(name: str) -> str:
    return (DOCS / name).read_text()


def _python_blocks(section: str) -> list[str]:
    return [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", section, flags=re.S)]


def _finished_stage(tmp_path: Path, name: str) -> Path:
    job = SimulatedJob(tmp_path, scenario="complete", total=3, step=0.01, tag=f"readme-{name}")
    job.start()
    assert job.wait(30) == 0
    return job.write_stage(tmp_path / f"{name}.yaml", interval="200ms", exit_grace="200ms", timeout="30s")


def test_the_use_section_s_command_lines_run_as_written(tmp_path: Path) -> None:
    sections = [_section("Use"), _section("status and wait", _doc("cli.md"))]
    found = [
        [line.split("#")[0].strip() for line in section.splitlines() if line.startswith("    crosscheck ")]
        for section in sections
    ]
    assert all(len(each) >= 4 for each in found), found
    lines = list(dict.fromkeys(line for each in found for line in each))
    for name in ("extract", "a", "b"):
        _finished_stage(tmp_path, name)
    (tmp_path / "train.sh").write_text("#!/bin/sh\necho training >> trained.txt\n")
    (tmp_path / "train.sh").chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    crosscheck = shlex.quote(str(Path(sys.executable).with_name("crosscheck")))
    # The jobs finished before these commands: the first names when the run began, the state
    # store (per test) remembers it for the ones after.
    first = subprocess.run(
        f"{crosscheck} status extract.yaml a.yaml b.yaml --since 10m", shell=True, cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    for line in lines:
        out = subprocess.run(
            line.replace("crosscheck ", f"{crosscheck} ", 1), shell=True, cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, f"{line}\n{out.stdout}{out.stderr}"
    assert (tmp_path / "trained.txt").read_text() == "training\n"  # `wait ... && ./train.sh` trained


def test_the_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = [b for b in _python_blocks(_section("In Python", _doc("api.md"))) if "Checker" in b]
    _finished_stage(tmp_path, "extract")
    monkeypatch.chdir(tmp_path)
    trained: list[bool] = []
    namespace: dict[str, Any] = {"start_training": lambda: trained.append(True)}
    # docs/api.md's "In Python" block, on a finished job with a fresh Checker: give it the run's
    # start (``since``), as docs/run-binding.md says to.
    exec(
        compile(
            block.replace('load_stage("extract.yaml"))', 'load_stage("extract.yaml"), since="10m")'),
            "docs/api.md",
            "exec",
        ),
        namespace,
    )
    assert trained == [True]


@pytest.mark.prefect
@pytest.mark.usefixtures("prefect_harness")
def test_the_prefect_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = [b for b in _python_blocks(_section("Prefect: gates between stages")) if "@flow" in b]
    # docs/prefect.md shows the same flow: running one runs both.
    assert [b for b in _python_blocks(_doc("prefect.md")) if "@flow" in b] == [block]
    stages = tmp_path / "stages"
    stages.mkdir()
    # Long enough for the flow's first check to see it alive (the example gives no --since).
    job = SimulatedJob(tmp_path, scenario="complete", total=3, step=0.6, tag="readme-prefect")
    job.write_stage(stages / "extract.yaml", interval="200ms", exit_grace="200ms", timeout="30s")
    monkeypatch.chdir(tmp_path)
    trained: list[bool] = []
    namespace: dict[str, Any] = {"launch_extraction": job.start, "train": lambda: trained.append(True)}
    exec(compile(block, "README", "exec"), namespace)
    namespace["pipeline"]()
    job.stop()
    assert trained == [True]


def test_the_readme_is_short_and_its_links_to_the_docs_exist() -> None:
    """The README is what a newcomer reads first (at most ~250 lines); the rest is in docs/,
    and every docs/ page it names is there."""
    assert len(README.splitlines()) <= 250
    targets = re.findall(r"\]\((docs/[^)#]+)", README)
    assert targets and all((REPO / target).is_file() for target in targets), targets
