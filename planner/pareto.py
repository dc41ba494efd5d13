"""Cost vs p95 latency fronts by epsilon-constraint re-solves (mixed and per GPU type).

For a target t on p95 TPOT (or TTFT), every workload's SLO becomes min(SLO, t), the
capacities at SLO of the candidates are recomputed exactly (:mod:`planner.front_capacity`:
the front pool, its occupancy curves, bounds, dominance and the exact bisection of the
survivors), and the minimum-cost plan is solved again: once over all GPU types (the mixed
front) and once per GPU type.

At the problem's own SLOs the mixed point is the plan's optimum. Targets start at the knee
(:func:`knee_target`); each point is warm-started with the next looser point's plan (reused
outright when it still holds); the two metrics' sweeps run in parallel processes when the
CPUs allow. Roles: docs/serving-model.md 14.5.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from planner import dimensions
from planner.front_capacity import Curves, Exact, capacity_bounds, front_slos, survivor_sets
from planner.margins import Margins
from planner.optimize import SolveStatus, solve
from planner.optimize.check import check_plan
from planner.parameters import ProblemParams
from planner.planning import planning_instance, usd_per_million_tokens
from planner.problem import Problem
from planner.serving.queueing import capacity_from_curve

METRICS = ("tpot_p95_s", "ttft_p95_s")
#: ``optimize.fronts`` / ``--fronts``: which fronts a solve computes.
FRONT_MODES = ("none", "mixed", "used", "all")
#: The knee: the tightest target where tightening by 1 % raises the cost lower bound by at
#: most this many percent (the elasticity -dln(cost)/dln(target)); overridable per problem
#: as ``optimize.front_knee_elasticity``.
KNEE_ELASTICITY = 3.0
#: Geometric grid of targets on which the knee is looked for.
KNEE_GRID_POINTS = 32
#: The knee grid starts this much above the fastest latency any candidate reaches.
KNEE_GRID_START_MARGIN = 1.001
#: Fronts solved in parallel processes (one per metric) when at least this many CP-SAT
#: points are expected and more than one CPU is available.
PARALLEL_MIN_POINTS = 8


# ----------------------------------------------------------------------------- targets


def knee_target(problem: Problem, curves: Curves, metric: str, elasticity: float = KNEE_ELASTICITY) -> float:
    """The tightest target before the cost explodes (the fronts' first point).

    On a geometric grid from just above the fastest reachable p95 to the loosest SLO,
    the fluid lower bound of the cost, sum over workloads of rate x the cheapest price
    per unit of capacity at that target (curve-interpolated capacities of the pool), is
    computed; the knee is the tightest grid target reached from the loosest one without
    crossing a step whose elasticity -dln(cost)/dln(target) exceeds ``elasticity``.
    """
    loosest = max(getattr(w.slo, metric) for w in problem.workloads)
    margins = Margins.of(problem)
    fastest = curves.fastest(metric) * margins.factor(metric)
    if not np.isfinite(fastest) or fastest * KNEE_GRID_START_MARGIN >= loosest:
        return loosest
    grid = np.geomspace(fastest * KNEE_GRID_START_MARGIN, loosest, KNEE_GRID_POINTS)
    price = curves.frame["usd_per_replica_hour"].to_numpy(float)
    cost = np.zeros(len(grid))
    for w in problem.workloads:
        if w.name not in curves.rows:
            continue
        # twins of a configuration share its curve: the cheapest twin's price per unit is
        # the configuration's (the same minimum as over every row, computed once per configuration)
        curve, inverse = curves.distinct[w.name]
        cheapest = np.full(len(curve["rate_per_s"]), np.inf)
        np.minimum.at(cheapest, inverse, price[curves.rows[w.name]])
        for i, t in enumerate(grid):
            ttft, tpot = front_slos(w, metric, float(t))
            cap = margins.planned_capacity(lambda a, b, curve=curve: capacity_from_curve(curve, a, b), ttft, tpot)
            with np.errstate(divide="ignore"):
                per_unit = np.where(cap > 0, cheapest / np.where(cap > 0, cap, 1.0), np.inf)
            cost[i] += w.rate_per_s * float(per_unit.min())
    knee = loosest
    for i in range(len(grid) - 2, -1, -1):
        if not (np.isfinite(cost[i]) and cost[i + 1] > 0):
            break
        if np.log(cost[i] / cost[i + 1]) / np.log(grid[i + 1] / grid[i]) > elasticity:
            break
        knee = float(grid[i])
    return knee


def targets(problem: Problem, curves: Curves, metric: str, points: int) -> np.ndarray:
    """Geometric grid of ``points`` targets from the knee to the loosest SLO."""
    loosest = max(getattr(w.slo, metric) for w in problem.workloads)
    knee = knee_target(problem, curves, metric, problem.spec.optimize.front_knee_elasticity)
    return np.unique(np.geomspace(min(knee, loosest), loosest, points))


# ----------------------------------------------------------------------------- solving


def _solve_point(instance, options, previous):
    """Solve one front point, reusing the next looser point's optimal plan when it still holds.

    Capacities only shrink as the target tightens, so the optimum cost can only rise; a
    looser optimum that stays feasible under the tighter capacities is therefore optimal.
    Otherwise the looser plan's replicas are the solver's hint.
    """
    if instance is None:
        return str(SolveStatus.INFEASIBLE), None
    plan = previous[1] if previous is not None else None
    if plan is not None and previous[0] == str(SolveStatus.OPTIMAL) and not check_plan(instance, plan):
        return previous
    hint = None if plan is None else dict(zip(plan.deployments["candidate_id"], plan.deployments["replicas"]))
    result, plan = solve(instance, options, hint=hint)
    return str(result.status), plan


def _what_binds(problem: Problem, instance, cap: pd.DataFrame, options, metric: str, target_s: float) -> str:
    """Why a front point is infeasible: the latency target itself, the budget, or inventory."""
    unserved = [] if cap is None else [n for n in cap.columns if not (cap[n] > 0).any()]
    if instance is None or unserved:
        names = ", ".join(unserved) or "every workload"
        return f"latency target: no candidate meets {metric} <= {target_s:.6g} s for {names}"
    relaxed = replace(instance, budget_usd_per_hour=None)
    if instance.budget_usd_per_hour is not None:
        result, plan = solve(relaxed, options)
        if plan is not None:
            return (f"budget_usd_per_hour: {instance.budget_usd_per_hour:g} USD/h, the target needs "
                    f"{plan.usd_per_hour:.2f} USD/h")
    if instance.inventory_gpus:
        result, plan = solve(replace(relaxed, inventory_gpus={}), options)
        if plan is not None:
            need = ", ".join(f"{g}: {n}" for g, n in plan.gpus_by_type.items())
            return f"inventory: the target needs {need} GPUs"
    return "constraints (max_distinct_configs or redundancy) with the budget and inventory"


def _row(problem, front, metric, target, status, plan, binds=""):
    ok = plan is not None
    return {
        "front": front, "metric": metric, "target_s": float(target), "status": status,
        "usd_per_hour": plan.usd_per_hour if ok else np.nan,
        "usd_per_million_tokens": usd_per_million_tokens(problem, plan.usd_per_hour) if ok else np.nan,
        "gpus": int(plan.deployments["gpus"].sum()) if ok else 0,
        "deployments": "; ".join(
            f"{r.replicas}x {dimensions.label(r, 'pareto')}"
            for r in plan.deployments.itertuples()) if ok else "",
        "binding": binds,
    }


def _tightens_nothing(problem: Problem, metric: str, target_s: float) -> bool:
    """Whether the target is at least every workload's own SLO (capacities unchanged)."""
    return all(target_s >= getattr(w.slo, metric) for w in problem.workloads)


def _sweep(problem: Problem, curves: Curves, options, metric: str, points: int, gpu_fronts) -> list[dict]:
    """One metric's fronts, loosest target first: the mixed front, then the GPU types'.

    ``gpu_fronts``: a list of GPU ids, or ``"used"``: the GPU types of ``curves.used``
    (the ranked plans') and of the mixed front's points. At a target no tighter than any
    SLO the mixed point is the plan's own optimum (``curves.optimum``) or solved over every
    feasible candidate, as the plan is. The exact capacities of all the mixed points are
    computed together (:func:`planner.front_capacity.survivor_sets`), then those of all
    the GPU types' points.
    """
    frame = curves.frame
    limited = {problem.catalog.gpu(g).id for g in problem.spec.inventory}
    grid = [float(t) for t in targets(problem, curves, metric, points)[::-1]]
    bounds = [capacity_bounds(curves, metric, t) for t in grid]
    exact = Exact(curves, metric, grid)
    tight = [i for i, t in enumerate(grid) if not _tightens_nothing(problem, metric, t)]
    subs = survivor_sets(curves, bounds, limited, exact, [(None, i) for i in tight])
    rows, previous = [], None
    for i, target in enumerate(grid):
        if (None, i) not in subs and curves.optimum is not None:
            status, plan = str(SolveStatus.OPTIMAL), curves.optimum
            sub = None
        else:
            if (None, i) not in subs:
                sub = None
                instance = planning_instance(problem, curves.feasible)
            else:
                sub = subs[None, i]
                instance = planning_instance(problem, frame.loc[sub.index], sub) if len(sub) else None
            status, plan = _solve_point(instance, options, previous)
        previous = (status, plan)
        binds = "" if plan is not None else _what_binds(problem, instance, sub, options, metric, target)
        rows.append(_row(problem, "mixed", metric, target, status, plan, binds))
    if gpu_fronts == "used":
        used = set(curves.used)
        for r in rows:
            used |= {d.split()[1] for d in r["deployments"].split("; ") if d}
        gpu_fronts = sorted(used)
    subs = survivor_sets(curves, bounds, limited, exact, [(g, i) for g in gpu_fronts for i in range(len(grid))])
    for gpu in gpu_fronts:
        prev = None
        for i, target in enumerate(grid):
            sub = subs[gpu, i]
            instance = planning_instance(problem, frame.loc[sub.index], sub) if len(sub) else None
            status, plan = _solve_point(instance, options, prev)
            prev = (status, plan)
            binds = "" if plan is not None else _what_binds(problem, instance, sub, options, metric, target)
            rows.append(_row(problem, gpu, metric, target, status, plan, binds))
    return rows


#: The sweeps of a parallel run, inherited by the forked children (nothing is pickled in).
_JOBS: list = []


def _sweep_in_child(index: int) -> list[dict]:
    return _sweep(*_JOBS[index])


def pareto_fronts(problem: Problem, candidates: pd.DataFrame, params: ProblemParams, options,
                  points: int | None = None,
                  metrics=METRICS, per_gpu: bool | str = True, prove_unique_plan: bool = False,
                  fronts: str | None = None, used_gpus=(), optimum=None, processes: int | None = None
                  ) -> pd.DataFrame:
    """Points (front, metric, target_s, status, cost, ..., binding) of the fronts.

    ``params``: the problem's serving parameters (:func:`planner.planning.search_candidates`).
    ``front`` is ``"mixed"`` or a GPU id; a point whose solve is infeasible has NaN cost and
    says in ``binding`` what makes it infeasible (the target, the budget, inventory).

    ``fronts`` (default: ``per_gpu``; ``True`` is ``"all"``, ``False`` is ``"mixed"``):
    ``"mixed"`` computes the mixed fronts only, ``"used"`` adds the per-GPU-type fronts of
    the GPU types in ``used_gpus`` (the ranked plans') or in some mixed-front point of that metric,
    ``"all"`` those of every feasible GPU type, ``"none"`` nothing. ``optimum``: the plan's
    own optimal plan (a ``Plan`` or ranked plan), the mixed point at the problem's SLOs.

    Points are solved by one CP-SAT worker (deterministic for a given model, seed and
    hint) without the lexicographic uniqueness proof of the plan's own solve, unless
    ``prove_unique_plan``: the cost is the proven minimum either way. ``processes``
    (default: 2 when more than one CPU is available and the sweep is large enough) runs
    the metrics' sweeps in parallel processes; each sweep is sequential, so the result
    does not depend on it.
    """
    mode = fronts or {True: "all", False: "mixed"}.get(per_gpu, per_gpu)
    if mode not in FRONT_MODES:
        raise ValueError(f"fronts: expected one of {', '.join(FRONT_MODES)}, got {mode!r}")
    if mode == "none":
        return _empty()
    points = points or problem.spec.optimize.pareto_points
    options = replace(options, prove_unique_plan=prove_unique_plan, canonical_routing=False,
                      num_workers=options.num_workers if prove_unique_plan else 1)
    feasible = candidates[candidates["feasible"]]
    curves = Curves(problem, feasible, params)
    curves.used, curves.optimum = tuple(used_gpus), optimum
    gpu_fronts = {"mixed": [], "used": "used", "all": sorted(curves.frame["gpu"].unique())}[mode]
    jobs = [(problem, curves, options, m, points, gpu_fronts) for m in metrics]
    workers = processes if processes is not None else _default_processes(len(jobs), points, gpu_fronts)
    if workers > 1 and len(jobs) > 1:
        import multiprocessing

        _JOBS[:] = jobs
        try:
            with multiprocessing.get_context("fork").Pool(min(workers, len(jobs)),
                                                          initializer=_default_signals) as pool:
                parts = pool.map(_sweep_in_child, range(len(jobs)))
                pool.close()  # idle workers exit on their own; terminate() is only the error path
                pool.join()
        finally:
            _JOBS.clear()
    else:
        parts = [_sweep(*job) for job in jobs]
    rows = [r for part in parts for r in part]
    if not rows:
        return _empty()
    out = pd.DataFrame(rows).sort_values(["metric", "front", "target_s"], kind="stable", ignore_index=True)
    out.attrs.update(name="pareto", unit="USD/h")
    return out


def _default_signals() -> None:
    """Pool initializer: the children drop the planner's signal handlers (planner.interrupt).

    A forked child inherits the handler that turns SIGTERM into an exception; a child
    interrupted that way while it holds the pool's queue lock left the lock held and the
    parent waiting forever. With the default handlers a signalled child just ends, and
    the parent, which keeps its handlers, reports the interruption.
    """
    import signal

    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent decides


def _default_processes(jobs: int, points: int, gpu_fronts) -> int:
    """2 processes when fork exists, a second CPU is there and the sweeps are large."""
    import multiprocessing

    from planner.serving.parallel import usable_cpus

    cpus = usable_cpus()
    if cpus < 2 or jobs < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    expected = points * (1 + (len(gpu_fronts) if isinstance(gpu_fronts, list) else 2))
    return 2 if expected >= PARALLEL_MIN_POINTS else 1


def _empty() -> pd.DataFrame:
    out = pd.DataFrame(columns=["front", "metric", "target_s", "status", "usd_per_hour",
                                "usd_per_million_tokens", "gpus", "deployments", "binding"])
    out.attrs.update(name="pareto", unit="USD/h")
    return out
