"""Ranked-plan candidates: the optimum's equal-cost face, then alternatives that carry real load.

:func:`planner.optimize.k_best` returns the k cheapest distinct deployed sets. Two things
make its raw output a poor ranking: which equal-cost optimum comes first depends on k
(the latency tie-break can only compare the plans found), and an alternative is often the
optimum plus a near-idle deployment. :func:`plan_alternatives` fixes both: it always
enumerates the optimum's equal-cost face (up to ``face_limit`` distinct sets, whatever k
is), so the caller can pick rank 1 by latency among all of them; and every plan after the
first is solved with a minimum load per deployment, dropped only when no remaining plan
can meet it (inventory, budget, redundancy or distinct-config limits force it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner.optimize.blocks import emitted, split_model
from planner.optimize.bounded import bounded_search
from planner.optimize.instance import PlanningInstance, SolverOptions, SolveStatus
from planner.optimize.model import BuiltModel, build_model
from planner.optimize.nextplan import FIRST, LOADED, PLAIN, BlockSearch, WholeModelSearch
from planner.optimize.solve import Plan, SolveResult, read_plan

#: Least load (fraction of the capacity at SLO of its replicas, spare replicas of N+1
#: redundancy not counted) of every deployment of a ranked alternative (rank >= 2).
MIN_ALTERNATIVE_LOAD_FRACTION = 0.05
#: Most distinct deployed sets at the optimal cost compared by latency for rank 1.
EQUAL_COST_PLANS_LIMIT = 8
#: CP-SAT workers of every solve after the first (the rest of the equal-cost face and the
#: alternatives), at most the options' ``num_workers``. Each of those plans is the canonical
#: one (proven lexicographic tie-break), so the worker count changes only the time: one
#: worker spends the least CPU time (issue 19: about 2.5x less than 8 workers on the large
#: benchmark problem). Only with ``prove_unique_plan`` and canonical routing; the first
#: solve keeps the options' workers.
ALTERNATIVE_WORKERS = 1
# Tolerance of the load check on read-back plans (the solver's load rows are exact or
# conservative; this absorbs float rounding of rate / capacity only).
_LOAD_CHECK_TOLERANCE = 1e-9


@dataclass(frozen=True, eq=False)
class FoundPlan:
    """One solved plan and how it may be ranked.

    Attributes
    ----------
    result, plan : SolveResult, Plan
    optimal_cost : bool
        The plan costs the proven optimum and is among the first ``face_limit`` such sets:
        a candidate for rank 1.
    admissible : bool
        The plan may be ranked as an alternative (rank >= 2): every deployment carries at
        least the minimum load, or no remaining distinct plan could (``forced``).
    forced : bool
        Found after the minimum-load model became infeasible.
    min_load_fraction : float
        The least load fraction over its deployments (spare replicas not counted).
    """

    result: SolveResult
    plan: Plan
    optimal_cost: bool
    admissible: bool
    forced: bool
    min_load_fraction: float


def plan_alternatives(instance: PlanningInstance, k: int, options: SolverOptions = SolverOptions(), *,
                      min_load_fraction: float = MIN_ALTERNATIVE_LOAD_FRACTION,
                      face_limit: int = EQUAL_COST_PLANS_LIMIT, statuses: list | None = None,
                      built: BuiltModel | None = None, workers: int = ALTERNATIVE_WORKERS) -> list[FoundPlan]:
    """The optimum, its equal-cost face, and enough admissible alternatives for k ranks.

    Parameters
    ----------
    instance : PlanningInstance
    k : int
        Ranks wanted (>= 1).
    options : SolverOptions
    min_load_fraction : float, default MIN_ALTERNATIVE_LOAD_FRACTION
        In [0, 1): least load of each deployment of an alternative.
    face_limit : int, default EQUAL_COST_PLANS_LIMIT
        Most equal-cost distinct sets enumerated for rank 1 (>= 1).
    statuses : list, optional
        Receives the :class:`SolveResult` of every solve, in order (the first tells an
        infeasible instance from one whose feasibility the time limit left undecided).
    built : BuiltModel, optional
        The instance's model (:func:`build_model`, emitted or not), when the caller built it
        already (to report its pruning); built here otherwise.
    workers : int, default ALTERNATIVE_WORKERS
        Most CP-SAT workers of the solves after the first (when every plan is canonical).

    Returns
    -------
    list of FoundPlan
        In the order found (no-good cuts, each solve canonical); empty when infeasible.
        It holds every distinct set at the optimal cost up to ``face_limit`` whatever k is,
        and enough admissible plans for ranks 2..k besides whichever optimum ranks first
        (fewer when fewer distinct plans exist).

    Notes
    -----
    The first solve is the plain optimum. Every later solve forbids the sets found so far
    (the cut of :func:`k_best`) and adds, per candidate j, ``load_j >= ceil(f L_j)
    (y_j - spare_j)``: each non-spare replica carries at least a fraction f of its capacity
    (``ceil`` makes it conservative). When that model is infeasible, the remaining plans
    all hold a lighter deployment, so the search goes on without the rows and marks them
    ``forced``. The search stops at a solve that is not proven optimal.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not 0 <= min_load_fraction < 1:
        raise ValueError(f"min_load_fraction must be in [0, 1), got {min_load_fraction}")
    if face_limit < 1:
        raise ValueError(f"face_limit must be >= 1, got {face_limit}")
    built = built if built is not None else build_model(instance, emit=False)
    later = (replace(options, num_workers=max(1, min(options.num_workers, workers)))
             if options.prove_unique_plan and options.canonical_routing else options)
    blocks = split_model(built)
    if blocks is not None:
        search = BlockSearch(built, blocks, options, later, min_load_fraction)
    else:
        search = (bounded_search(built, options, later, min_load_fraction)
                  or WholeModelSearch(emitted(built), options, later, min_load_fraction))
    forced = False
    found: list[FoundPlan] = []
    optimum: float | None = None

    def last(usd_per_hour: float) -> bool:
        """Whether a next plan of that cost would end the search, were it admissible (as a
        plan of the minimum-load model nearly always is; a wrong guess costs time only)."""
        optimal = optimum is None or (sum(f.optimal_cost for f in found) < face_limit
                                      and round(usd_per_hour, 9) == round(optimum, 9))
        return not _wanted([f.optimal_cost for f in found] + [optimal], [f.admissible for f in found] + [True],
                           k, face_limit)

    while _wanted([f.optimal_cost for f in found], [f.admissible for f in found], k, face_limit):
        kind = FIRST if not found else PLAIN if forced else LOADED
        result = search.next(kind, last=last)
        if statuses is not None:
            statuses.append(result)
        if result.status == SolveStatus.INFEASIBLE and kind == LOADED:
            forced = True
            continue
        plan = read_plan(built, result)
        if plan is None:
            break
        optimum = result.objective_usd_per_hour if optimum is None else optimum
        least = _least_load(built, plan)
        face = sum(f.optimal_cost for f in found)
        found.append(FoundPlan(
            result=result, plan=plan,
            optimal_cost=face < face_limit and round(result.objective_usd_per_hour, 9) == round(optimum, 9),
            admissible=forced or least >= min_load_fraction - _LOAD_CHECK_TOLERANCE,
            forced=forced and len(found) > 0, min_load_fraction=least))
        if result.status != SolveStatus.OPTIMAL:
            break
        search.forbid(set(plan.deployments["candidate_id"]))
    return found


def _wanted(optimal_cost: list[bool], admissible: list[bool], k: int, face_limit: int) -> bool:
    """Whether :func:`plan_alternatives` solves again after plans with these flags (in order)."""
    if not optimal_cost:
        return True
    face = sum(optimal_cost)
    if optimal_cost[-1] and face < face_limit:
        return True
    # rank 1 is the lone optimum when the face is one plan: k - 1 alternatives suffice
    need = k - 1 if face == 1 and not admissible[0] else k
    return sum(admissible) < need


def _least_load(built: BuiltModel, plan: Plan) -> float:
    """Least load fraction over a plan's deployments, spare replicas of N+1 not counted."""
    red = set(built.instance.redundancy_workloads)
    routing = plan.routing
    spare_ids = ({cid for cid, w in zip(routing["candidate_id"].tolist(), routing["workload"].tolist()) if w in red}
                 if red else set())
    dep = plan.deployments
    if dep.empty:
        return 1.0
    spare = np.array([cid in spare_ids for cid in dep["candidate_id"].tolist()], dtype=np.int64)
    replicas = dep["replicas"].to_numpy(np.int64)
    active = np.maximum(replicas - spare, 1)
    return float(np.min(dep["load_fraction"].to_numpy(float) * replicas / active))
