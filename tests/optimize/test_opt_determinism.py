"""Equal-cost optima are broken canonically: identical plans across runs and row orders."""

import pandas as pd
import pytest
from opt_helpers import FAST, melange_instance, random_instance, tie_instance

from planner.optimize import PlanningInstance, SolverOptions, SolveStatus, k_best, solve


def _shuffled(inst: PlanningInstance, seed: int) -> PlanningInstance:
    order = inst.candidates.sample(frac=1.0, random_state=seed).index
    cap = inst.capacity_per_s.loc[order[::-1], inst.capacity_per_s.columns[::-1]]
    return PlanningInstance(inst.candidates.loc[order], cap, inst.rate_per_s[::-1],
                            slices_per_workload=inst.slices_per_workload)


def _same(a, b):
    pd.testing.assert_frame_equal(a.deployments, b.deployments)
    pd.testing.assert_frame_equal(a.routing, b.routing)
    assert a.usd_per_hour == b.usd_per_hour and a.gpus_by_type == b.gpus_by_type


@pytest.mark.parametrize("make", [tie_instance, melange_instance, lambda: random_instance(7, limits=False)])
def test_same_plan_twice_and_with_rows_shuffled(make):
    inst = make()
    r1, p1 = solve(inst, FAST)
    r2, p2 = solve(inst, FAST)
    r3, p3 = solve(_shuffled(inst, 1), FAST)
    assert r1.status == SolveStatus.OPTIMAL and r1.solver_params["proven_unique"]
    _same(p1, p2)
    _same(p1, p3)


def test_worker_count_does_not_change_the_plan(monkeypatch):
    import sys

    # parallel on small models too (the module, not the function planner.optimize.solve)
    monkeypatch.setattr(sys.modules["planner.optimize.solve"], "SINGLE_WORKER_MAX_VARIABLES", 0)
    inst = tie_instance()
    _, one = solve(inst, SolverOptions(num_workers=1))
    _, many = solve(inst, SolverOptions(num_workers=8, random_seed=5))
    _same(one, many)


def test_tie_instance_really_has_ties():
    inst = tie_instance()
    result, plan = solve(inst, FAST)
    # load 7/3 + 5/2 = 4.83 replicas: 5 single-GPU replicas of any of three GPU types, $10/h
    assert result.objective_usd_per_hour == pytest.approx(10.0)
    others = k_best(inst, 4, FAST)         # several deployed sets reach the same cost
    assert [r.objective_usd_per_hour for r, _ in others] == pytest.approx([10.0] * 4)
    assert result.solver_params["proven_unique"]


@pytest.mark.parametrize("make", [tie_instance, melange_instance, lambda: random_instance(9, limits=False)])
def test_weighted_tie_break_alone_gives_the_proven_plan(make):
    inst = make()
    proven_result, proven = solve(inst, FAST)
    fast_result, fast = solve(inst, SolverOptions(time_limit_s=20.0, prove_unique_plan=False))
    assert proven_result.solver_params["proven_unique"]
    assert not fast_result.solver_params["proven_unique"]
    _same(proven, fast)


def test_two_phase_path_when_the_combined_objective_could_overflow(monkeypatch):
    inst = tie_instance()
    _, combined = solve(inst, FAST)
    monkeypatch.setattr("planner.optimize.tiebreak.COMBINED_OBJECTIVE_LIMIT", 0)
    result, two_phase = solve(inst, FAST)
    assert result.solver_params["combined_objective_weight"] is None
    assert result.solver_params["proven_unique"] and result.status == SolveStatus.OPTIMAL
    _same(combined, two_phase)


@pytest.mark.parametrize("make", [tie_instance, melange_instance, lambda: random_instance(3, limits=False),
                                  lambda: random_instance(6), lambda: random_instance(16)])
def test_one_solve_proofs_give_the_plan_of_the_lexicographic_stages(make, monkeypatch):
    # the uniqueness check and the weighted routing solve against the per-variable loops
    inst = make()
    fast_result, fast = solve(inst, FAST)
    monkeypatch.setattr("planner.optimize.tiebreak._no_other_replicas", lambda *args: False)
    monkeypatch.setattr("planner.optimize.tiebreak._lexicographic_weights", lambda *args: None)
    loop_result, loop = solve(inst, FAST)
    assert fast_result.solver_params["proven_unique"] == loop_result.solver_params["proven_unique"]
    assert fast_result.solver_params["num_solves"] <= loop_result.solver_params["num_solves"]
    _same(fast, loop)


def test_uniqueness_check_finds_another_plan_on_a_tied_face():
    from planner.optimize import build_model
    from planner.optimize.tiebreak import _no_other_replicas, _optimal_face, new_solver

    built = build_model(tie_instance())
    result, _ = solve(tie_instance(), FAST)
    y = result.replicas.to_numpy()
    cost = int(built.price_units.to_numpy() @ y)
    face = _optimal_face(built, cost)           # cost alone: three GPU types tie (test above)
    assert not _no_other_replicas(face, built, y, new_solver(FAST, 20.0))
    face.add(built.tie_break_expr <= int(built.tie_break_weights.to_numpy() @ y))
    assert _no_other_replicas(face, built, y, new_solver(FAST, 20.0))


def test_small_models_are_solved_by_one_worker_and_large_ones_by_at_most_the_cpus():
    from planner.optimize.solve import SINGLE_WORKER_MAX_VARIABLES, solving_options, usable_cpus

    options = SolverOptions(num_workers=8)
    assert solving_options(options, SINGLE_WORKER_MAX_VARIABLES - 1).num_workers == 1
    assert solving_options(options, SINGLE_WORKER_MAX_VARIABLES).num_workers == min(8, usable_cpus())
    assert solving_options(SolverOptions(num_workers=1), 10**6).num_workers == 1
    result, _ = solve(tie_instance(), options)
    assert result.solver_params["num_workers"] == 8           # the configured count is reported


@pytest.mark.parametrize("make", [tie_instance, melange_instance, lambda: random_instance(6)])
def test_solver_settings_change_the_time_only(make, monkeypatch):
    # every solve runs with the planner's presolve, probing and cut settings; CP-SAT's own
    # defaults (3 presolve rounds, probing level 2, cut level 1) give the same canonical plan
    from planner.optimize import tiebreak

    assert tiebreak.new_solver(FAST, 1.0).parameters.cut_level == tiebreak.CUT_LEVEL
    inst = make()
    tuned_result, tuned = solve(inst, FAST)
    for name, default in (("PRESOLVE_ITERATIONS", 3), ("PROBING_LEVEL", 2), ("CUT_LEVEL", 1)):
        monkeypatch.setattr(tiebreak, name, default)
    assert tiebreak.new_solver(FAST, 1.0).parameters.cut_level == 1
    default_result, default = solve(inst, FAST)
    assert tuned_result.status == default_result.status == SolveStatus.OPTIMAL
    assert tuned_result.solver_params["proven_unique"] and default_result.solver_params["proven_unique"]
    _same(tuned, default)
