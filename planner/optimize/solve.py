"""Run CP-SAT on a built model, report status honestly, and read the plan back as tables."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from ortools.sat.python import cp_model

from planner.optimize.instance import PlanningInstance, SolverOptions, SolveStatus
from planner.optimize.blocks import emitted, split_model
from planner.optimize.model import BuiltModel, build_model
from planner.optimize.prune import candidate_pools, candidate_roles
from planner.optimize.scaling import COST_UNITS_PER_USD
from planner.optimize.tiebreak import (TIE_BREAK_RULE, add_hints, canonical_solution, new_solver, solution_values,
                                      tie_break_weight)
from planner.serving.parallel import usable_cpus

_STATUS = {cp_model.OPTIMAL: SolveStatus.OPTIMAL, cp_model.FEASIBLE: SolveStatus.FEASIBLE,
           cp_model.INFEASIBLE: SolveStatus.INFEASIBLE, cp_model.MODEL_INVALID: SolveStatus.MODEL_INVALID,
           cp_model.UNKNOWN: SolveStatus.UNKNOWN}

OBJECTIVE_SENSE = {"usd_per_hour": "min"}
#: Models with fewer variables are solved by one CP-SAT worker (:func:`solving_options`).
SINGLE_WORKER_MAX_VARIABLES = 2000
#: Status of a decomposed solve with a block that found no plan, most decisive first.
_NO_PLAN_ORDER = (SolveStatus.INFEASIBLE, SolveStatus.MODEL_INVALID, SolveStatus.UNKNOWN)


@dataclass(frozen=True, eq=False)
class SolveResult:
    """Outcome of :func:`run_solver`.

    Attributes
    ----------
    status : SolveStatus
        ``optimal`` only when proven with gap 0.
    objective_usd_per_hour, best_bound_usd_per_hour, gap : float or None
        Cost of the plan, proven lower bound, relative gap (obj - bound) / obj; None
        without a plan.
    wall_time_s : float
        All phases together.
    solver_params : dict
        Settings used, the tie-break rule, ``proven_unique`` (the plan is the unique
        canonical optimum), the number of CP-SAT solves and wall time per stage.
    scales : dict
        Integer scale constants of the model.
    replicas, traffic_units : pandas.Series or None
        Solution values aligned with the model's ``replicas`` and ``traffic`` Series.
    """

    status: SolveStatus
    objective_usd_per_hour: float | None
    best_bound_usd_per_hour: float | None
    gap: float | None
    wall_time_s: float
    solver_params: dict
    scales: dict
    replicas: pd.Series | None = None
    traffic_units: pd.Series | None = None


@dataclass(frozen=True, eq=False)
class Plan:
    """A deployment plan: what to run (``deployments``) and where traffic goes (``routing``).

    ``deployments``: one row per candidate with replicas > 0, sorted by ``candidate_id``:
    candidate_id, gpu, gpus_per_replica, replicas, gpus, usd_per_hour, load_fraction
    (load / replicas), then the candidates' other columns. ``routing``: long format
    candidate_id, workload, rate_per_s [1/s]. ``usd_per_hour``: total cost;
    ``gpus_by_type``: GPUs per GPU type.
    """

    deployments: pd.DataFrame
    routing: pd.DataFrame
    usd_per_hour: float
    gpus_by_type: dict[str, int]


def run_solver(built: BuiltModel, options: SolverOptions = SolverOptions(), hint: dict | None = None) -> SolveResult:
    """Solve a built model to minimum cost, then pick the canonical optimal plan.

    Parameters
    ----------
    built : BuiltModel
        From :func:`build_model`; not mutated.
    options : SolverOptions
        Solver settings.
    hint : dict, optional
        Replicas per candidate id of a known plan (a neighbouring Pareto point's) to
        start from instead of the greedy hint; candidates it omits are hinted 0.

    Returns
    -------
    SolveResult
        ``infeasible``/``unknown``/``model_invalid`` results carry no solution.

    Notes
    -----
    Phase 1 minimizes ``M * cost + sum_j w_j * replicas_j`` with parallel workers,
    M larger than the second term, so cost comes first (cost alone when that objective
    could overflow). When it is proven optimal, phase 2 (:func:`canonical_solution`)
    bounds cost (and the weighted-replica term) by the optimum and breaks the remaining ties
    lexicographically, which makes the returned plan unique, hence identical across
    runs and worker counts. With a non-zero gap limit the status is at best
    ``feasible`` unless the gap closed.
    """
    return finish_solve(built, cost_phase(built, options, hint), options)


@dataclass(eq=False)
class CostPhase:
    """Phase 1 of :func:`run_solver` (the cost solve), finished by :func:`finish_solve`.

    ``y``, ``cost_units``, ``bound_units``, ``gap``: None without a plan; ``status``
    ``optimal`` only when proven with gap 0; ``key``: the proven optimum of the combined
    objective ``weight * cost + T`` (None unless optimal with a combined objective).
    """

    solver: cp_model.CpSolver
    solving: SolverOptions
    status: SolveStatus
    params: dict
    weight: int | None
    seconds: float
    y: np.ndarray | None = None
    cost_units: int | None = None
    bound_units: int | None = None
    gap: float | None = None
    key: int | None = None


def cost_phase(built: BuiltModel, options: SolverOptions, hint: dict | None = None,
               greedy: tuple | None = None) -> CostPhase:
    """The cost solve of :func:`run_solver` (its phase 1); ``greedy``: :func:`greedy_hint`
    of ``built`` when the caller has it."""
    start = time.perf_counter()
    weight = tie_break_weight(built)
    model = built.model.clone()
    if weight is not None:          # one solve: cost first, weighted-replica tie-break second
        model.minimize(weight * built.cost_expr + built.tie_break_expr)
    if hint is None:
        for variables, values in greedy if greedy is not None else greedy_hint(built):
            add_hints(model, variables, values)
    else:
        _add_plan_hint(model, built, hint)
    solving = solving_options(options, len(model.proto.variables))
    solver = new_solver(solving, options.time_limit_s)
    code = solver.solve(model)
    status = _STATUS.get(code, SolveStatus.UNKNOWN)
    params = {"time_limit_s": options.time_limit_s, "num_workers": options.num_workers,
              "random_seed": options.random_seed, "relative_gap_limit": options.relative_gap_limit,
              "objective_sense": OBJECTIVE_SENSE, "tie_break": TIE_BREAK_RULE,
              "prove_unique_plan": options.prove_unique_plan, "combined_objective_weight": weight,
              "proven_unique": False, "num_solves": 1,
              "wall_time_s": {"cost": time.perf_counter() - start}}
    phase = CostPhase(solver, solving, status, params, weight, time.perf_counter() - start)
    if status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
        return phase
    y = solution_values(solver, built.replicas)
    cost_units = plan_cost_units(built, y)
    if code == cp_model.OPTIMAL and options.relative_gap_limit == 0:
        bound_units = cost_units
    elif weight is None:
        bound_units = math.ceil(solver.best_objective_bound - 1e-6)
    else:
        tie_max = weight - 1
        bound_units = math.ceil((solver.best_objective_bound - tie_max) / weight - 1e-9)
    bound_units = min(max(bound_units, 0), cost_units)
    gap = 0.0 if cost_units == bound_units else (cost_units - bound_units) / max(cost_units, 1)
    if status == SolveStatus.OPTIMAL and gap > 0:
        phase.status = SolveStatus.FEASIBLE      # optimal only within the gap limit
    phase.y, phase.cost_units, phase.bound_units, phase.gap = y, cost_units, bound_units, gap
    if phase.status == SolveStatus.OPTIMAL and weight is not None:
        phase.key = weight * cost_units + int(built.tie_break_weights.to_numpy() @ y)
    return phase


def finish_solve(built: BuiltModel, phase: CostPhase, options: SolverOptions, *,
                 one_support: bool = False) -> SolveResult:
    """:func:`run_solver`'s result from its cost phase: the canonical plan when proven optimal.

    ``one_support``: every plan of the optimal face is known to deploy the set that
    ``phase`` deploys (:mod:`planner.optimize.cutseq`), so the uniqueness proof only
    compares replica counts on that set.
    """
    start = time.perf_counter()
    params = phase.params
    if phase.y is None:
        return SolveResult(phase.status, None, None, None, phase.seconds, params, built.scales)
    y = phase.y
    if phase.status == SolveStatus.OPTIMAL:
        tie_units = None if phase.weight is None else int(built.tie_break_weights.to_numpy() @ y)
        y, x, report = canonical_solution(built, phase.solving, phase.cost_units, tie_units, phase.solver,
                                          one_support=one_support)
        params.update(proven_unique=report.proven_unique, num_solves=1 + report.num_solves)
        params["wall_time_s"].update(report.wall_time_s)
    else:
        x = solution_values(phase.solver, built.traffic)
    replicas = pd.Series(y, index=built.replicas.index, name="replicas")
    traffic = pd.Series(x, index=built.traffic.index, name="traffic_units", dtype=np.int64)
    objective = plan_cost_usd(built, y)
    return SolveResult(phase.status, objective, phase.bound_units / COST_UNITS_PER_USD, phase.gap,
                       phase.seconds + time.perf_counter() - start, params, built.scales, replicas, traffic)


def plan_cost_units(built: BuiltModel, replicas: np.ndarray) -> int:
    """Exact scaled cost [cost units / h] of ``replicas`` (aligned with ``built.replicas``)."""
    return int(built.price_units.to_numpy(dtype=object) @ np.asarray(replicas, dtype=np.int64).astype(object))


def plan_cost_usd(built: BuiltModel, replicas: np.ndarray) -> float:
    """Cost [USD/h] of ``replicas`` (aligned with ``built.replicas``), as a result reports it."""
    return math.fsum(built.candidates["usd_per_replica_hour"].to_numpy(float) * replicas)


def solving_options(options: SolverOptions, num_variables: int) -> SolverOptions:
    """The options a model of ``num_variables`` variables is solved with: one CP-SAT worker
    below :data:`SINGLE_WORKER_MAX_VARIABLES`, else at most the usable CPUs' worth.

    The plan is the canonical one whatever the worker count (proven tie-break); only the time
    changes, and on small models the portfolio's extra threads cost more than they find
    (issue 19: the 978-variable disaggregated model's cost solve, 0.20 s with one worker,
    0.29 s with two, 0.43-0.98 s with eight on two cores). ``solver_params`` reports the
    configured ``num_workers``.
    """
    workers = 1 if num_variables < SINGLE_WORKER_MAX_VARIABLES else min(options.num_workers, usable_cpus())
    workers = max(1, min(options.num_workers, workers))
    return options if workers == options.num_workers else replace(options, num_workers=workers)


def combine_results(built: BuiltModel, blocks: list[BuiltModel], results: list, options: SolverOptions,
                     weight: int | None, wall_time_s: float) -> SolveResult:
    """One :class:`SolveResult` of the whole model from its blocks' results (same order).

    Without a plan in some block: no solution, status infeasible (some block proven
    infeasible), model_invalid or unknown, in that order. Otherwise the replicas and traffic
    of every block together, the cost and proven bound summed, optimal when every block
    is; ``solver_params`` as :func:`run_solver` writes them (``weight``: that of the whole
    model), with ``num_solves`` and the stage times summed over blocks and ``blocks``.
    """
    stages: dict = {}
    for r in results:
        for stage, seconds in r.solver_params["wall_time_s"].items():
            stages[stage] = stages.get(stage, 0.0) + seconds
    params = {"time_limit_s": options.time_limit_s, "num_workers": options.num_workers,
              "random_seed": options.random_seed, "relative_gap_limit": options.relative_gap_limit,
              "objective_sense": OBJECTIVE_SENSE, "tie_break": TIE_BREAK_RULE,
              "prove_unique_plan": options.prove_unique_plan, "combined_objective_weight": weight,
              "proven_unique": all(r.solver_params["proven_unique"] for r in results),
              "num_solves": sum(r.solver_params["num_solves"] for r in results), "blocks": len(blocks),
              "wall_time_s": stages}
    failed = [r.status for r in results if r.replicas is None]
    if failed:
        status = next(s for s in _NO_PLAN_ORDER if s in failed)
        return SolveResult(status, None, None, None, wall_time_s, params, built.scales)
    y = pd.Series(0, index=built.replicas.index, dtype=np.int64, name="replicas")
    x = pd.Series(0, index=built.traffic.index, dtype=np.int64, name="traffic_units")
    cost_units = bound_units = 0
    for block, r in zip(blocks, results):
        y.loc[block.replicas.index] = r.replicas.to_numpy(np.int64)
        x.loc[block.traffic.index] = r.traffic_units.to_numpy(np.int64)
        cost = plan_cost_units(block, r.replicas.to_numpy(np.int64))
        cost_units += cost
        bound_units += cost if r.gap == 0 else round(r.best_bound_usd_per_hour * COST_UNITS_PER_USD)
    gap = 0.0 if cost_units == bound_units else (cost_units - bound_units) / max(cost_units, 1)
    status = (SolveStatus.OPTIMAL if all(r.status == SolveStatus.OPTIMAL for r in results) and gap == 0
              else SolveStatus.FEASIBLE)
    objective = plan_cost_usd(built, y.to_numpy())
    return SolveResult(status, objective, bound_units / COST_UNITS_PER_USD, gap, wall_time_s, params,
                       built.scales, y, x)


def solve_blocks(built: BuiltModel, options: SolverOptions = SolverOptions(), hint: dict | None = None
                 ) -> SolveResult:
    """:func:`run_solver` of a model, block by block when it splits (the same canonical plan,
    see :mod:`planner.optimize.blocks`); the whole model in one solve otherwise. ``built``
    may be unemitted (``build_model(..., emit=False)``): only what is solved is emitted."""
    start = time.perf_counter()
    blocks = split_model(built)
    if blocks is None:
        return run_solver(emitted(built), options, hint)
    results = []
    for block in blocks:
        results.append(run_solver(block, options, hint))
        if results[-1].status == SolveStatus.INFEASIBLE:
            break           # the whole model is infeasible
    return combine_results(built, blocks, results, options, tie_break_weight(built),
                           time.perf_counter() - start)


def greedy_hint(built: BuiltModel) -> tuple:
    """Hint: each workload wholly on its cheapest candidate per request, replicas rounded up,
    as (variables, values) pairs (:func:`cost_phase` adds them; a sequence of solves of one
    model's data computes them once).

    It ignores inventory, budget and distinct-config limits; CP-SAT repairs or drops it.
    """
    if not len(built.traffic):
        return ()
    pairs = built.traffic.index
    ids = np.asarray(pairs.get_level_values("candidate_id"), dtype=object)
    workloads = np.asarray(pairs.get_level_values("workload"), dtype=object)
    price = built.price_units.to_numpy(float)[built.price_units.index.get_indexer(ids)]
    units_at = built.load_units_per_replica.to_numpy()[built.load_units_per_replica.index.get_indexer(ids)]
    per_unit = price * built.load_coef.to_numpy() / units_at
    at_cand = built.candidates.index.get_indexer(ids)
    role, pool = candidate_roles(built.candidates)[at_cand], candidate_pools(built.candidates)[at_cand]
    x = np.zeros(len(pairs), dtype=np.int64)

    def cheapest(positions: np.ndarray) -> int:
        """The first of the least per-unit cost among ``positions`` (as ``Series.idxmin``)."""
        positions = positions[~np.isnan(per_unit[positions])]
        return int(positions[np.argmin(per_unit[positions])])

    for workload in sorted(set(workloads.tolist())):
        # the cheapest aggregated candidate, or the cheapest prefill + decode pair of one pool
        at = np.flatnonzero(workloads == workload)
        mine, pools = role[at], pool[at]
        options = [[cheapest(at[mine == "both"])]] if (mine == "both").any() else []
        for key in sorted(set(pools[mine != "both"])):
            p, d = (mine == "prefill") & (pools == key), (mine == "decode") & (pools == key)
            if p.any() and d.any():
                options.append([cheapest(at[p]), cheapest(at[d])])
        chosen = min(options, key=lambda c: sum(per_unit[i] for i in c)) if options else []
        for i in chosen:
            x[i] = int(built.traffic_units[workload])
    load = np.zeros(len(built.replicas), dtype=np.int64)
    at_rep = built.replicas.index.get_indexer(ids)
    np.add.at(load, at_rep, built.load_coef.to_numpy(np.int64) * x)
    units = built.load_units_per_replica.to_numpy()
    spare = np.zeros(len(units), dtype=np.int64)
    red, spares = set(built.instance.redundancy_workloads), set(built.spare.index)
    for i in np.flatnonzero(x > 0):
        if ids[i] in spares and workloads[i] in red:
            spare[at_rep[i]] = 1
    y = -(-load // units) + spare
    return ((built.replicas, y), (built.use, y > 0), (built.traffic, x),
            (built.spare, spare[built.replicas.index.get_indexer(built.spare.index)]))


def _add_plan_hint(model: cp_model.CpModel, built: BuiltModel, hint: dict) -> None:
    """Hint the replicas (and use) of a known plan; CP-SAT repairs it where it no longer fits."""
    y = [int(hint.get(cid, 0)) for cid in built.replicas.index]
    add_hints(model, built.replicas, y)
    add_hints(model, built.use, [v > 0 for v in y])


def read_plan(built: BuiltModel, result: SolveResult) -> Plan | None:
    """Turn a solution into deployment and routing tables.

    Parameters
    ----------
    built : BuiltModel
        The model that was solved.
    result : SolveResult
        From :func:`run_solver` on ``built``.

    Returns
    -------
    Plan or None
        None when the result holds no solution (infeasible, unknown, invalid).
    """
    if result.replicas is None:
        return None
    inst, cands = built.instance, built.candidates
    workloads = list(built.workloads)
    x = result.traffic_units.to_numpy()
    pairs = result.traffic_units.index[x > 0]
    pair_ids, pair_wl = pairs.get_level_values("candidate_id"), pairs.get_level_values("workload")
    order = sorted(range(len(pairs)), key=lambda i: (pair_ids[i], pair_wl[i]))
    pair_ids, pair_wl = pair_ids.take(order), pair_wl.take(order)
    w_pos = np.array([workloads.index(w) for w in pair_wl], dtype=np.int64)
    rate = _values_at(inst.rate_per_s, workloads).astype(float)
    q = _values_at(built.traffic_units, workloads)
    routed = rate[w_pos] * (x[x > 0][order] / q[w_pos])
    routing = pd.DataFrame({"candidate_id": pair_ids, "workload": pair_wl, "rate_per_s": routed})
    capacity = inst.capacity_per_s
    cap = capacity.to_numpy(float)[capacity.index.get_indexer(pair_ids), capacity.columns.get_indexer(pair_wl)]
    y_all = result.replicas.to_numpy()
    ids = result.replicas.index[y_all > 0]
    y = y_all[y_all > 0].astype(np.int64)
    load = group_sums(pair_ids, routed / cap, ids)

    pos = cands.index.get_indexer(ids)
    price = cands["usd_per_replica_hour"].to_numpy(float)[pos]
    gpr = cands["gpus_per_replica"].to_numpy(np.int64)[pos]
    columns = {"candidate_id": ids.to_numpy(), "gpu": cands["gpu"].to_numpy()[pos], "gpus_per_replica": gpr,
               "replicas": y, "gpus": y * gpr, "usd_per_hour": y * price, "load_fraction": load / y}
    others = [c for c in cands.columns if c not in ("gpu", "gpus_per_replica")]
    if set(others) & set(columns):      # a repeated name: concat keeps both columns
        dep = pd.concat([pd.DataFrame(columns),
                         cands.iloc[pos].drop(columns=["gpu", "gpus_per_replica"]).reset_index(drop=True)], axis=1)
    else:
        dep = pd.DataFrame({**columns, **{c: cands[c].array.take(pos) for c in others}})
    dep.attrs["name"] = "deployments"
    routing.attrs.update(name="routing", unit="1/s")
    gpus: dict = {}
    for g, n in zip(columns["gpu"], columns["gpus"]):
        gpus[str(g)] = gpus.get(str(g), 0) + int(n)
    return Plan(deployments=dep, routing=routing, usd_per_hour=math.fsum(columns["usd_per_hour"]),
                gpus_by_type=dict(sorted(gpus.items())))


def _values_at(series: pd.Series, labels: list) -> np.ndarray:
    """``series[labels].to_numpy()`` without building the selected Series."""
    at = dict(zip(series.index, range(len(series))))
    return series.to_numpy()[[at[label] for label in labels]]


def group_sums(keys: pd.Index, values: np.ndarray, wanted: pd.Index) -> np.ndarray:
    """Per key of ``wanted``, the sum of ``values`` at its entries of ``keys`` (0 without any),
    added in order with the compensated (Kahan) summation of pandas' groupby sum, so that the
    sums are those of ``pd.Series(values).groupby(keys).sum()`` to the bit."""
    total: dict = {}
    carry: dict = {}
    for key, value in zip(keys, values.tolist()):
        y = value - carry.get(key, 0.0)
        s = total.get(key, 0.0)
        t = s + y
        c = t - s - y
        carry[key] = 0.0 if c != c else c
        total[key] = t
    return np.array([total.get(key, 0.0) for key in wanted], dtype=float)


def solve(instance: PlanningInstance, options: SolverOptions = SolverOptions(), hint: dict | None = None
          ) -> tuple[SolveResult, Plan | None]:
    """Build, solve and read in one call.

    Parameters
    ----------
    instance : PlanningInstance
    options : SolverOptions
    hint : dict, optional
        Replicas per candidate id to start from (see :func:`run_solver`).

    Returns
    -------
    (SolveResult, Plan or None)
        The plan is None whenever no solution was found; never an empty plan.
    """
    built = build_model(instance, emit=False)      # solve_blocks emits the blocks, or the whole
    result = solve_blocks(built, options, hint)
    return result, read_plan(built, result)
