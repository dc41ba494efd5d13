"""Dominance pruning removes candidates without changing the optimum."""

import numpy as np
import pandas as pd
import pytest
from opt_helpers import FAST

from planner.optimize import (PlanningInstance, SolveStatus, build_model, prune_dominated, read_plan,
                              run_solver)
from planner.optimize.prune import NO_CAPACITY


def test_prune_rules():
    cands = pd.DataFrame({"gpu": ["g", "g", "g", "g", "h", "g"], "gpus_per_replica": [1, 1, 2, 1, 1, 1],
                          "usd_per_replica_hour": [1.0, 1.0, 1.0, 2.0, 2.0, 1.0]},
                         index=["a", "b", "c", "d", "e", "f"])
    cap = pd.DataFrame({"w1": [3.0, 3.0, 3.0, 4.0, 1.0, 0.0], "w2": [2.0, 2.0, 2.0, 1.0, 1.0, 0.0]},
                       index=cands.index)
    pruned = prune_dominated(cands, cap)
    # b duplicates a (a first); c needs more GPUs for the same; d trades price for w1 capacity;
    # e is another GPU type; f serves nothing.
    assert pruned.to_dict() == {"b": "a", "c": "a", "f": NO_CAPACITY}


def _random(seed):
    rng = np.random.default_rng(1000 + seed)
    n, m = int(rng.integers(4, 10)), int(rng.integers(1, 4))
    ids = [f"k{i:02d}" for i in rng.permutation(n)]
    cands = pd.DataFrame({"gpu": rng.choice(["g1", "g2"], size=n), "gpus_per_replica": rng.integers(1, 3, n),
                          "usd_per_replica_hour": rng.integers(2, 6, size=n) / 2.0}, index=ids)
    cap = pd.DataFrame(rng.integers(0, 5, size=(n, m)).astype(float), index=ids,
                       columns=[f"w{k}" for k in range(m)])
    cap.iloc[0] = 4.0
    rate = pd.Series(rng.integers(1, 9, size=m).astype(float), index=cap.columns)
    opts = {}
    if rng.random() < 0.4:
        opts["max_distinct_configs"] = int(rng.integers(1, 3))
    if rng.random() < 0.4:
        opts["inventory_gpus"] = {"g1": int(rng.integers(0, 8))}
    if rng.random() < 0.4:
        opts["redundancy_workloads"] = ("w0",)
    if rng.random() < 0.5:
        opts["slices_per_workload"] = int(rng.integers(1, 4))
    return PlanningInstance(cands, cap, rate, **opts)


@pytest.mark.parametrize("seed", range(20))
def test_pruning_keeps_the_optimum(seed):
    inst = _random(seed)
    results = []
    for prune in (True, False):
        built = build_model(inst, prune=prune)
        result = run_solver(built, FAST)
        results.append((result, read_plan(built, result), built))
    (pruned, plan, built), (full, _, _) = results
    assert pruned.status == full.status
    if full.status == SolveStatus.OPTIMAL:
        assert pruned.objective_usd_per_hour == pytest.approx(full.objective_usd_per_hour, abs=1e-9)
        assert not set(plan.deployments["candidate_id"]) & set(built.pruned.index)


def test_random_pruning_cases_actually_prune():
    assert sum(len(build_model(_random(s)).pruned) > 0 for s in range(20)) >= 10
