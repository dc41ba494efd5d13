"""Fitting a calibration to measurements: :func:`fit_calibration` (the levels of
:mod:`planner.calibration`, searched group by group with a compass search and a prior
toward the parent values) and the per-group statistics of the result."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import pandas as pd

from planner.accuracy import Harness, add_families, engine_keys, predict_calibrated, predict_rows, row_arrays
from planner.calibration import DEFAULT_PARAMETERS, GPU_PARAMETERS, LEVEL_PARAMETERS, LEVELS, Calibration, compose
from planner.serving.params import ServingParams

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FitOptions:
    """Settings of :func:`fit_calibration`.

    min_rows: rows a group needs for its own values; min_other: distinct values of the
    other factor a group needs (models per GPU, GPUs per engine, GPUs per model), so that
    the factors separate (a parameter's own ``ParamSpec.min_other`` overrides it);
    prior_weight: pull toward the parent values (loss units per squared double step,
    divided by the group's rows); iterations: compass-search sweeps per level; rounds:
    sweeps over the levels; clip_log_error: |ln(pred/measured)| above this counts as this
    (robust to gross outliers); levels: which levels to fit.
    """

    min_rows: int = 20
    min_other: int = 2
    prior_weight: float = 2.0
    iterations: int = 12
    rounds: int = 3
    clip_log_error: float = 2.0
    levels: tuple = LEVELS
    #: Engine parameters fitted per engine and release; the others only globally. The
    #: benchmark harness (first_wave_weight) differs by campaign, not by engine: fitted per
    #: engine it did not carry over to unseen (model, GPU) pairs in cross-validation.
    engine_parameters: tuple = ("step_overhead_s", "request_overhead_s", "memory_factor", "compute_factor",
                                "prefill_compute_factor")


_OTHER = {"gpu": "model", "engine": "gpu", "release": "pair", "campaign": "pair", "math": "model", "model": "gpu"}


def _log_errors(pred, value, clip):
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.abs(np.log(pred / value))
    return np.where(np.isfinite(err), np.minimum(err, clip), clip)


def _family_weights(families: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Row weights that give each metric family of a group the same total weight."""
    fam = pd.Series(families, dtype=object).astype(str)
    key = pd.Series(codes).astype(str) + "|" + fam
    counts = key.map(key.value_counts()).to_numpy(dtype=float)
    per_group = fam.groupby(codes).transform("nunique").to_numpy(dtype=float)
    return 1.0 / (counts * per_group)


def pattern_search(predict, value, weights, codes, n_groups, prior_u, specs, options: FitOptions):
    """Minimize, for every group at once, its weighted mean clipped |ln(pred/value)| plus a prior.

    ``predict(U)`` takes per-row search coordinates U (rows x parameters) and returns the
    predictions; each group moves its own coordinates from ``prior_u`` (compass search:
    +-step along each coordinate, halve the step where neither direction improves).
    """
    u = prior_u.copy()
    steps = np.tile(np.array([s.step for s in specs]), (n_groups, 1))
    n_rows = np.maximum(np.bincount(codes, minlength=n_groups), 1)
    wsum = np.maximum(np.bincount(codes, weights=weights, minlength=n_groups), 1e-300)
    prior_scale = 2.0 * np.array([s.step for s in specs])
    lo = np.array([s.to_u(s.lower) for s in specs])
    hi = np.array([s.to_u(s.upper) for s in specs])

    def loss(uu):
        err = _log_errors(predict(uu[codes]), value, options.clip_log_error)
        fit = np.bincount(codes, weights=weights * err, minlength=n_groups) / wsum
        return fit + options.prior_weight / n_rows * (((uu - prior_u) / prior_scale) ** 2).sum(axis=1)

    best = loss(u)
    for _ in range(options.iterations):
        for k in range(len(specs)):
            improved = np.zeros(n_groups, bool)
            for sign in (1.0, -1.0):
                trial = u.copy()
                trial[:, k] = np.clip(np.where(improved, u[:, k], u[:, k] + sign * steps[:, k]), lo[k], hi[k])
                trial_loss = loss(trial)
                better = (trial_loss < best - 1e-9) & ~improved
                u[better, k] = trial[better, k]
                best = np.where(better, trial_loss, best)
                improved |= better
            steps[~improved, k] *= 0.5
    return u


def eligible_groups(rows: pd.DataFrame, level: str, options: FitOptions,
                    min_other: int | None = None) -> list:
    """Keys of ``level`` with at least ``min_rows`` rows and ``min_other`` distinct partners
    (``options.min_other`` unless given)."""
    rows = rows.assign(pair=rows["model"].astype(str) + "|" + rows["gpu"].astype(str))
    for col in ("release", "campaign"):
        if col not in rows:
            rows = rows.assign(**{col: np.nan})
    need = options.min_other if min_other is None else min_other
    stats = rows.groupby(level).agg(n=("value", "size"), other=(_OTHER[level], "nunique"))
    return sorted(stats[(stats["n"] >= options.min_rows) & (stats["other"] >= need)].index)


def parameter_batches(level: str, rows: pd.DataFrame, options: FitOptions) -> list:
    """``[(group keys, {name: ParamSpec})]`` to search for ``level``: its parameters batched
    by the partners their groups need (most first), each with its eligible groups."""
    specs = LEVEL_PARAMETERS[level]
    if level in ("engine", "release"):
        specs = {k: v for k, v in specs.items() if k in options.engine_parameters}
    need = {n: options.min_other if s.min_other is None else s.min_other for n, s in specs.items()}
    batches = []
    for m in sorted(set(need.values()), reverse=True):
        keys = eligible_groups(rows, level, options, m)
        if keys:
            batches.append((keys, {n: s for n, s in specs.items() if need[n] == m}))
    return batches


def fit_calibration(catalog, rows: pd.DataFrame, base: ServingParams | None = None,
                    options: FitOptions | None = None, provenance: dict | None = None) -> Calibration:
    """Fit the global values, then per GPU, engine and model values, to prepared rows.

    Parameters
    ----------
    catalog : Catalog
    rows : DataFrame
        Rows from :func:`planner.accuracy.prepare_rows` (aggregated serving).
    base : ServingParams, optional
        Starting values and the prior of the global fit (default: the seeds').
    options : FitOptions, optional
    provenance : dict, optional
        Stored as is in the result (source file, hash, date, command).

    Returns
    -------
    Calibration (with per-group residual statistics).

    Notes
    -----
    Objective of a group: the weighted mean of min(|ln(pred/measured)|, clip) over its rows
    (each metric family of the group weighs the same) plus prior_weight / n_rows *
    sum(((u - u_prior) / (2 step))^2) in the search coordinates u. All groups of a level are
    searched at once (one vectorized prediction per trial), the other levels held at their
    current values; the levels are swept ``rounds`` times. The global fit is pulled toward
    the seeds, every group toward the global fit (factors and deltas toward neutral).
    """
    fit = _Fit.start(catalog, rows, base or ServingParams(), options or FitOptions())
    _search_level(fit, None, [], DEFAULT_PARAMETERS)
    batches = {level: parameter_batches(level, fit.rows, fit.options) for level in fit.options.levels}
    for round_ in range(fit.options.rounds):
        for level in fit.options.levels:
            for keys, specs in batches[level]:
                _search_level(fit, level, keys, specs)
        log.info("calibration round %d/%d done", round_ + 1, fit.options.rounds)
    cal = fit.calibration()
    cal = replace(cal, provenance=dict(provenance or {}), gpu_priors=gpu_priors(catalog, cal.gpus))
    return with_stats(cal, catalog, fit.rows, fit.base, fit.arrays)


@dataclass
class _Fit:
    """The state of one :func:`fit_calibration`: the rows, their arrays and level keys, and
    the values fitted so far (``default``: the global fit, ``tables``: per level and key)."""

    catalog: object
    base: ServingParams
    options: FitOptions
    rows: pd.DataFrame
    arrays: object
    value: np.ndarray
    families: np.ndarray
    keys_of: dict
    release_of_campaign: dict
    default: dict
    tables: dict

    @classmethod
    def start(cls, catalog, rows: pd.DataFrame, base: ServingParams, options: FitOptions) -> "_Fit":
        rows = add_families(rows.reset_index(drop=True))
        arrays = row_arrays(catalog, rows)
        start = {**base.as_dict(), **Harness().__dict__}
        default = {n: float(np.asarray(start[n], float).reshape(-1)[0]) for n in DEFAULT_PARAMETERS}
        for col in ("release", "campaign"):
            if col not in rows:
                rows[col] = np.nan
        keys_of = {level: rows[level].to_numpy() for level in ("gpu", "engine", "release", "campaign", "math",
                                                               "model")}
        return cls(catalog=catalog, base=base, options=options, rows=rows, arrays=arrays,
                   value=rows["value"].to_numpy(float), families=rows["family"].to_numpy(), keys_of=keys_of,
                   release_of_campaign=dict(zip(keys_of["campaign"], engine_keys(rows))), default=default,
                   tables={level: {} for level in LEVELS})

    def calibration(self) -> Calibration:
        """The values fitted so far, as a calibration."""
        t = self.tables
        return Calibration(default=dict(self.default), gpus=t["gpu"], engines=t["engine"], releases=t["release"],
                           maths=t["math"], models=t["model"], campaigns=t["campaign"])

    def current(self) -> dict:
        """Per-row level values of the calibration so far (``{"<level>.<name>": array}``)."""
        cal = self.calibration()
        values = cal.level_values("gpu", self.keys_of["gpu"])
        values.update(cal.level_values("engine", engine_keys(self.rows)))
        for level in ("math", "model", "campaign"):
            values.update(cal.level_values(level, self.keys_of[level]))
        return values

    def subset(self, index) -> tuple:
        """The rows ``index`` and their arrays (once per search, reused by every trial)."""
        if len(index) == len(self.rows):
            return self.rows, self.arrays
        return self.rows.iloc[index].reset_index(drop=True), self.arrays.take(index)

    def predict_with(self, values: dict, part: tuple) -> np.ndarray:
        """Predictions of the rows ``part`` = (rows, arrays) (``values`` restricted to them)."""
        params, harness = compose(self.base, values)
        return predict_rows(self.catalog, part[0], params, Harness(**harness), arrays=part[1])


def _group_priors(fit: _Fit, level: str, keys: list, specs: dict) -> np.ndarray:
    """Prior search coordinates of each group of ``level`` (groups x parameters): releases
    start from their engine, campaigns from their release, the rest from the global fit
    (factors and deltas from neutral)."""
    parent = fit.calibration()
    prior = []
    for k in keys:
        if level == "release":
            up = parent.level_values("engine", [k.split("@")[0]])
        elif level == "campaign":
            up = parent.level_values("engine", [fit.release_of_campaign[k]])
        else:
            up = {}
        prior.append([s.to_u(up[f"engine.{n}"][0] if up else
                             (s.neutral if s.neutral is not None else fit.default[n]))
                      for n, s in specs.items()])
    return np.array(prior)


def _predict_coordinates(fit: _Fit, level: str | None, specs: dict, fixed_values: dict, part: tuple,
                         u_rows: np.ndarray) -> np.ndarray:
    """Predictions of the rows ``part`` with the parameters ``specs`` of ``level`` at the
    per-row search coordinates ``u_rows`` (rows x parameters), the others at ``fixed_values``."""
    prefix = "engine" if level in ("engine", "release") else level
    values = dict(fixed_values)
    for i, (n, s) in enumerate(specs.items()):
        key = f"{prefix}.{n}" if level else (f"gpu.{n}" if n in GPU_PARAMETERS else f"engine.{n}")
        values[key] = s.from_u(u_rows[:, i])
    return fit.predict_with(values, part)


def _search_level(fit: _Fit, level: str | None, keys: list, specs: dict) -> None:
    """Fit the parameters ``specs`` of the groups ``keys`` of ``level`` (None: the global fit)
    at once, the other values held; stores the result in ``fit``."""
    if level is None:
        codes, index = np.zeros(len(fit.rows), dtype=int), np.arange(len(fit.rows))
        prior = np.array([[s.to_u(fit.default[n]) for n, s in specs.items()]])
    else:
        codes_all = pd.Series(fit.keys_of[level], dtype=object).map({k: i for i, k in enumerate(keys)})
        index = np.flatnonzero(codes_all.notna().to_numpy())
        codes = codes_all.to_numpy()[index].astype(int)
        prior = _group_priors(fit, level, keys, specs)
    if not index.size:
        return
    fixed_values = {k: v[index] for k, v in fit.current().items()}
    predict = partial(_predict_coordinates, fit, level, specs, fixed_values, fit.subset(index))
    plist = list(specs.values())
    u = pattern_search(predict, fit.value[index], _family_weights(fit.families[index], codes), codes, len(prior),
                       prior, plist, fit.options)
    for g in range(len(prior)):
        fitted = {n: float(s.from_u(u[g, i])) for i, (n, s) in enumerate(specs.items())}
        if level is None:
            fit.default.update(fitted)
        else:
            fit.tables[level].setdefault(keys[g], {}).update(fitted)


def gpu_priors(catalog, measured) -> dict:
    """Where each catalog GPU without values of its own borrows its hardware values.

    The measured GPU (in ``measured``) of the same vendor and memory technology whose datasheet
    bandwidth is nearest (|ln ratio|, then id); without one, the nearest measured GPU of the
    same vendor; without any measured GPU of the vendor: None (the seed defaults). Never an
    average over other vendors' GPUs.
    """
    measured = sorted(g for g in measured if g in catalog.gpus.entries)
    out = {}
    for gid in sorted(catalog.gpus.entries):
        if gid in measured:
            continue
        g = catalog.gpu(gid)
        same = [catalog.gpu(m) for m in measured if catalog.gpu(m).vendor == g.vendor]
        tech = [m for m in same if g.memory_technology and m.memory_technology == g.memory_technology]
        pool = tech or same
        if not pool:
            out[gid] = {"borrowed_from": None, "reason": f"no measured {g.vendor} GPU: seed defaults"}
            continue
        near = min(pool, key=lambda m: (abs(np.log(m.memory_bandwidth_tb_per_s / g.memory_bandwidth_tb_per_s)),
                                        m.id))
        why = (f"nearest measured {g.vendor} {g.memory_technology} GPU by memory bandwidth" if tech else
               f"no measured {g.vendor} {g.memory_technology or ''} GPU: nearest measured {g.vendor} GPU "
               "by memory bandwidth")
        out[gid] = {"borrowed_from": near.id, "reason": " ".join(why.split())}
    return out


def with_stats(cal: Calibration, catalog, rows: pd.DataFrame, base: ServingParams | None = None,
               arrays=None) -> Calibration:
    """``cal`` with the rows and median APE per metric family of every group."""
    rows = add_families(rows)
    pred = predict_calibrated(catalog, rows, cal, base, arrays)
    measured = rows["value"].to_numpy(float)
    frame = pd.DataFrame({"gpu": rows["gpu"].to_numpy(), "engine": rows["engine"].to_numpy(),
                          "release": engine_keys(rows), "math": rows["math"].to_numpy(),
                          "model": rows["model"].to_numpy(),
                          "campaign": rows["campaign"].to_numpy() if "campaign" in rows else np.nan,
                          "family": rows["family"].to_numpy(),
                          "ape": np.abs(pred - measured) / measured * 100.0})

    def summary(part):
        return {"rows": int(len(part)), "median_ape_pct": {f: round(float(v), 1) for f, v in
                                                           part.groupby("family")["ape"].median().items()}}

    stats = {"default": summary(frame)}
    for level, table in (("gpu", cal.gpus), ("engine", cal.engines), ("release", cal.releases),
                         ("math", cal.maths), ("model", cal.models), ("campaign", cal.campaigns)):
        stats.update({f"{level}:{k}": summary(frame[frame[level] == k]) for k in table})
    return replace(cal, stats=stats)
