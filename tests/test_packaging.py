"""The wheel as a user gets it: built, installed beside a Prefect that was there first,
deployed from a user's project.

A user's venv has Prefect and prefect-slack first (the Prefect these tests run: the newest
in make test, the range's floor as constraints/oldest.txt pins it in make test-compat's
.venv-oldest); the wheel is then installed into it: no file of any distribution that was
there changes (each file of each distribution hashed before, after the install and after the
uninstall), ``pip check`` passes, ``from prefect import flow`` still works. The same venv
without google-re2 runs the regex fallback.

The user's project has its own ``flows/`` package (Prefect's docs use ``flows/hello.py``), so
the wheel must not install a top-level ``flows``: the gate is deployed as
``sensors.flows.gate`` from that project with that venv's ``prefect deploy``, a worker from
it runs the gate against a simulated job on a real Prefect server, and ``import flows`` there
is still the user's. Installing needs PyPI (or the wheels pip finds here); without it the
tests are skipped, saying so.
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
import time
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from sensors.testing import SimulatedJob
from tests.prefect_server import _stop, _wait_for
from tests.test_deployments_e2e import _deployment, _finished, _post, _yaml

# The module's venv is set up in its first test's time: installs of ~150 distributions, minutes
# beside make test's workers.
pytestmark = [pytest.mark.e2e, pytest.mark.packaging, pytest.mark.timeout(900)]

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


@dataclass(frozen=True)
class UsersVenv:
    """A user's venv: their Prefect first, then the wheel installed beside it."""

    root: Path
    before: dict[str, Any]  # every distribution's files, hashed, before the wheel
    after: dict[str, Any]  # and after it


@pytest.fixture(scope="module")
def users_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> UsersVenv:
    """A venv as a user has it (Prefect and prefect-slack, installed first), then the wheel
    installed into it with pip, as docs/install.md says; each distribution's files hashed
    before and after. Both tests of the wheel's install use it: one Prefect install, not two
    (one took 35 s of CPU here, 140 s beside an 8-worker fuzz run).

    Its Prefect is the one these tests run (their server's): a client newer than its server
    is Prefect's own mismatch (the server refuses the newer fields with a 422), not the
    wheel's. make test runs the newest the range allows; make test-compat's .venv-oldest the
    range's floor, every package as its users had it (constraints/oldest.txt)."""
    root = tmp_path_factory.mktemp("venv") / "users"
    _run(sys.executable, "-m", "venv", root)
    bin_ = root / "bin"
    _pip_install(bin_, "--upgrade", "pip")
    running = metadata.version("prefect")
    pins = ["-c", REPO / "constraints" / "oldest.txt"] if running == _floor() else []
    _pip_install(bin_, *pins, f"prefect=={running}", "prefect-slack")
    before = _installed(bin_)
    _pip_install(bin_, wheel)
    return UsersVenv(root, before, _installed(bin_))


