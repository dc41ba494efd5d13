"""Fitting a calibration to measurements: :func:`fit_calibration` (the levels of
:mod:`planner.calibration`, searched group by group with a compass search and a prior
toward the parent values) and the per-group statistics of the result."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import pandas as pd

from planner.accuracy import (Harness, add_families, engine_keys, predict_calibrated, predict_columns, row_arrays,
                              row_columns)
from planner.calibration import (DEFAULT_PARAMETERS, GPU_PARAMETERS, LEVEL_PARAMETERS, LEVELS, OPTIONAL_DEFAULTS,
                                 Calibration, compose, platform_keys)
from planner.parameters import gpu_architectures
from planner.serving.params import ServingParams

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FitOptions:
    """Settings of :func:`fit_calibration`: the levels and when a group gets its own values,
    which parameters vary per engine, then the loss and the search.

    levels: which levels to fit; min_rows: rows a group needs for its own values;
    min_other: distinct values of the other factor a group needs (models per GPU, GPUs per
    engine, GPUs per model), so that the factors separate (a parameter's own
    ``ParamSpec.min_other`` overrides it); prior_weight: pull toward the parent values (loss
    units per squared double step, divided by the group's rows); clip_log_error:
    |ln(pred/measured)| above this counts as this (robust to gross outliers); iterations:
    compass-search sweeps per level; rounds: sweeps over the levels.
    """

    levels: tuple = LEVELS
    min_rows: int = 20
    min_other: int = 2
    prior_weight: float = 2.0
    #: Engine parameters fitted per engine and release; the others only globally. The
    #: benchmark harness (first_wave_weight) differs by campaign, not by engine: fitted per
    #: engine it did not carry over to unseen (model, GPU) pairs in cross-validation.
    engine_parameters: tuple = ("step_overhead_s", "layer_overhead_s", "request_overhead_s", "memory_factor",
                                "compute_factor", "prefill_compute_factor")
    clip_log_error: float = 2.0
    iterations: int = 12
    rounds: int = 3


_OTHER = {"gpu": "model", "engine": "gpu", "release": "pair", "platform": "gpu", "campaign": "pair", "math": "model",
          "model": "gpu"}


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


#: Parameters that enter every prediction additively (the request overhead: a fixed TTFT
#: latency outside the GPU steps, ``planner.accuracy._metric_values``): a trial moves the
#: predictions by slope x the change, the slope per row measured once per search, instead of
#: re-running the load models. :func:`pattern_search` checks the result against a full
#: prediction at the end of every search (``ADDITIVE_CHECK_RTOL``).
ADDITIVE_PARAMETERS = ("request_overhead_s",)
#: Relative agreement the end-of-search check asks of the tracked predictions (additive
#: updates accumulate rounding only: ~1e-13).
ADDITIVE_CHECK_RTOL = 1e-9


def pattern_search(predict, value, weights, codes, n_groups, prior_u, specs, options: FitOptions,
                   additive=(), upper_u=None):
    """Minimize, for every group at once, its weighted mean clipped |ln(pred/value)| plus a prior.

    ``predict(U, index)`` takes the search coordinates U (one row per row of ``index``, one
    column per parameter) of the rows ``index`` and returns their predictions; each group
    moves its own coordinates from ``prior_u`` (compass search: +-step along each
    coordinate, halve the step where neither direction improves). ``additive``: indices of
    ``specs`` whose parameter enters the predictions additively (:data:`ADDITIVE_PARAMETERS`);
    ``upper_u``: per-group upper bounds in u (groups x parameters, NaN: the spec's), tighter
    than the specs' (the all-reduce latency of each GPU, :func:`allreduce_latency_bound_s`).

    Notes
    -----
    A group's loss depends on its own rows only, so a trial predicts only the rows of the
    groups whose coordinate moves (not those that already improved in the + direction, nor
    those held at a bound); the other groups' losses are unchanged and their predictions are
    kept from the best point so far. The result is the same as predicting every row in every
    trial (per-row predictions do not depend on the other rows of a call); additive
    parameters agree to rounding (checked at the end).
    """
    u = prior_u.copy()
    steps = np.tile(np.array([s.step for s in specs]), (n_groups, 1))
    n_rows = np.maximum(np.bincount(codes, minlength=n_groups), 1)
    wsum = np.maximum(np.bincount(codes, weights=weights, minlength=n_groups), 1e-300)
    prior_scale = 2.0 * np.array([s.step for s in specs])
    lo = np.array([s.to_u(s.lower) for s in specs])
    hi = np.tile(np.array([s.to_u(s.upper) for s in specs]), (n_groups, 1))
    if upper_u is not None:
        hi = np.where(np.isnan(upper_u), hi, np.minimum(upper_u, hi))
    u = np.minimum(u, hi)
    every = np.arange(len(codes))

    def loss(uu, pred, idx):
        err = _log_errors(pred, value[idx], options.clip_log_error)
        fit = np.bincount(codes[idx], weights=weights[idx] * err, minlength=n_groups) / wsum
        return fit + options.prior_weight / n_rows * (((uu - prior_u) / prior_scale) ** 2).sum(axis=1)

    pred = predict(u[codes], every)
    best = loss(u, pred, every)
    slopes = {}
    for k in additive:  # d prediction / d parameter, per row (0 where it does not enter)
        shifted = u.copy()
        shifted[:, k] = np.where(u[:, k] + 1.0 <= hi[:, k], u[:, k] + 1.0, u[:, k] - 1.0)
        dx = specs[k].from_u(shifted[codes, k]) - specs[k].from_u(u[codes, k])
        with np.errstate(divide="ignore", invalid="ignore"):
            slopes[k] = np.where(dx != 0, (predict(shifted[codes], every) - pred) / dx, 0.0)
    for _ in range(options.iterations):
        for k in range(len(specs)):
            improved = np.zeros(n_groups, bool)
            for sign in (1.0, -1.0):
                moved = np.clip(u[:, k] + sign * steps[:, k], lo[k], hi[:, k])
                moving = (moved != u[:, k]) & ~improved
                if not moving.any():
                    continue
                trial = u.copy()
                trial[moving, k] = moved[moving]
                idx = np.flatnonzero(moving[codes])
                if k in slopes:
                    dx = specs[k].from_u(trial[codes[idx], k]) - specs[k].from_u(u[codes[idx], k])
                    trial_pred = pred[idx] + slopes[k][idx] * dx
                else:
                    trial_pred = predict(trial[codes[idx]], idx)
                trial_loss = loss(trial, trial_pred, idx)
                better = moving & (trial_loss < best - 1e-9)
                u[better, k] = trial[better, k]
                best = np.where(better, trial_loss, best)
                take = better[codes[idx]]
                pred[idx[take]] = trial_pred[take]
                improved |= better
            steps[~improved, k] *= 0.5
    if slopes:
        _check_tracked(pred, predict(u[codes], every), [s for i, s in enumerate(specs) if i in slopes])
    return u


def _check_tracked(tracked, full, specs) -> None:
    """The end-of-search check of :func:`pattern_search`'s additive updates."""
    both = np.isfinite(tracked) & np.isfinite(full)
    ok = np.array_equal(np.isfinite(tracked), np.isfinite(full)) and np.allclose(
        tracked[both], full[both], rtol=ADDITIVE_CHECK_RTOL, atol=0.0)
    if not ok:
        raise RuntimeError("calibration fit: a parameter of ADDITIVE_PARAMETERS no longer enters the predictions "
                           f"additively ({', '.join(s.description for s in specs)}): remove it there")


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
    #: Transformer layers and MoE layers of each row's model (the per-layer step costs' multipliers).
    layers: np.ndarray
    moe_layers: np.ndarray
    release_of_campaign: dict
    default: dict
    tables: dict

    @classmethod
    def start(cls, catalog, rows: pd.DataFrame, base: ServingParams, options: FitOptions) -> "_Fit":
        rows = add_families(rows.reset_index(drop=True))
        arrays = row_arrays(catalog, rows)
        start = {**OPTIONAL_DEFAULTS, **base.as_dict(), **Harness().__dict__}
        default = {n: float(np.asarray(start[n], float).reshape(-1)[0]) for n in DEFAULT_PARAMETERS}
        for col in ("release", "campaign"):
            if col not in rows:
                rows[col] = np.nan
        rows["platform"] = platform_keys(rows["engine"].to_numpy(), gpu_architectures(catalog, rows["gpu"].to_numpy()))
        keys_of = {level: rows[level].to_numpy() for level in ("gpu", "engine", "release", "platform", "campaign",
                                                               "math", "model")}
        layers = np.broadcast_to(np.asarray(arrays.n_layers, dtype=float), (len(rows),)).copy()
        moe_layers = np.where(np.broadcast_to(np.asarray(arrays.num_experts), layers.shape) > 0, layers, 0.0)
        return cls(catalog=catalog, base=base, options=options, rows=rows, arrays=arrays,
                   value=rows["value"].to_numpy(float), families=rows["family"].to_numpy(), keys_of=keys_of,
                   layers=layers, moe_layers=moe_layers,
                   release_of_campaign=dict(zip(keys_of["campaign"], engine_keys(rows))), default=default,
                   tables={level: {} for level in LEVELS})

    def calibration(self) -> Calibration:
        """The values fitted so far, as a calibration."""
        t = self.tables
        return Calibration(default=dict(self.default), gpus=t["gpu"], engines=t["engine"], releases=t["release"],
                           maths=t["math"], models=t["model"], campaigns=t["campaign"], platforms=t["platform"])

    def current(self) -> dict:
        """Per-row level values of the calibration so far (``{"<level>.<name>": array}``)."""
        cal = self.calibration()
        values = cal.level_values("gpu", self.keys_of["gpu"])
        values.update(cal.level_values("engine", engine_keys(self.rows)))
        for level in ("math", "model", "campaign", "platform"):
            values.update(cal.level_values(level, self.keys_of[level]))
        values["row.layers"], values["row.moe_layers"] = self.layers, self.moe_layers
        return values

    def subset(self, index) -> tuple:
        """The columns (:func:`planner.accuracy.row_columns`) and arrays of the rows ``index``
        (once per search, reused by every trial)."""
        if len(index) == len(self.rows):
            return row_columns(self.rows), self.arrays
        return row_columns(self.rows, index), self.arrays.take(index)

    def predict_with(self, values: dict, part: tuple, index=None) -> np.ndarray:
        """Predictions of the rows ``part`` = (columns, arrays) (of its rows ``index``; ``values``
        restricted to them)."""
        cols, arrays = part
        if index is not None and len(index) < len(cols["point_code"]):
            cols, arrays = {k: v[index] for k, v in cols.items()}, arrays.take(index)
        params, harness = compose(self.base, values)
        return predict_columns(cols, arrays, params, Harness(**harness))


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
                         u_rows: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Predictions of the rows ``index`` of ``part`` with the parameters ``specs`` of ``level``
    at their search coordinates ``u_rows`` (rows x parameters), the others at ``fixed_values``."""
    prefix = "engine" if level in ("engine", "release") else level
    whole = len(index) == len(part[0]["point_code"])
    values = dict(fixed_values) if whole else {k: v[index] for k, v in fixed_values.items()}
    for i, (n, s) in enumerate(specs.items()):
        key = f"{prefix}.{n}" if level else (f"gpu.{n}" if n in GPU_PARAMETERS else f"engine.{n}")
        values[key] = s.from_u(u_rows[:, i])
    return fit.predict_with(values, part, None if whole else index)


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
    additive = [i for i, n in enumerate(specs) if n in ADDITIVE_PARAMETERS]
    u = pattern_search(predict, fit.value[index], _family_weights(fit.families[index], codes), codes, len(prior),
                       prior, plist, fit.options, additive, _upper_bounds(fit, level, keys, specs))
    for g in range(len(prior)):
        fitted = {n: float(s.from_u(u[g, i])) for i, (n, s) in enumerate(specs.items())}
        if level is None:
            fit.default.update(fitted)
        else:
            fit.tables[level].setdefault(keys[g], {}).update(fitted)


def allreduce_latency_bound_s(catalog, gpu_id: str) -> float:
    """The most a GPU's fitted TP all-reduce latency may be: its scale-up link's published
    small-message all-reduce latency (``scale_up_allreduce_latency_us`` in
    ``catalogs/gpus.yaml``), else the parameter's loader range (a GPU without an NVLink-class
    link: the latency does not enter its predictions)."""
    spec = GPU_PARAMETERS["allreduce_latency_nvlink_s"]
    gpu = catalog.gpus.entries.get(gpu_id)
    figure = None if gpu is None else gpu.scale_up_allreduce_latency_s
    return spec.upper if figure is None else min(figure, spec.upper)


def _upper_bounds(fit: _Fit, level: str | None, keys: list, specs: dict):
    """Per-group upper bounds (u) of a search: the all-reduce latency of each GPU group at its
    link's published figure, of the global fit at the largest figure of the measured GPUs."""
    name = "allreduce_latency_nvlink_s"
    if name not in specs or level not in (None, "gpu"):
        return None
    spec = specs[name]
    if level == "gpu":
        column = [spec.to_u(allreduce_latency_bound_s(fit.catalog, str(g))) for g in keys]
    else:  # the global fit: the largest published figure of the measured GPUs that have one
        gpus = [fit.catalog.gpus.entries.get(str(g)) for g in sorted(set(fit.keys_of["gpu"]))]
        figures = [g.scale_up_allreduce_latency_s for g in gpus if g is not None and g.scale_up_allreduce_latency_s]
        column = [spec.to_u(min(max(figures), spec.upper) if figures else spec.upper)]
    out = np.full((len(column), len(specs)), np.nan)
    out[:, list(specs).index(name)] = column
    return out


#: What an unmeasured GPU's prior sibling shares with it, most specific first (then the
#: vendor alone): the compute architecture (the die its kernels run on), then the memory
#: technology (:func:`gpu_priors`).
PRIOR_KEYS = ("architecture", "memory_technology")


def gpu_priors(catalog, measured, keys=PRIOR_KEYS) -> dict:
    """Where each catalog GPU without values of its own borrows its hardware values.

    The measured GPU (in ``measured``) of the same vendor and the same first of ``keys``
    (``architecture`` in ``catalogs/gpus.yaml``: H200 from H100, MI325X from MI300X, the same
    die with other memory; then ``memory_technology``) whose datasheet bandwidth is nearest
    (|ln ratio|, then id); without one sharing any key, the nearest measured GPU of the same
    vendor; without any measured GPU of the vendor: None (the seed defaults). Never an
    average over other vendors' GPUs.

    Notes
    -----
    The achievable fractions of the datasheet bandwidth and FLOPS are properties of the die
    and its kernels more than of the memory type: with the fitted values of a sibling in
    place of a GPU's own, MI325X's rows are predicted far better with MI300X's values (the
    same CDNA 3 die) than with MI355X's (the same HBM3e, CDNA 4), H200's throughput better
    with H100's than with B200's (docs/accuracy.md, "Cross-validation", generated by
    ``benchmarks/bench_accuracy.py``).
    """
    measured = sorted(g for g in measured if g in catalog.gpus.entries)
    out = {}
    for gid in sorted(catalog.gpus.entries):
        if gid in measured:
            continue
        g = catalog.gpu(gid)
        same = [catalog.gpu(m) for m in measured if catalog.gpu(m).vendor == g.vendor]
        if not same:
            out[gid] = {"borrowed_from": None, "reason": f"no measured {g.vendor} GPU: seed defaults"}
            continue
        values = [getattr(g, k) or "" for k in keys]
        level = next((i for i, k in enumerate(keys)
                      if values[i] and any(getattr(m, k) == values[i] for m in same)), None)
        pool = same if level is None else [m for m in same if getattr(m, keys[level]) == values[level]]
        near = min(pool, key=lambda m: (abs(np.log(m.memory_bandwidth_tb_per_s / g.memory_bandwidth_tb_per_s)),
                                        m.id))
        missing = " or ".join(v for v in values[:len(keys) if level is None else level])
        found = "" if level is None else values[level]
        why = (f"no measured {g.vendor} {missing} GPU: " if missing else "") + \
            f"nearest measured {g.vendor} {found} GPU by memory bandwidth"
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
                          "platform": platform_keys(rows["engine"].to_numpy(), gpu_architectures(catalog, rows["gpu"].to_numpy())),
                          "campaign": rows["campaign"].to_numpy() if "campaign" in rows else np.nan,
                          "family": rows["family"].to_numpy(),
                          "ape": np.abs(pred - measured) / measured * 100.0})

    def summary(part):
        return {"rows": int(len(part)), "median_ape_pct": {f: round(float(v), 1) for f, v in
                                                           part.groupby("family")["ape"].median().items()}}

    stats = {"default": summary(frame)}
    for level, table in (("gpu", cal.gpus), ("engine", cal.engines), ("release", cal.releases),
                         ("math", cal.maths), ("model", cal.models), ("campaign", cal.campaigns),
                         ("platform", cal.platforms)):
        stats.update({f"{level}:{k}": summary(frame[frame[level] == k]) for k in table})
    return replace(cal, stats=stats)
