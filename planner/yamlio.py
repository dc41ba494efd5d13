"""Reading YAML input files safely, and turning pydantic errors into YAML-path lines."""

from __future__ import annotations

import functools
import math
import re
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from planner import limits
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


def _models_in(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, unions, tuples, dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) is dict:  # the value type only; keys are user data
        return _models_in(typing.get_args(annotation)[-1])
    out = []
    for arg in typing.get_args(annotation):
        out += [m for m in _models_in(arg) if m not in out]
    return out


def allowed_keys(model: type[BaseModel] | None, loc: tuple) -> list[str]:
    """The keys the model at ``loc`` (a pydantic error location) accepts; [] when unknown.

    Walks ``model``'s field annotations along ``loc``: a field name steps into the field's
    model(s), a model's class name (pydantic's union tag) picks that member, and a list
    index or dict key stays on the element type. So an unknown key anywhere in a problem
    file gets a "did you mean" from the keys allowed at its place.
    """
    models = [model] if model is not None else []
    for part in loc[:-1]:
        if not isinstance(part, str):
            continue
        named = [m for m in models if part in m.model_fields]
        if named:
            models = list(dict.fromkeys(x for m in named for x in _models_in(m.model_fields[part].annotation)))
        else:
            models = [m for m in models if m.__name__ == part] or models
    return sorted({k for m in models for k in m.model_fields})


