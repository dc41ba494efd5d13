"""Reading YAML input files safely, and turning pydantic errors into YAML-path lines."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from planner.schema import PlanningInputError


def yaml_path(loc: tuple, root: str = "") -> str:
    """``('workloads', 1, 'slo', 'tpot_p95_s')`` -> ``workloads[1].slo.tpot_p95_s``."""
    out = root
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def validation_problems(exc: ValidationError, root: str = "") -> list[str]:
    """One line per pydantic error, each starting with the YAML path of the field."""
    lines = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "missing":
            msg = "required key is missing"
        msg = msg.removeprefix("Value error, ")
        lines.append(f"{yaml_path(loc, root)}: {msg}")
    return lines


def _reject_nan(node: Any, loc: tuple, problems: list[str]) -> None:
    if isinstance(node, float) and (math.isnan(node) or math.isinf(node)):
        problems.append(f"{yaml_path(loc)}: must be a finite number, not {node}")
    elif isinstance(node, dict):
        for key, value in node.items():
            _reject_nan(value, loc + (key,), problems)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _reject_nan(value, loc + (i,), problems)


#: libyaml's C parser when PyYAML was built with it (8x faster on the catalogs), else pure Python.
#: Both are "safe" loaders: plain data only, no arbitrary Python objects.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file with a safe loader; errors name the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanningInputError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanningInputError(f"{path}: cannot read: {exc}") from None
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlanningInputError(f"{path}:{where}: YAML syntax error: {problem}") from None
    if data is None:
        raise PlanningInputError(f"{path}: file is empty")
    problems: list[str] = []
    _reject_nan(data, (), problems)
    if problems:
        raise PlanningInputError([f"{path}: {p}" for p in problems])
    return data


def parse_model(cls: type[BaseModel], data: Any, source: str, root: str = ""):
    """Validate ``data`` into ``cls``; errors become ``source: yaml.path: message`` lines."""
    if not isinstance(data, dict):
        raise PlanningInputError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise PlanningInputError([f"{source}: {p}" for p in validation_problems(exc, root)]) from None
