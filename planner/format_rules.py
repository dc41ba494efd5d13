"""Which (GPU, weight format, KV dtype) rows the search rejects for engine support or quality.

Two tables decide, both catalogs with sources: ``catalogs/engines.yaml`` (only when the
problem sets ``serving.engine``) and ``catalogs/quality.yaml`` (the problem's ``quality``
options). Evaluated once per distinct combination, then mapped onto the candidate rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner import compat, quality
from planner.dimensions import CandidateTable

#: The dimensions engine support and published quality depend on.
FORMAT_KEY = ("model", "gpu", "quantization", "kv_cache_dtype")
#: The reasons this module adds to planner/search.py REASONS, in check order.
REASONS = (compat.NO_ARCHITECTURE, compat.NO_FORMAT, quality.UNVERIFIED, quality.BELOW_MINIMUM)


def format_rejections(problem, frame: pd.DataFrame, coded: dict | None = None) -> dict[str, np.ndarray]:
    """One boolean mask per reason of :data:`REASONS` over the rows of ``frame``.

    ``frame`` has the columns model, gpu, quantization, kv_cache_dtype (the search grid);
    ``coded``: their :class:`planner.dimensions.Coded` forms (the grid's), used instead of
    factorizing the columns (the same masks).
    """
    if coded is not None and all(k in coded for k in FORMAT_KEY):
        codes, combinations = _combinations([coded[k].factorize() for k in FORMAT_KEY])
    else:
        codes, uniques = CandidateTable(frame).factorize(FORMAT_KEY)
        combinations = uniques.itertuples(index=False)
    engine = problem.spec.serving.engine
    engines = compat.engine_table(problem.catalog) if engine else None
    table = quality.quality_table(problem.catalog)
    opts = problem.spec.quality
    per_key = []
    for model, gpu, fmt, kv in combinations:
        why = engines.reason(engine, gpu, fmt, kv) if engines is not None else None
        per_key.append(why or table.reason(model, fmt, kv, opts.min_recovery, opts.allow_unverified_formats))
    per_key = np.array(per_key + [None], dtype=object)[codes]
    return {reason: per_key == reason for reason in REASONS}


def _combinations(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, list[tuple]]:
    """Codes of the rows' combinations of several columns' ``(codes, values)`` (mixed radix,
    numbered in order of first appearance) and each combination's values."""
    key = np.zeros(len(parts[0][0]), dtype=np.int64)
    for codes, values in parts:
        key = key * len(values) + codes
    codes, keys = pd.factorize(key)
    out = []
    for k in keys:
        combination = []
        for _, values in reversed(parts):
            k, at = divmod(int(k), len(values))
            combination.append(values[at])
        out.append(tuple(reversed(combination)))
    return codes, out


def with_quality(problem, deployments: pd.DataFrame) -> pd.DataFrame:
    """``deployments`` with ``quality_recovery`` and ``quality_source`` columns (when it has a
    weight format; measured capacity rows have none)."""
    if "quantization" not in deployments.columns or deployments.empty:
        return deployments
    table = quality.quality_table(problem.catalog)
    found = [table.recovery(m, q, k) for m, q, k in
             zip(deployments["model"], deployments["quantization"], deployments["kv_cache_dtype"])]
    return deployments.assign(quality_recovery=[r.recovery for r in found],
                              quality_source=[r.source for r in found])


def format_relaxation(problem, rows: pd.DataFrame) -> tuple[str, dict] | None:
    """The relaxation of the quality gate or the engine restriction that would let ``rows``
    (one model's candidates, none feasible) back in: (message, {dotted spec key: value}).

    Quality first (the gate rejects whole formats), then the engine; None when neither
    rejected any row.
    """
    reasons = set(rows["infeasible_reason"])
    if quality.UNVERIFIED in reasons:
        return ("formats without a published accuracy figure were rejected: allow them "
                "(quality.allow_unverified_formats: true)", {"quality.allow_unverified_formats": True})
    if quality.BELOW_MINIMUM in reasons:
        table = quality.quality_table(problem.catalog)
        low = rows[rows["infeasible_reason"] == quality.BELOW_MINIMUM]
        best = max(table.recovery(m, q, k).recovery for m, q, k in
                   zip(low["model"], low["quantization"], low["kv_cache_dtype"]))
        floor = np.floor(best * 1000) / 1000
        return (f"the searched formats' published recovery is at most {best:.4f}: lower "
                f"quality.min_recovery to {floor:.3f}", {"quality.min_recovery": float(floor)})
    if reasons & {compat.NO_ARCHITECTURE, compat.NO_FORMAT}:
        return (f"serving.engine {problem.spec.serving.engine} supports none of the searched GPUs and formats "
                "(catalogs/engines.yaml): drop serving.engine or search other GPUs/formats",
                {"serving.engine": None})
    return None
