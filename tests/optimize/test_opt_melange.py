"""Melange's worked example: slice factor 1 vs fine-grained splitting."""

import pytest
from opt_helpers import FAST, melange_instance

from planner.optimize import SolveStatus, check_plan, solve


def _replicas(plan):
    return dict(zip(plan.deployments["gpu"], plan.deployments["replicas"]))


def test_melange_whole_workloads_costs_6_70():
    inst = melange_instance(slices_per_workload=1)
    result, plan = solve(inst, FAST)
    assert result.status == SolveStatus.OPTIMAL and result.gap == 0.0
    assert result.objective_usd_per_hour == pytest.approx(6.70, abs=1e-9)
    assert result.best_bound_usd_per_hour == pytest.approx(6.70, abs=1e-9)
    assert _replicas(plan) == {"a10g": 3, "a100-80gb": 1}
    assert plan.usd_per_hour == pytest.approx(6.70, abs=1e-9)
    assert check_plan(inst, plan) == []


def test_melange_fine_grained_costs_4_68_with_a_replica_at_exactly_full_load():
    inst = melange_instance()
    result, plan = solve(inst, FAST)
    assert result.status == SolveStatus.OPTIMAL and result.gap == 0.0
    assert result.objective_usd_per_hour == pytest.approx(4.68, abs=1e-9)
    assert _replicas(plan) == {"a10g": 1, "a100-80gb": 1}
    assert result.scales["load_scaling"] == "exact"   # 100% load must be allowed
    assert plan.deployments["load_fraction"].max() == pytest.approx(1.0)
    assert check_plan(inst, plan) == []
    assert set(plan.deployments.columns[:7]) == {"candidate_id", "gpu", "gpus_per_replica", "replicas",
                                                 "gpus", "usd_per_hour", "load_fraction"}
    assert "source" in plan.deployments.columns
    assert plan.gpus_by_type == {"a100-80gb": 1, "a10g": 1}


def test_melange_fine_grained_with_n_plus_1_needs_a_spare_per_deployment():
    inst = melange_instance(redundancy_workloads=("long_in_short_out",))
    result, plan = solve(inst, FAST)
    assert result.status == SolveStatus.OPTIMAL
    assert check_plan(inst, plan) == []
    assert result.objective_usd_per_hour > 4.68
