"""Cross-validation of :func:`planner.calibration.fit_calibration`: folds of whole groups.

Three fold schemes (:data:`SCHEMES`), each holding whole groups of rows out of the fit:

* ``model_gpu``: (model, GPU) pairs; what a new model on a measured GPU, or a measured
  model on another GPU, would see;
* ``campaign``: benchmark campaigns, a source family (the bracketed ``source`` label)
  crossed with the engine release and the GPU vendor (``AIC silicon_sample x trtllm@1.0 x
  nvidia``): how a campaign
  the fit never saw (its harness, its client, its engine build) is predicted;
* ``gpu``: GPUs: a held-out GPU gets the hardware values of the measured GPU of its vendor
  and memory technology (:func:`planner.calibration_fit.gpu_priors`), as an unmeasured catalog
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
#: The fitted tables of a :class:`~planner.calibration.Calibration` a fold part stores.
FITTED_TABLES = ("default", "gpus", "engines", "releases", "maths", "models", "campaigns", "platforms")


def calibration_of_part(part: dict, fold, catalog):
    """The calibration fitted in fold ``fold`` of a :func:`run_folds` part (its priors from
    today's rule, :func:`planner.calibration_fit.gpu_priors`)."""
    from planner.calibration import Calibration
    from planner.calibration_fit import gpu_priors

    tables = part["parts"][str(fold)]["calibration"]
    return Calibration(**tables, gpu_priors=gpu_priors(catalog, tables["gpus"]))  # parts before the platform level: none


#: Fold scheme -> the row columns whose distinct values are held out together.
SCHEMES = {"model_gpu": ("model", "gpu"), "campaign": ("campaign",), "gpu": ("gpu",)}
#: Schemes reported leave-one-group-out: every campaign / GPU held out once, alone, each
#: fold's fit on the full fit's schedule (``run_folds(..., full_schedule=True)``).
LEAVE_ONE_OUT = ("campaign", "gpu")


def group_count(rows: pd.DataFrame, scheme: str) -> int:
    """Distinct groups of ``scheme`` in ``rows`` (the folds of leaving one out)."""
    return int(rows[list(SCHEMES[scheme])].astype(str).agg("|".join, axis=1).nunique())


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
    :data:`CV_ROUNDS` rounds. ``folds`` at least the number of groups: one group per fold
    (leave-one-group-out).

    Returns
    -------
    dict: ``folds``, ``scheme``, ``grouped_by``; ``by_family``: per metric family ``n``,
    ``in_fold_median_ape_pct`` (the training rows of every fold, pooled),
    ``out_of_fold_median_ape_pct`` (every row predicted by the fit that did not see its group,
    pooled) and ``gap_pct`` (mean/median statistics); ``per_fold``; ``predictions``: the
    out-of-fold prediction per row id; with ``keep_fits``, ``fits``: the fold's Calibration
    per fold and ``fold_of``: the fold per row (in ``rows`` order).
    """
    part = run_folds(catalog, rows, folds, options, base, scheme, keep_fits=keep_fits)
    result = summarize(rows, [part])
    return {**result, "fits": part["fits"], "fold_of": part["fold_of"]} if keep_fits else result


def run_folds(catalog, rows: pd.DataFrame, folds: int = 5, options: FitOptions | None = None,
              base: ServingParams | None = None, scheme: str = "model_gpu", only=None,
              keep_fits: bool = False, full_schedule: bool = False) -> dict:
    """Fit and predict the folds ``only`` (default: all) of a scheme; :func:`summarize` pools
    the parts of one or several runs (JSON-able without ``keep_fits``). Each fold's fit runs
    at most :data:`CV_ITERATIONS` sweeps and :data:`CV_ROUNDS` rounds, or with
    ``full_schedule`` those of ``options`` (the full fit's: the leave-one-group-out runs)."""
    from dataclasses import replace

    from planner.accuracy import add_families

    options = options or FitOptions()
    if not full_schedule:
        options = replace(options, iterations=min(options.iterations, CV_ITERATIONS),
                          rounds=min(options.rounds, CV_ROUNDS))
    by = SCHEMES[scheme]
    rows = add_families(rows.reset_index(drop=True))
    fold = group_folds(rows, folds, by)
    ids = rows["id"].astype(str).to_numpy()
    out = {"scheme": scheme, "grouped_by": list(by), "folds": int(fold.max()) + 1,
           "schedule": {"iterations": options.iterations, "rounds": options.rounds},
           "fold_of": fold if keep_fits else dict(zip(ids, fold.tolist())), "parts": {}, "fits": []}
    for k in range(int(fold.max()) + 1):
        if only is not None and k not in only:
            continue
        train, test = fold != k, fold == k
        cal = fit_calibration(catalog, rows[train], base, options)
        if keep_fits:
            out["fits"].append(cal)
        pred_train = predict_calibrated(catalog, rows[train].reset_index(drop=True), cal, base)
        pred_test = predict_calibrated(catalog, rows[test].reset_index(drop=True), cal, base)
        out["parts"][str(k)] = {
            "held_out": sorted(rows.loc[test, list(by)].astype(str).agg("|".join, axis=1).unique()),
            "train": dict(zip(ids[train], pred_train.tolist())), "test": dict(zip(ids[test], pred_test.tolist())),
            # the fold's fitted values, unrounded (calibration_from_parts): its held-out rows can
            # be predicted again, e.g. under another prior rule, without refitting
            "calibration": {name: getattr(cal, name) for name in FITTED_TABLES}}
        log.info("%s fold %d/%d done", scheme, k + 1, int(fold.max()) + 1)
    return out


def summarize(rows: pd.DataFrame, parts: list, partial: bool = False) -> dict:
    """The cross-validation result (:func:`cross_validate`) of the fold runs ``parts`` of
    one scheme (together they must cover every fold; with ``partial`` the folds run so far,
    over the rows they held out: ``folds_run`` says how many).

    Per fold (``per_fold``): ``held_out``, the fold fit's training rows
    (``in_fold_median_ape_pct``), the held-out rows predicted by the fit that did not see
    them (``out_of_fold_median_ape_pct``) and the same held-out rows as training rows of the
    other folds' fits, pooled (``held_out_in_fold_median_ape_pct``, empty with one fold):
    the like-with-like gap of that group.
    """
    from planner.accuracy import add_families

    rows = add_families(rows.reset_index(drop=True))
    by_id = rows.set_index(rows["id"].astype(str))
    folds = {k: v for p in parts for k, v in p["parts"].items()}
    n_folds = parts[0]["folds"]
    missing = sorted(set(map(str, range(n_folds))) - set(folds), key=int)
    if missing and not partial:
        raise ValueError(f"cross-validation folds not run: {', '.join(missing)}")
    if missing:
        held = {i for f in folds.values() for i in f["test"]}
        rows = rows[rows["id"].astype(str).isin(held)].reset_index(drop=True)
    ids = rows["id"].astype(str).to_numpy()
    measured = rows["value"].to_numpy(float)
    oof = pd.Series({i: v for f in folds.values() for i, v in f["test"].items()}).reindex(ids).to_numpy(float)
    inside = []
    for k in sorted(folds, key=int):
        train = pd.Series(folds[k]["train"], dtype=float)
        sub = by_id.loc[train.index]
        inside.append(pd.DataFrame({"id": train.index, "fold": int(k), "family": sub["family"].to_numpy(),
                                    "statistic": sub["statistic"].to_numpy(),
                                    "ape": np.abs(train.to_numpy() - sub["value"].to_numpy(float))
                                    / sub["value"].to_numpy(float) * 100}))
    inside_all = pd.concat(inside, ignore_index=True)
    per_fold = []
    for k, part in zip(sorted(folds, key=int), inside):
        f = folds[k]
        test = rows[rows["id"].astype(str).isin(list(f["test"]))]
        ape_test = np.abs(test["id"].astype(str).map(f["test"]).to_numpy(float) - test["value"].to_numpy(float)) \
            / test["value"].to_numpy(float) * 100
        seen = inside_all[inside_all["id"].isin(list(f["test"])) & (inside_all["fold"] != int(k))]
        per_fold.append({"fold": int(k), "held_out": f["held_out"], "rows": int(len(central(test))),
                         "in_fold_median_ape_pct": family_medians(part, part["ape"].to_numpy()),
                         "out_of_fold_median_ape_pct": family_medians(test, ape_test),
                         "held_out_in_fold_median_ape_pct": family_medians(seen, seen["ape"].to_numpy())})
    ape_oof = np.abs(oof - measured) / measured * 100.0
    a = family_medians(inside_all, inside_all["ape"].to_numpy())
    b = family_medians(rows, ape_oof)
    counts = central(rows)["family"].value_counts()
    by_family = {f: {"n": int(counts.get(f, 0)), "in_fold_median_ape_pct": a[f],
                     "out_of_fold_median_ape_pct": b.get(f), "gap_pct": round(b[f] - a[f], 1)}
                 for f in sorted(a) if f in b}
    return {"folds": n_folds, **({"folds_run": len(folds)} if missing else {}),
            "scheme": parts[0]["scheme"], "grouped_by": parts[0]["grouped_by"],
            **({"schedule": parts[0]["schedule"]} if "schedule" in parts[0] else {}),
            "by_family": by_family, "per_fold": per_fold, "predictions": dict(zip(rows["id"], oof))}


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
