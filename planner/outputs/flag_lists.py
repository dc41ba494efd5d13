"""The engines' documented flag lists (``planner/outputs/engine_flags/<name>.txt``: one flag
per line, the engine version and the citation in the header comment), and the flags a
generated script passes. ``planner.outputs.launch`` re-exports these names.
"""

from __future__ import annotations

import shlex
from functools import cache
from pathlib import Path

FLAG_DIR = Path(__file__).resolve().parent / "engine_flags"


@cache
def flag_list(engine: str) -> frozenset[str]:
    """The documented flags of an engine (``engine_flags/<engine>.txt``)."""
    lines = (FLAG_DIR / f"{engine}.txt").read_text(encoding="utf-8").splitlines()
    return frozenset(s for s in (line.strip() for line in lines) if s.startswith("--"))


@cache
def flag_list_header(engine: str) -> tuple[str, ...]:
    """The header comment of an engine's flag list: version and citation lines."""
    lines = (FLAG_DIR / f"{engine}.txt").read_text(encoding="utf-8").splitlines()
    out = []
    for line in lines:
        if not line.startswith("#"):
            break
        out.append(line.lstrip("# ").rstrip())
    return tuple(out)


def engine_version(engine: str) -> str:
    """The ``Engine version:`` line of an engine's flag list."""
    for line in flag_list_header(engine):
        if line.startswith("Engine version:"):
            return line.removeprefix("Engine version:").strip()
    return "unknown"


def used_flags(script: str) -> list[str]:
    """Flags (``--name``) a generated script or command passes, comments excluded."""
    flags = []
    for line in script.splitlines():
        if line.lstrip().startswith("#"):
            continue
        tokens = shlex.split(line.rstrip().removesuffix("\\"), comments=True)
        flags += [t.split("=", 1)[0] for t in tokens if t.startswith("--")]
    return flags
