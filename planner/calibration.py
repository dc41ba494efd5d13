"""Calibrated serving parameters: load them, apply them per GPU, engine and model, fit them to measurements.

A calibration is factorized: hardware parameters per GPU (:data:`GPU_PARAMETERS`: bandwidth
and compute efficiency, all-reduce latency), software parameters per serving engine
(:data:`ENGINE_PARAMETERS`: step and request overheads, a kernel-efficiency factor), and
optional per-model adjustments (:data:`MODEL_PARAMETERS`). Each falls back to the global
fit (``default``) where the data had no group. :func:`fit_calibration` fits them to
published measurements; the shipped result is ``catalogs/calibration.yaml``;
``load_calibration('none')`` returns None (the seeds' values).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from planner.catalog import DEFAULT_CATALOG_DIR
from planner.schema import PlanningInputError
from planner.serving.params import ServingParams

log = logging.getLogger(__name__)

#: The calibration shipped with the planner.
DEFAULT_CALIBRATION_PATH = DEFAULT_CATALOG_DIR / "calibration.yaml"
#: Levels of a calibration, in fitting order after the global fit.
LEVELS = ("gpu", "engine", "release", "math", "model")


@dataclass(frozen=True)
class ParamSpec:
    """One calibrated parameter: bounds [lower, upper] (SI units), its search coordinate u
    (``log``: u = ln x, else u = x / scale; ``step``: the first step in u), its neutral
    value (what a missing group means for factors and deltas) and, where it differs from
    the fit's setting, how many distinct partners a group needs (``min_other``)."""

    lower: float
    upper: float
    scale: float = 1.0
    log: bool = False
    step: float = 0.25
    neutral: float | None = None
    description: str = ""
    #: Distinct partners a group needs for this parameter (None: ``FitOptions.min_other``).
    min_other: int | None = None

    def to_u(self, x):
        x = np.clip(np.asarray(x, dtype=float), self.lower, self.upper)
        return np.log(x) if self.log else x / self.scale

    def from_u(self, u):
        x = np.exp(u) if self.log else np.asarray(u, dtype=float) * self.scale
        return np.clip(x, self.lower, self.upper)


#: Hardware: fitted per GPU.
GPU_PARAMETERS: dict[str, ParamSpec] = {
    "memory_efficiency": ParamSpec(0.2, 1.0, log=True, step=0.2,
                                   description="eta_m: achieved fraction of peak memory bandwidth"),
    "compute_efficiency": ParamSpec(0.1, 1.0, log=True, step=0.2,
                                    description="eta_c: achieved fraction of dense peak FLOP/s"),
    "allreduce_latency_nvlink_s": ParamSpec(
        1e-6, 2e-4, scale=1e-5, step=1.0, description="tau: fixed latency of one TP all-reduce over NVLink"),
}
#: Software: fitted per serving engine. ``first_wave_weight`` describes the benchmark
#: harness (used by ``planner accuracy`` only, see :class:`planner.accuracy.Harness`).
ENGINE_PARAMETERS: dict[str, ParamSpec] = {
    "step_overhead_s": ParamSpec(0.0, 0.05, scale=1e-3, step=1.0,
                                 description="fixed time per engine step (launches, scheduling, sampling)"),
    "request_overhead_s": ParamSpec(0.0, 1.0, scale=1e-2, step=2.0,
                                    description="fixed TTFT latency outside the GPU steps (server, "
                                                "tokenizer, scheduling, streaming)"),
    "memory_factor": ParamSpec(0.3, 3.0, log=True, step=0.2, neutral=1.0,
                               description="multiplies memory efficiency (decode kernels)"),
    "compute_factor": ParamSpec(0.3, 3.0, log=True, step=0.2, neutral=1.0,
                                description="multiplies compute efficiency (GEMM and attention kernels)"),
    "prefill_compute_factor": ParamSpec(0.1, 3.0, log=True, step=0.2, neutral=1.0,
                                        description="prefill math runs at compute efficiency times this"),
    "first_wave_weight": ParamSpec(0.0, 1.0, scale=0.1, step=1.0,
                                   description="closed-loop benchmarks: share of requests that behave "
                                               "like the synchronized first wave"),
}
#: Per tensor-core math (bf16, fp8, fp4, int8, weight-only): kernels reach a different
#: fraction of each unit's peak (applied when the caller passes the math modes).
MATH_PARAMETERS: dict[str, ParamSpec] = {
    "compute_factor": ParamSpec(0.2, 3.0, log=True, step=0.2, neutral=1.0,
                                description="multiplies compute efficiency for this math"),
}
#: Per-model adjustments (applied when the caller passes model ids). The efficiency factor
#: multiplies both of a GPU's efficiencies, so it separates from the GPU only with two GPUs;
#: the prefill factor scales the prefill path alone, which the GPU's compute efficiency (fitted
#: on every model) already pins on one GPU, so groups of one GPU get it (``min_other=1``): out
#: of fold this lowered every family's error (docs/accuracy.md).
MODEL_PARAMETERS: dict[str, ParamSpec] = {
    "efficiency_factor": ParamSpec(0.3, 3.0, log=True, step=0.2, neutral=1.0,
                                   description="multiplies memory and compute efficiency"),
    "prefill_factor": ParamSpec(0.3, 3.0, log=True, step=0.2, neutral=1.0, min_other=1,
                                description="multiplies the prefill compute factor (the model's prefill "
                                            "path: MoE grouped GEMMs and routing, MLA attention)"),
}
LEVEL_PARAMETERS = {"gpu": GPU_PARAMETERS, "engine": ENGINE_PARAMETERS, "release": ENGINE_PARAMETERS,
                    "math": MATH_PARAMETERS, "model": MODEL_PARAMETERS}
