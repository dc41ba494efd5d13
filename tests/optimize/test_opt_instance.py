"""Input validation, honest statuses, and the integer scaling record."""

import numpy as np
import pandas as pd
import pytest
from opt_helpers import FAST, melange_instance

from planner.optimize import (COST_UNITS_PER_USD, LOAD_UNITS_PER_REPLICA, PlanningInstance, SolverOptions,
                              SolveStatus, build_model, check_plan, solve)
from planner.schema import PlanningInputError


def test_validation_reports_every_problem():
    inst = melange_instance()
    cands = inst.candidates.copy()
    cands.loc["a10g-x1", "usd_per_replica_hour"] = -1.0
    cap = inst.capacity_per_s.copy()
    cap.iloc[0, 0] = np.nan
    with pytest.raises(PlanningInputError) as err:
        PlanningInstance(cands, cap, inst.rate_per_s, budget_usd_per_hour=0.0, max_distinct_configs=0,
                         redundancy_workloads=("nope",), slices_per_workload=0,
                         inventory_gpus={"a10g": -2})
    text = str(err.value)
    for field in ("usd_per_replica_hour", "capacity_per_s", "budget_usd_per_hour", "max_distinct_configs",
                  "redundancy_workloads", "slices_per_workload", "inventory_gpus.a10g"):
        assert field in text
    assert len(err.value.problems) == 7


def test_validation_of_shapes_and_options():
    inst = melange_instance()
    with pytest.raises(PlanningInputError, match="capacity_per_s.columns"):
        PlanningInstance(inst.candidates, inst.capacity_per_s.iloc[:, :2], inst.rate_per_s)
    with pytest.raises(PlanningInputError, match="missing columns"):
        PlanningInstance(inst.candidates.drop(columns="gpu"), inst.capacity_per_s, inst.rate_per_s)
    with pytest.raises(PlanningInputError, match="rate_per_s"):
        PlanningInstance(inst.candidates, inst.capacity_per_s, inst.rate_per_s * 0)
    with pytest.raises(PlanningInputError, match="num_workers"):
        SolverOptions(num_workers=0)


def test_scales_are_recorded_and_exact_for_small_rationals():
    built = build_model(melange_instance())
    assert built.scales["cost_units_per_usd"] == COST_UNITS_PER_USD
    assert built.scales["cost_scaling"] == "exact" and built.scales["load_scaling"] == "exact"
    assert built.price_units.to_dict() == {"a100-x1": 3_670_000, "a10g-x1": 1_010_000}
    assert [v.name for v in built.replicas] == ["replicas[a100-x1]", "replicas[a10g-x1]"]


def test_awkward_numbers_fall_back_to_conservative_rounding():
    inst = melange_instance()
    cap = inst.capacity_per_s * (1 / 3) + 1e-7
    odd = PlanningInstance(inst.candidates.assign(usd_per_replica_hour=[1.0100000001, 3.67]), cap,
                           inst.rate_per_s / 7)
    built = build_model(odd)
    assert built.scales["load_scaling"] == "rounded_up"
    assert built.scales["load_units_per_replica"] == LOAD_UNITS_PER_REPLICA
    assert built.scales["cost_scaling"] == "rounded_up"
    result, plan = solve(odd, FAST)
    assert result.status == SolveStatus.OPTIMAL
    assert check_plan(odd, plan) == []


def test_overflow_guard_rejects_absurd_scales():
    inst = melange_instance()
    with pytest.raises(PlanningInputError, match="overflow guard"):
        solve(PlanningInstance(inst.candidates, inst.capacity_per_s * 1e-9, inst.rate_per_s * 1e6), FAST)


def test_gap_limit_is_not_reported_as_optimal():
    result, plan = solve(melange_instance(), SolverOptions(relative_gap_limit=0.5))
    assert result.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)
    assert result.gap is not None and result.best_bound_usd_per_hour is not None
    if result.gap > 0:
        assert result.status == SolveStatus.FEASIBLE
    assert plan is not None and not plan.deployments.empty


def test_candidate_ids_need_not_be_sorted_and_extra_columns_pass_through():
    inst = melange_instance()
    cands = inst.candidates.iloc[::-1].assign(note=["x", "y"])
    result, plan = solve(PlanningInstance(cands, inst.capacity_per_s, inst.rate_per_s), FAST)
    assert list(plan.deployments["candidate_id"]) == sorted(plan.deployments["candidate_id"])
    notes = dict(zip(plan.deployments["candidate_id"], plan.deployments["note"]))
    assert notes == {"a100-x1": "x", "a10g-x1": "y"}
    assert isinstance(plan.routing, pd.DataFrame) and list(plan.routing.columns) == [
        "candidate_id", "workload", "rate_per_s"]


def test_validation_of_string_dtype_ids_and_gpus():
    """The vectorized checks of string-dtype ids and GPU types (and integer GPU counts) find
    what the value-by-value ones find; a capacity table in another row order is accepted."""
    inst = melange_instance()
    cands = inst.candidates.astype({"gpu": "str"}).set_axis(inst.candidates.index.astype("str"))
    cap = inst.capacity_per_s.set_axis(cands.index)
    PlanningInstance(cands, cap.iloc[::-1], inst.rate_per_s)          # valid, rows in another order
    renamed = cands.index.tolist()
    renamed[0] = ""
    gpus = cands["gpu"].copy()
    gpus.iloc[1] = None
    with pytest.raises(PlanningInputError) as err:
        PlanningInstance(cands.assign(gpu=gpus, gpus_per_replica=0).set_axis(pd.Index(renamed, dtype="str")),
                         cap.set_axis(pd.Index(renamed, dtype="str")), inst.rate_per_s)
    assert sorted(p.split(":")[0] for p in err.value.problems) == [
        "candidates.gpu", "candidates.gpus_per_replica", "candidates.index"]
