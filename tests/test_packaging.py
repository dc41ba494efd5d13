"""Packaging (issue 16 item 1): every third-party module the package imports is a regular
dependency, so ``pip install -e .`` (README quick start) is enough for ``planner solve --out``."""

import ast
import sys

import pytest

from conftest import ROOT

tomllib = pytest.importorskip("tomllib")   # Python >= 3.11

# import name -> distribution name, where they differ
DISTRIBUTION = {"yaml": "pyyaml"}


def _third_party_imports() -> set[str]:
    names = set()
    for path in (ROOT / "planner").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "planner"}


def _requirement_name(req: str) -> str:
    for sep in "<>=!~[; ":
        req = req.split(sep)[0]
    return req.strip().lower()


def test_every_imported_package_is_a_regular_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = {_requirement_name(r) for r in project["dependencies"]}
    imported = {DISTRIBUTION.get(n, n).lower() for n in _third_party_imports()}
    assert {"matplotlib", "openpyxl", "ortools", "numpy", "pandas", "pydantic", "pyyaml"} <= imported
    assert imported <= required, sorted(imported - required)


def test_quick_start_installs_the_package_without_extras():
    readme = (ROOT / "README.md").read_text()
    assert "python -m pip install -e . && planner solve problems/chat-70b.yaml" in readme
