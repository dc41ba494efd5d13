"""The k cheapest plans that differ in the set of candidates they deploy (no-good cuts)."""

from __future__ import annotations

from dataclasses import replace

from planner.optimize.instance import PlanningInstance, SolverOptions, SolveStatus
from planner.optimize.model import build_model
from planner.optimize.solve import Plan, SolveResult, read_plan, run_solver


def k_best(instance: PlanningInstance, k: int, options: SolverOptions = SolverOptions()
           ) -> list[tuple[SolveResult, Plan]]:
    """The optimum, then the next-cheapest plans with a different set of deployed candidates.

    Parameters
    ----------
    instance : PlanningInstance
    k : int
        How many plans at most (>= 1).
    options : SolverOptions

    Returns
    -------
    list of (SolveResult, Plan)
        At most k entries, ranked by cost then by the sorted tuple of deployed
        ``candidate_id``; shorter when fewer distinct sets are feasible, empty when the
        instance is infeasible.

    Raises
    ------
    ValueError
        When k < 1.

    Notes
    -----
    After each plan with deployed set S, the cut OR(not use_j for j in S, use_j for j
    not in S) forbids exactly that set, and the model is re-solved (each solve has its
    own canonical tie-break). Dominated candidates are pruned before building, so the
    alternatives are drawn from non-dominated candidates only. The search stops early at
    a solve that is not proven optimal, as later ranks would not be trustworthy.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    built = build_model(instance)
    model = built.model.clone()
    ids = list(built.use.index)
    found: list[tuple[SolveResult, Plan]] = []
    for _ in range(k):
        current = replace(built, model=model)
        result = run_solver(current, options)
        plan = read_plan(current, result)
        if plan is None:
            break
        found.append((result, plan))
        if result.status != SolveStatus.OPTIMAL:
            break
        used = set(plan.deployments["candidate_id"])
        model = model.clone()
        model.add_bool_or([~built.use[i] if i in used else built.use[i] for i in ids])
    return sorted(found, key=lambda rp: (round(rp[0].objective_usd_per_hour, 9),
                                         tuple(sorted(rp[1].deployments["candidate_id"]))))


def deployed_sets(plans: list[tuple[SolveResult, Plan]]) -> list[tuple[str, ...]]:
    """The sorted candidate ids of each plan, for display and tests."""
    return [tuple(sorted(plan.deployments["candidate_id"])) for _, plan in plans]