def test_the_wheel_installs_its_two_packages_and_the_prefect_collection(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = zf.read(meta).decode()
        (points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_points = zf.read(points).decode()
        licenses = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        license_text = zf.read(licenses[0]).decode() if licenses else ""
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"sensors", "prefect_crosscheck"}
    assert {"sensors/py.typed", "prefect_crosscheck/py.typed"} <= set(names)
    assert "Apache License" in license_text and "Version 2.0" in license_text
    lines = metadata.splitlines()
    assert "Name: prefect-crosscheck" in lines and "License-Expression: Apache-2.0" in lines
    assert f"Version: {_version()}" in lines
    requires = [line.removeprefix("Requires-Dist: ") for line in lines if line.startswith("Requires-Dist: ")]
    core = [r for r in requires if "extra ==" not in r]
    # prefect itself, never prefect-client (it ships the same package and overwrites prefect's files)
    assert not any(r.startswith("prefect-client") for r in requires)
    (prefect,) = [r for r in core if r.split("<")[0].split(">")[0] == "prefect"]
    assert prefect == f"prefect<4,>={_floor()}"
    # What sensors/ imports is declared (prometheus_client was not: it came with Prefect).
    names_only = {r.split(";")[0].split("<")[0].split(">")[0].split("=")[0].strip().lower() for r in core}
    assert {"prometheus-client", "regex", "google-re2", "pydantic", "rich", "httpx", "paramiko"} <= names_only
    (re2,) = [r for r in core if r.startswith("google-re2")]
    assert "platform_python_implementation" in re2 and "platform_machine" in re2
    assert any(line.startswith("Classifier: Typing :: Typed") for line in lines)
    assert any(line.startswith("Project-URL: Source, https://") for line in lines)
    assert "Keywords:" in metadata and "prefect" in metadata.split("Keywords:", 1)[1].splitlines()[0]
    assert "[prefect.collections]\nprefect_crosscheck = prefect_crosscheck.blocks" in entry_points
    assert "[console_scripts]\ncrosscheck = sensors._cli:main" in entry_points


def _version() -> str:
    namespace: dict[str, str] = {}
    exec((REPO / "sensors" / "_version.py").read_text(), namespace)
    return namespace["__version__"]


def _floor() -> str:
    """The floor of the Prefect range, as constraints/oldest.txt pins it (the two must agree)."""
    pins = (REPO / "constraints" / "oldest.txt").read_text().splitlines()
    (pin,) = [line for line in pins if line.startswith("prefect==")]
    return pin.removeprefix("prefect==")


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
            # As deployments/prefect.yaml: a module-path entrypoint with an empty pull makes
            # `prefect deploy` before 3.8 split the entrypoint on ":" (a ValueError).
            pull:
              - prefect.deployments.steps.set_working_directory:
                  directory: .
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
    users_venv: UsersVenv, wheel: Path, prefect_server: dict[str, Any], tmp_path: Path
) -> None:
    api, env = prefect_server["api"], dict(prefect_server["env"])
    venv = users_venv.root
    bin_ = venv / "bin"
    if not (bin_ / "crosscheck").exists():
        # The install test uninstalls it at its end (where it ran first).
        _pip_install(bin_, "--no-deps", wheel)
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
    assert _run(bin_ / "crosscheck", "--version").startswith(f"crosscheck {_version()}, prefect 3.")

    job = SimulatedJob(tmp_path, scenario="complete", total=3, step=0.05)
    stage_file = tmp_path / "job.yaml"
    stage_file.write_text(_yaml(job.stage_dict(name="wheel-job", interval="500ms")))

    _run(bin_ / "prefect", "work-pool", "create", POOL, "--type", "process", env=env)
    _run(bin_ / "prefect", "--no-prompt", "deploy", "--all", cwd=project, env=env)
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


# --------------------------------------------------------------------------- beside a user's Prefect

#: Every file of every installed distribution (as its RECORD lists it), hashed: run by the
#: venv's own Python. Compiled files (__pycache__) are left out: an import may write them.
_HASH_FILES = r"""
import hashlib, json, sys
from importlib import metadata
out = {}
for dist in metadata.distributions():
    files = {}
    for f in dist.files or []:
        if "__pycache__" in f.parts:
            continue
        try:
            files[str(f)] = hashlib.sha256(f.locate().read_bytes()).hexdigest()
        except OSError:
            files[str(f)] = None
    out[dist.metadata["Name"].lower().replace("_", "-")] = {"version": dist.version, "files": files}
json.dump(out, sys.stdout)
"""


def _installed(bin_: Path) -> dict[str, Any]:
    # -I: not the current directory (a checkout's egg-info would count as installed).
    return json.loads(_run(bin_ / "python", "-I", "-c", _HASH_FILES))


