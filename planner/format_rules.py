"""Which (GPU, weight format, KV dtype) rows the search rejects for engine support or quality.

Two tables decide, both catalogs with sources: ``catalogs/engines.yaml`` (only when the
problem sets ``serving.engine``) and ``catalogs/quality.yaml`` (the problem's ``quality``
options). Evaluated once per distinct combination, then mapped onto the candidate rows.
"""

from __future__ import annotations

import itertools

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
    engine = problem.spec.serving.engine
    engines = compat.engine_table(problem.catalog) if engine else None
    table = quality.quality_table(problem.catalog)
    opts = problem.spec.quality
    none = len(REASONS)
    published: dict = {}     # the quality reason per (model, format, KV dtype): the GPU plays no part

    def code_of(model, gpu, fmt, kv) -> int:
        """The combination's reason as its position in REASONS (len(REASONS): accepted)."""
        why = engines.reason(engine, gpu, fmt, kv) if engines is not None else None
        if not why:
            key = (model, fmt, kv)
            if key not in published:
                published[key] = table.reason(model, fmt, kv, opts.min_recovery, opts.allow_unverified_formats)
            why = published[key]
        return REASONS.index(why) if why in REASONS else none

    parts = [coded[k].factorize() for k in FORMAT_KEY] if coded is not None and all(k in coded for k in FORMAT_KEY) \
        else None
    if parts is not None and len(frame) and all((codes >= 0).all() for codes, _ in parts):
        # every combination of the columns' few distinct values (the grid's product), then
        # onto the rows by their codes (speed: no pass over the rows' combinations)
        per_combination = np.array([code_of(*c) for c in itertools.product(*(values for _, values in parts))],
                                   dtype=np.int64)
        which = per_combination[np.ravel_multi_index([codes for codes, _ in parts],
                                                     tuple(len(values) for _, values in parts))]
    else:
        codes, uniques = CandidateTable(frame).factorize(FORMAT_KEY)
        which = np.array([code_of(*c) for c in uniques.itertuples(index=False)] + [none], dtype=np.int64)[codes]
    # integer codes compared (speed: not the rows' reason strings)
    return {reason: which == i for i, reason in enumerate(REASONS)}


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