def suggest(name: str, choices) -> str:
    """`` (did you mean 'h100-sxm'?)`` for a near miss, else an empty string."""
    import difflib  # only for a near miss to report (process start)

    close = difflib.get_close_matches(name.lower(), list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_key_message(key, choices) -> str:
    """``unknown key (did you mean 'quantization'?)`` for a near miss, else ``unknown key``."""
    return "unknown key" + (suggest(str(key), choices) if isinstance(key, str) else "")


def validation_problems(exc: ValidationError, root: str = "", model: type[BaseModel] | None = None) -> list[str]:
    """One line per pydantic error, each starting with the YAML path of the field.

    With ``model`` (the validated class), an unknown key gets a "did you mean" from the keys
    allowed at its place.
    """
    lines = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = unknown_key_message(loc[-1] if loc else "", allowed_keys(model, loc))
        elif err["type"] == "missing":
            msg = "required key is missing"
        msg = msg.removeprefix("Value error, ")
        lines.append(f"{yaml_path(loc, root)}: {msg}")
    return lines


def _reject_nan(node: Any, loc: tuple, problems: list[str]) -> None:
    """NaN, infinities and numbers beyond :data:`planner.limits.MAX_ABS_NUMBER`, by YAML path."""
    if isinstance(node, float) and (math.isnan(node) or math.isinf(node)):
        problems.append(f"{yaml_path(loc)}: must be a finite number, not {node}")
    elif isinstance(node, (int, float)) and not isinstance(node, bool) and abs(node) > limits.MAX_ABS_NUMBER:
        problems.append(f"{yaml_path(loc)}: {node:.3g} is beyond the planner's range "
                        f"(|x| <= {limits.MAX_ABS_NUMBER:.0e})")
    elif isinstance(node, dict):
        for key, value in node.items():
            _reject_nan(value, loc + (key,), problems)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _reject_nan(value, loc + (i,), problems)


_BOOL, _INT, _FLOAT = (f"tag:yaml.org,2002:{t}" for t in ("bool", "int", "float"))


@functools.cache
def _strict_loader():
    """The loader class of :func:`read_yaml`, built at the first parse, so that a run whose
    inputs all come from the parsed-input cache (:mod:`planner.catalog_cache`) never
    imports PyYAML (process start).

    A safe loader with YAML 1.2 core scalars: ``true``/``false`` only are booleans and
    integers are decimal, so ``yes``, ``on``, ``0x28``, ``010`` and ``1:20`` stay strings
    (and are rejected where a number is expected) instead of being coerced silently. It is
    libyaml's C parser when PyYAML was built with it (8x faster on the catalogs), else pure
    Python; both are "safe" loaders: plain data only, no arbitrary Python objects.
    """
    import yaml

    safe_loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class _StrictLoader(safe_loader):
        pass

    _StrictLoader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in (_BOOL, _INT, _FLOAT)]
        for first, resolvers in safe_loader.yaml_implicit_resolvers.items()}
    _StrictLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    _StrictLoader.add_implicit_resolver(_INT, re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
    _StrictLoader.add_implicit_resolver(_FLOAT, re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
        list("-+0123456789."))
    _StrictLoader.add_constructor(_INT, _construct_int)
    return _StrictLoader


def _construct_int(loader, node):
    import yaml

    text = loader.construct_scalar(node).replace("_", "")
    digits = len(text.lstrip("+-"))
    if digits > limits.MAX_INT_DIGITS:
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of {digits} digits (at most {limits.MAX_INT_DIGITS})", node.start_mark)
    try:
        return int(text, 10)
    except ValueError:
        raise yaml.constructor.ConstructorError(None, None, f"not a decimal integer: {text!r}",
                                                node.start_mark) from None


def _shape_problem(data: Any) -> str | None:
    """Why a parsed document is too big or too deep (aliases counted expanded), or None.

    Walks each distinct list/mapping once (aliases share objects), without recursion, so a
    "billion laughs" file or 10,000 nested lists are rejected in linear time.
    """
    done: dict[int, tuple[int, int]] = {}     # id -> (expanded nodes, depth)
    open_ids: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, finished = stack.pop()
        if not isinstance(node, (dict, list)) or (not finished and id(node) in done):
            continue
        children = list(node.values()) if isinstance(node, dict) else node
        if finished:
            size, depth = 1 + len(node) if isinstance(node, dict) else 1, 0
            for child in children:
                sub = done.get(id(child), (1, 0)) if isinstance(child, (dict, list)) else (1, 0)
                size, depth = size + sub[0], max(depth, sub[1])
            done[id(node)] = (size, depth + 1)
            open_ids.discard(id(node))
            if size > limits.MAX_YAML_NODES:
                return (f"expands to more than {limits.MAX_YAML_NODES:,} values "
                        "(a YAML alias bomb, or far more data than a problem file holds)")
            if depth + 1 > limits.MAX_YAML_DEPTH:
                return f"nests lists/mappings deeper than {limits.MAX_YAML_DEPTH} levels"
            continue
        if id(node) in open_ids:
            return "contains a recursive YAML alias (a list or mapping inside itself)"
        open_ids.add(id(node))
        stack.append((node, True))
        for child in children:
            if isinstance(child, (dict, list)):
                if id(child) in open_ids:
                    return "contains a recursive YAML alias (a list or mapping inside itself)"
                stack.append((child, False))
    return None


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file with a safe, strict loader; errors name the file and line.

    Raises
    ------
    PlanningInputError
        Missing, unreadable or over-large file, a syntax error, a document that expands
        beyond :data:`planner.limits.MAX_YAML_NODES` values or nests deeper than
        :data:`planner.limits.MAX_YAML_DEPTH`, a NaN/inf, or a number beyond
        :data:`planner.limits.MAX_ABS_NUMBER`.
    """
    import yaml

    path = Path(path)
    try:
        text = limits.read_text_bounded(path)
    except FileNotFoundError:
        raise PlanningInputError(f"{path}: file not found") from None
    except (OSError, ValueError) as exc:
        raise PlanningInputError(f"{path}: cannot read: {exc}") from None
    try:
        data = yaml.load(text, Loader=_strict_loader())  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlanningInputError(f"{path}:{where}: YAML syntax error: {problem}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # e.g. a timestamp out of range
        raise PlanningInputError(f"{path}: cannot parse: {type(exc).__name__}: {exc}"[:300]) from None
    if data is None:
        raise PlanningInputError(f"{path}: file is empty")
    shape = _shape_problem(data)
    if shape:
        raise PlanningInputError(f"{path}: {shape}")
    problems: list[str] = []
    _reject_nan(data, (), problems)
    if problems:
        raise PlanningInputError([f"{path}: {p}" for p in problems])
    return data


def parse_file_cached(cls: type[BaseModel], path: str | Path, name: str, source: str | None = None):
    """``parse_model(cls, read_yaml(path), source)`` (``source`` defaults to ``path``), kept in
    the parsed-input cache (:mod:`planner.catalog_cache`, as ``name``) keyed by the file's
    bytes: a repeated run with the file unchanged loads the validated model instead of
    parsing and validating it again, and with every input cached a run imports no PyYAML
    and builds no validator (process start). A path that is not a regular file of at most
    :data:`planner.limits.MAX_INPUT_FILE_BYTES` is parsed directly (:func:`read_yaml`
    reports it); a file with an error is never cached (its errors come on every run)."""
    from planner.catalog_cache import cached

    path = Path(path)
    source = str(path) if source is None else source
    try:
        regular = path.is_file() and path.stat().st_size <= limits.MAX_INPUT_FILE_BYTES
    except OSError:
        regular = False
    if not regular:
        return parse_model(cls, read_yaml(path), source)
    return cached(name, path.resolve(), [path], lambda: parse_model(cls, read_yaml(path), source))


def parse_model(cls: type[BaseModel], data: Any, source: str, root: str = ""):
    """Validate ``data`` into ``cls``; errors become ``source: yaml.path: message`` lines."""
    if not isinstance(data, dict):
        raise PlanningInputError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise PlanningInputError([f"{source}: {p}" for p in validation_problems(exc, root, cls)]) from None
