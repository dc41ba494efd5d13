"""The serving parameters the search resolves and carries to the later stages: the
problem's ``serving:`` overrides, the parameters of configuration rows (calibrated per GPU,
model and math mode, then the overrides) and the :class:`planner.parameters.ProblemParams`
of a solve. :mod:`planner.search` re-exports these names.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner import parameters
from planner.problem import Problem
from planner.serving.params import ServingParams


def serving_overrides(problem: Problem) -> dict:
    """The problem's explicit ``serving:`` parameter overrides."""
    # the section is flat: its model_dump(exclude_none=True, exclude=...), without building
    # its serializer (the one pydantic build of a warm run: process start, issue 19)
    return {k: v for k, v in problem.spec.serving if v is not None and k not in ("calibration", "engine")}


def serving_params(problem: Problem, rows: pd.DataFrame | None = None, coded: dict | None = None) -> ServingParams:
    """Parameters of configuration ``rows`` (calibrated per GPU, then the YAML overrides);
    without rows, the uncalibrated base with the overrides. ``coded``: the rows' columns'
    :class:`planner.dimensions.Coded` forms (the search grid's), read instead of the columns.

    A solve calls it once per model, in the search; the stages get the result carried in
    :class:`planner.parameters.ProblemParams` (:func:`problem_params`).
    """
    if rows is None:
        return ServingParams().with_overrides(**serving_overrides(problem))
    keys = ("gpu", "quantization", "model")
    pairs = [coded[k].factorize() for k in keys] if coded is not None and all(k in coded for k in keys) else None
    if pairs is not None and all((codes >= 0).all() for codes, _ in pairs):   # no missing id
        ids = (None, None, None)
    else:
        ids, pairs = tuple(rows[k].to_numpy() for k in keys), None
    return parameters.for_configs(problem.catalog, problem.calibration, serving_overrides(problem),
                                  problem.spec.serving.engine, *ids, models=problem.imported_models, coded=pairs)


def problem_params(problem: Problem, ids: pd.Index | None = None,
                   per_candidate: ServingParams | None = None,
                   id_order: np.ndarray | None = None) -> parameters.ProblemParams:
    """The problem's parameters to carry: overrides, base, description, and the evaluated
    candidates' own (``ids``, ``per_candidate``, ``id_order``: the permutation sorting ``ids``;
    none for measured capacities)."""
    overrides = serving_overrides(problem)
    extra = {} if ids is None else {"ids": ids, "per_candidate": per_candidate, "id_order": id_order}
    return parameters.ProblemParams(overrides=overrides, base=serving_params(problem),
                                    used=parameters.describe(problem.calibration, overrides,
                                                             problem.spec.serving.engine),
                                    **extra)