#: Parameters of the global fit (the engine's efficiency factor is 1 there by definition).
DEFAULT_PARAMETERS = {**GPU_PARAMETERS, **{k: v for k, v in ENGINE_PARAMETERS.items() if v.neutral is None}}
HARNESS_FIELDS = ("first_wave_weight",)


def compose(base: ServingParams, values: dict):
    """(ServingParams, harness dict) from per-row level values.

    ``values`` maps ``gpu.<name>``, ``engine.<name>``, ``model.<name>`` to arrays (or
    scalars). Efficiencies are eta_gpu * f_engine * f_model (at most 1; the engine has a
    memory and a compute factor); the prefill factor is the engine's times the model's; the
    request overhead is the engine's.
    """
    f = np.asarray(values.get("model.efficiency_factor", 1.0))
    serving = {
        "memory_efficiency": np.minimum(values["gpu.memory_efficiency"] * f
                                        * np.asarray(values.get("engine.memory_factor", 1.0)), 1.0),
        "compute_efficiency": np.minimum(values["gpu.compute_efficiency"] * f
                                         * np.asarray(values.get("engine.compute_factor", 1.0))
                                         * np.asarray(values.get("math.compute_factor", 1.0)), 1.0),
        "allreduce_latency_nvlink_s": values["gpu.allreduce_latency_nvlink_s"],
        "step_overhead_s": values["engine.step_overhead_s"],
        "prefill_compute_factor": np.asarray(values.get("engine.prefill_compute_factor", 1.0))
        * np.asarray(values.get("model.prefill_factor", 1.0)),
        "request_overhead_s": values["engine.request_overhead_s"],
    }
    harness = {h: values[f"engine.{h}"] for h in HARNESS_FIELDS if f"engine.{h}" in values}
    return base.with_overrides(**{k: np.asarray(v, dtype=float) for k, v in serving.items()}), harness


