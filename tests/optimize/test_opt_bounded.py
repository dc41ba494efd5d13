"""Cost bounds per candidate hold for every plan, and the ranking on the bounded restriction
finds the whole model's plans in the same order."""

import numpy as np
import pandas as pd
import pytest
from opt_helpers import FAST, random_instance, random_pooled_instance
from ortools.sat.python import cp_model

from planner.optimize import PlanningInstance, alternatives, bounded, build_model
from planner.optimize.alternatives import plan_alternatives
from planner.optimize.lpbound import candidate_lower_bounds
from planner.optimize.tiebreak import tie_break_weight

INSTANCES = [("aggregated", s) for s in range(12)] + [("pooled", s) for s in range(12)]


def _instance(kind: str, seed: int):
    return random_instance(seed, n_max=6) if kind == "aggregated" else random_pooled_instance(seed)


def _least_cost_deploying(built, j: int) -> float | None:
    """The proven least cost [cost units / h] of a plan with replicas_j >= 1 (None: none exists)."""
    model = built.model.clone()
    model.add(built.replicas.iloc[j] >= 1)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 20.0
    status = solver.solve(model)
    assert status in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
    return solver.objective_value if status == cp_model.OPTIMAL else None


@pytest.mark.parametrize("kind, seed", INSTANCES)
def test_bounds_are_below_every_plan_that_deploys_the_candidate(kind, seed):
    built = build_model(_instance(kind, seed))
    bounds = candidate_lower_bounds(built)
    if bounds is None:                    # no multipliers: only for an infeasible LP
        assert all(_least_cost_deploying(built, j) is None for j in range(len(built.replicas)))
        return
    assert len(bounds) == len(built.replicas)
    for j in range(len(built.replicas)):
        least = _least_cost_deploying(built, j)
        if least is None:
            continue                      # any bound holds (inf included)
        assert bounds[j] <= least, built.replicas.index[j]


def test_bounds_are_tight_enough_to_rule_candidates_out():
    """On the random pools, the bounds are often above the optimum, and infinite for a
    candidate whose one replica exceeds its GPU type's inventory."""
    above = 0
    for seed in range(12):
        built = build_model(random_pooled_instance(seed))
        bounds = candidate_lower_bounds(built)
        if bounds is None:
            continue
        opt = min((c for c in (_least_cost_deploying(built, j) for j in range(len(bounds))) if c is not None),
                  default=None)
        if opt is not None:
            above += int((bounds > opt).sum())
        assert np.all(np.isinf(bounds[built.replica_upper.to_numpy() < 1]))
    assert above >= 10


def _plan_tables(found):
    return [(f.plan.deployments.to_dict("list"), f.plan.routing.to_dict("list"), f.optimal_cost, f.admissible,
             f.forced, f.result.status, f.result.objective_usd_per_hour, f.result.best_bound_usd_per_hour,
             f.result.solver_params["combined_objective_weight"], f.result.solver_params["proven_unique"])
            for f in found]


def _restrict_tiny_models(monkeypatch, headroom: float) -> None:
    """The bounded search on the tests' models of a few candidates, from the least bound."""
    for name, value in (("RESTRICTION_MIN_CANDIDATES", 0), ("RESTRICTION_LEAST_CANDIDATES", 1),
                        ("RESTRICTION_MAX_SHARE", 1.0), ("RESTRICTION_HEADROOM", headroom)):
        monkeypatch.setattr(bounded, name, value)


def _record_restrictions(monkeypatch) -> list:
    """(candidate ids kept, candidates in the whole model) of every restriction the bounded
    searches make, as they run."""
    made: list = []
    real = bounded.BoundedSearch._restrict

    def recording(self, threshold):
        real(self, threshold)
        made.append((list(self.sub.replicas.index), len(self.built.replicas)))

    monkeypatch.setattr(bounded.BoundedSearch, "_restrict", recording)
    return made


