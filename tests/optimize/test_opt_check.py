"""The independent plan checker accepts solved plans and catches broken ones."""

from dataclasses import replace

import pytest
from opt_helpers import FAST, melange_instance, random_instance

from planner.optimize import check_plan, solve


@pytest.fixture(scope="module")
def solved():
    inst = melange_instance()
    return inst, solve(inst, FAST)[1]


def test_valid_plan_has_no_violations(solved):
    inst, plan = solved
    assert check_plan(inst, plan) == []


def test_too_few_replicas_is_an_overload(solved):
    inst, plan = solved
    dep = plan.deployments.copy()
    dep.loc[dep["gpu"] == "a100-80gb", "replicas"] = 0
    broken = replace(plan, deployments=dep)
    assert any(v.startswith("load a100-x1") for v in check_plan(inst, broken))


def test_unserved_traffic_and_wrong_totals_are_caught(solved):
    inst, plan = solved
    routing = plan.routing.iloc[1:].reset_index(drop=True)
    violations = check_plan(inst, replace(plan, routing=routing, usd_per_hour=1.0,
                                          gpus_by_type={"a10g": 9}))
    assert any(v.startswith("workload ") for v in violations)
    assert any(v.startswith("usd_per_hour") for v in violations)
    assert any(v.startswith("gpus_by_type") for v in violations)


def test_limits_are_checked(solved):
    inst, plan = solved
    strict = replace(inst, inventory_gpus={"a10g": 0}, budget_usd_per_hour=1.0, max_distinct_configs=1,
                     redundancy_workloads=("long_in_short_out",))
    violations = " | ".join(check_plan(strict, plan))
    for word in ("inventory a10g", "budget", "max_distinct_configs", "N+1 spare"):
        assert word in violations


def test_routing_to_a_candidate_that_cannot_serve_is_caught():
    inst = random_instance(4, limits=False)
    plan = solve(inst, FAST)[1]
    zero = inst.capacity_per_s.stack()
    zero = zero[zero == 0]
    assert plan is not None and not zero.empty
    cid, wl = zero.index[0]
    routing = plan.routing.copy()
    routing.loc[len(routing)] = [cid, wl, 0.5]
    assert any("cannot serve" in v or "without replicas" in v for v in check_plan(inst, replace(
        plan, routing=routing)))
