"""Packaging (issue 16 item 1): every third-party module the package imports is a regular
dependency, so ``pip install -e .`` (README quick start) is enough for ``planner solve --out``."""

import ast
import sys

import pytest

from conftest import ROOT

tomllib = pytest.importorskip("tomllib")   # Python >= 3.11

# import name -> distribution name, where they differ
DISTRIBUTION = {"yaml": "pyyaml"}


def _third_party_imports(top_level_only: bool = False) -> set[str]:
    names = set()
    for path in (ROOT / "planner").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in (tree.body if top_level_only else ast.walk(tree)):
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
    """Every import is a regular dependency, except the optional extras' (Ray: ``[distributed]``),
    which are imported lazily, inside the function that needs them, never at module level."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = {_requirement_name(r) for r in project["dependencies"]}
    optional = {_requirement_name(r) for name, reqs in project["optional-dependencies"].items()
                if name != "dev" for r in reqs}
    imported = {DISTRIBUTION.get(n, n).lower() for n in _third_party_imports()}
    assert {"matplotlib", "openpyxl", "ortools", "numpy", "pandas", "pydantic", "pyyaml"} <= imported
    assert imported <= required | optional, sorted(imported - required - optional)
    top_level = {DISTRIBUTION.get(n, n).lower() for n in _third_party_imports(top_level_only=True)}
    assert not top_level & (optional - required), sorted(top_level & (optional - required))


def test_quick_start_installs_the_package_without_extras():
    readme = (ROOT / "README.md").read_text()
    assert "python -m pip install -e . && planner solve problems/chat-70b.yaml" in readme