def test_first_threshold_and_when_the_model_is_searched_whole(monkeypatch):
    bounds = np.array([5.0, np.inf, 1.0, 3.0, 2.0, 4.0])
    monkeypatch.setattr(bounded, "RESTRICTION_HEADROOM", 0.5)
    monkeypatch.setattr(bounded, "RESTRICTION_LEAST_CANDIDATES", 2)
    assert bounded.first_threshold(bounds) == 2.0          # the two least bounds
    monkeypatch.setattr(bounded, "RESTRICTION_LEAST_CANDIDATES", 1)
    assert bounded.first_threshold(bounds) == 1.5          # 1.5 x the least bound
    monkeypatch.setattr(bounded, "RESTRICTION_LEAST_CANDIDATES", 9)
    assert bounded.first_threshold(bounds) == 5.0          # every finite bound
    assert bounded.first_threshold(np.array([np.inf])) == np.inf
    # a first restriction that keeps more than RESTRICTION_MAX_SHARE: the whole model
    inst = random_pooled_instance(0)
    built = build_model(inst, emit=False)
    monkeypatch.setattr(bounded, "RESTRICTION_MIN_CANDIDATES", 0)
    monkeypatch.setattr(bounded, "RESTRICTION_MAX_SHARE", 1.0)
    assert bounded.bounded_search(built, FAST, FAST, 0.05) is not None
    monkeypatch.setattr(bounded, "RESTRICTION_MAX_SHARE", 0.0)
    assert bounded.bounded_search(built, FAST, FAST, 0.05) is None
    monkeypatch.setattr(bounded, "RESTRICTION_MAX_SHARE", 1.0)
    monkeypatch.setattr(bounded, "RESTRICTION_MIN_CANDIDATES", len(built.replicas) + 1)
    assert bounded.bounded_search(built, FAST, FAST, 0.05) is None


@pytest.mark.parametrize("headroom", [0.0, 0.1])
@pytest.mark.parametrize("kind, seed", INSTANCES[::2])
def test_bounded_ranking_finds_the_whole_models_plans(kind, seed, headroom, monkeypatch):
    """Headroom 0: every plan above the first threshold grows the restriction (the step is
    solved again); 0.1: the default."""
    inst = _instance(kind, seed)
    monkeypatch.setattr(alternatives, "split_model", lambda built: None)
    whole = plan_alternatives(inst, 4, FAST, face_limit=4)
    _restrict_tiny_models(monkeypatch, headroom)
    restricted = _record_restrictions(monkeypatch)
    mine = plan_alternatives(inst, 4, FAST, face_limit=4)
    assert _plan_tables(mine) == _plan_tables(whole)
    assert restricted or candidate_lower_bounds(build_model(inst, emit=False)) is None
    if whole:
        assert mine[0].result.solver_params["combined_objective_weight"] == tie_break_weight(build_model(inst))


def test_some_bounded_rankings_grow_and_some_stay_small(monkeypatch):
    """The cases above exercise both paths: a restriction that holds every plan asked for,
    and one that grows (headroom 0)."""
    monkeypatch.setattr(alternatives, "split_model", lambda built: None)
    _restrict_tiny_models(monkeypatch, 0.0)
    grown, small = 0, 0
    sizes = _record_restrictions(monkeypatch)
    for kind, seed in INSTANCES[::2]:
        sizes.clear()
        plan_alternatives(_instance(kind, seed), 4, FAST, face_limit=4)
        if not sizes:                     # an infeasible LP: the whole model is searched
            continue
        grown += len(sizes) > 1
        small += len(sizes[0][0]) < sizes[0][1]
    assert grown >= 2 and small >= 2


def test_an_infeasible_restriction_grows_to_every_usable_candidate(monkeypatch):
    """One configuration at most, and neither "cheap" nor "mid" serves the 6 req/s alone
    (inventory): with bounds that admit only those two first (valid: each is below every
    plan's cost), the first restriction is infeasible and the step is solved on every
    candidate some plan can deploy; "blocked" (2 GPUs per replica, inventory 1) never is."""
    ids = pd.Index(["big", "blocked", "cheap", "mid"], name="candidate_id")
    cands = pd.DataFrame({"gpu": ["g4", "g3", "g1", "g2"], "gpus_per_replica": [1, 2, 1, 1],
                          "usd_per_replica_hour": [5.0, 1.0, 1.0, 2.0]}, index=ids)
    capacity = pd.DataFrame({"chat": [10.0, 10.0, 2.0, 3.0]}, index=ids)
    inst = PlanningInstance(cands, capacity, pd.Series({"chat": 6.0}), inventory_gpus={"g1": 2, "g2": 1, "g3": 1},
                            max_distinct_configs=1)
    built = build_model(inst, emit=False, prune=False)
    lp = dict(zip(built.replicas.index, candidate_lower_bounds(built)))
    assert np.isinf(lp["blocked"]) and lp["big"] <= 5e6          # big alone: $5/h, the optimum
    monkeypatch.setattr(alternatives, "split_model", lambda built: None)
    whole = plan_alternatives(inst, 2, FAST, face_limit=2, built=build_model(inst, emit=False, prune=False))
    _restrict_tiny_models(monkeypatch, 0.0)
    weak = np.array([4e6, np.inf, 0.0, 0.0])                      # big, blocked, cheap, mid
    monkeypatch.setattr(bounded, "candidate_lower_bounds", lambda built: weak)
    made = _record_restrictions(monkeypatch)
    mine = plan_alternatives(inst, 2, FAST, face_limit=2, built=build_model(inst, emit=False, prune=False))
    assert _plan_tables(mine) == _plan_tables(whole)
    assert [sorted(ids) for ids, _ in made] == [["cheap", "mid"], ["big", "cheap", "mid"]]
    assert [f.plan.deployments["candidate_id"].tolist() for f in mine] == [["big"]]