@dataclass(frozen=True)
class Calibration:
    """Fitted values: ``default`` (global fit), per ``gpus``, ``engines``, engine ``releases``
    (``<engine>@<major>.<minor>``, e.g. ``trtllm@1.2``) and ``models``.

    Each maps a key to ``{parameter: value}``; ``stats`` maps ``gpu:<id>`` etc. to the rows
    and residuals of the group; ``provenance`` says where the values come from.
    """

    default: dict
    gpus: dict = field(default_factory=dict)
    engines: dict = field(default_factory=dict)
    releases: dict = field(default_factory=dict)
    maths: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)
    path: str | None = None

    @property
    def parameters(self) -> list[str]:
        """The ServingParams fields this calibration sets."""
        return ["memory_efficiency", "compute_efficiency", "allreduce_latency_nvlink_s", "step_overhead_s",
                "request_overhead_s", "prefill_compute_factor"]

    def level_values(self, level: str, keys, fallback: str = "global") -> dict:
        """``{"<level>.<name>": per-row array}`` for ``keys`` (ids of the level, None allowed).

        Engine keys may name a release (``trtllm@1.2``): release values, then the engine's,
        then the global fit.
        """
        table = {"gpu": self.gpus, "engine": self.engines, "math": self.maths, "model": self.models}[level]
        codes, uniques = pd.factorize(np.asarray(keys, dtype=object).reshape(-1))  # None/NaN -> -1
        uniques = [str(k) for k in uniques] + [""]
        codes = np.where(codes < 0, len(uniques) - 1, codes)
        out = {}
        for name, spec in LEVEL_PARAMETERS[level].items():
            if spec.neutral is not None:
                default = spec.neutral
            elif fallback == "global":
                default = self.default.get(name, np.nan)
            else:
                default = np.nan
            per_key = []
            for k in uniques:
                chain = [self.releases.get(k, {}), table.get(k.split("@")[0], {})] if level == "engine" \
                    else [table.get(k, {})]
                per_key.append(next((c[name] for c in chain if name in c), default))
            out[f"{level}.{name}"] = np.asarray(per_key, dtype=float)[codes] if codes.size else np.zeros(0)
        return out

    def params_for(self, base: ServingParams, gpu_ids, engine=None, fallback: str = "global",
                   model_ids=None, math_modes=None) -> ServingParams:
        """``base`` with the calibrated fields replaced by arrays aligned with ``gpu_ids``.

        Parameters
        ----------
        base : ServingParams
            The values to start from (fields a calibration does not set keep them).
        gpu_ids : array-like of str
            Canonical catalog GPU id per configuration row.
        engine : str or array-like of str, optional
            Serving engine (``vllm``, ``sglang``, ``trtllm``, ...) or engine release
            (``trtllm@1.2``), one for all rows or one per row; None (or an engine without its
            own values) uses the global fit's software values.
        fallback : {"global", "base"}
            What a GPU without its own values gets: the global fit (default: every GPU of a
            comparison then carries the same software overheads) or ``base``'s values.
        model_ids : array-like of str, optional
            Catalog model id per row: applies the per-model adjustments too.
        math_modes : array-like of str, optional
            Tensor-core math per row (:meth:`planner.catalog.Catalog.math_modes`: bf16, fp8, fp4,
            int8 or weight-only): applies the per-math compute factors too.

        Returns
        -------
        ServingParams whose calibrated fields are float arrays of ``len(gpu_ids)``.
        """
        gpus = np.asarray(gpu_ids, dtype=object).reshape(-1)
        values = self.level_values("gpu", gpus, fallback)
        engines = np.broadcast_to(np.asarray(engine, dtype=object), gpus.shape)
        values.update(self.level_values("engine", engines))
        if model_ids is not None:
            values.update(self.level_values("model", model_ids))
        if math_modes is not None:
            values.update(self.level_values("math", math_modes))
        params, _ = compose(base, values)
        if fallback == "base":
            own = np.isin(gpus.astype(str), list(self.gpus))
            keep = {n: np.where(own, getattr(params, n), np.broadcast_to(np.asarray(getattr(base, n), float),
                                                                         own.shape))
                    for n in GPU_PARAMETERS}
            params = params.with_overrides(**keep)
        return params

    def harness_for(self, gpu_ids, engine=None):
        """The benchmark-harness values (:class:`planner.accuracy.Harness`) per row."""
        from planner.accuracy import Harness

        n = np.asarray(gpu_ids, dtype=object).reshape(-1).shape
        values = self.level_values("engine", np.broadcast_to(np.asarray(engine, dtype=object), n))
        return Harness(**{h: values[f"engine.{h}"] for h in HARNESS_FIELDS})

    def describe(self) -> dict:
        """What the calibration is and which parameters it sets (for every output)."""
        return {
            "calibration": self.path or "in-memory",
            "parameters": self.parameters,
            "default": dict(self.default),
            "gpus": sorted(self.gpus), "engines": sorted(self.engines), "releases": sorted(self.releases),
            "math": sorted(self.maths), "models": sorted(self.models),
            "lookup": "hardware per GPU, software per engine release -> engine, both else the global "
                      "fit; math and model adjustments when math modes and model ids are given",
            "source": self.provenance.get("source", {}),
            "fitted": self.provenance.get("fitted", {}),
        }

    def to_dict(self) -> dict:
        """The YAML document of this calibration (see ``catalogs/calibration.yaml``)."""
        def section(level, table):
            return {k: {"values": _rounded(v), **self.stats.get(f"{level}:{k}", {})}
                    for k, v in sorted(table.items())}

        default = {"values": _rounded(self.default), **self.stats.get("default", {})}
        return {**self.provenance, "default": default,
                "gpus": section("gpu", self.gpus), "engines": section("engine", self.engines),
                "releases": section("release", self.releases), "math": section("math", self.maths),
                "models": section("model", self.models)}


