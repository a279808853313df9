"""The wheel as a user gets it: built, installed into a fresh venv, deployed from a user's project.

The user's project has its own ``flows/`` package (Prefect's docs use ``flows/hello.py``), so
the wheel must not install a top-level ``flows``: the gate is deployed as
``sensors.flows.gate`` from that project with the fresh venv's ``prefect deploy``, a worker
from the fresh venv runs it against a simulated job on a real Prefect server, and ``import
flows`` there is still the user's. Installing needs PyPI (pip's cache makes reruns quick);
without it the test is skipped, saying so.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest

from sensors.testing import SimulatedJob
from tests.test_deployments_e2e import _deployment, _finished, _post, _stop, _wait_for, _yaml, server

__all__ = ["server"]  # the module-scoped Prefect server fixture, shared with the e2e test

pytestmark = [pytest.mark.e2e, pytest.mark.packaging]

REPO = Path(__file__).resolve().parent.parent
POOL = "crosscheck-wheel"


def _clean(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: ours) as a user's shell has it: no PYTHONPATH pointing into this
    checkout (pip would find the checkout's egg-info and call the wheel installed)."""
    return {
        k: v for k, v in (env or os.environ).items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    }


def _run(
    *argv: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600
) -> str:
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=_clean(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(map(str, argv))}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Built from a copy: a stale build/ in the checkout could otherwise end up in the wheel.
    src = tmp_path_factory.mktemp("src") / "prefect-crosscheck"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*cache"
        ),
    )
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(dist)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0 and _offline(done.stderr):
        pytest.skip("PyPI is not reachable: cannot fetch the build backend (setuptools>=77)")
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = dist.glob("prefect_crosscheck-*.whl")
    return path


def _offline(stderr: str) -> bool:
    return any(
        s in stderr
        for s in ("NewConnectionError", "Temporary failure in name resolution", "No matching distribution")
    )


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and its server extra (the Prefect CLI: deploy, worker)."""
    root = tmp_path_factory.mktemp("venv") / "fresh"
    _run(sys.executable, "-m", "venv", root)
    done = subprocess.run(
        [root / "bin" / "pip", "install", "-q", f"{wheel}[server]"],
        cwd=root,
        env=_clean(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0 and _offline(done.stderr):
        pytest.skip("PyPI is not reachable: cannot install the wheel's dependencies into a fresh venv")
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def test_the_wheel_installs_sensors_only_and_the_prefect_collection(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = zf.read(meta).decode()
        (points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_points = zf.read(points).decode()
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"sensors"}
    assert "Name: prefect-crosscheck" in metadata
    assert "Requires-Dist: prefect-client<4,>=3.9" in metadata
    assert not any(
        line.startswith("Requires-Dist: prefect<") or line.startswith("Requires-Dist: prefect>")
        for line in metadata.splitlines()
        if "extra ==" not in line
    )
    assert "Keywords:" in metadata and "prefect" in metadata.split("Keywords:", 1)[1].splitlines()[0]
    assert "[prefect.collections]\nprefect_crosscheck = sensors.blocks" in entry_points
    assert "[console_scripts]\ncrosscheck = sensors._cli:main" in entry_points


def _user_project(root: Path) -> Path:
    project = root / "my-pipeline"
    (project / "flows").mkdir(parents=True)
    (project / "flows" / "__init__.py").write_text('OWNER = "the user"\n')
    (project / "flows" / "hello.py").write_text(
        textwrap.dedent(
            """
            from prefect import flow

            @flow
            def hello() -> str:
                return "hello"
            """
        )
    )
    (project / "prefect.yaml").write_text(
        textwrap.dedent(
            f"""
            name: my-pipeline
            build: null
            push: null
            pull: []
            deployments:
              - name: gate
                entrypoint: sensors.flows.gate
                parameters: {{}}
                work_pool:
                  name: {POOL}
            """
        )
    )
    return project


def test_a_user_project_with_its_own_flows_deploys_and_runs_the_gate(
    venv: Path, server: dict[str, Any], tmp_path: Path
) -> None:
    api, env = server["api"], dict(server["env"])
    bin_ = venv / "bin"
    project = _user_project(tmp_path)

    where = json.loads(
        _run(
            bin_ / "python",
            "-c",
            "import json, flows, sensors.flows; print(json.dumps([flows.OWNER, flows.__file__, sensors.flows.__file__]))",
            cwd=project,
        )
    )
    assert where[0] == "the user" and where[1] == str(project / "flows" / "__init__.py")
    assert where[2].startswith(str(venv)), "sensors must come from the installed wheel"
    # Outside the project there is no `flows` at all: the wheel installs none.
    probe = subprocess.run(
        [bin_ / "python", "-c", "import flows"],
        cwd=tmp_path,
        env=_clean(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode != 0 and "No module named 'flows'" in probe.stderr
    assert _run(bin_ / "crosscheck", "--version").split()[-1] != "0+unknown"

    job = SimulatedJob(tmp_path, scenario="complete", total=3, step=0.05)
    stage_file = tmp_path / "job.yaml"
    stage_file.write_text(_yaml(job.stage_dict(name="wheel-job", interval="500ms")))

    _run(bin_ / "prefect", "work-pool", "create", POOL, "--type", "process", env=env)
    _run(bin_ / "prefect", "deploy", "--all", "--no-prompt", cwd=project, env=env)
    worker_log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 - closed below
    worker = subprocess.Popen(
        [bin_ / "prefect", "worker", "start", "--pool", POOL, "--type", "process"],
        env=_clean(env),
        cwd=project,
        stdout=worker_log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        started = datetime.datetime.now(datetime.UTC).isoformat()
        job.start()
        gate = _deployment(api, "crosscheck-gate/gate")
        assert gate["entrypoint"] == "sensors.flows.gate"
        run = _post(
            api,
            f"/deployments/{gate['id']}/create_flow_run",
            {"parameters": {"stage": str(stage_file), "since": started}},
        )
        done = _wait_for("the gate flow run", lambda: _finished(api, run["id"]), timeout=240, every=2)
        assert done["state"]["type"] == "COMPLETED"
    except AssertionError as exc:
        tail = (tmp_path / "worker.log").read_text(errors="replace")[-4000:]
        raise AssertionError(f"{exc}\n--- worker log ---\n{tail}") from None
    finally:
        _stop(worker, signal.SIGINT, grace=30)
        worker_log.close()
        job.stop()
    # After all that, the user's package is still the user's.
    assert _run(bin_ / "python", "-c", "import flows; print(flows.OWNER)", cwd=project).strip() == "the user"
