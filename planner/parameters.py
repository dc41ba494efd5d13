"""Which serving-model parameters apply: the seed defaults, then a calibration, then the
user's explicit overrides (problem YAML ``serving:`` or CLI flags), in that order."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from planner.catalog import DEFAULT_CATALOG_DIR
from planner.schema import PlanningInputError
from planner.serving.params import ServingParams


@lru_cache(maxsize=8)
def load(spec: str | None):
    """The calibration named by ``spec`` ('none', 'default' or a YAML path), or None.

    'default' is the shipped ``catalogs/calibration.yaml``; when that file is absent the
    seed defaults apply (None).
    """
    if spec is None or str(spec).lower() == "none":
        return None
    if str(spec) == "default" and not (DEFAULT_CATALOG_DIR / "calibration.yaml").exists():
        return None
    from planner.calibration import load_calibration

    try:
        return load_calibration(spec)
    except FileNotFoundError:
        raise PlanningInputError(f"calibration: file not found: {spec}") from None


def resolve(gpu_ids, calibration=None, overrides: dict | None = None, engine: str | None = None,
            model_ids=None, math_modes=None) -> ServingParams:
    """Parameters per configuration row (arrays aligned with ``gpu_ids`` when calibrated).

    ``model_ids`` and ``math_modes`` (:meth:`planner.catalog.Catalog.math_modes`) per row
    select the calibration's per-model and per-math adjustments.
    """
    params = ServingParams()
    if calibration is not None:
        def per_row(values):
            return None if values is None else np.asarray(values, dtype=object)

        params = calibration.params_for(params, np.asarray(gpu_ids, dtype=object), engine=engine,
                                        model_ids=per_row(model_ids), math_modes=per_row(math_modes))
    return params.with_overrides(**(overrides or {}))


def take(params: ServingParams, rows) -> ServingParams:
    """The parameters of configuration rows ``rows`` (array fields indexed, scalars kept)."""
    values = params.as_dict()
    return params.with_overrides(**{k: np.asarray(v)[rows] for k, v in values.items() if np.ndim(v)})


def describe(calibration, overrides: dict | None = None, engine: str | None = None) -> dict:
    """What was used, for every output: the calibration (or 'none') and explicit overrides."""
    return {"calibration": calibration.describe() if calibration is not None else "none (seed defaults)",
            "engine": engine, "overrides": dict(overrides or {})}


def scalars(params: ServingParams) -> dict:
    """``params`` as a dict, one-element arrays as plain numbers (one configuration)."""
    out = {}
    for k, v in params.as_dict().items():
        a = np.asarray(v, dtype=float)
        out[k] = float(a.reshape(-1)[0]) if a.size == 1 else a.tolist()
    return out
