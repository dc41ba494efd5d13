"""Prediction intervals of the calibrated serving model, from its out-of-fold errors.

For every predicted row of a cross-validation (``planner calibrate --cv K``, folds of whole
(model, GPU) pairs) the log error e = ln(measured / predicted) is known. Per metric family
(``ttft``, ``tpot_itl``, ``throughput``, ``e2e``) and scope (all rows, per GPU vendor, per
engine, per vendor and engine) with at least :data:`MIN_INTERVAL_ROWS` rows, the quantiles
of e at :data:`INTERVAL_LEVELS` are stored in the calibration YAML (``intervals:``). A
prediction y then has the interval [y exp(Q(a/2)), y exp(Q(1 - a/2))] at level 1 - a, and
:func:`error_factor` returns exp(Q(q)): the factor a measurement exceeds the prediction by
with probability 1 - q.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Quantile levels stored per family and scope.
INTERVAL_LEVELS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 0.8, 0.9, 0.95, 0.975, 0.99)
#: Rows a scope needs for its own quantiles (else the next wider scope).
MIN_INTERVAL_ROWS = 30
#: Central intervals reported by ``planner eval`` and per deployment: name -> coverage.
REPORTED_INTERVALS = {"p80": 0.80, "p95": 0.95}
#: Output quantity names -> metric family.
FAMILY_OF = {"ttft": "ttft", "ttft_s": "ttft", "ttft_p95_s": "ttft", "tpot": "tpot_itl", "tpot_s": "tpot_itl",
             "tpot_p95_s": "tpot_itl", "tpot_mean_s": "tpot_itl", "itl": "tpot_itl", "tpot_itl": "tpot_itl",
             "throughput": "throughput", "throughput_tokens_per_s": "throughput",
             "per_user_tokens_per_s": "throughput", "max_rate_per_s": "throughput", "e2e": "e2e"}


def family_of(name: str) -> str:
    """The metric family of an output quantity (``tpot_s`` -> ``tpot_itl``); ValueError if unknown."""
    try:
        return FAMILY_OF[name]
    except KeyError:
        raise ValueError(f"unknown metric family '{name}' (known: {', '.join(sorted(FAMILY_OF))})") from None


def scopes(vendor: str | None, engine: str | None) -> list[str]:
    """Scope keys from the most specific to all rows."""
    engine = engine.split("@")[0] if engine else None
    out = []
    if vendor and engine:
        out.append(f"vendor:{vendor}|engine:{engine}")
    if engine:
        out.append(f"engine:{engine}")
    if vendor:
        out.append(f"vendor:{vendor}")
    return out + ["all"]


def fit_intervals(rows: pd.DataFrame, predictions, vendors: dict, source: str) -> dict:
    """The ``intervals`` section of a calibration from out-of-fold ``predictions`` of ``rows``.

    ``rows`` need ``family``, ``gpu``, ``engine`` and ``value``; ``vendors`` maps GPU ids to
    vendors (stored too, so that lookups need no catalog).
    """
    pred = np.asarray(predictions, dtype=float)
    measured = rows["value"].to_numpy(float)
    ok = np.isfinite(pred) & (pred > 0) & (measured > 0)
    frame = pd.DataFrame({"family": rows["family"].to_numpy()[ok], "engine": rows["engine"].astype(str).to_numpy()[ok],
                          "vendor": rows["gpu"].map(vendors).astype(str).to_numpy()[ok],
                          "e": np.log(measured[ok] / pred[ok])})
    families = {}
    for fam, part in sorted(frame.groupby("family"), key=lambda kv: kv[0]):
        keyed = {"all": part}
        for (v, e), g in part.groupby(["vendor", "engine"]):
            keyed[f"vendor:{v}|engine:{e}"] = g
        for e, g in part.groupby("engine"):
            keyed[f"engine:{e}"] = g
        for v, g in part.groupby("vendor"):
            keyed[f"vendor:{v}"] = g
        families[fam] = {k: {"n": int(len(g)), "log_quantiles": [round(float(x), 4) for x in
                                                                   np.quantile(g["e"], INTERVAL_LEVELS)]}
                         for k, g in sorted(keyed.items()) if len(g) >= MIN_INTERVAL_ROWS}
    return {"method": "quantiles of ln(measured / predicted) over out-of-fold predictions, per metric family "
                      "and scope (vendor|engine, engine, vendor, all: the most specific with at least "
                      f"{MIN_INTERVAL_ROWS} rows applies)",
            "source": source, "levels": list(INTERVAL_LEVELS), "min_rows": MIN_INTERVAL_ROWS,
            "families": families, "gpu_vendors": dict(sorted(vendors.items()))}


def log_error_quantile(intervals: dict, family: str, q: float, gpu: str | None = None,
                       engine: str | None = None) -> tuple[float, str]:
    """(quantile q of ln(measured / predicted), the scope used); (0, 'none') without data."""
    fam = (intervals or {}).get("families", {}).get(family_of(family))
    if not fam:
        return 0.0, "none"
    vendor = intervals.get("gpu_vendors", {}).get(gpu) if gpu else None
    scope = next(s for s in scopes(vendor, engine) + ["all"] if s in fam or s == "all")
    if scope not in fam:
        return 0.0, "none"
    levels = np.asarray(intervals["levels"], dtype=float)
    return float(np.interp(q, levels, fam[scope]["log_quantiles"])), scope


def error_factor(intervals: dict, family: str, q: float, gpu: str | None = None,
                 engine: str | None = None) -> float:
    """exp of :func:`log_error_quantile`: measured / predicted is below this with probability q
    (1.0 without interval data; q outside the stored levels takes the nearest level)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    return float(np.exp(log_error_quantile(intervals, family, q, gpu, engine)[0]))


def intervals_for(intervals: dict, values: dict, gpu: str | None = None, engine: str | None = None) -> dict:
    """``{quantity: {"p80": [lo, hi], "p95": [lo, hi]}}`` around each predicted value."""
    out = {}
    for name, value in values.items():
        if value is None or not np.isfinite(value):
            continue
        fam = family_of(name)
        if fam not in (intervals or {}).get("families", {}):
            continue
        out[name] = {label: [float(value) * error_factor(intervals, fam, (1 - cover) / 2, gpu, engine),
                             float(value) * error_factor(intervals, fam, (1 + cover) / 2, gpu, engine)]
                     for label, cover in REPORTED_INTERVALS.items()}
    return out


def widen(intervals: dict, ratios: dict, source: str) -> dict:
    """``intervals`` with each family's spread around its median scaled by ``ratios[family]``:
    Q'(q) = Q(0.5) + k (Q(q) - Q(0.5)).

    For intervals taken from in-sample errors when no out-of-fold errors are at hand:
    k = out-of-fold / in-fold median APE of a cross-validation widens them to the error
    the cross-validation measured for unseen groups (families without a ratio keep k = 1).
    """
    levels = list(intervals["levels"])
    mid = levels.index(0.5)
    families = {}
    for fam, scopes in intervals["families"].items():
        k = float(ratios.get(fam, 1.0))
        families[fam] = {s: {"n": q["n"], "log_quantiles": [round(q["log_quantiles"][mid] + k * (v - q["log_quantiles"][mid]), 4)
                                                          for v in q["log_quantiles"]]}
                         for s, q in scopes.items()}
    return {**intervals, "families": families, "source": source,
            "widened_by": {f: round(float(k), 3) for f, k in sorted(ratios.items())}}
