"""CP-SAT optimum == exhaustive optimum on many tiny random instances; every plan checks out."""

import pytest
from opt_helpers import FAST, melange_instance, random_instance

from planner.optimize import PlanningInstance, SolveStatus, brute_force_optimum, check_plan, solve

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


@pytest.mark.parametrize(("slices", "usd_per_hour"), [(None, 5.69), (1, 7.34), (3, 5.69)])
def test_hand_computed_two_workload_case(slices, usd_per_hour):
    # 12 req/s each of Melange's short-short and long-long classes. Fine-grained: one A100
    # at 100 % load (1.2 - 0.2 offloaded) + 2 A10G; whole workloads: 2 A100; thirds
    # (4 req/s pieces, 0.2 A100-load each): 5 pieces fill one A100 exactly, 1 piece -> 2 A10G.
    inst = melange_instance()
    keep = ["short_in_short_out", "long_in_long_out"]
    inst = PlanningInstance(inst.candidates, inst.capacity_per_s[keep], inst.rate_per_s[keep] * 2,
                            slices_per_workload=slices)
    expected = brute_force_optimum(inst)
    result, plan = solve(inst, FAST)
    assert expected.usd_per_hour == pytest.approx(usd_per_hour, abs=1e-9)
    assert result.objective_usd_per_hour == pytest.approx(usd_per_hour, abs=1e-9)
    assert check_plan(inst, plan) == []
