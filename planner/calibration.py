"""Calibrated serving parameters, the data part: load and write a calibration, look its values
up per GPU, engine, engine build, model and math, compose them (the parameters' declarations:
:mod:`planner.calibration_params`, re-exported here).

A calibration is factorized: hardware parameters per GPU (:data:`GPU_PARAMETERS`: bandwidth
and compute efficiency, all-reduce latency), software parameters per serving engine
(:data:`ENGINE_PARAMETERS`: step and request overheads, a kernel-efficiency factor), and
optional per-model adjustments (:data:`MODEL_PARAMETERS`). Each falls back to the global
fit (``default``) where the data had no group. The fitting part is :mod:`planner.calibration_fit`
(:func:`~planner.calibration_fit.fit_calibration` fits them to published measurements and
:func:`~planner.calibration_fit.gpu_priors` says where unmeasured GPUs borrow their hardware
values); the shipped result is ``catalogs/calibration.yaml``;
``load_calibration('none')`` returns None (the seeds' values).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

# The parameters' declarations (re-exported: planner.calibration stays the import point).
from planner.calibration_params import (  # noqa: F401
    CAMPAIGN_PARAMETERS, DEFAULT_PARAMETERS, ENGINE_PARAMETERS, FACTOR_BOUNDS, GPU_PARAMETERS, HARNESS_FIELDS,
    LEVEL_PARAMETERS, LEVELS, MATH_PARAMETERS, MAX_ALLREDUCE_LATENCY_S, MAX_COMPUTE_EFFICIENCY,
    MAX_LAYER_OVERHEAD_S, MAX_MEMORY_EFFICIENCY, MODEL_PARAMETERS, OPTIONAL_DEFAULTS, PLATFORM_PARAMETERS,
    ParamSpec)
from planner.catalog import DEFAULT_CATALOG_DIR
from planner.catalog_cache import cached
from planner.schema import PlanningInputError
from planner.serving.params import ServingParams


#: The calibration shipped with the planner.
DEFAULT_CALIBRATION_PATH = DEFAULT_CATALOG_DIR / "calibration.yaml"


def compose(base: ServingParams, values: dict):
    """(ServingParams, harness dict) from per-row level values.

    ``values`` maps ``gpu.<name>``, ``engine.<name>``, ``model.<name>`` to arrays (or
    scalars). Efficiencies are eta_gpu * f_engine * f_model (* f_math for compute), clipped
    at the hardware bounds :data:`MAX_MEMORY_EFFICIENCY` and :data:`MAX_COMPUTE_EFFICIENCY`;
    the prefill factor is the engine's times the model's, clipped so that the prefill
    efficiency (compute efficiency * prefill factor) stays within the compute bound too;
    the step overhead is the engine's plus the per-layer costs (:func:`layer_cost_s`); the
    request overhead is the campaign's (accuracy rows only) or the engine's.
    """
    f = np.asarray(values.get("model.efficiency_factor", 1.0))
    compute = np.minimum(values["gpu.compute_efficiency"] * f
                         * np.asarray(values.get("engine.compute_factor", 1.0))
                         * np.asarray(values.get("math.compute_factor", 1.0)), MAX_COMPUTE_EFFICIENCY)
    prefill = (np.asarray(values.get("engine.prefill_compute_factor", 1.0))
               * np.asarray(values.get("model.prefill_factor", 1.0)))
    serving = {
        "memory_efficiency": np.minimum(values["gpu.memory_efficiency"] * f
                                        * np.asarray(values.get("engine.memory_factor", 1.0)),
                                        MAX_MEMORY_EFFICIENCY),
        "compute_efficiency": compute,
        "allreduce_latency_nvlink_s": values["gpu.allreduce_latency_nvlink_s"],
        "step_overhead_s": np.asarray(values["engine.step_overhead_s"], dtype=float) + layer_cost_s(values),
        "prefill_compute_factor": np.minimum(prefill, MAX_COMPUTE_EFFICIENCY / compute),
        "request_overhead_s": _campaign_or(values, "request_overhead_s"),
    }
    harness = {h: _campaign_or(values, h) for h in HARNESS_FIELDS if f"engine.{h}" in values}
    return base.with_overrides(**{k: np.asarray(v, dtype=float) for k, v in serving.items()}), harness


def platform_keys(engines, architectures) -> np.ndarray:
    """``<engine>:<architecture>`` per row (an engine release counts as its engine; None: no engine)."""
    e, v = (a.reshape(-1) for a in np.broadcast_arrays(np.asarray(engines, dtype=object),
                                                        np.asarray(architectures, dtype=object)))
    return np.array([None if pd.isna(k) else f"{str(k).split('@')[0]}:{w}" for k, w in zip(e, v)], dtype=object)


def layer_cost_s(values: dict):
    """The per-layer part of a step's fixed time per row: layers x (engine + model
    ``layer_overhead_s``) + MoE layers x the platform's ``moe_layer_overhead_s`` (0 without
    ``row.layers`` / ``row.moe_layers``)."""
    out = 0.0
    layers, moe_layers = values.get("row.layers"), values.get("row.moe_layers")
    if layers is not None:
        per_layer = sum(np.asarray(values.get(f"{level}.layer_overhead_s", 0.0), dtype=float)
                        for level in ("engine", "model"))
        out = np.asarray(layers, dtype=float) * per_layer
    if moe_layers is not None:
        out = out + np.asarray(moe_layers, dtype=float) * np.asarray(
            values.get("platform.moe_layer_overhead_s", 0.0), dtype=float)
    return out


def _campaign_or(values: dict, name: str):
    """The campaign's value where it has one, else the engine's."""
    engine = np.asarray(values[f"engine.{name}"], dtype=float)
    campaign = values.get(f"campaign.{name}")
    return engine if campaign is None else np.where(np.isnan(campaign), engine, campaign)


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
    #: Engine builds per GPU architecture (``sglang:gfx942``; :data:`PLATFORM_PARAMETERS`).
    platforms: dict = field(default_factory=dict)
    #: Benchmark campaigns' harness values (:data:`CAMPAIGN_PARAMETERS`; accuracy only).
    campaigns: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)
    path: str | None = None
    #: GPU without values of its own -> ``{"borrowed_from": measured GPU id or None, "reason"}``
    #: (:func:`planner.calibration_fit.gpu_priors`); such a GPU is "uncalibrated" in every output.
    gpu_priors: dict = field(default_factory=dict)
    #: Prediction intervals from out-of-fold errors (:mod:`planner.calibration_intervals`).
    intervals: dict = field(default_factory=dict)

    @property
    def parameters(self) -> list[str]:
        """The ServingParams fields this calibration sets."""
        return ["memory_efficiency", "compute_efficiency", "allreduce_latency_nvlink_s", "step_overhead_s",
                "request_overhead_s", "prefill_compute_factor"]

    def level_values(self, level: str, keys, fallback: str = "global") -> dict:
        """``{"<level>.<name>": per-row array}`` for ``keys`` (ids of the level, None allowed).

        Engine keys may name a release (``trtllm@1.2``): release values, then the engine's,
        then the global fit. GPU keys: the GPU's values, then those of the measured GPU it
        borrows from (:attr:`gpu_priors`), then the global fit (``fallback="global"``) or NaN.
        """
        table = {"gpu": self.gpus, "engine": self.engines, "math": self.maths, "model": self.models,
                 "campaign": self.campaigns, "platform": self.platforms}[level]
        codes, uniques = pd.factorize(np.asarray(keys, dtype=object).reshape(-1))  # None/NaN -> -1
        uniques = [str(k) for k in uniques] + [""]
        codes = np.where(codes < 0, len(uniques) - 1, codes)
        out = {}
        for name, spec in LEVEL_PARAMETERS[level].items():
            if spec.neutral is not None:
                default = spec.neutral
            elif level == "campaign":  # no value of its own: the engine's (see compose)
                default = np.nan
            elif fallback == "global":
                default = self.default.get(name, np.nan)
            else:
                default = np.nan
            per_key = []
            for k in uniques:
                if level == "engine":
                    chain = [self.releases.get(k, {}), table.get(k.split("@")[0], {})]
                elif level == "gpu":
                    chain = [table.get(k, {}), table.get(str(self.gpu_priors.get(k, {}).get("borrowed_from")), {})]
                else:
                    chain = [table.get(k, {})]
                per_key.append(next((c[name] for c in chain if name in c), default))
            out[f"{level}.{name}"] = np.asarray(per_key, dtype=float)[codes] if codes.size else np.zeros(0)
        return out

    def params_for(self, base: ServingParams, gpu_ids, engine=None, fallback: str = "prior",
                   model_ids=None, math_modes=None, campaigns=None, layers=None, moe_layers=None, architectures=None) -> ServingParams:
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
        fallback : {"prior", "global", "base"}
            What a GPU without its own values gets for its hardware values: ``prior``
            (default) those of the measured GPU of its vendor and memory technology it borrows
            from (:attr:`gpu_priors`), else ``base``'s (never other vendors' average);
            ``global`` the global fit; ``base`` ``base``'s values.
        model_ids : array-like of str, optional
            Catalog model id per row: applies the per-model adjustments too.
        math_modes : array-like of str, optional
            Tensor-core math per row (:meth:`planner.catalog.Catalog.math_modes`: bf16, fp8, fp4,
            int8 or weight-only): applies the per-math compute factors too.
        campaigns : array-like of str, optional
            Benchmark campaign per row (accuracy against measurements only): its harness
            values (request overhead) where the calibration has them.
        layers, moe_layers : array-like of float, optional
            Transformer layers and MoE layers of each row's model
            (:func:`planner.parameters.catalog_keys`): the per-layer step costs times these
            join the step overhead (:func:`layer_cost_s`). Without them no per-layer cost
            applies (every planner and accuracy path passes them:
            :func:`planner.parameters.for_configs`, :func:`planner.accuracy.predict_calibrated`).
        architectures : array-like of str, optional
            GPU architecture per row (``GpuSpec.architecture``, else its vendor): selects the
            engine build's (:func:`platform_keys`) per-MoE-layer cost.

        Returns
        -------
        ServingParams whose calibrated fields are float arrays of ``len(gpu_ids)``.
        """
        gpus = np.asarray(gpu_ids, dtype=object).reshape(-1)
        values = self.level_values("gpu", gpus, "global" if fallback == "global" else "none")
        for n in GPU_PARAMETERS:  # no value of its own nor borrowed: the base values
            missing = np.isnan(values[f"gpu.{n}"])
            if missing.any():
                fill = np.broadcast_to(np.asarray(getattr(base, n), float), missing.shape)
                values[f"gpu.{n}"] = np.where(missing, np.minimum(fill, GPU_PARAMETERS[n].upper), values[f"gpu.{n}"])
        engines = np.broadcast_to(np.asarray(engine, dtype=object), gpus.shape)
        values.update(self.level_values("engine", engines))
        if model_ids is not None:
            values.update(self.level_values("model", model_ids))
        if math_modes is not None:
            values.update(self.level_values("math", math_modes))
        if campaigns is not None:
            values.update(self.level_values("campaign", campaigns))
        for name, per_row in (("row.layers", layers), ("row.moe_layers", moe_layers)):
            if per_row is not None:
                values[name] = np.broadcast_to(np.asarray(per_row, dtype=float).reshape(-1), gpus.shape)
        if architectures is not None:
            values.update(self.level_values("platform", platform_keys(engines, architectures)))
        params, _ = compose(base, values)
        if fallback == "base":
            own = np.isin(gpus.astype(str), list(self.gpus))
            keep = {n: np.where(own, getattr(params, n), np.broadcast_to(np.asarray(getattr(base, n), float),
                                                                         own.shape))
                    for n in GPU_PARAMETERS}
            params = params.with_overrides(**keep)
        return params

    def gpu_status(self, gpu_id: str) -> dict:
        """``calibrated`` (bool), ``calibration_status`` ("calibrated" / "uncalibrated") and,
        for an uncalibrated GPU, ``calibration_prior``: where its hardware values come from."""
        if gpu_id in self.gpus:
            return {"calibrated": True, "calibration_status": "calibrated"}
        prior = self.gpu_priors.get(gpu_id, {})
        source = prior.get("borrowed_from")
        return {"calibrated": False, "calibration_status": "uncalibrated",
                "calibration_prior": (f"hardware values of {source}" if source else "seed defaults")
                + (f" ({prior['reason']})" if prior.get("reason") else "")}

    def harness_for(self, gpu_ids, engine=None, campaigns=None) -> dict:
        """The benchmark-harness values per row (the fields of
        :class:`planner.accuracy_loads.Harness`)."""
        n = np.asarray(gpu_ids, dtype=object).reshape(-1).shape
        values = self.level_values("engine", np.broadcast_to(np.asarray(engine, dtype=object), n))
        if campaigns is not None:
            values.update(self.level_values("campaign", campaigns))
        return {h: _campaign_or(values, h) for h in HARNESS_FIELDS}

    def describe(self) -> dict:
        """What the calibration is and which parameters it sets (for every output)."""
        return {
            "calibration": self.path or "in-memory",
            "parameters": self.parameters,
            "default": dict(self.default),
            "gpus": sorted(self.gpus), "engines": sorted(self.engines), "releases": sorted(self.releases),
            "math": sorted(self.maths), "models": sorted(self.models), "platforms": sorted(self.platforms),
            "uncalibrated_gpus": {g: dict(v) for g, v in sorted(self.gpu_priors.items())},
            "lookup": "hardware per GPU (a GPU without values borrows those of the nearest measured GPU of "
                      "its vendor and memory technology, else the seed defaults: 'uncalibrated'), software "
                      "per engine release -> engine -> the global fit; math and model adjustments when "
                      "math modes and model ids are given; a per-layer step cost (engine + model) x the model's "
                      "layers plus the engine build's (per GPU architecture) x its MoE layers; composed efficiencies clipped at "
                      f"{MAX_MEMORY_EFFICIENCY} (memory) and {MAX_COMPUTE_EFFICIENCY} (compute)",
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
                "releases": section("release", self.releases), "platforms": section("platform", self.platforms),
                "math": section("math", self.maths),
                "models": section("model", self.models), "campaigns": section("campaign", self.campaigns),
                "uncalibrated_gpus": {g: dict(v) for g, v in sorted(self.gpu_priors.items())},
                **({"intervals": self.intervals} if self.intervals else {})}


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

    default = {**OPTIONAL_DEFAULTS, **values_of(doc["default"], "default", DEFAULT_PARAMETERS)}
    stats["default"] = {k: v for k, v in doc["default"].items() if k != "values"}
    tables = {}
    for level, section in (("gpu", "gpus"), ("engine", "engines"), ("release", "releases"),
                           ("platform", "platforms"), ("math", "math"), ("model", "models"), ("campaign", "campaigns")):
        tables[level] = {}
        for key, block in (doc.get(section) or {}).items():
            tables[level][str(key)] = values_of(block, f"{section}.{key}", LEVEL_PARAMETERS[level])
            stats[f"{level}:{key}"] = {k: v for k, v in (block or {}).items() if k != "values"}
    missing = [n for n in DEFAULT_PARAMETERS if n not in default]
    if missing:
        problems.append(f"default.values: missing {', '.join(missing)}")
    if problems:
        raise PlanningInputError([f"{where0}: {p}" for p in problems])
    priors = doc.get("uncalibrated_gpus") or {}
    if not isinstance(priors, dict) or any(not isinstance(v, dict) for v in priors.values()):
        raise PlanningInputError(f"{where0}: uncalibrated_gpus: expected a mapping of GPU id -> "
                                 "{borrowed_from, reason}")
    bad = [g for g, v in priors.items() if v.get("borrowed_from") not in (None, *tables["gpu"])]
    if bad:
        raise PlanningInputError([f"{where0}: uncalibrated_gpus.{g}.borrowed_from: "
                                  f"'{priors[g]['borrowed_from']}' has no values under gpus" for g in bad])
    intervals = doc.get("intervals") or {}
    if not isinstance(intervals, dict):
        raise PlanningInputError(f"{where0}: intervals: expected a mapping")
    provenance = {k: v for k, v in doc.items() if k not in CALIBRATION_SECTIONS}
    return Calibration(default=default, gpus=tables["gpu"], engines=tables["engine"],
                       releases=tables["release"], maths=tables["math"], models=tables["model"],
                       platforms=tables["platform"], campaigns=tables["campaign"], stats=stats, provenance=provenance, path=path, gpu_priors={str(g): dict(v) for g, v in priors.items()},
                       intervals=intervals)


