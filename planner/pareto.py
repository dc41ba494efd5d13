"""Cost vs p95 latency fronts by epsilon-constraint re-solves (mixed and per GPU type).

For a target t on p95 TPOT (or TTFT), every workload's SLO becomes min(SLO, t), the
capacities at SLO are recomputed for the feasible candidates, and the minimum-cost plan
is solved again: once over all GPU types (the mixed front) and once per GPU type.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.optimize import SolveStatus, solve
from planner.problem import Problem
from planner.search import serving_params, workload_arrays, workload_capacity
from planner.serving.queueing import TrafficArrays, state_at_occupancy

METRICS = ("tpot_p95_s", "ttft_p95_s")
#: The tightest target sits this much above the fastest latency any candidate reaches.
TIGHTEST_TARGET_MARGIN = 1.02
#: A trickle of load (decode occupancy) for the fastest reachable latency.
TRICKLE_OCCUPANCY = 1e-6


def _fastest_latency(problem: Problem, feasible: pd.DataFrame, metric: str) -> float:
    """The smallest target at which every workload still has some candidate."""
    params = serving_params(problem)
    worst = 0.0
    for w in problem.workloads:
        rows = feasible[feasible["model"] == w.model]
        if rows.empty:
            continue
        arrays = workload_arrays(problem, rows, w)
        traffic = TrafficArrays.from_distributions(w.prompt, w.output, w.prefix_cache_hit_fraction)
        state = state_at_occupancy(arrays, params, traffic, TRICKLE_OCCUPANCY)
        worst = max(worst, float(np.nanmin(state[metric])))
    return worst


def _capacities(problem: Problem, feasible: pd.DataFrame, metric: str, target_s: float) -> pd.DataFrame:
    params = serving_params(problem)
    cap = pd.DataFrame(0.0, index=feasible.index, columns=[w.name for w in problem.workloads])
    for w in problem.workloads:
        rows = feasible[feasible["model"] == w.model]
        caps = {"tpot_cap_s": target_s} if metric == "tpot_p95_s" else {"ttft_cap_s": target_s}
        cap.loc[rows.index, w.name] = workload_capacity(problem, rows, w, params, **caps)["max_rate_per_s"]
    return cap


def targets(problem: Problem, feasible: pd.DataFrame, metric: str, points: int) -> np.ndarray:
    """Geometric grid from just above the fastest reachable p95 to the loosest SLO."""
    loosest = max(getattr(w.slo, metric) for w in problem.workloads)
    tightest = min(_fastest_latency(problem, feasible, metric) * TIGHTEST_TARGET_MARGIN, loosest)
    return np.unique(np.geomspace(tightest, loosest, points))


def pareto_fronts(problem: Problem, candidates: pd.DataFrame, options, points: int | None = None) -> pd.DataFrame:
    """Points (front, metric, target_s, status, cost) of the mixed and per-GPU-type fronts.

    ``front`` is ``"mixed"`` or a GPU id; a point whose solve is infeasible has NaN cost.
    """
    from planner.pipeline import planning_instance, usd_per_million_tokens

    points = points or problem.spec.optimize.pareto_points
    feasible = candidates[candidates["feasible"]]
    gpu_types = sorted(feasible["gpu"].unique())
    rows = []
    for metric in METRICS:
        for target in targets(problem, feasible, metric, points):
            cap = _capacities(problem, feasible, metric, float(target))
            for front in ["mixed", *gpu_types]:
                sub = cap if front == "mixed" else cap[feasible["gpu"] == front]
                instance = planning_instance(problem, feasible.loc[sub.index], sub)
                result, plan = solve(instance, options) if instance is not None else (None, None)
                ok = plan is not None
                rows.append({
                    "front": front, "metric": metric, "target_s": float(target),
                    "status": str(result.status) if result is not None else str(SolveStatus.INFEASIBLE),
                    "usd_per_hour": plan.usd_per_hour if ok else np.nan,
                    "usd_per_million_tokens": usd_per_million_tokens(problem, plan.usd_per_hour) if ok else np.nan,
                    "gpus": int(plan.deployments["gpus"].sum()) if ok else 0,
                    "deployments": "; ".join(
                        f"{r.replicas}x {r.gpu} tp{r.tp} pp{r.pp} {r.quantization}/{r.kv_cache_dtype} b{r.max_batch}"
                        for r in plan.deployments.itertuples()) if ok else "",
                })
    out = pd.DataFrame(rows)
    out.attrs.update(name="pareto", unit="USD/h")
    return out
