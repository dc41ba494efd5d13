"""Infeasible instances are explained with the binding limit and a verified relaxation."""

from dataclasses import replace

import pandas as pd
import pytest
from opt_helpers import FAST, melange_instance

from planner.optimize import PlanningInstance, SolveStatus, diagnose_infeasible, solve


def _assert_relaxation_solves(inst, finding):
    assert finding.verified
    result, plan = solve(replace(inst, **finding.relaxation), FAST)
    assert result.status == SolveStatus.OPTIMAL and plan is not None


def test_infeasible_inventory_proposes_the_fewest_extra_gpus():
    inst = melange_instance(inventory_gpus={"a100-80gb": 0, "a10g": 2})
    result, plan = solve(inst, FAST)
    assert result.status == SolveStatus.INFEASIBLE and plan is None
    assert result.objective_usd_per_hour is None
    [finding] = diagnose_infeasible(inst, FAST)
    assert finding.constraint == "inventory_gpus"
    assert finding.message == "inventory a100-80gb >= 1 (now 0)"
    assert finding.relaxation == {"inventory_gpus": {"a100-80gb": 1, "a10g": 2}}
    _assert_relaxation_solves(inst, finding)


def test_infeasible_budget_proposes_the_cheapest_plan_cost():
    inst = melange_instance(budget_usd_per_hour=4.0)
    assert solve(inst, FAST)[1] is None
    [finding] = diagnose_infeasible(inst, FAST)
    assert finding.constraint == "budget_usd_per_hour"
    assert finding.message.startswith("budget_usd_per_hour >= 4.68")
    assert finding.relaxation == {"budget_usd_per_hour": pytest.approx(4.68)}
    _assert_relaxation_solves(inst, finding)


def test_distinct_configs_and_redundancy():
    inst = melange_instance(max_distinct_configs=1, inventory_gpus={"a100-80gb": 1, "a10g": 4})
    inventory, distinct = diagnose_infeasible(inst, FAST)      # either relaxation alone works
    assert inventory.message == "inventory a100-80gb >= 2 (now 1)"
    assert distinct.constraint == "max_distinct_configs"
    assert distinct.relaxation == {"max_distinct_configs": 2}
    for finding in (inventory, distinct):
        _assert_relaxation_solves(inst, finding)
    inst = melange_instance(redundancy_workloads=("long_in_short_out",), inventory_gpus={"a100-80gb": 1,
                                                                                         "a10g": 1})
    findings = diagnose_infeasible(inst, FAST)
    assert [f.constraint for f in findings] == ["inventory_gpus", "redundancy_workloads"]
    for finding in findings:
        _assert_relaxation_solves(inst, finding)


def test_several_limits_together_give_a_combined_relaxation():
    inst = melange_instance(inventory_gpus={"a100-80gb": 0, "a10g": 2}, budget_usd_per_hour=4.0)
    [finding] = diagnose_infeasible(inst, FAST)
    assert finding.constraint == "combination"
    assert "inventory a100-80gb >= 1" in finding.message and "budget_usd_per_hour >= 4.68" in finding.message
    _assert_relaxation_solves(inst, finding)


def test_unserved_workload_is_named_and_feasible_instances_have_no_findings():
    inst = melange_instance()
    cap = inst.capacity_per_s.copy()
    cap["long_in_long_out"] = 0.0
    broken = PlanningInstance(inst.candidates, cap, inst.rate_per_s)
    assert [f.message for f in diagnose_infeasible(broken, FAST)] == [
        "no candidate serves workload long_in_long_out"]
    assert solve(broken, FAST)[0].status == SolveStatus.INFEASIBLE
    assert diagnose_infeasible(inst, FAST) == []
    assert isinstance(inst.capacity_per_s, pd.DataFrame)
