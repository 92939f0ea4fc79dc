"""The package's import structure: every module imports on its own (no import circles), and no module
reaches into another xray_tb (or tb_plugin) module's private names."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import xray_tb

ROOT = Path(xray_tb.__file__).parent
OURS = ("xray_tb", "tb_plugin")


def module_names() -> list[str]:
    names = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


# One fresh interpreter imports each module first, alone: a circle shows as an ImportError for the
# partly initialised module. Our modules are forgotten between imports (torch and the rest stay loaded).
ISOLATED_IMPORTS = """
import importlib, json, sys, traceback
failures = {}
for name in json.loads(sys.argv[1]):
    for loaded in [m for m in sys.modules if m.split(".")[0] in ("xray_tb", "tb_plugin")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception:
        failures[name] = traceback.format_exc(limit=-3)
print(json.dumps(failures))
"""


def test_every_module_imports_alone():
    names = module_names()
    assert "xray_tb.xray" in names and "xray_tb.capture.capture" in names
    # two interpreters, each importing every other module: half the wall time on two cores
    interpreters = [subprocess.Popen([sys.executable, "-c", ISOLATED_IMPORTS, json.dumps(names[start::2])], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=ROOT.parent) for start in (0, 1)]
    failures = {}
    for interpreter in interpreters:
        out, err = interpreter.communicate(timeout=300)
        assert interpreter.returncode == 0, err
        failures.update(json.loads(out.strip().splitlines()[-1]))
    assert failures == {}, "\n".join(f"{name}:\n{trace}" for name, trace in failures.items())


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_reaches(path: Path, module: str) -> list[str]:
    """``from <ours> import _name`` and ``<our module>._name`` in one file (its own names excepted)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:  # relative: resolve against this package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([source] if source else []))
            if source.split(".")[0] not in OURS or source == module:
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{path}:{node.lineno}: from {source} import {alias.name}")
                else:
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in OURS:
                    modules.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name) and node.value.id in modules:
            found.append(f"{path}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_imports_another_modules_private_names():
    found = []
    for name in module_names():
        relative = Path(*name.split("."))
        path = ROOT.parent / (relative / "__init__.py" if (ROOT.parent / relative).is_dir() else relative.with_suffix(".py"))
        found += private_reaches(path, name)
    assert found == []


def test_the_check_sees_a_private_import(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from xray_tb.capture.hooks import _InertHook\nfrom xray_tb.io import storage\nstorage._x\n")
    assert len(private_reaches(sample, "xray_tb.sample")) == 2