def _rounded(values: dict) -> dict:
    return {k: float(f"{v:.4g}") for k, v in values.items()}


def calibration_from_dict(doc: dict, path: str | None = None) -> Calibration:
    """Parse a calibration YAML document; ``PlanningInputError`` on unknown or bad values."""
    where0 = path or "calibration"
    if not isinstance(doc, dict) or not isinstance(doc.get("default"), dict):
        raise PlanningInputError(f"{where0}: expected a mapping with 'default', 'gpus', 'engines', 'models'")
    problems, stats = [], {}

    def values_of(block, where, known):
        values = (block or {}).get("values") or {}
        if not isinstance(values, dict):
            problems.append(f"{where}.values: expected a mapping")
            return {}
        out = {}
        for name, value in values.items():
            if name not in known:
                problems.append(f"{where}.values.{name}: unknown parameter (known: {', '.join(known)})")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                problems.append(f"{where}.values.{name}: must be a finite number, got {value!r}")
            elif not known[name].lower <= value <= known[name].upper:
                problems.append(f"{where}.values.{name}: {value} is outside [{known[name].lower}, "
                                f"{known[name].upper}]")
            else:
                out[name] = float(value)
        return out

    default = values_of(doc["default"], "default", DEFAULT_PARAMETERS)
    stats["default"] = {k: v for k, v in doc["default"].items() if k != "values"}
    tables = {}
    for level, section in (("gpu", "gpus"), ("engine", "engines"), ("release", "releases"), ("math", "math"),
                           ("model", "models")):
        tables[level] = {}
        for key, block in (doc.get(section) or {}).items():
            tables[level][str(key)] = values_of(block, f"{section}.{key}", LEVEL_PARAMETERS[level])
            stats[f"{level}:{key}"] = {k: v for k, v in (block or {}).items() if k != "values"}
    missing = [n for n in DEFAULT_PARAMETERS if n not in default]
    if missing:
        problems.append(f"default.values: missing {', '.join(missing)}")
    if problems:
        raise PlanningInputError([f"{where0}: {p}" for p in problems])
    provenance = {k: v for k, v in doc.items() if k not in ("default", "gpus", "engines", "releases", "math",
                                                            "models")}
    return Calibration(default=default, gpus=tables["gpu"], engines=tables["engine"],
                       releases=tables["release"], maths=tables["math"], models=tables["model"], stats=stats,
                       provenance=provenance, path=path)


def load_calibration(spec: str | Path | None = "default") -> Calibration | None:
    """``'none'`` -> None (seed values); None or ``'default'`` -> the shipped file; else a path."""
    from planner.yamlio import read_yaml

    if spec is not None and str(spec).strip().lower() == "none":
        return None
    path = DEFAULT_CALIBRATION_PATH if spec is None or str(spec) == "default" else Path(spec)
    if not Path(path).is_file():
        raise PlanningInputError(f"--calibration: no such file '{path}' (use 'none', 'default' or a path)")
    return calibration_from_dict(read_yaml(Path(path)), str(_display_path(Path(path))))


