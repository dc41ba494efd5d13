"""The parsed-catalog cache: validated catalogs kept on disk, so that a repeated run skips the
YAML parsing and the validation of files that have not changed.

Where: ``$PLANNER_CACHE_DIR``, else ``$XDG_CACHE_HOME/llm-planner``, else
``~/.cache/llm-planner``; ``PLANNER_CACHE_DIR=off`` (or an empty value) turns the cache off.
One file per cached thing and source (a catalog directory, a calibration file, the validated
model of a problem file or a catalog table: :func:`planner.yamlio.parse_file_cached`),
``<name>-<digest of the source path>.pickle``,
holds a key (a line of hex digits) and the pickled object. The key is a SHA-256 of
:data:`CACHE_FORMAT`, the Python and pydantic versions, the size and modification time of
every source file of the ``planner`` package, read once per process (as Python's own bytecode
cache checks its sources: any edit, upgrade or reinstall of the planner rebuilds) and the names and bytes of
the catalog files; a file whose key differs is rebuilt and replaced, so an edited catalog or
planner never gets a stale catalog, and the cache never changes a result.

A cache file that is missing, unreadable, corrupt or of another key is ignored silently and
rebuilt; a directory that cannot be written is skipped silently (the command runs as without
the cache). Files are written atomically (:mod:`planner.atomic`). Loading unpickles, which
can run code: the directory must be the user's own (the default is), never one that others
can write.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

#: Bumped when the layout of a cache file changes.
CACHE_FORMAT = 1
#: The environment variable naming the cache directory; :data:`DISABLED` values turn it off.
CACHE_DIR_ENV = "PLANNER_CACHE_DIR"
DISABLED = ("", "off", "none", "0", "false", "no")
#: The cache's subdirectory of ``$XDG_CACHE_HOME`` (default ``~/.cache``).
CACHE_SUBDIR = "llm-planner"

#: The root of the ``planner`` package, whose source files are part of every key.
_PACKAGE_DIR = Path(__file__).resolve().parent

T = TypeVar("T")
_MISS = object()           # "no usable cache file" (a cached object may be anything)


def cache_dir() -> Path | None:
    """The cache directory, or None when the cache is off (``PLANNER_CACHE_DIR=off``)."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured is not None:
        return None if configured.strip().lower() in DISABLED else Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base) / CACHE_SUBDIR


def cached(name: str, source: Path, files: Sequence[Path], build: Callable[[], T]) -> T:
    """``build()``, or the object an earlier ``build()`` from the same ``files`` (same bytes,
    same planner code) stored under ``name`` for ``source`` (the directory or file the object
    stands for). Errors of ``build`` propagate and nothing is stored then."""
    root = cache_dir()
    if root is None:
        return build()
    try:
        key = _key(name, source, files)
    except OSError:                       # a file is missing: build() says so properly
        return build()
    path = root / f"{name}-{hashlib.sha256(str(source).encode()).hexdigest()[:16]}.pickle"
    hit = _read(path, key)
    if hit is not _MISS:
        return hit
    value = build()
    _write(path, key, value)
    return value


def _key(name: str, source: Path, files: Sequence[Path]) -> str:
    digest = hashlib.sha256()
    for part in (CACHE_FORMAT, name, str(source), sys.implementation.name, sys.version,
                 _pydantic_version(), *_code_signature()):
        digest.update(f"{part}\0".encode())
    for path in files:
        data = Path(path).read_bytes()
        digest.update(f"{Path(path).name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _pydantic_version() -> str:
    from pydantic import VERSION  # the pickled models' library

    return VERSION


@lru_cache(maxsize=1)
def _code_signature() -> tuple[str, ...]:
    """``path size mtime_ns`` of every ``.py`` file of the package, sorted (a stat each).

    Taken once per process (speed: a run keys its catalog, calibration and problem file),
    so it describes the code the process imported; an edit while it runs counts from the
    next process on, as for Python's own bytecode cache."""
    rows, pending = [], [_PACKAGE_DIR]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
                    pending.append(Path(entry.path))
                elif entry.name.endswith(".py"):
                    stat = entry.stat()
                    rows.append(f"{entry.path} {stat.st_size} {stat.st_mtime_ns}")
    return tuple(sorted(rows))


def _read(path: Path, key: str):
    """The cached object of ``path`` if its key line is ``key``, else :data:`_MISS` (never raises)."""
    try:
        with open(path, "rb") as fh:
            if fh.readline() != f"{key}\n".encode():
                return _MISS              # another catalog or planner version: not even unpickled
            return pickle.load(fh)
    except Exception:  # noqa: BLE001 - missing, unreadable, truncated, corrupt: rebuild
        return _MISS


def _write(path: Path, key: str, value) -> None:
    """Store ``(key, value)`` atomically; a failure (read-only or full disk) is ignored."""
    from planner.atomic import atomic_write_bytes

    try:
        atomic_write_bytes(path, f"{key}\n".encode() + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass
