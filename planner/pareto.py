"""Cost vs p95 latency fronts by epsilon-constraint re-solves (mixed and per GPU type).

For a target t on p95 TPOT (or TTFT), every workload's SLO becomes min(SLO, t), the
capacities at SLO of the candidates are recomputed exactly (the same bisection as the
search, :func:`planner.serving.queueing.capacity_at_slo`), and the minimum-cost plan is
solved again: once over all GPU types (the mixed front) and once per GPU type.

Speed (issue 19): the fronts consider a pool of candidates, per configuration the one
with the largest feasible max batch (:func:`front_pool`: more slots never lower a
capacity). Occupancy curves of the pool are computed once per sweep; at each target they
bound every capacity from below and above (:func:`_capacity_bounds`); a candidate that a
strong candidate (exact capacity) beats even on those bounds is dropped
(:func:`_survivors`), and only the survivors' capacities are bisected. Where a
candidate's own p95 at its SLO capacity already meets the target its capacity is the
search's (the bisection takes the same steps). At the problem's own SLOs the mixed point
is the plan's optimum. Targets start at the knee (:func:`knee_target`); each point is warm-
started with the next looser point's plan (reused outright when it still holds); the two
metrics' sweeps run in parallel processes when the CPUs allow. Roles: docs/serving-model.md 14.5.
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pandas as pd

from planner import dimensions
from planner.margins import Margins
from planner.optimize import SolveStatus, solve
from planner.optimize.check import check_plan
from planner.parameters import ProblemParams
from planner.planning import planning_instance, usd_per_million_tokens
from planner.optimize.prune import candidate_blocks, candidate_roles
from planner.problem import Problem
from planner.search import workload_arrays, workload_capacity
from planner.serving.queueing import TrafficArrays, capacity_from_curve, occupancy_curve

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
#: Points of the occupancy curves the capacity bounds are read from (quadratic grid).
FRONT_CURVE_POINTS = 16
#: Block of rows per dominance test (memory: block x strong rows x workloads booleans).
DOMINANCE_BLOCK = 512
#: Candidates per workload (best lower bound of capacity per price) that may dominate others.
STRONG_PER_WORKLOAD = 32
#: Fronts solved in parallel processes (one per metric) when at least this many CP-SAT
#: points are expected and more than one CPU is available.
PARALLEL_MIN_POINTS = 8


# ----------------------------------------------------------------------------- curves


def front_pool(feasible: pd.DataFrame) -> np.ndarray:
    """Positions of the candidates the fronts consider: per configuration (model, GPU, TP,
    PP, formats), the feasible one with the largest max batch that serves some workload.

    A larger max batch only adds slots at the same price: at every occupancy its p95s are
    at most those of a smaller one (the decode step does not depend on the slot count), so
    its capacity at any target is at least as large, up to the bisection's resolution.
    """
    caps = feasible[[c for c in feasible.columns if c.startswith("capacity_per_s[")]].to_numpy(float)
    serving = np.flatnonzero((caps > 0).any(axis=1))
    keys = [n for n in dimensions.NAMES if n != "max_batch"]
    codes = dimensions.CandidateTable(feasible).take(serving).factorize(keys)[0]
    batch = feasible["max_batch"].to_numpy()[serving]
    order = np.lexsort((serving, -batch, codes))
    first = np.ones(len(order), dtype=bool)
    first[1:] = codes[order][1:] != codes[order][:-1]
    return np.sort(serving[order[first]])


class _Curves:
    """Occupancy curves of the front pool's candidates that serve each workload at its SLO.

    ``pool``: the rows of ``feasible`` considered (:func:`front_pool`); ``rows[w]``:
    positions into ``pool`` of the candidates of workload w with capacity > 0 at the
    problem's SLO (a tighter target can only lower a capacity).
    """

    def __init__(self, problem: Problem, feasible: pd.DataFrame, params: ProblemParams):
        self.problem, self.feasible, self.params = problem, feasible, params
        self.pool = front_pool(feasible)
        self.frame = feasible.iloc[self.pool]
        self.names = [w.name for w in problem.workloads]
        self.rows, self.curves = {}, {}
        self.used, self.optimum = (), None
        for w in problem.workloads:
            cap = self.frame[f"capacity_per_s[{w.name}]"].to_numpy(float)
            both = candidate_roles(self.frame) == "both"  # role rows: no curve (_capacity_bounds)
            pos = np.flatnonzero((self.frame["model"].to_numpy() == w.model) & (cap > 0) & both)
            if not len(pos):
                continue
            rows = self.frame.iloc[pos]
            traffic = TrafficArrays.from_distributions(w.prompt, w.output, w.prefix_cache_hit_fraction)
            self.rows[w.name] = pos
            self.curves[w.name] = occupancy_curve(workload_arrays(problem, rows, w), params.of(rows),
                                                  traffic, FRONT_CURVE_POINTS)

    def fastest(self, metric: str) -> float:
        """The smallest target at which every workload still has some candidate (trickle load)."""
        worst = 0.0
        for curve in self.curves.values():
            worst = max(worst, float(np.nanmin(curve[metric][:, 0])))
        return worst


def _slos(workload, metric: str, target_s: float) -> tuple[float, float]:
    ttft, tpot = workload.slo.ttft_p95_s, workload.slo.tpot_p95_s
    if metric == "tpot_p95_s":
        return ttft, min(tpot, target_s)
    return min(ttft, target_s), tpot


def _capacity_bounds(curves: _Curves, metric: str, target_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds (pool rows x workloads) of the pool's exact capacities.

    Where a curve's p95s increase with the occupancy n (docs/serving-model.md 9.2) its feasible grid
    points are a prefix; the bisection's n* lies within one bisection step below the
    first crossing, so above the grid point before the last feasible one and below the
    first infeasible one, and rates increase with n. Elsewhere the bounds are 0 and the
    capacity at the SLO. Candidates whose p95 at the SLO capacity meets the target keep
    that capacity exactly.
    """
    frame = curves.frame
    lo = np.zeros((len(frame), len(curves.names)))
    hi = np.zeros_like(lo)
    roles = candidate_roles(frame) != "both"  # their capacity at the SLO bounds a tighter target's
    for k, w in enumerate(curves.problem.workloads):
        hi[roles, k] = frame[f"capacity_per_s[{w.name}]"].to_numpy(float)[roles]
        if w.name not in curves.rows:
            continue
        pos, curve = curves.rows[w.name], curves.curves[w.name]
        exact = frame[f"capacity_per_s[{w.name}]"].to_numpy(float)[pos]
        own = frame[f"{metric}[{w.name}]"].to_numpy(float)[pos]
        # central p95s against the SLOs the confidence margin leaves (planner.margins)
        ttft, tpot = Margins.of(curves.problem).slos(*_slos(w, metric, target_s))
        p_ttft, p_tpot, rate_raw = curve["ttft_p95_s"], curve["tpot_p95_s"], curve["rate_per_s"]
        with np.errstate(invalid="ignore"):
            monotone = ((np.diff(p_ttft, axis=1) >= 0) & (np.diff(p_tpot, axis=1) >= 0)
                        & ~(np.diff(rate_raw, axis=1) < 0)).all(axis=1)
        good = (p_ttft <= ttft) & (p_tpot <= tpot)
        points = good.shape[1]
        last = np.where(good.any(axis=1), points - 1 - np.argmax(good[:, ::-1], axis=1), -1)
        rows = np.arange(len(pos))
        rate = np.nan_to_num(rate_raw, nan=0.0)
        below = np.where(last >= 1, rate[rows, np.clip(last - 1, 0, None)], 0.0)
        above_rate = rate_raw[rows, np.clip(last + 1, 0, points - 1)]
        above = np.where((last < points - 1) & np.isfinite(above_rate), above_rate, exact)
        above = np.where(last < 0, 0.0, np.minimum(above, exact))
        unchanged = own <= (tpot if metric == "tpot_p95_s" else ttft)
        lo[pos, k] = np.where(unchanged, exact, np.where(monotone, np.minimum(below, above), 0.0))
        hi[pos, k] = np.where(unchanged, exact, np.where(monotone, above, exact))
    return lo, hi


def _survivors(frame: pd.DataFrame, lo: np.ndarray, hi: np.ndarray, limited: set, gpu: str | None,
               exact: "_Exact") -> np.ndarray:
    """Pool positions a minimum-cost plan may need at this target (all GPU types, or one).

    A strong set (for each workload the ``STRONG_PER_WORKLOAD`` best lower bounds, and
    as many best lower bounds per price), whose exact capacities are computed, is always kept; another candidate j
    is dropped when a strong i beats it for sure: exact capacities of i >= upper bounds
    of j on every workload, price_i <=
    price_j, and either i's GPU type has no inventory limit (mixed front) or i has the
    same type and at most j's GPUs per replica. Replacing j's replicas by as many of i's
    then keeps every constraint at no higher cost, so no optimum needs j.
    """
    types = frame["gpu"].to_numpy()
    live = (hi > 0).any(axis=1)
    if gpu is not None:
        live &= types == gpu
    idx = np.flatnonzero(live)
    if not len(idx):
        return idx
    price = frame["usd_per_replica_hour"].to_numpy(float)[idx]
    gpus = frame["gpus"].to_numpy(float)[idx]
    t, role = types[idx], candidate_blocks(frame)[idx]
    strong = set()
    for k in range(lo.shape[1]):
        for value in (lo[idx, k] / price, lo[idx, k]):
            if (value > 0).any():
                strong.update(np.argsort(-value, kind="stable")[:STRONG_PER_WORKLOAD].tolist())
    s = np.array(sorted(strong), dtype=int)
    free = ~np.isin(t[s], list(limited)) if gpu is None else np.zeros(len(s), dtype=bool)
    dropped = np.zeros(len(idx), dtype=bool)
    ls = exact.capacities(idx[s]).to_numpy()
    for start in range(0, len(idx), DOMINANCE_BLOCK):
        stop = min(start + DOMINANCE_BLOCK, len(idx))
        ge = (ls[None, :, :] >= hi[idx[start:stop], None, :]).all(axis=2)
        cheaper = price[s][None, :] <= price[start:stop, None]
        swap = free[None, :] | ((t[s][None, :] == t[start:stop, None]) & (gpus[s][None, :] <= gpus[start:stop, None]))
        swap &= role[s][None, :] == role[start:stop, None]  # never a role or pool for another
        dropped[start:stop] = (ge & cheaper & swap).any(axis=1)
    dropped[s] = False
    return idx[~dropped]