def _display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(DEFAULT_CATALOG_DIR.parent))
    except ValueError:
        return str(path)


def write_calibration(calibration: Calibration, path: str | Path) -> None:
    """Write ``calibration`` as YAML, with a header comment, to ``path``."""
    import yaml

    header = ("# Calibrated serving-model parameters, written by `planner calibrate`\n"
              "# (planner/calibration.py).\n"
              "# Hardware values per GPU (gpus), software values per engine release -> engine (releases,\n"
              "# engines), both falling back to the global fit (default); math and models adjust on top\n"
              "# when the caller passes math modes and model ids. Efficiency = eta_gpu * engine factor *\n"
              "# math factor * model factor (<= 1); prefill factor = engine value * model value;\n"
              "# request overhead = engine value (online runs).\n"
              "# rows / median_ape_pct: the rows of the group and their median absolute percentage error\n"
              "# per metric family with these values. Regenerate with `fitted.command`.\n")
    text = yaml.safe_dump(calibration.to_dict(), sort_keys=False, default_flow_style=False, width=100)
    from planner.atomic import atomic_write_text

    atomic_write_text(path, header + text)


def file_sha256(path: str | Path) -> str:
    """SHA-256 hex digest of a file (provenance of a fit)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def predict_calibrated(catalog, rows: pd.DataFrame, calibration: Calibration | None,
                       base: ServingParams | None = None, arrays=None) -> np.ndarray:
    """Predictions of prepared rows with a calibration (None: ``base``, the seeds' values)."""
    from planner.accuracy import predict_rows

    base = base or ServingParams()
    if calibration is None:
        return predict_rows(catalog, rows, base, arrays=arrays)
    gpus, models = rows["gpu"].to_numpy(), rows["model"].to_numpy()
    engines = engine_keys(rows)
    maths = rows["math"].to_numpy() if "math" in rows else None
    params = calibration.params_for(base, gpus, engines, model_ids=models, math_modes=maths)
    return predict_rows(catalog, rows, params, calibration.harness_for(gpus, engines), arrays=arrays)


def engine_keys(rows: pd.DataFrame) -> np.ndarray:
    """``<engine>@<release>`` where the row has a release, else the engine."""
    release = rows["release"] if "release" in rows else pd.Series(np.nan, index=rows.index)
    return np.where(release.notna(), release.astype(str), rows["engine"].astype(str)).astype(object)


# ------------------------------------------------------------------------ fitting


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


_OTHER = {"gpu": "model", "engine": "gpu", "release": "pair", "math": "model", "model": "gpu"}


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
    if "release" not in rows:
        rows = rows.assign(release=np.nan)
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
    from planner.accuracy import Harness, add_families, predict_rows, row_arrays, take_arrays

    base = base or ServingParams()
    options = options or FitOptions()
    rows = add_families(rows.reset_index(drop=True))
    arrays = row_arrays(catalog, rows)
    value = rows["value"].to_numpy(float)
    families = rows["family"].to_numpy()
    start = {**base.as_dict(), **Harness().__dict__}
    default = {n: float(np.asarray(start[n], float).reshape(-1)[0]) for n in DEFAULT_PARAMETERS}
    tables: dict[str, dict] = {level: {} for level in LEVELS}
    if "release" not in rows:
        rows["release"] = np.nan
    keys_of = {"gpu": rows["gpu"].to_numpy(), "engine": rows["engine"].to_numpy(),
               "release": rows["release"].to_numpy(), "math": rows["math"].to_numpy(),
               "model": rows["model"].to_numpy()}

    def calibration() -> Calibration:
        return Calibration(default=dict(default), gpus=tables["gpu"], engines=tables["engine"],
                           releases=tables["release"], maths=tables["math"], models=tables["model"])

    def current() -> dict:
        cal = calibration()
        values = cal.level_values("gpu", keys_of["gpu"])
        values.update(cal.level_values("engine", engine_keys(rows)))
        values.update(cal.level_values("math", keys_of["math"]))
        values.update(cal.level_values("model", keys_of["model"]))
        return values

    def predict_with(values: dict, index):
        """Predictions of rows ``index`` (``values`` already restricted to them)."""
        params, harness = compose(base, values)
        if len(index) == len(rows):
            return predict_rows(catalog, rows, params, Harness(**harness), arrays=arrays)
        return predict_rows(catalog, rows.iloc[index].reset_index(drop=True), params, Harness(**harness),
                            arrays=take_arrays(arrays, index, len(rows)))

    def search(level: str | None, keys: list, specs: dict):
        names, plist = list(specs), list(specs.values())
        if level is None:
            codes, index = np.zeros(len(rows), dtype=int), np.arange(len(rows))
            prior = np.array([[s.to_u(default[n]) for n, s in specs.items()]])
        else:
            codes_all = pd.Series(keys_of[level], dtype=object).map({k: i for i, k in enumerate(keys)})
            index = np.flatnonzero(codes_all.notna().to_numpy())
            codes = codes_all.to_numpy()[index].astype(int)
            parent = calibration()
            prior = []
            for k in keys:  # releases start from their engine, the rest from the global fit
                up = parent.level_values("engine", [k.split("@")[0]]) if level == "release" else {}
                prior.append([s.to_u(up[f"engine.{n}"][0] if up else
                                     (s.neutral if s.neutral is not None else default[n]))
                              for n, s in specs.items()])
            prior = np.array(prior)
        if not index.size:
            return
        fixed_values = {k: v[index] for k, v in current().items()}
        prefix = "engine" if level in ("engine", "release") else level

        def predict(u_rows):
            values = dict(fixed_values)
            for i, (n, s) in enumerate(zip(names, plist)):
                key = f"{prefix}.{n}" if level else (f"gpu.{n}" if n in GPU_PARAMETERS else f"engine.{n}")
                values[key] = s.from_u(u_rows[:, i])
            return predict_with(values, index)

        u = pattern_search(predict, value[index], _family_weights(families[index], codes), codes, len(prior),
                           prior, plist, options)
        for g in range(len(prior)):
            fitted = {n: float(s.from_u(u[g, i])) for i, (n, s) in enumerate(zip(names, plist))}
            if level is None:
                default.update(fitted)
            else:
                tables[level].setdefault(keys[g], {}).update(fitted)

    search(None, [], DEFAULT_PARAMETERS)
    batches = {level: parameter_batches(level, rows, options) for level in options.levels}
    for round_ in range(options.rounds):
        for level in options.levels:
            for keys, specs in batches[level]:
                search(level, keys, specs)
        log.info("calibration round %d/%d done", round_ + 1, options.rounds)
    cal = calibration()
    cal = Calibration(default=cal.default, gpus=cal.gpus, engines=cal.engines, releases=cal.releases,
                      maths=cal.maths, models=cal.models, provenance=dict(provenance or {}))
    return with_stats(cal, catalog, rows, base, arrays)


def with_stats(cal: Calibration, catalog, rows: pd.DataFrame, base: ServingParams | None = None,
               arrays=None) -> Calibration:
    """``cal`` with the rows and median APE per metric family of every group."""
    from planner.accuracy import add_families

    rows = add_families(rows)
    pred = predict_calibrated(catalog, rows, cal, base, arrays)
    measured = rows["value"].to_numpy(float)
    frame = pd.DataFrame({"gpu": rows["gpu"].to_numpy(), "engine": rows["engine"].to_numpy(),
                          "release": engine_keys(rows), "math": rows["math"].to_numpy(),
                          "model": rows["model"].to_numpy(),
                          "family": rows["family"].to_numpy(),
                          "ape": np.abs(pred - measured) / measured * 100.0})

    def summary(part):
        return {"rows": int(len(part)), "median_ape_pct": {f: round(float(v), 1) for f, v in
                                                           part.groupby("family")["ape"].median().items()}}

    stats = {"default": summary(frame)}
    for level, table in (("gpu", cal.gpus), ("engine", cal.engines), ("release", cal.releases),
                         ("math", cal.maths), ("model", cal.models)):
        stats.update({f"{level}:{k}": summary(frame[frame[level] == k]) for k in table})
    return Calibration(default=cal.default, gpus=cal.gpus, engines=cal.engines, releases=cal.releases,
                       maths=cal.maths, models=cal.models, stats=stats, provenance=cal.provenance,
                       path=cal.path)


def group_folds(rows: pd.DataFrame, folds: int = 5, by=("model", "gpu")) -> np.ndarray:
    """Fold number per row: whole (model, GPU) groups, largest first, each to the fold with
    the fewest rows so far (deterministic)."""
    keys = rows[list(by)].astype(str).agg("|".join, axis=1)
    sizes = keys.value_counts()
    load = np.zeros(folds)
    fold_of = {}
    for key in sorted(sizes.index, key=lambda k: (-sizes[k], k)):
        fold_of[key] = int(np.argmin(load))
        load[fold_of[key]] += sizes[key]
    return keys.map(fold_of).to_numpy()


def cross_validate(catalog, rows: pd.DataFrame, folds: int = 5, options: FitOptions | None = None,
                   base: ServingParams | None = None, keep_fits: bool = False) -> dict:
    """K-fold cross-validation of :func:`fit_calibration`, folds grouped by (model, GPU).

    Returns
    -------
    dict: ``folds``; ``by_family``: per metric family ``n``, ``in_fold_median_ape_pct`` (the
    training rows of every fold, pooled), ``out_of_fold_median_ape_pct`` (every row predicted
    by the fit that did not see its (model, GPU) pair, pooled) and ``gap_pct``; ``per_fold``;
    ``predictions``: the out-of-fold prediction per row id; with ``keep_fits``, ``fits``: the
    fold's Calibration per fold and ``fold_of``: the fold per row (in ``rows`` order).
    """
    from planner.accuracy import add_families

    rows = add_families(rows.reset_index(drop=True))
    fold = group_folds(rows, folds)
    measured = rows["value"].to_numpy(float)
    oof = np.full(len(rows), np.nan)
    inside, per_fold, fits = [], [], []
    for k in range(folds):
        train, test = fold != k, fold == k
        cal = fit_calibration(catalog, rows[train], base, options)
        fits.append(cal)
        pred_train = predict_calibrated(catalog, rows[train].reset_index(drop=True), cal, base)
        oof[test] = predict_calibrated(catalog, rows[test].reset_index(drop=True), cal, base)
        ape_train = np.abs(pred_train - measured[train]) / measured[train] * 100.0
        ape_test = np.abs(oof[test] - measured[test]) / measured[test] * 100.0
        inside.append(pd.DataFrame({"family": rows.loc[train, "family"].to_numpy(), "ape": ape_train}))
        per_fold.append({"fold": k, "held_out": sorted(rows.loc[test, ["model", "gpu"]].astype(str)
                                                       .agg("|".join, axis=1).unique()),
                         "in_fold_median_ape_pct": _family_medians(rows.loc[train, "family"], ape_train),
                         "out_of_fold_median_ape_pct": _family_medians(rows.loc[test, "family"], ape_test)})
        log.info("fold %d/%d done", k + 1, folds)
    ape_oof = np.abs(oof - measured) / measured * 100.0
    inside_all = pd.concat(inside)
    by_family = {}
    for fam in sorted(rows["family"].unique()):
        a = float(np.nanmedian(inside_all.loc[inside_all["family"] == fam, "ape"]))
        b = float(np.nanmedian(ape_oof[rows["family"].to_numpy() == fam]))
        by_family[fam] = {"n": int((rows["family"] == fam).sum()), "in_fold_median_ape_pct": round(a, 1),
                          "out_of_fold_median_ape_pct": round(b, 1), "gap_pct": round(b - a, 1)}
    result = {"folds": folds, "grouped_by": ["model", "gpu"], "by_family": by_family, "per_fold": per_fold,
              "predictions": dict(zip(rows["id"], oof))}
    return {**result, "fits": fits, "fold_of": fold} if keep_fits else result


def _family_medians(families: pd.Series, ape: np.ndarray) -> dict:
    frame = pd.DataFrame({"family": families.to_numpy(), "ape": ape})
    return {f: round(float(v), 1) for f, v in frame.groupby("family")["ape"].median().items()}