def _cheap_mid_big_rankings(monkeypatch, big_bound_usd: float, before=None) -> tuple:
    """(whole model's plans, bounded search's plans, its restrictions) of cheap ($1/h, 2 req/s),
    mid ($2/h, 3 req/s) and big ($5/h, 10 req/s) serving 6 req/s, with LP bounds 0 for cheap
    and mid and ``big_bound_usd`` for big; ``before()`` runs just before the bounded search."""
    ids = pd.Index(["big", "cheap", "mid"], name="candidate_id")
    cands = pd.DataFrame({"gpu": ["g3", "g1", "g2"], "gpus_per_replica": [1, 1, 1],
                          "usd_per_replica_hour": [5.0, 1.0, 2.0]}, index=ids)
    capacity = pd.DataFrame({"chat": [10.0, 2.0, 3.0]}, index=ids)
    inst = PlanningInstance(cands, capacity, pd.Series({"chat": 6.0}))
    monkeypatch.setattr(alternatives, "split_model", lambda built: None)
    whole = plan_alternatives(inst, 2, FAST, face_limit=1, built=build_model(inst, emit=False, prune=False))
    _restrict_tiny_models(monkeypatch, 0.0)
    bounds = np.array([big_bound_usd * 1e6, 0.0, 0.0])
    monkeypatch.setattr(bounded, "candidate_lower_bounds", lambda built: bounds)
    made = _record_restrictions(monkeypatch)
    if before is not None:
        before()
    mine = plan_alternatives(inst, 2, FAST, face_limit=1, built=build_model(inst, emit=False, prune=False))
    assert _plan_tables(mine) == _plan_tables(whole)
    return whole, mine, made


def test_a_threshold_that_keeps_no_more_candidates_solves_nothing_again(monkeypatch):
    """Cheap x 3 ($3/h) is the optimum; with big's bound at $4/h (valid: big alone costs $5/h),
    the first restriction (threshold 0) keeps cheap and mid, and its optimum at $3/h lies
    above the threshold. Raised to $3/h, the threshold keeps the same two candidates: the plan
    is exact as it stands, with the solves of the whole model's first plan. The second plan
    (mid x 2, $4/h) raises it to $4/h, which keeps big too: solved again."""
    whole, mine, made = _cheap_mid_big_rankings(monkeypatch, 4.0)
    assert [f.plan.deployments["candidate_id"].tolist() for f in mine][:2] == [["cheap"], ["mid"]]
    assert [f.plan.usd_per_hour for f in mine][:2] == [3.0, 4.0]
    assert [sorted(ids) for ids, _ in made] == [["cheap", "mid"], ["big", "cheap", "mid"]]
    first = [f.result.solver_params["num_solves"] for f in (whole[0], mine[0])]
    assert first[0] == first[1]
    assert mine[1].result.solver_params["num_solves"] > whole[1].result.solver_params["num_solves"]


def test_a_plan_solved_again_on_a_larger_restriction_runs_nothing_beside(monkeypatch):
    """As above with big's bound at $2/h: the first plan ($3/h, from cheap and mid) raises the
    threshold to $3/h, which keeps big, so that step is solved again on all three; its
    restricted search looks nothing ahead for it (the loaded model's cost solve, run beside
    the first plan's proof, would be of the restriction that is dropped)."""
    from planner.optimize import nextplan

    ahead: list = []
    real = nextplan.WholeModelSearch._loaded_ahead

    def recording(self, support):
        ahead.append(sorted(self.built.replicas.index))
        real(self, support)

    whole, mine, made = _cheap_mid_big_rankings(
        monkeypatch, 2.0, lambda: monkeypatch.setattr(nextplan.WholeModelSearch, "_loaded_ahead", recording))
    assert [sorted(ids) for ids, _ in made] == [["cheap", "mid"], ["big", "cheap", "mid"]]
    assert ahead in ([], [["big", "cheap", "mid"]])       # beside only with a second CPU
    # the first plan counts the solves of the dropped step too
    assert mine[0].result.solver_params["num_solves"] > whole[0].result.solver_params["num_solves"]
