"""Planning (issue 18): serving parameters resolved once per problem and carried to the stages
are exactly those a stage would resolve for its own rows; counts come from the model's pruning."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import yaml

from planner import parameters
from planner.optimize.prune import prune_dominated
from planner.planning import find_plans, planning_instance, search_candidates, solver_options
from planner.problem import load_problem
from planner.search import REASONS, serving_params
from planner.serving.params import ServingParams

STEP_OVERHEAD_S = 0.0015
SPEC = {
    "name": "two-models",
    "workloads": [
        {"name": "small", "model": "llama-3.1-8b", "rate_per_s": 20, "prompt_tokens": 600, "output_tokens": 200,
         "slo": {"ttft_p95_s": 1.0, "tpot_p95_s": 0.05}},
        {"name": "large", "model": "llama-3.1-70b", "rate_per_s": 2, "prompt_tokens": 2000, "output_tokens": 300,
         "slo": {"ttft_p95_s": 3.0, "tpot_p95_s": 0.08}},
    ],
    "search": {"gpus": ["l40s", "h100-sxm"], "quantization": ["bf16", "fp8"], "kv_cache_dtype": ["bf16"],
               "tp": [1, 2, 3], "pp": [1], "max_batch": [16, 128]},
    "serving": {"step_overhead_s": STEP_OVERHEAD_S},
}
#: Rejections found after the serving model ran: the configuration was evaluated.
EVALUATED = ("", *REASONS[REASONS.index("weights_do_not_fit_memory"):])


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    path = tmp_path_factory.mktemp("planning") / "two-models.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return load_problem(path)


def _same(a: ServingParams, b: ServingParams) -> None:
    for f in fields(ServingParams):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert np.ndim(x) == np.ndim(y), f.name
        np.testing.assert_array_equal(x, y, err_msg=f.name)


def test_parameters_carried_equal_those_resolved_for_any_rows(problem):
    candidates, params = search_candidates(problem)
    evaluated = candidates.index[candidates["infeasible_reason"].isin(EVALUATED)]
    assert sorted(params.ids) == sorted(evaluated)
    assert set(candidates.loc[evaluated, "model"]) == {"llama-3.1-8b", "llama-3.1-70b"}
    # calibrated per GPU: some fields are per-row arrays, so the lookup is not vacuous
    assert any(np.ndim(v) == 1 for v in params.per_candidate.as_dict().values())
    rng = np.random.default_rng(0)
    feasible = candidates[candidates["feasible"]]
    subsets = [feasible, candidates.loc[evaluated[::-1]], candidates[candidates["model"] == "llama-3.1-70b"]
               .loc[lambda f: f["infeasible_reason"].isin(EVALUATED)],
               candidates.loc[rng.choice(evaluated, size=25)]]       # mixed models, repeats
    for rows in subsets:
        assert len(rows)
        _same(params.of(rows), serving_params(problem, rows))
    assert np.all(np.asarray(params.of(feasible).step_overhead_s) == STEP_OVERHEAD_S)
    structural = candidates.index[~candidates["infeasible_reason"].isin(EVALUATED)]
    assert len(structural)                                         # tp 3 divides no head count
    with pytest.raises(KeyError, match=structural[0]):
        params.of(candidates.loc[structural[:1]])


def test_problem_level_parameters(problem):
    _, params = search_candidates(problem)
    assert params.overrides == {"step_overhead_s": STEP_OVERHEAD_S}
    _same(params.base, ServingParams(step_overhead_s=STEP_OVERHEAD_S))
    assert params.used == parameters.describe(problem.calibration, params.overrides, problem.spec.serving.engine)


def test_concat_keeps_shared_scalars_and_broadcasts_the_rest():
    a = ServingParams(memory_efficiency=np.array([0.7, 0.75]), step_overhead_s=0.001)
    b = ServingParams(step_overhead_s=0.002)
    out = parameters.concat([a, b], [2, 3])
    np.testing.assert_array_equal(out.memory_efficiency, [0.7, 0.75, 0.8, 0.8, 0.8])
    np.testing.assert_array_equal(out.step_overhead_s, [0.001, 0.001, 0.002, 0.002, 0.002])
    assert out.compute_efficiency == 0.6 and np.ndim(out.compute_efficiency) == 0
    _same(out.take(np.array([4, 0])),
          ServingParams(memory_efficiency=np.array([0.8, 0.7]), step_overhead_s=np.array([0.002, 0.001])))


def test_in_model_count_is_the_models_own_pruning(problem):
    candidates, _ = search_candidates(problem)
    instance = planning_instance(problem, candidates)
    solutions = find_plans(problem, instance, 1, solver_options(problem))
    assert solutions.found and solutions.status == "optimal"
    pruned = prune_dominated(instance.candidates, instance.capacity_per_s)
    assert 0 < solutions.in_model == len(instance.candidates) - len(pruned)


def test_instance_from_the_table_is_the_one_of_its_capacities_given(problem):
    """The default instance (the rows kept by position) equals the one built from the same
    capacities passed in by id, in another row order (the rows looked up by id and sorted):
    the same candidates, columns, capacities and order; a candidate that serves nothing stays out."""
    import pandas as pd

    candidates, _ = search_candidates(problem)
    names = [w.name for w in problem.workloads]
    feasible = candidates[candidates["feasible"]]
    given = feasible[[f"capacity_per_s[{n}]" for n in names]].set_axis(names, axis=1).iloc[::-1]
    default, by_id = planning_instance(problem, candidates), planning_instance(problem, candidates, given)
    pd.testing.assert_frame_equal(default.candidates, by_id.candidates, check_exact=True)
    pd.testing.assert_frame_equal(default.capacity_per_s, by_id.capacity_per_s, check_exact=True)
    assert default.candidates.index.is_monotonic_increasing and len(default.candidates) > 1
    assert list(default.candidates.columns[:3]) == ["gpu", "gpus_per_replica", "usd_per_replica_hour"]
    assert (default.capacity_per_s > 0).any(axis=1).all()
