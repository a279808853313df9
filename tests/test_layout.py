"""The layout keeps its dependency direction: core ← Prefect layer ← flows and the demo.

The core (every module under ``sensors/`` but the Prefect layer) imports neither Prefect nor
anything from ``flows/``, and paramiko only in the SSH host modules, which nothing imports
until a stage names an SSH host. Checked twice: in a fresh interpreter (what an import really
pulls in) and statically (an import inside a function the first check would not reach). Each
layer's ``__init__`` says what it may import, and the tables here check that it says it right.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SENSORS = REPO / "sensors"

#: The public modules at the top of the package (everything else lives in a layer's folder).
PUBLIC = {
    "sensors",
    "sensors.__main__",
    "sensors._version",
    "sensors.prefect",
    "sensors.flows",
    "sensors.blocks",
    "sensors.testing",
}
#: The layers, bottom up: the folders under ``sensors/`` and what each may import at the top of
#: a module (itself always). The Prefect layer (``_prefect/`` and the public modules on it)
#: may import anything.
LAYERS: dict[str, set[str]] = {
    "_base": set(),
    "_run": {"_base"},
    "_signals": {"_base", "_run"},
    "_config": {"_base", "_signals"},
    "_hosts": {"_base", "_config"},
    "_verdict": {"_base", "_run", "_config"},
    "_store": {"_base"},
    "_check": {"_base", "_run", "_config", "_hosts", "_signals", "_verdict", "_store"},
    "_present": {"_base", "_config"},
    "_notify": {"_base", "_config", "_present"},
    "_watch": {"_base", "_run", "_config", "_hosts", "_check", "_store", "_present"},
    "_draft": {"_base", "_run", "_signals", "_config", "_hosts"},
    "_cli": {"_base", "_run", "_config", "_check", "_present", "_watch", "_version"},
}
#: What a layer may import only inside a function, when a command or a stage asks for it.
LAZY: dict[str, set[str]] = {
    "_watch": {"_notify", "_prefect"},
    "_cli": {"_hosts", "_notify", "_store", "_prefect", "blocks", "_draft"},
}
#: The Prefect layer: it may import Prefect (and the demo the flows); the core may not.
PREFECT_LAYER = {"sensors.prefect", "sensors.flows", "sensors.blocks"}

#: Not imported here: ``testing`` is the public test-helper module (simulated jobs, run as a
#: script too), ``__main__`` runs the CLI when imported.
NOT_IMPORTED = {"sensors.testing", "sensors.__main__"}
#: The only modules that import paramiko.
SSH_MODULES = {
    "sensors._hosts.ssh",
    "sensors._hosts.ssh_config",
    "sensors._hosts.ssh_connect",
    "sensors._hosts.ssh_shell",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(SENSORS.rglob("*.py"))}


def _layer(name: str) -> str:
    """``sensors._check.batch`` → ``_check``; a public module is its own layer."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else name


def _prefect_layer() -> set[str]:
    return PREFECT_LAYER | {m for m in _modules() if _layer(m) == "_prefect"}


def _core() -> list[str]:
    return sorted(set(_modules()) - _prefect_layer() - NOT_IMPORTED)