class _Exact:
    """Exact capacities at one target, computed once per pool row when first needed."""

    def __init__(self, curves: _Curves, metric: str, target_s: float):
        self.curves, self.metric, self.target_s = curves, metric, target_s
        self.values = np.full((len(curves.frame), len(curves.names)), np.nan)

    def capacities(self, positions: np.ndarray) -> pd.DataFrame:
        missing = positions[np.isnan(self.values[positions, 0])]
        if len(missing):
            self.values[missing] = self._compute(missing)
        frame = self.curves.frame
        return pd.DataFrame(self.values[positions], index=frame.index[positions], columns=self.curves.names)

    def _compute(self, positions: np.ndarray) -> np.ndarray:
        """Capacities at min(SLO, target) (the search's bisection where the target binds)."""
        problem, rows = self.curves.problem, self.curves.frame.iloc[positions]
        out = np.zeros((len(positions), len(self.curves.names)))
        margins = Margins.of(problem)
        for k, w in enumerate(problem.workloads):
            if w.name not in self.curves.rows:
                continue
            exact = rows[f"capacity_per_s[{w.name}]"].to_numpy(float)
            own = rows[f"{self.metric}[{w.name}]"].to_numpy(float)
            ttft, tpot = _slos(w, self.metric, self.target_s)
            held_ttft, held_tpot = margins.slos(ttft, tpot)
            bind = np.flatnonzero((exact > 0) & ~(own <= (held_tpot if self.metric == "tpot_p95_s" else held_ttft)))
            out[:, k] = exact
            if len(bind):
                sub = rows.iloc[bind]
                got = workload_capacity(problem, sub, w, self.curves.params.of(sub),
                                        tpot_cap_s=tpot, ttft_cap_s=ttft, margins=margins)
                out[bind, k] = got["max_rate_per_s"]
        return out


