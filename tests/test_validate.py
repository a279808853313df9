"""``crosscheck validate`` (load and explain, no probing) and the stage file's published JSON
Schema (``schema/stage.schema.json``, ``crosscheck schema``): the schema is the models', and
every example stage file in the repository passes both. Through the installed command."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from sensors._base.errors import ConfigError
from sensors._config.stage import _YAMLLoader, stage_from_dict, stage_json_schema
from sensors.testing import SimulatedJob

REPO = Path(__file__).resolve().parent.parent
CROSSCHECK = str(Path(sys.executable).with_name("crosscheck"))
PUBLISHED = REPO / "schema" / "stage.schema.json"
STAGE_FILES = sorted((REPO / "deployments" / "stages").glob("*.yaml"))
#: What a fragment of the docs (a ``host:``, ``gpu:`` or ``notify:`` block) is completed with.
MINIMAL = {"stage": "example", "process": {"match": "job.py"}, "log": {"path": "/x.log", "complete": "^done"}}


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CROSSCHECK, *args], capture_output=True, text=True, timeout=timeout, check=False)


def _load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_YAMLLoader)  # as a stage file is read: YAML 1.2 booleans


def _doc_blocks() -> list[tuple[str, dict[str, Any]]]:
    """Every ```yaml block of the docs, as a stage: a whole one as it is, a fragment merged
    into a minimal stage."""
    found = []
    for doc in [
        REPO / "README.md",
        *sorted((REPO / "docs").rglob("*.md")),
        *sorted(REPO.glob("deployments/*.md")),
    ]:
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", doc.read_text(), flags=re.S)):
            data = _load_yaml(block)
            if "stage" not in data:
                data = {**MINIMAL, **data}
            found.append((f"{doc.relative_to(REPO)}#{i + 1}", data))
    return found


def _examples() -> list[tuple[str, dict[str, Any]]]:
    examples = [(str(p.relative_to(REPO)), _load_yaml(p.read_text())) for p in STAGE_FILES]
    examples += _doc_blocks()
    job = SimulatedJob(Path("/tmp/crosscheck-example"), scenario="complete")  # not started
    examples.append(("sensors.testing.SimulatedJob.stage_dict()", job.stage_dict()))
    return examples


EXAMPLES = _examples()


def test_the_examples_are_found() -> None:
    names = [name for name, _ in EXAMPLES]
    assert len(STAGE_FILES) >= 2 and sum(n.startswith("README.md#") for n in names) >= 1, names
    assert sum(n.startswith("docs/") for n in names) >= 4, names


def test_the_published_schema_is_the_models() -> None:
    """schema/stage.schema.json is what the models generate (regenerate it with
    ``crosscheck schema > schema/stage.schema.json``), and a valid draft 2020-12 schema."""
    published = json.loads(PUBLISHED.read_text())
    assert published == stage_json_schema(), "schema/stage.schema.json is stale: crosscheck schema > it"
    jsonschema.Draft202012Validator.check_schema(published)
    out = run("schema")
    assert out.returncode == 0 and json.loads(out.stdout) == published


@pytest.mark.parametrize(("name", "data"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_every_example_stage_passes_the_schema_and_the_models(name: str, data: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(json.loads(PUBLISHED.read_text())).validate(data)
    stage_from_dict(data)


@pytest.mark.parametrize("path", STAGE_FILES, ids=[p.name for p in STAGE_FILES])
def test_example_stage_files_name_the_schema_for_editors(path: Path) -> None:
    """yaml-language-server reads ``# yaml-language-server: $schema=...`` (a path relative
    to the file): editors complete and check the examples."""
    first = path.read_text().splitlines()[0]
    m = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)", first)
    assert m and (path.parent / m[1]).resolve() == PUBLISHED


@pytest.mark.parametrize(
    "change",
    [
        {"proces": {"match": "x"}},  # a typo: an unknown key
        {"policy": {"interval": "30 sec"}},
        {"policy": {"settle": 0}},
        {"log": {"path": "logs/x.log", "complete": "^done"}},  # relative
        {"outputs": {"files": "/out", "lines": "/out.jsonl", "expected": 3}},
        {"outputs": {"files": "/out", "expected": 0}},
        {"process": {"match": "x", "pid": 4}},
        {"process": {}},
        {"gpu": {"devices": []}},
        {"gpu": {"devices": 1024}},
        {"host": {"ssh": "gpu-box", "material": {"source": "x", "known_hosts": "k"}}},  # a block's only
        {"notify": {"on": ["stalled", "finished"]}},
        {"stage": "two words"},
    ],
)
def test_what_the_models_refuse_the_schema_refuses(change: dict[str, Any]) -> None:
    data = {**MINIMAL, **change}
    with pytest.raises(ConfigError):
        stage_from_dict(data, file="x.yaml")
    errors = list(jsonschema.Draft202012Validator(stage_json_schema()).iter_errors(data))
    assert errors, change


def test_a_stage_without_a_signal_is_refused_by_both() -> None:
    with pytest.raises(ConfigError):
        stage_from_dict({"stage": "empty"})
    assert list(jsonschema.Draft202012Validator(stage_json_schema()).iter_errors({"stage": "empty"}))


@pytest.mark.parametrize(
    "change",
    [
        {"policy": {"interval": 30, "stall_after": "1.5h", "timeout": "2d"}},
        {"gpu": {"devices": 0}},
        {"gpu": {"devices": "GPU-0f2b6c1e-7a3d-4c55-9e21-3b8f0d9a1c01"}},
        {"gpu": {"devices": [0, "GPU-5d1e"], "idle_for": "2m"}},
        {"launch": {"command": "python -u train.py --out /data"}},
        {"host": {"ssh": "gpu-box", "port": 2222, "passphrase": "env:KEY_PASSPHRASE"}},
    ],
)
def test_what_the_models_take_the_schema_takes(change: dict[str, Any]) -> None:
    data = {**MINIMAL, **change}
    stage_from_dict(data)
    jsonschema.Draft202012Validator(stage_json_schema()).validate(data)


# --------------------------------------------------------------------------- validate


def test_validate_explains_the_example_stage_files() -> None:
    out = run("validate", *map(str, STAGE_FILES))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"{STAGE_FILES[0]}: stage extract: valid" in text
    assert "  host     gpu-box over SSH: root@gpu-box:22" in text
    assert "'^Extraction complete' (RE2)" in text and "done at 37,312" in text
    assert "a check every 30s; stalled after 20m without progress" in text
    assert "launch   /root/ml-env/bin/python3 -u /root/eagle3/03_train_draft.py" in text
    assert "warning" not in text


def _write(tmp_path: Path, name: str, data: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_validate_warns_of_a_stage_that_cannot_tell_success_from_a_crash(tmp_path: Path) -> None:
    only_process = _write(tmp_path, "p.yaml", {"stage": "p", "process": {"match": "train.py"}})
    with_gpu = _write(
        tmp_path, "pg.yaml", {"stage": "pg", "process": {"match": "train.py"}, "gpu": {"devices": "all"}}
    )
    launched = _write(
        tmp_path,
        "pl.yaml",
        {"stage": "pl", "process": {"match": "train.py"}, "launch": {"command": "train.py"}},
    )
    gpu_only = _write(tmp_path, "g.yaml", {"stage": "g", "gpu": {"devices": 0}})
    out = run("validate", only_process, with_gpu, launched, gpu_only)
    assert out.returncode == 0, out.stderr
    per_file = out.stdout.split(f"{tmp_path}/")[1:]
    assert [f.split(":")[0] for f in per_file] == ["p.yaml", "pg.yaml", "pl.yaml", "g.yaml"]
    assert "warning  never completes on its own: when its process is gone" in per_file[0]
    assert "warning  never completes on its own" in per_file[1]
    assert "warning  completes only when crosscheck launched the job" in per_file[2]
    assert "warning  never completes: a GPU at rest" in per_file[3]
    assert run("validate", "--strict", only_process).returncode == 1
    fine = _write(tmp_path, "fine.yaml", MINIMAL)
    assert run("validate", "--strict", fine).returncode == 0


def test_validate_names_a_backtracking_regex(tmp_path: Path) -> None:
    path = _write(tmp_path, "bt.yaml", {**MINIMAL, "log": {"path": "/x.log", "complete": r"^(?=done)done"}})
    out = run("validate", path)
    assert out.returncode == 0
    assert "(backtracking re: lookahead" in out.stdout
    assert "warning  backtracking regex: log.complete: '^(?=done)done' uses lookahead" in out.stdout


def test_validate_a_file_that_does_not_load_is_its_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = _write(tmp_path, "bad.yaml", {**MINIMAL, "policy": {"interval": "30 sec"}})
    good = _write(tmp_path, "good.yaml", MINIMAL)
    out = run("validate", bad, good)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [f"crosscheck: {bad}: policy.interval: '30 sec' is not a duration"
                                       " (use 500ms, 30s, 15m, 2h, or a number of seconds)"]  # fmt: skip
    assert f"{good}: stage example: valid" in out.stdout  # the others are still explained


def test_validate_probes_nothing_and_shows_the_ssh_route(tmp_path: Path) -> None:
    """An SSH stage is resolved through its ssh config (Include followed) and never
    connected to: a host that does not exist validates at once."""
    (tmp_path / "hosts.conf").write_text("Host gpu-*\n  HostName gpu.invalid\n  Port 2222\n  User ml\n")
    (tmp_path / "config").write_text(f"Include {tmp_path}/hosts.conf\n")
    host = {"ssh": "gpu-7", "config": str(tmp_path / "config"), "known_hosts": "/nonexistent"}
    path = _write(tmp_path, "ssh.yaml", {**MINIMAL, "host": host})
    began = time.monotonic()
    out = run("validate", path)
    assert out.returncode == 0, out.stderr
    assert "  host     gpu-7 over SSH: ml@gpu.invalid:2222 (host keys from /nonexistent)" in out.stdout
    assert time.monotonic() - began < 20


def test_validate_strict_warns_of_a_host_its_ssh_config_refuses(tmp_path: Path) -> None:
    """A stage whose ssh config a check refuses (ProxyCommand, a Match exec it reaches) said
    "valid" and exit 0 even with --strict, while status on the same file exits 2: it is a
    warning (the module's docstring lists it), so --strict exits 1."""
    (tmp_path / "config").write_text("Host gpu\n  ProxyCommand nc %h %p\n")
    host = {"ssh": "gpu", "config": str(tmp_path / "config"), "known_hosts": "/nonexistent"}
    path = _write(tmp_path, "refused.yaml", {**MINIMAL, "host": host})
    out = run("validate", "--strict", path)
    assert out.returncode == 1, out.stdout
    assert "  warning  host gpu cannot be resolved through the ssh config here" in out.stdout
    assert "ProxyCommand" in out.stdout
    assert run("validate", path).returncode == 0  # a warning, not an error: the worker's config may differ