def _imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    """Absolute module names ``path`` imports (``from a import b`` gives ``a`` and ``a.b``)."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _roots(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


def test_the_layout_lists_real_modules() -> None:
    modules = set(_modules())
    assert {
        "sensors",
        "sensors._check.checker",
        "sensors._cli.main",
        "sensors._hosts",
        "sensors._signals.gpu",
    } <= modules
    assert modules.issuperset(PUBLIC | NOT_IMPORTED | SSH_MODULES)
    assert {_layer(m) for m in modules} - {_layer(m) for m in PUBLIC} == set(LAYERS) | {"_prefect"}


def test_every_module_lives_in_a_layers_folder_or_is_public() -> None:
    """No new flat module: a private module belongs to a layer, and the tree shows which."""
    flat = {m for m, path in _modules().items() if path.parent == SENSORS and m not in PUBLIC}
    assert flat == set(), f"modules outside a layer's folder: {sorted(flat)}"


@pytest.mark.parametrize("layer", [*sorted(LAYERS), "_prefect"])
def test_each_layer_says_what_lives_there(layer: str) -> None:
    doc = ast.get_docstring(ast.parse((SENSORS / layer / "__init__.py").read_text()))
    assert doc and len(doc.split()) >= 20, f"sensors/{layer}/__init__.py needs a docstring"


def _named(name: str, text: str) -> bool:
    """Whether ``text`` names the layer or module ``name``: ``_config``, ``sensors._config`` or
    ``sensors._config.stage``; a public module (``blocks``) only with its package,
    ``sensors.blocks``, where the bare word is English."""
    prefix = r"(?:(?<=\bsensors\.)|(?<![\w.]))" if name.startswith("_") else r"(?<=\bsensors\.)"
    return re.search(prefix + re.escape(name) + r"(?!\w)", text) is not None


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_each_layer_says_what_it_may_import(layer: str) -> None:
    """A folder's ``__init__`` docstring says what it may import, as LAYERS and LAZY have it:
    every layer it may import is named, and no other layer of the core."""
    doc = ast.get_docstring(ast.parse((SENSORS / layer / "__init__.py").read_text())) or ""
    assert "May import" in doc, f"sensors/{layer}/__init__.py does not say what it may import"
    allowed = LAYERS[layer] | LAZY.get(layer, set())
    unnamed = sorted(name for name in allowed if not _named(name, doc))
    assert unnamed == [], f"sensors/{layer}/__init__.py may import {unnamed} and does not say so"
    wrong = sorted(other for other in set(LAYERS) - allowed - {layer} if _named(other, doc))
    assert wrong == [], f"sensors/{layer}/__init__.py names {wrong}, which it may not import"


@pytest.mark.parametrize("name", sorted(m for m in _modules() if _layer(m) in LAYERS))
def test_a_layer_imports_only_the_layers_below_it(name: str) -> None:
    layer = _layer(name)
    path = _modules()[name]
    top = {_layer(m) for m in _imports(path, top_level_only=True) if m.startswith("sensors.")} - {layer}
    everywhere = {_layer(m) for m in _imports(path) if m.startswith("sensors.")} - {layer}
    assert top <= LAYERS[layer], f"{name} imports {sorted(top - LAYERS[layer])} at the top"
    allowed = LAYERS[layer] | LAZY.get(layer, set())
    assert everywhere <= allowed, f"{name} imports {sorted(everywhere - allowed)}"


def test_importing_the_core_loads_neither_prefect_nor_paramiko_nor_flows() -> None:
    """Every core module imported in one fresh interpreter: no Prefect, no ``flows``, and no
    paramiko until the SSH modules themselves are imported."""
    plain = [m for m in _core() if m not in SSH_MODULES]
    code = f"""
import importlib, json, sys
def loaded():
    return sorted({{m.split(".")[0] for m in sys.modules}} & {{"prefect", "paramiko", "flows"}})
for name in {plain!r}:
    importlib.import_module(name)
before = loaded()
for name in {sorted(SSH_MODULES)!r}:
    importlib.import_module(name)
print(json.dumps({{"core": before, "with_ssh": loaded()}}))
"""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"core": [], "with_ssh": ["paramiko"]}


@pytest.mark.parametrize("name", sorted(_modules()))
def test_no_module_under_sensors_imports_flows(name: str) -> None:
    # sensors.flows is the library's own Prefect layer; the repository's flows/ package is not.
    assert "flows" not in _roots(_imports(_modules()[name]))


@pytest.mark.parametrize("name", _core())
def test_the_core_imports_prefect_only_lazily(name: str) -> None:
    # A lazy import inside a function (resolve_secret's Prefect Secret block) is allowed.
    assert "prefect" not in _roots(_imports(_modules()[name], top_level_only=True))


def test_only_the_ssh_modules_import_paramiko() -> None:
    importers = {name for name, path in _modules().items() if "paramiko" in _roots(_imports(path))}
    assert importers == SSH_MODULES


def test_module_names_in_strings_exist() -> None:
    """A module named in a string (``sys.modules["sensors._hosts.ssh"]``) survives a move."""
    modules = set(_modules())
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if text.startswith("sensors.") and text.replace(".", "").replace("_", "").isalnum():
                    assert text in modules, f"{name} names {text!r}, which is not a module"
