"""``plan(problem) -> PlanResult``: the only place that calls every stage in order.

load -> enumerate and evaluate candidates -> capacities at SLO -> CP-SAT (k-best plans)
-> predicted p95s of each deployment at its routed load -> Pareto fronts -> diagnosis.
The stages' logic lives in :mod:`planner.planning` and the stage modules; this module only
calls them and assembles the :class:`~planner.planning.PlanResult`.
"""

from __future__ import annotations

import time

import pandas as pd

from planner.optimize import SolveStatus
from planner.planning import (PlanResult, candidate_counts, find_plans, planning_instance, rank_plans,
                              search_candidates, solver_options)
from planner.problem import Problem


def plan(problem: Problem, *, top_k: int | None = None, time_limit_s: float | None = None,
         pareto: bool = True, fronts: str | None = None, verify: bool = False,
         diagnose: bool = True) -> PlanResult:
    """Solve a problem: ranked plans, Pareto fronts, and a diagnosis when infeasible.

    ``fronts`` (default: the problem's ``optimize.fronts``) picks the fronts, see
    :func:`planner.pareto.pareto_fronts`; ``pareto=False`` skips them. ``verify`` simulates
    every deployment of the plans (:mod:`planner.verify`). ``diagnose=False``: no
    diagnosis (the diagnosis's own re-solves).
    """
    t0 = time.perf_counter()
    candidates, params = search_candidates(problem)
    t_search = time.perf_counter() - t0
    options = solver_options(problem, time_limit_s)
    instance = planning_instance(problem, candidates)
    k = top_k or problem.spec.optimize.top_k
    solutions = find_plans(problem, instance, k, options)
    t_solve = time.perf_counter() - t0 - t_search
    plans = rank_plans(problem, candidates, params, solutions.found, k)
    status = solutions.status
    front_mode, fronts = fronts, pd.DataFrame()
    t_pareto = 0.0          # only the fronts' own time (0 with --no-pareto)
    if plans and pareto and not problem.measured:
        from planner.pareto import pareto_fronts  # the fronts' modules only when fronts are asked for

        t_fronts = time.perf_counter()
        used = sorted({g for p in plans for g in p.gpus_by_type})
        fronts = pareto_fronts(problem, candidates, params, options,
                               fronts=front_mode or problem.spec.optimize.fronts, used_gpus=used,
                               optimum=plans[0] if status == str(SolveStatus.OPTIMAL) else None)
        t_pareto = time.perf_counter() - t_fronts
    timings = {"search": t_search, "solve": t_solve, "pareto": t_pareto}
    if verify:
        from planner.verify import verify_plans

        t_verify = time.perf_counter()
        plans = verify_plans(problem, candidates, params, plans)
        timings["verify"] = time.perf_counter() - t_verify
    if plans or not diagnose:
        diagnosis = []
    elif solutions.undecided:  # the diagnosis's modules only without a plan (process start)
        from planner.diagnosis import undecided_finding

        diagnosis = [undecided_finding(options)]
    else:
        from planner.diagnosis import diagnose as diagnose_problem

        diagnosis = diagnose_problem(problem, candidates, params, instance, options)
    daily = None
    if plans and (problem.spec.load_profile or any(w.load_profile for w in problem.spec.workloads)):
        from planner.procurement.profile import daily_plan

        daily = daily_plan(problem, plans[0], instance, time_limit_s=time_limit_s)
    return PlanResult(problem=problem, status=status, candidates=candidates, plans=plans, pareto=fronts,
                      solver=solutions.summary(), counts=candidate_counts(candidates, solutions), params=params,
                      diagnosis=diagnosis, daily=daily,
                      timings_s={**timings, "total": time.perf_counter() - t0}, verified=verify)
