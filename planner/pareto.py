"""Cost vs p95 latency fronts by epsilon-constraint re-solves (mixed and per GPU type).

For a target t on p95 TPOT (or TTFT), every workload's SLO becomes min(SLO, t), the
capacities at SLO are recomputed for the feasible candidates, and the minimum-cost plan
is solved again: once over all GPU types (the mixed front) and once per GPU type.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from planner.margins import Margins
from planner.optimize import SolveStatus, solve
from planner.optimize.check import check_plan
from planner.problem import Problem
from planner.search import serving_params, workload_arrays
from planner.serving.queueing import TrafficArrays, capacity_from_curve, occupancy_curve, state_at_occupancy

METRICS = ("tpot_p95_s", "ttft_p95_s")
#: The tightest target sits this much above the fastest latency any candidate reaches.
TIGHTEST_TARGET_MARGIN = 1.02
#: A trickle of load (decode occupancy) for the fastest reachable latency.
TRICKLE_OCCUPANCY = 1e-6


def _fastest_latency(problem: Problem, feasible: pd.DataFrame, metric: str) -> float:
    """The smallest target at which every workload still has some candidate."""
    worst = 0.0
    for w in problem.workloads:
        rows = feasible[feasible["model"] == w.model]
        if rows.empty:
            continue
        params = serving_params(problem, rows)
        arrays = workload_arrays(problem, rows, w)
        traffic = TrafficArrays.from_distributions(w.prompt, w.output, w.prefix_cache_hit_fraction)
        state = state_at_occupancy(arrays, params, traffic, TRICKLE_OCCUPANCY)
        worst = max(worst, float(np.nanmin(state[metric])))
    return worst


def _curves(problem: Problem, feasible: pd.DataFrame) -> dict:
    """Occupancy curves of the feasible candidates per workload (computed once per sweep)."""
    out = {}
    for w in problem.workloads:
        rows = feasible[feasible["model"] == w.model]
        if rows.empty:
            continue
        params = serving_params(problem, rows)
        traffic = TrafficArrays.from_distributions(w.prompt, w.output, w.prefix_cache_hit_fraction)
        out[w.name] = (rows.index, occupancy_curve(workload_arrays(problem, rows, w), params, traffic))
    return out


def _capacities(problem: Problem, feasible: pd.DataFrame, curves: dict, metric: str, target_s: float) -> pd.DataFrame:
    cap = pd.DataFrame(0.0, index=feasible.index, columns=[w.name for w in problem.workloads])
    for w in problem.workloads:
        if w.name not in curves:
            continue
        index, curve = curves[w.name]
        ttft, tpot = w.slo.ttft_p95_s, w.slo.tpot_p95_s
        if metric == "tpot_p95_s":
            tpot = min(tpot, target_s)
        else:
            ttft = min(ttft, target_s)
        cap.loc[index, w.name] = Margins.of(problem).planned_capacity(
            lambda a, b, curve=curve: capacity_from_curve(curve, a, b), ttft, tpot)
    return cap


def targets(problem: Problem, feasible: pd.DataFrame, metric: str, points: int) -> np.ndarray:
    """Geometric grid from just above the fastest reachable p95 (at the confidence) to the loosest SLO."""
    loosest = max(getattr(w.slo, metric) for w in problem.workloads)
    fastest = _fastest_latency(problem, feasible, metric) * Margins.of(problem).factor(metric)
    tightest = min(fastest * TIGHTEST_TARGET_MARGIN, loosest)
    return np.unique(np.geomspace(tightest, loosest, points))


def _solve_point(instance, options, previous):
    """Solve one front point, reusing the next looser point's optimal plan when it still holds.

    Capacities only shrink as the target tightens, so the optimum cost can only rise; a
    looser optimum that stays feasible under the tighter capacities is therefore optimal.
    """
    if instance is None:
        return str(SolveStatus.INFEASIBLE), None
    if previous is not None and previous[1] is not None and previous[0] == str(SolveStatus.OPTIMAL):
        if not check_plan(instance, previous[1]):
            return previous
    result, plan = solve(instance, options)
    return str(result.status), plan


def pareto_fronts(problem: Problem, candidates: pd.DataFrame, options, points: int | None = None,
                  metrics=METRICS, per_gpu: bool = True, prove_unique_plan: bool = False) -> pd.DataFrame:
    """Points (front, metric, target_s, status, cost) of the mixed and per-GPU-type fronts.

    ``front`` is ``"mixed"`` or a GPU id; a point whose solve is infeasible has NaN cost.
    ``per_gpu=False`` computes the mixed fronts only.

    Points are solved by one CP-SAT worker (deterministic for a given model and seed)
    without the lexicographic uniqueness proof of the plan's own solve, unless
    ``prove_unique_plan``: the cost is the proven minimum either way. Equal-cost plans tie
    in the weighted replica sum often enough that the parallel search alone would not
    repeat its deployments; the proof took 80-95 % of the front's time on the large
    benchmark problem (``benchmarks/bench_large_problem.py``: 47.7 s with the proof and
    8 workers, 17.2 s with one worker and no proof).
    """
    from planner.pipeline import planning_instance, usd_per_million_tokens

    points = points or problem.spec.optimize.pareto_points
    options = replace(options, prove_unique_plan=prove_unique_plan,
                      num_workers=options.num_workers if prove_unique_plan else 1)
    feasible = candidates[candidates["feasible"]]
    gpu_types = sorted(feasible["gpu"].unique()) if per_gpu else []
    curves = _curves(problem, feasible)
    rows = []
    for metric in metrics:
        previous: dict = {}  # front -> (status, plan) of the next looser target
        for target in targets(problem, feasible, metric, points)[::-1]:
            cap = _capacities(problem, feasible, curves, metric, float(target))
            for front in ["mixed", *gpu_types]:
                sub = cap if front == "mixed" else cap[feasible["gpu"] == front]
                instance = planning_instance(problem, feasible.loc[sub.index], sub)
                status, plan = _solve_point(instance, options, previous.get(front))
                previous[front] = (status, plan)
                ok = plan is not None
                rows.append({
                    "front": front, "metric": metric, "target_s": float(target), "status": status,
                    "usd_per_hour": plan.usd_per_hour if ok else np.nan,
                    "usd_per_million_tokens": usd_per_million_tokens(problem, plan.usd_per_hour) if ok else np.nan,
                    "gpus": int(plan.deployments["gpus"].sum()) if ok else 0,
                    "deployments": "; ".join(
                        f"{r.replicas}x {r.gpu} tp{r.tp} pp{r.pp} {r.quantization}/{r.kv_cache_dtype} b{r.max_batch}"
                        for r in plan.deployments.itertuples()) if ok else "",
                })
    out = pd.DataFrame(rows).sort_values(["metric", "front", "target_s"], kind="stable", ignore_index=True)
    out.attrs.update(name="pareto", unit="USD/h")
    return out
