"""Published accuracy recovery of quantized formats (``catalogs/quality.yaml``).

``recovery(model, weight_format, kv_cache_dtype)`` returns the published recovery and its
source, 1.0 for the reference precision, or ``None`` when no figure is published
("unverified"). The search rejects formats below the problem's ``quality.min_recovery``
and unverified ones unless ``quality.allow_unverified_formats`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from pydantic import Field, model_validator

from planner.compat import catalog_file, load_table
from planner.schema import PlanningInputError, Strict

QUALITY_FILE = "quality.yaml"
#: Rejection reasons (planner/search.py REASONS), in check order.
UNVERIFIED = "quality_unverified"
BELOW_MINIMUM = "quality_below_min_recovery"
#: What ``quality.source`` says for the reference precision and for a format without a figure.
LOSSLESS_SOURCE = "reference precision (recovery 1.0 by definition)"
UNVERIFIED_SOURCE = "unverified: no published accuracy figure in catalogs/quality.yaml"


class NativeFormat(Strict):
    model: str
    weight_format: str
    source: str = Field(min_length=1)


class RecoveryEntry(Strict):
    """One published evaluation of a quantized checkpoint against its unquantized reference."""

    model: str
    weight_format: str
    kv_cache_dtype: str | None = None
    recovery: float | None = Field(default=None, gt=0, le=1.5)
    score: float | None = Field(default=None, gt=0)
    reference_score: float | None = Field(default=None, gt=0)
    benchmark: str = Field(min_length=1)
    checkpoint: str = Field(min_length=1)
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _one_figure(self):
        scores = self.score is not None and self.reference_score is not None
        if (self.recovery is None) == (not scores):
            raise ValueError("give either recovery or both score and reference_score")
        return self

    @property
    def recovery_fraction(self) -> float:
        return self.recovery if self.recovery is not None else self.score / self.reference_score


class QualityCatalog(Strict):
    catalog_version: str
    lossless_formats: tuple[str, ...]
    lossless_kv_cache_dtypes: tuple[str, ...]
    native: tuple[NativeFormat, ...] = ()
    entries: tuple[RecoveryEntry, ...] = ()


@dataclass(frozen=True)
class Recovery:
    """The quality of one (model, weight format, KV dtype): ``recovery`` None = unverified."""

    recovery: float | None
    source: str

    def as_dict(self) -> dict:
        return {"recovery": self.recovery, "source": self.source}


class QualityTable:
    """Lookups over a validated :class:`QualityCatalog`."""

    def __init__(self, doc: QualityCatalog):
        self.doc = doc
        self._native = {(n.model, n.weight_format): n.source for n in doc.native}
        self._entries = {(e.model, e.weight_format, e.kv_cache_dtype): e for e in doc.entries}

    def recovery(self, model: str, weight_format: str, kv_cache_dtype: str) -> Recovery:
        """Published recovery of a model served with a weight format and KV dtype.

        Notes
        -----
        A row naming the KV dtype wins. Otherwise the weight format's figure applies (16-bit
        weights and the model's native format are the reference, 1.0; a row without a KV dtype
        was evaluated with a 16-bit KV cache); with a quantized KV cache and no row for it, the
        source says that the KV cache's effect is not included. A weight format without a
        figure is unverified (``recovery`` None).
        """
        exact = self._entries.get((model, weight_format, kv_cache_dtype))
        if exact is not None:
            return Recovery(exact.recovery_fraction, f"{exact.benchmark}, {exact.checkpoint}: {exact.source}")
        weights = self._weights(model, weight_format)
        if weights.recovery is not None and kv_cache_dtype not in self.doc.lossless_kv_cache_dtypes:
            return Recovery(weights.recovery, f"{weights.source} [weights only: no published figure for a "
                                              f"{kv_cache_dtype} KV cache; its effect is not included]")
        return weights

    def _weights(self, model: str, weight_format: str) -> Recovery:
        """The figure of the weight format with a 16-bit KV cache."""
        if weight_format in self.doc.lossless_formats:
            native = next((s for (m, _), s in self._native.items() if m == model), None)
            return Recovery(1.0, LOSSLESS_SOURCE + (f"; upcast of the native format: {native}" if native else ""))
        if (model, weight_format) in self._native:
            return Recovery(1.0, f"native format of the model (recovery 1.0 by definition): "
                                 f"{self._native[(model, weight_format)]}")
        row = self._entries.get((model, weight_format, None))
        if row is not None:
            return Recovery(row.recovery_fraction, f"{row.benchmark}, {row.checkpoint}: {row.source}")
        return Recovery(None, UNVERIFIED_SOURCE)

    def reason(self, model: str, weight_format: str, kv_cache_dtype: str, min_recovery: float,
               allow_unverified: bool) -> str | None:
        """The rejection reason of a combination under a problem's quality options, or None."""
        r = self.recovery(model, weight_format, kv_cache_dtype)
        if r.recovery is None:
            return None if allow_unverified else UNVERIFIED
        return BELOW_MINIMUM if r.recovery < min_recovery else None


def _check(doc: QualityCatalog, catalog, source: str) -> None:
    problems = []
    formats, kvs, models = catalog.weight_formats.entries, catalog.kv_dtypes.entries, catalog.models.entries
    rows = [("native", i, n.model, n.weight_format, None) for i, n in enumerate(doc.native)]
    rows += [("entries", i, e.model, e.weight_format, e.kv_cache_dtype) for i, e in enumerate(doc.entries)]
    for key, i, model, fmt, kv in rows:
        if model not in models:
            problems.append(f"{source}: {key}[{i}].model: unknown model '{model}'")
        if fmt not in formats:
            problems.append(f"{source}: {key}[{i}].weight_format: unknown format '{fmt}'")
        if kv is not None and kv not in kvs:
            problems.append(f"{source}: {key}[{i}].kv_cache_dtype: unknown KV cache dtype '{kv}'")
    for f in doc.lossless_formats:
        if f not in formats:
            problems.append(f"{source}: lossless_formats: unknown format '{f}'")
    keys = [(e.model, e.weight_format, e.kv_cache_dtype) for e in doc.entries]
    for k in sorted({k for k in keys if keys.count(k) > 1}, key=str):
        problems.append(f"{source}: entries: duplicate row for {k}")
    if problems:
        raise PlanningInputError(problems)


def quality_table(catalog) -> QualityTable:
    """The validated quality table of a catalog (the shipped one when its directory has none)."""
    return _load(str(catalog_file(catalog, QUALITY_FILE)), str(catalog.directory))


@lru_cache(maxsize=4)
def _load(path: str, catalog_dir: str) -> QualityTable:
    return QualityTable(load_table(path, catalog_dir, QualityCatalog, _check))
