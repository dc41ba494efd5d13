"""Cross-validation of :func:`planner.calibration.fit_calibration`: folds of whole groups.

Three fold schemes (:data:`SCHEMES`), each holding whole groups of rows out of the fit:

* ``model_gpu``: (model, GPU) pairs; what a new model on a measured GPU, or a measured
  model on another GPU, would see;
* ``campaign``: benchmark campaigns, a source family (the bracketed ``source`` label)
  crossed with the engine release and the GPU vendor (``AIC silicon_sample x trtllm@1.0 x
  nvidia``): how a campaign
  the fit never saw (its harness, its client, its engine build) is predicted;
* ``gpu``: GPUs: a held-out GPU gets the hardware values of the measured GPU of its vendor
  and memory technology (:func:`planner.calibration.gpu_priors`), as an unmeasured catalog
  GPU does.

Groups go to K folds, largest first, each to the fold with the fewest rows so far
(deterministic); every group is held out exactly once.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from planner.accuracy import predict_calibrated
from planner.calibration_fit import FitOptions, fit_calibration
from planner.serving.params import ServingParams

log = logging.getLogger(__name__)

#: Compass-search sweeps and level rounds of each fold's fit (the full fit: 12 and 3). A
#: fit of the reference files takes minutes; 3 schemes x K folds at the full settings would
#: take hours. In-fold and out-of-fold errors come from the same fold fits, so the gap
#: compares like with like.
CV_ITERATIONS, CV_ROUNDS = 8, 2
#: Fold scheme -> the row columns whose distinct values are held out together.
SCHEMES = {"model_gpu": ("model", "gpu"), "campaign": ("campaign",), "gpu": ("gpu",)}


def group_folds(rows: pd.DataFrame, folds: int = 5, by=("model", "gpu")) -> np.ndarray:
    """Fold number per row: whole groups of ``by``, largest first, each to the fold with
    the fewest rows so far (deterministic). Fewer groups than folds: one fold per group."""
    keys = rows[list(by)].astype(str).agg("|".join, axis=1)
    sizes = keys.value_counts()
    load = np.zeros(min(folds, len(sizes)) or 1)
    fold_of = {}
    for key in sorted(sizes.index, key=lambda k: (-sizes[k], k)):
        fold_of[key] = int(np.argmin(load))
        load[fold_of[key]] += sizes[key]
    return keys.map(fold_of).to_numpy()


def cross_validate(catalog, rows: pd.DataFrame, folds: int = 5, options: FitOptions | None = None,
                   base: ServingParams | None = None, keep_fits: bool = False,
                   scheme: str = "model_gpu") -> dict:
    """K-fold cross-validation of :func:`fit_calibration`, folds of whole groups (``scheme``).

    Each fold's fit uses ``options`` with at most :data:`CV_ITERATIONS` sweeps and
    :data:`CV_ROUNDS` rounds.

    Returns
    -------
    dict: ``folds``, ``scheme``, ``grouped_by``; ``by_family``: per metric family ``n``,
    ``in_fold_median_ape_pct`` (the training rows of every fold, pooled),
    ``out_of_fold_median_ape_pct`` (every row predicted by the fit that did not see its group,
    pooled) and ``gap_pct``; ``per_fold``; ``predictions``: the out-of-fold prediction per
    row id; with ``keep_fits``, ``fits``: the fold's Calibration per fold and ``fold_of``: the
    fold per row (in ``rows`` order).
    """
    from dataclasses import replace

    from planner.accuracy import add_families

    options = options or FitOptions()
    options = replace(options, iterations=min(options.iterations, CV_ITERATIONS),
                      rounds=min(options.rounds, CV_ROUNDS))
    by = SCHEMES[scheme]
    rows = add_families(rows.reset_index(drop=True))
    fold = group_folds(rows, folds, by)
    measured = rows["value"].to_numpy(float)
    oof = np.full(len(rows), np.nan)
    inside, per_fold, fits = [], [], []
    for k in range(int(fold.max()) + 1):
        train, test = fold != k, fold == k
        cal = fit_calibration(catalog, rows[train], base, options)
        fits.append(cal)
        pred_train = predict_calibrated(catalog, rows[train].reset_index(drop=True), cal, base)
        oof[test] = predict_calibrated(catalog, rows[test].reset_index(drop=True), cal, base)
        ape_train = np.abs(pred_train - measured[train]) / measured[train] * 100.0
        ape_test = np.abs(oof[test] - measured[test]) / measured[test] * 100.0
        inside.append(pd.DataFrame({"family": rows.loc[train, "family"].to_numpy(), "ape": ape_train,
                                    "statistic": rows.loc[train, "statistic"].to_numpy()}))
        per_fold.append({"fold": k, "held_out": sorted(rows.loc[test, list(by)].astype(str)
                                                       .agg("|".join, axis=1).unique()),
                         "in_fold_median_ape_pct": family_medians(rows.loc[train], ape_train),
                         "out_of_fold_median_ape_pct": family_medians(rows.loc[test], ape_test)})
        log.info("%s fold %d/%d done", scheme, k + 1, int(fold.max()) + 1)
    ape_oof = np.abs(oof - measured) / measured * 100.0
    inside_all = pd.concat(inside, ignore_index=True)
    a = family_medians(inside_all, inside_all["ape"].to_numpy())
    b = family_medians(rows, ape_oof)
    counts = central(rows)["family"].value_counts()
    by_family = {f: {"n": int(counts.get(f, 0)), "in_fold_median_ape_pct": a[f],
                     "out_of_fold_median_ape_pct": b.get(f), "gap_pct": round(b[f] - a[f], 1)}
                 for f in sorted(a) if f in b}
    result = {"folds": int(fold.max()) + 1, "scheme": scheme, "grouped_by": list(by), "by_family": by_family,
              "per_fold": per_fold, "predictions": dict(zip(rows["id"], oof))}
    return {**result, "fits": fits, "fold_of": fold} if keep_fits else result


#: Statistics the accuracy targets are stated for (the central predictions).
CENTRAL_STATISTICS = ("mean", "median")


def central(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of a mean or median statistic (TTFT p90/p99 and TPOT p99 are reported apart)."""
    return rows[rows["statistic"].isin(CENTRAL_STATISTICS)] if "statistic" in rows else rows


def family_medians(rows: pd.DataFrame, ape: np.ndarray) -> dict:
    """Median APE % per metric family over the mean/median rows of ``rows``."""
    frame = pd.DataFrame({"family": rows["family"].to_numpy(), "ape": np.asarray(ape, float),
                          "statistic": rows["statistic"].to_numpy() if "statistic" in rows else "mean"})
    frame = central(frame)
    return {f: round(float(v), 1) for f, v in frame.groupby("family")["ape"].median().items()}