# ----------------------------------------------------------------------------- targets


def knee_target(problem: Problem, curves: _Curves, metric: str, elasticity: float = KNEE_ELASTICITY) -> float:
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
        pos, curve = curves.rows[w.name], curves.curves[w.name]
        for i, t in enumerate(grid):
            ttft, tpot = _slos(w, metric, float(t))
            cap = margins.planned_capacity(lambda a, b, curve=curve: capacity_from_curve(curve, a, b), ttft, tpot)
            with np.errstate(divide="ignore"):
                per_unit = np.where(cap > 0, price[pos] / np.where(cap > 0, cap, 1.0), np.inf)
            cost[i] += w.rate_per_s * float(per_unit.min())
    knee = loosest
    for i in range(len(grid) - 2, -1, -1):
        if not (np.isfinite(cost[i]) and cost[i + 1] > 0):
            break
        if np.log(cost[i] / cost[i + 1]) / np.log(grid[i + 1] / grid[i]) > elasticity:
            break
        knee = float(grid[i])
    return knee


def targets(problem: Problem, curves: _Curves, metric: str, points: int) -> np.ndarray:
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


def _sweep(problem: Problem, curves: _Curves, options, metric: str, points: int, gpu_fronts) -> list[dict]:
    """One metric's fronts, loosest target first: the mixed front, then the GPU types'.

    ``gpu_fronts``: a list of GPU ids, or ``"used"``: the GPU types of ``curves.used``
    (the ranked plans') and of the mixed front's points. At a target no tighter than any
    SLO the mixed point is the plan's own optimum (``curves.optimum``) or solved over every
    feasible candidate, as the plan is.
    """
    frame = curves.frame
    limited = {problem.catalog.gpu(g).id for g in problem.spec.inventory}
    rows, previous, points_at = [], None, []
    for target in targets(problem, curves, metric, points)[::-1]:
        target = float(target)
        lo, hi = _capacity_bounds(curves, metric, target)
        exact = _Exact(curves, metric, target)
        points_at.append((target, lo, hi, exact))
        if _tightens_nothing(problem, metric, target) and curves.optimum is not None:
            status, plan = str(SolveStatus.OPTIMAL), curves.optimum
            sub = None
        else:
            if _tightens_nothing(problem, metric, target):
                sub = None
                instance = planning_instance(problem, curves.feasible)
            else:
                sub = exact.capacities(_survivors(frame, lo, hi, limited, None, exact))
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
    for gpu in gpu_fronts:
        prev = None
        for target, lo, hi, exact in points_at:
            sub = exact.capacities(_survivors(frame, lo, hi, limited, gpu, exact))
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
    the GPU types in ``used_gpus`` (the ranked plans') or in some mixed-front point,
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
    curves = _Curves(problem, feasible, params)
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

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cpus < 2 or jobs < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    expected = points * (1 + (len(gpu_fronts) if isinstance(gpu_fronts, list) else 2))
    return 2 if expected >= PARALLEL_MIN_POINTS else 1


def _empty() -> pd.DataFrame:
    out = pd.DataFrame(columns=["front", "metric", "target_s", "status", "usd_per_hour",
                                "usd_per_million_tokens", "gpus", "deployments", "binding"])
    out.attrs.update(name="pareto", unit="USD/h")
    return out