def _pip_install(bin_: Path, *args: str | Path) -> None:
    # --no-compile: no __pycache__ written at install (what is compared is the source files;
    # compiling Prefect's files cost ~13 s of CPU an install, 25 % of it, on this machine).
    done = subprocess.run(
        [bin_ / "pip", "install", "-q", "--no-compile", *map(str, args)],
        env=_clean(), capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if done.returncode != 0 and _offline(done.stderr):
        pytest.skip("PyPI is not reachable: cannot install Prefect into a fresh venv")
    assert done.returncode == 0, done.stderr[-3000:]


def _changed(before: dict[str, Any], after: dict[str, Any], *, names: set[str] | None = None) -> list[str]:
    """What changed of the distributions in ``before`` (or of those ``names``): a version, a
    file's content, a file gone."""
    changed = []
    for name, dist in before.items():
        if names is not None and name not in names:
            continue
        now = after.get(name)
        if now is None:
            changed.append(f"{name} {dist['version']}: uninstalled")
            continue
        if now["version"] != dist["version"]:
            changed.append(f"{name}: {dist['version']} -> {now['version']}")
            continue
        changed += [
            f"{name}: {path} changed" for path, h in dist["files"].items() if now["files"].get(path) != h
        ]
    return changed


#: The user's Prefect: its files may never change.
PREFECT = {"prefect", "prefect-slack"}


def test_installing_beside_a_users_prefect_changes_none_of_its_files(
    users_venv: UsersVenv, wheel: Path, tmp_path: Path
) -> None:
    """The user's environment first (Prefect and prefect-slack, as they installed them), then
    the wheel: nothing that was there changes, and uninstalling it leaves Prefect working.
    make test runs it beside the newest Prefect; make test-compat beside both ends of the
    range (each of its venvs is one end)."""
    bin_ = users_venv.root / "bin"
    before, after = users_venv.before, users_venv.after
    floor = metadata.version("prefect") == _floor()
    assert not floor or before["prefect"]["version"] == _floor()
    assert _changed(before, after, names=PREFECT) == []
    # Nothing else was removed or moved back (a pin would: prefect-client 3.9.0 took
    # python-slugify back); what moved forward is what a new requirement of it needs (the
    # newest paramiko's PyNaCl needs a newer cffi than the floor's cryptography had).
    others = _changed(before, after)
    assert all(_forward(change) for change in others), others
    # The distributions it added own none of the files the others own (prefect-client would
    # own all of prefect's).
    owned = {path for dist in before.values() for path in dist["files"]}
    added = {name: dist for name, dist in after.items() if name not in before}
    assert "prefect-crosscheck" in added and "prefect-client" not in added
    assert [p for dist in added.values() for p in dist["files"] if p in owned] == []
    assert "No broken requirements found" in _run(bin_ / "pip", "check")
    version = _run(bin_ / "crosscheck", "--version")
    assert f"prefect {before['prefect']['version']}," in version and "regexes: re2" in version
    assert (
        _run(bin_ / "python", "-c", "import prefect_crosscheck as p; print(p.__version__)").strip()
        == _version()
    )

    _run(bin_ / "pip", "uninstall", "-y", "prefect-crosscheck")
    assert _changed(before, _installed(bin_), names=PREFECT) == []
    _run(
        bin_ / "python",
        "-I",
        "-c",
        "from prefect import flow\n@flow\ndef f():\n    return 1\nassert f.fn() == 1",
    )

    if not floor:
        _without_re2(bin_, wheel, tmp_path)


def _without_re2(bin_: Path, wheel: Path, tmp_path: Path) -> None:
    """docs/install.md's install without google-re2 (where it has no wheel): the wheel alone,
    then its requirements but google-re2. The stage regexes run under `regex`, each search
    bounded: a catastrophic pattern over the job's log costs a bounded time, not hours."""
    _run(bin_ / "pip", "uninstall", "-y", "google-re2")
    _pip_install(bin_, "--no-deps", wheel)
    requirements = _run(bin_ / "python", "-I", "-c", _REQUIREMENTS_BUT_RE2)
    assert "google-re2" not in requirements and "prefect" in requirements
    _pip_install(bin_, *requirements.split())
    assert "regexes: regex (no google-re2 here" in _run(bin_ / "crosscheck", "--version")
    log = tmp_path / "job.log"
    # '(a|aa)+$' backtracks exponentially on a line of a's that ends otherwise (hours per line
    # for Python's re at 64 characters); the completion line after them is still found.
    log.write_text("start\n" + ("a" * 64 + "b\n") * 40 + "Extraction complete\n")
    stage = tmp_path / "s.yaml"
    stage.write_text(
        f"stage: no-re2\nhost: local\nlog:\n  path: {log}\n  complete: '^Extraction complete'\n"
        "  error: '(a|aa)+$'\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [bin_ / "crosscheck", "status", stage, "--json", "--since", "1h", "--state", "none"],
        env=_clean(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    took = time.monotonic() - started
    data = json.loads(done.stdout)
    assert data["regex_engine"] == "regex" and data["verdict"] == "complete", done.stderr
    assert done.returncode == 0 and took < 30, (took, done.stderr)
    assert "was stopped after 0.1 s" in done.stderr and "Traceback" not in done.stderr


def _forward(change: str) -> bool:
    """Whether ``change`` (from :func:`_changed`) is an upgrade."""
    from packaging.version import Version

    _, _, versions = change.partition(": ")
    old, arrow, new = versions.partition(" -> ")
    return bool(arrow) and Version(new) > Version(old)


#: docs/install.md's line (one requirement a word here, not a line): the installed wheel's
#: requirements, less google-re2 and the extras'.
_REQUIREMENTS_BUT_RE2 = (
    "from importlib.metadata import requires; "
    "print(' '.join(r.split(';')[0].replace(' ', '') for r in requires('prefect-crosscheck') "
    "if 'extra ==' not in r and not r.startswith('google-re2')))"
)
