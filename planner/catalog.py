"""Load and validate the catalogs, and resolve ids (with aliases and "did you mean")."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from planner.catalog_cache import cached
from planner.schema import (
    GpuCatalog,
    GpuSpec,
    KvCacheDtype,
    ModelCatalog,
    ModelSpec,
    PlanningInputError,
    PriceCatalog,
    PurchasePrice,
    QuantizationCatalog,
    RentalPrice,
    WeightFormat,
)
from planner.yamlio import parse_model, read_yaml, suggest  # noqa: F401 (suggest: re-exported)

#: The catalogs shipped with the package (``catalogs/`` at the repository root).
DEFAULT_CATALOG_DIR = Path(__file__).resolve().parent.parent / "catalogs"

CATALOG_FILES = {
    "gpus": ("gpus.yaml", GpuCatalog),
    "models": ("models.yaml", ModelCatalog),
    "quantization": ("quantization.yaml", QuantizationCatalog),
    "prices": ("prices.yaml", PriceCatalog),
}


@dataclass(frozen=True)
class _Table:
    """Entries by id, plus an alias map onto ids."""

    kind: str
    entries: dict
    aliases: dict = field(default_factory=dict)

    @classmethod
    def build(cls, kind: str, items, source: str) -> "_Table":
        entries, aliases, problems = {}, {}, []
        for item in items:
            if item.id in entries:
                problems.append(f"{source}: duplicate {kind} id '{item.id}'")
            entries[item.id] = item
        for item in items:
            for alias in getattr(item, "aliases", ()):
                if alias in entries or alias in aliases:
                    problems.append(f"{source}: alias '{alias}' of '{item.id}' is already used")
                aliases[alias] = item.id
        if problems:
            raise PlanningInputError(problems)
        return cls(kind, entries, aliases)

    def resolve(self, name: str, where: str = ""):
        key = str(name).strip().lower()
        key = self.aliases.get(key, key)
        if key in self.entries:
            return self.entries[key]
        prefix = f"{where}: " if where else ""
        raise PlanningInputError(
            f"{prefix}unknown {self.kind} '{name}'{suggest(key, [*self.entries, *self.aliases])}"
        )


@dataclass(frozen=True)
class Catalog:
    """Every catalog, validated, with id resolution. Build with :func:`load_catalog`."""

    gpus: _Table
    models: _Table
    weight_formats: _Table
    kv_dtypes: _Table
    prices: PriceCatalog
    versions: dict
    directory: Path

    def gpu(self, name: str, where: str = "") -> GpuSpec:
        return self.gpus.resolve(name, where)

    def model(self, name: str, where: str = "") -> ModelSpec:
        """A catalog model id or alias, or a path to a HuggingFace ``config.json``."""
        if str(name).endswith(".json"):
            from planner.hf_import import model_from_hf_config

            try:
                return model_from_hf_config(name)
            except PlanningInputError as exc:
                if not where:
                    raise
                raise PlanningInputError([f"{where}: {p}" for p in exc.problems]) from None
        return self.models.resolve(name, where)

    def weight_format(self, name: str, where: str = "") -> WeightFormat:
        return self.weight_formats.resolve(name, where)

    def kv_dtype(self, name: str, where: str = "") -> KvCacheDtype:
        return self.kv_dtypes.resolve(name, where)

    def math_mode(self, gpu: str, weight_format: str) -> str:
        """The tensor-core math a GPU runs for a weight format: the format's ``math`` (bf16,
        fp8, int8, fp4) where the GPU has it natively, else ``weight-only`` (dequantized to
        BF16). Selects the calibration's per-math compute factor."""
        math = self.weight_format(weight_format).math
        return math if self.gpu(gpu).peak_flops_per_s(math) is not None else "weight-only"

    def math_modes(self, gpu_ids, formats) -> np.ndarray:
        """:meth:`math_mode` per (GPU, weight format) row."""
        import pandas as pd

        g_codes, gpus = pd.factorize(np.asarray(gpu_ids, dtype=object).reshape(-1))
        q_codes, fmts = pd.factorize(np.asarray(formats, dtype=object).reshape(-1))
        pair, codes = np.unique(g_codes * len(fmts) + q_codes, return_inverse=True)
        modes = np.array([self.math_mode(gpus[k // len(fmts)], fmts[k % len(fmts)]) for k in pair], dtype=object)
        return modes[codes.reshape(-1)]

    def rental_prices(self, gpu_id: str) -> list[RentalPrice]:
        return sorted((p for p in self.prices.rental if p.gpu == gpu_id),
                      key=lambda p: (p.offering, p.usd_per_gpu_hour, p.provider))

    def default_price_usd_per_gpu_hour(self, gpu_id: str) -> float | None:
        """The catalog's default on-demand price of a GPU, or None when it has none."""
        for row in self.prices.rental:
            if row.gpu == gpu_id and row.default:
                return row.usd_per_gpu_hour
        return None

    def purchase_price(self, gpu_id: str) -> PurchasePrice | None:
        rows = [p for p in self.prices.purchase if p.gpu == gpu_id]
        return rows[0] if rows else None


def load_catalog(directory: str | Path | None = None) -> Catalog:
    """Read and validate every catalog file of ``directory`` (default: the shipped one)."""
    directory = Path(directory) if directory else DEFAULT_CATALOG_DIR
    return _load_cached(directory.resolve())


@lru_cache(maxsize=4)
def _load_cached(directory: Path) -> Catalog:
    """The catalog of ``directory``, from the parsed-catalog cache when its files are unchanged."""
    files = [directory / filename for filename, _ in CATALOG_FILES.values()]
    return cached("catalog", directory, files, lambda: _parse(directory))


def _parse(directory: Path) -> Catalog:
    parsed, versions = {}, {}
    for key, (filename, cls) in CATALOG_FILES.items():
        path = directory / filename
        parsed[key] = parse_model(cls, read_yaml(path), str(path))
        versions[filename] = parsed[key].catalog_version
    quant = parsed["quantization"]
    catalog = Catalog(
        gpus=_Table.build("GPU", parsed["gpus"].gpus, "gpus.yaml"),
        models=_Table.build("model", parsed["models"].models, "models.yaml"),
        weight_formats=_Table.build("quantization", quant.weight_formats, "quantization.yaml"),
        kv_dtypes=_Table.build("KV cache dtype", quant.kv_cache_dtypes, "quantization.yaml"),
        prices=parsed["prices"],
        versions=versions,
        directory=directory,
    )
    _check_references(catalog)
    return catalog


def _check_references(catalog: Catalog) -> None:
    problems = []
    for i, row in enumerate(catalog.prices.rental):
        if row.gpu not in catalog.gpus.entries:
            problems.append(f"prices.yaml: rental[{i}].gpu: unknown GPU '{row.gpu}'"
                            f"{suggest(row.gpu, catalog.gpus.entries)}")
    for i, row in enumerate(catalog.prices.purchase):
        if row.gpu not in catalog.gpus.entries:
            problems.append(f"prices.yaml: purchase[{i}].gpu: unknown GPU '{row.gpu}'"
                            f"{suggest(row.gpu, catalog.gpus.entries)}")
    for fmt in catalog.weight_formats.entries.values():
        for gpu in fmt.unsupported_gpus:
            if gpu not in catalog.gpus.entries:
                problems.append(f"quantization.yaml: {fmt.id}.unsupported_gpus: unknown GPU '{gpu}'")
    if problems:
        raise PlanningInputError(problems)
