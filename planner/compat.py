"""Engine x GPU architecture x weight/KV format compatibility (``catalogs/engines.yaml``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field

from planner.catalog import DEFAULT_CATALOG_DIR, load_catalog
from planner.schema import PlanningInputError, Strict
from planner.yamlio import parse_file_cached

ENGINES_FILE = "engines.yaml"
#: Rejection reasons of this table (planner/search.py REASONS), in check order.
NO_ARCHITECTURE = "engine_unsupported_on_gpu"
NO_FORMAT = "engine_unsupported_format"


class EngineSupport(Strict):
    """The formats one engine documents for one GPU architecture."""

    engine: str
    architecture: str
    weight_formats: tuple[str, ...] = Field(min_length=1)
    kv_cache_dtypes: tuple[str, ...] = Field(min_length=1)
    source: str = Field(min_length=1)


class EngineTable(Strict):
    catalog_version: str
    architectures: dict[str, tuple[str, ...]]
    support: tuple[EngineSupport, ...]

    def architecture(self, gpu_id: str) -> str | None:
        for arch, gpus in self.architectures.items():
            if gpu_id in gpus:
                return arch
        return None

    def row(self, engine: str, gpu_id: str) -> EngineSupport | None:
        arch = self.architecture(gpu_id)
        return next((r for r in self.support if r.engine == engine and r.architecture == arch), None)

    def reason(self, engine: str, gpu_id: str, weight_format: str, kv_cache_dtype: str) -> str | None:
        """``None`` when the engine documents the combination, else the rejection reason."""
        row = self.row(engine, gpu_id)
        if row is None:
            return NO_ARCHITECTURE
        if weight_format not in row.weight_formats or kv_cache_dtype not in row.kv_cache_dtypes:
            return NO_FORMAT
        return None

    def explain(self, engine: str, gpu_id: str, weight_format: str, kv_cache_dtype: str) -> str | None:
        """A sentence for a launch README, or None when supported."""
        why = self.reason(engine, gpu_id, weight_format, kv_cache_dtype)
        if why == NO_ARCHITECTURE:
            return (f"catalogs/engines.yaml lists no {engine} support for {gpu_id} "
                    f"({self.architecture(gpu_id) or 'unknown architecture'})")
        if why == NO_FORMAT:
            return (f"{engine} documents no {weight_format} weights with a {kv_cache_dtype} KV cache on "
                    f"{self.architecture(gpu_id)} ({gpu_id}); see catalogs/engines.yaml")
        return None


def _check(table: EngineTable, catalog, source: str) -> None:
    problems = []
    listed = [g for gpus in table.architectures.values() for g in gpus]
    for gpu in sorted(set(catalog.gpus.entries) - set(listed)):
        problems.append(f"{source}: architectures: GPU '{gpu}' is in no architecture")
    for gpu in sorted({g for g in listed if listed.count(g) > 1}):
        problems.append(f"{source}: architectures: GPU '{gpu}' is listed more than once")
    for i, row in enumerate(table.support):
        if row.architecture not in table.architectures:
            problems.append(f"{source}: support[{i}].architecture: unknown architecture '{row.architecture}'")
        for f in row.weight_formats:
            if f not in catalog.weight_formats.entries:
                problems.append(f"{source}: support[{i}].weight_formats: unknown format '{f}'")
        for k in row.kv_cache_dtypes:
            if k not in catalog.kv_dtypes.entries:
                problems.append(f"{source}: support[{i}].kv_cache_dtypes: unknown KV cache dtype '{k}'")
    keys = [(r.engine, r.architecture) for r in table.support]
    for key in sorted({k for k in keys if keys.count(k) > 1}):
        problems.append(f"{source}: support: duplicate row for engine {key[0]} on {key[1]}")
    if problems:
        raise PlanningInputError(problems)


def catalog_file(catalog, filename: str) -> Path:
    """``filename`` of the catalog's directory, else the shipped one (a custom ``--catalog-dir``
    need not copy every table)."""
    path = Path(catalog.directory) / filename
    return path if path.exists() else DEFAULT_CATALOG_DIR / filename


def engine_table(catalog) -> EngineTable:
    """The validated engine compatibility table of a catalog."""
    return _load(str(catalog_file(catalog, ENGINES_FILE)), str(catalog.directory))


def load_table(path: str, catalog_dir: str, cls, check):
    """Parse the table file ``path`` into ``cls`` and ``check(doc, catalog, path)`` its ids
    against the catalog of ``catalog_dir`` (shared by engines.yaml and quality.yaml)."""
    doc = parse_file_cached(cls, path, f"table-{cls.__name__}", path)
    check(doc, load_catalog(catalog_dir), path)
    return doc


@lru_cache(maxsize=4)
def _load(path: str, catalog_dir: str) -> EngineTable:
    return load_table(path, catalog_dir, EngineTable, _check)
