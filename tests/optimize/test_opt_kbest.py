"""k-best plans differ in their set of deployed candidates and come in cost order."""

import pytest
from opt_helpers import FAST, melange_instance, random_instance, tie_instance

from planner.optimize import SolveStatus, check_plan, deployed_sets, k_best, solve


def test_melange_k_best_in_cost_order():
    inst = melange_instance()
    plans = k_best(inst, 3, FAST)
    costs = [r.objective_usd_per_hour for r, _ in plans]
    assert costs == pytest.approx([4.68, 7.34, 12.12])
    assert deployed_sets(plans) == [("a100-x1", "a10g-x1"), ("a100-x1",), ("a10g-x1",)]
    assert all(check_plan(inst, p) == [] for _, p in plans)


@pytest.mark.parametrize("make", [tie_instance, lambda: random_instance(5, limits=False)])
def test_k_best_distinct_sets_non_decreasing_cost(make):
    inst = make()
    plans = k_best(inst, 5, FAST)
    sets = deployed_sets(plans)
    assert len(set(sets)) == len(sets) >= 2
    costs = [r.objective_usd_per_hour for r, _ in plans]
    assert costs == sorted(costs)
    assert costs[0] == pytest.approx(solve(inst, FAST)[0].objective_usd_per_hour)
    assert all(r.status == SolveStatus.OPTIMAL for r, _ in plans)
    ranked = [(round(c, 9), s) for c, s in zip(costs, sets)]
    assert ranked == sorted(ranked)


def test_k_best_stops_when_no_other_set_exists_and_on_infeasible():
    inst = melange_instance(slices_per_workload=1)
    assert len(k_best(inst, 10, FAST)) == 3
    assert k_best(melange_instance(budget_usd_per_hour=1.0), 2, FAST) == []
    with pytest.raises(ValueError):
        k_best(inst, 0, FAST)