#: Top-level keys of a calibration YAML that are not provenance.
CALIBRATION_SECTIONS = ("default", "gpus", "engines", "releases", "platforms", "math", "models", "campaigns",
                        "uncalibrated_gpus", "intervals")


def load_calibration(spec: str | Path | None = "default") -> Calibration | None:
    """``'none'`` -> None (seed values); None or ``'default'`` -> the shipped file; else a path."""
    from planner.yamlio import read_yaml

    if spec is not None and str(spec).strip().lower() == "none":
        return None
    path = DEFAULT_CALIBRATION_PATH if spec is None or str(spec) == "default" else Path(spec)
    if not Path(path).is_file():
        raise PlanningInputError(f"--calibration: no such file '{path}' (use 'none', 'default' or a path)")
    path = Path(path)
    doc = cached("calibration-yaml", path.resolve(), [path], lambda: read_yaml(path))  # parsed once per version
    return calibration_from_dict(doc, str(_display_path(path)))


def _display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(DEFAULT_CATALOG_DIR.parent))
    except ValueError:
        return str(path)


def write_calibration(calibration: Calibration, path: str | Path) -> None:
    """Write ``calibration`` as YAML, with a header comment, to ``path``."""
    import yaml

    header = ("# Calibrated serving-model parameters, written by `planner calibrate`\n"
              "# (planner/calibration.py; docs/accuracy.md).\n"
              "# Hardware values per GPU (gpus): achievable fractions of the datasheet bandwidth and\n"
              f"# dense FLOPS, at most {MAX_MEMORY_EFFICIENCY} and {MAX_COMPUTE_EFFICIENCY}; a GPU without values borrows those of\n"
              "# the GPU named under uncalibrated_gpus (same vendor and memory technology), else the seed\n"
              "# defaults. Software values per engine release -> engine -> the global fit (default);\n"
              "# math and models: bounded factors (prior 1). Composed efficiency = eta_gpu * engine factor *\n"
              "# math factor * model factor, clipped at the hardware bounds. campaigns: benchmark-harness\n"
              "# values of the measurement campaigns (accuracy only). intervals: quantiles of the\n"
              "# out-of-fold log errors (prediction intervals, planner.parameters.error_quantile).\n"
              "# rows / median_ape_pct: the rows of the group and their median absolute percentage error\n"
              "# per metric family with these values. Regenerate with `fitted.command`.\n")
    text = yaml.safe_dump(calibration.to_dict(), sort_keys=False, default_flow_style=False, width=100)
    from planner.atomic import atomic_write_text

    atomic_write_text(path, header + text)


def file_sha256(path: str | Path) -> str:
    """SHA-256 hex digest of a file (provenance of a fit)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
