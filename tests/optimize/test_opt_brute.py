"""CP-SAT optimum == exhaustive optimum on many tiny random instances; every plan checks out."""

import pytest
from opt_helpers import FAST, random_instance

from planner.optimize import SolveStatus, brute_force_optimum, check_plan, solve

SEEDS = range(60)


@pytest.mark.parametrize("seed", SEEDS)
def test_solver_matches_brute_force(seed):
    inst = random_instance(seed)
    expected = brute_force_optimum(inst)
    result, plan = solve(inst, FAST)
    if expected is None:
        assert result.status == SolveStatus.INFEASIBLE and plan is None
        return
    assert result.status == SolveStatus.OPTIMAL and result.gap == 0.0
    assert result.objective_usd_per_hour == pytest.approx(expected.usd_per_hour, abs=1e-9)
    assert result.scales["load_scaling"] == "exact"
    assert check_plan(inst, plan) == []


def test_random_instances_cover_both_outcomes_and_all_limits():
    insts = [random_instance(s) for s in SEEDS]
    outcomes = {brute_force_optimum(i) is None for i in insts}
    assert outcomes == {True, False}
    assert any(i.inventory_gpus for i in insts) and any(i.budget_usd_per_hour for i in insts)
    assert any(i.redundancy_workloads for i in insts) and any(i.max_distinct_configs for i in insts)
    assert {i.slices_per_workload is None for i in insts} == {True, False}
