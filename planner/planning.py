"""Planning: from the candidate table to ranked plans, and what every stage shares.

The candidate table (measured capacities or the search's evaluated grid), the optimizer's
planning instance over it, the plans it finds and their ranking (with the predicted p95s of
each deployment at its routed load), $/1M tokens, and the :class:`PlanResult` the outputs
read. :mod:`planner.pipeline` calls the stages in order; the stages (:mod:`planner.pareto`,
:mod:`planner.diagnosis`, :mod:`planner.outputs`, :mod:`planner.procurement`) import this
module, never the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from planner import dimensions, lookup
from planner.format_rules import with_quality
from planner.margins import Margins
from planner.optimize import PlanningInstance, SolverOptions, SolveStatus
from planner.optimize.alternatives import (EQUAL_COST_PLANS_LIMIT, MIN_ALTERNATIVE_LOAD_FRACTION, FoundPlan,
                                           plan_alternatives)
from planner.optimize.model import build_model
from planner.optimize.prefilter import prefilter_dominated
from planner.optimize.prune import candidate_pools, candidate_roles
from planner.optimize.solve import group_sums
from planner.parameters import ProblemParams
from planner.problem import Problem
from planner.search import candidates_and_params, problem_params, rejection_counts, workload_arrays
from planner.serving.queueing import TrafficArrays, state_at_rate
from planner.units import SECONDS_PER_HOUR, TOKENS_PER_MILLION

#: Configuration columns a planning candidate carries besides its GPU type.
CONFIG_COLUMNS = ("model", *dimensions.SETTINGS)
#: Per-workload columns of a plan's routing, widened to ``column[workload]`` in plans_table().
ROUTED_COLUMNS = ("rate_per_s", "ttft_p95_s", "tpot_p95_s")


@dataclass(frozen=True, eq=False)
class RankedPlan:
    """One plan: its deployments (with predicted latencies), routing and cost."""

    rank: int
    usd_per_hour: float
    usd_per_million_tokens: float | None
    deployments: pd.DataFrame
    routing: pd.DataFrame
    gpus_by_type: dict
    usd_per_million_input_tokens: float | None = None
    usd_per_million_total_tokens: float | None = None


@dataclass(frozen=True, eq=False)
class PlanResult:
    """Everything ``planner solve`` reports; pandas tables for notebooks."""

    problem: Problem
    status: str
    candidates: pd.DataFrame
    plans: list[RankedPlan]
    pareto: pd.DataFrame
    solver: dict
    counts: dict
    #: The serving parameters used, resolved once (:class:`planner.parameters.ProblemParams`).
    params: ProblemParams
    diagnosis: list[dict] = field(default_factory=list)
    timings_s: dict = field(default_factory=dict)
    #: The plans' routing carries simulated p95s (``solve --verify``).
    verified: bool = False
    daily: dict | None = None  # per-hour plan of a load profile (planner.procurement.profile)

    @property
    def best(self) -> RankedPlan | None:
        return self.plans[0] if self.plans else None

    def plans_table(self) -> pd.DataFrame:
        """One row per (plan, deployment), with the columns of ``plans.csv``.

        The deployment's columns, then ``rank``, the plan's ``plan_usd_per_hour`` and
        ``plan_usd_per_million_{,input_,total_}tokens``, then per workload w
        ``rate_per_s[w]`` (0 when the deployment does not serve w), ``ttft_p95_s[w]`` and
        ``tpot_p95_s[w]`` (NaN when it does not, or without a serving model).
        """
        names = [w.name for w in self.problem.workloads]
        rows = []
        for p in self.plans:
            d = p.deployments.assign(rank=p.rank, plan_usd_per_hour=p.usd_per_hour,
                                     plan_usd_per_million_tokens=p.usd_per_million_tokens,
                                     plan_usd_per_million_input_tokens=p.usd_per_million_input_tokens,
                                     plan_usd_per_million_total_tokens=p.usd_per_million_total_tokens)
            wide = p.routing.pivot(index="candidate_id", columns="workload", values=list(ROUTED_COLUMNS))
            wide = wide.reindex(index=d["candidate_id"], columns=pd.MultiIndex.from_product([ROUTED_COLUMNS, names]))
            for n in names:
                for col in ROUTED_COLUMNS:
                    values = wide[(col, n)].to_numpy(float)
                    d[f"{col}[{n}]"] = np.nan_to_num(values, nan=0.0) if col == "rate_per_s" else values
            rows.append(d)
        return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def output_tokens_per_s(problem: Problem) -> float:
    """Output tokens per second of the whole traffic mix (the seeds' $/1M-token basis)."""
    return sum(w.rate_per_s * w.output.mean for w in problem.workloads if w.output is not None)


def input_tokens_per_s(problem: Problem) -> float:
    """Prompt (input) tokens per second of the whole mix, prefix-cache hits included (they are billed)."""
    return sum(w.rate_per_s * w.prompt.mean for w in problem.workloads if w.prompt is not None)


def _usd_per_million(usd_per_hour: float, tokens_per_s: float) -> float | None:
    return usd_per_hour / (tokens_per_s * SECONDS_PER_HOUR) * TOKENS_PER_MILLION if tokens_per_s > 0 else None


def usd_per_million_tokens(problem: Problem, usd_per_hour: float) -> float | None:
    """USD per 1M output tokens (the seeds' basis); None without output lengths."""
    return _usd_per_million(usd_per_hour, output_tokens_per_s(problem))


def usd_per_million_by_basis(problem: Problem, usd_per_hour: float) -> dict[str, float | None]:
    """USD per 1M output, input (prompt) and total (input + output) tokens of the offered mix."""
    out, inp = output_tokens_per_s(problem), input_tokens_per_s(problem)
    return {"usd_per_million_tokens": _usd_per_million(usd_per_hour, out),
            "usd_per_million_input_tokens": _usd_per_million(usd_per_hour, inp),
            "usd_per_million_total_tokens": _usd_per_million(usd_per_hour, inp + out)}


def measured_candidates(problem: Problem) -> pd.DataFrame:
    """Candidates from the problem's measured capacity table (Mélange-style)."""
    rows = []
    margins = Margins.of(problem)
    for row in problem.spec.capacity_table:
        gpu = problem.catalog.gpu(row.gpu).id
        price = row.usd_per_hour if row.usd_per_hour is not None else problem.prices_usd_per_gpu_hour.get(gpu, np.nan) * row.gpus
        rec = {"candidate_id": row.name, "name": row.name, "gpu": gpu, "gpus": row.gpus,
               "usd_per_replica_hour": price}
        for w in problem.workloads:
            measured = float(row.capacity_per_s.get(w.name, 0.0))
            rec[f"central_capacity_per_s[{w.name}]"] = measured
            rec[f"capacity_per_s[{w.name}]"] = float(margins.load_cap(measured))
        rows.append(rec)
    frame = pd.DataFrame(rows).set_index("candidate_id").sort_index()
    frame["infeasible_reason"] = np.where(frame["usd_per_replica_hour"].isna(), "no_price_for_gpu", "")
    frame["feasible"] = frame["infeasible_reason"] == ""
    return frame


def search_candidates(problem: Problem) -> tuple[pd.DataFrame, ProblemParams]:
    """The candidate table (the measured capacity table, or the search's evaluated grid) and
    the problem's serving parameters, resolved once, for the later stages."""
    if problem.measured:
        return measured_candidates(problem), problem_params(problem)
    return candidates_and_params(problem)


def planning_instance(problem: Problem, candidates: pd.DataFrame,
                      capacity: pd.DataFrame | None = None) -> PlanningInstance | None:
    """The optimizer's instance over the feasible candidates (None if there are none)."""
    names = [w.name for w in problem.workloads]
    capacity_columns = [f"capacity_per_s[{n}]" for n in names] if capacity is None else []
    # only the columns the instance and the dominance pruning read are copied (speed: not
    # every evaluated metric of the feasible rows)
    read = [c for c in dict.fromkeys(("gpu", "gpus", "usd_per_replica_hour", *CONFIG_COLUMNS, "name",
                                      *capacity_columns)) if c in candidates.columns]
    feasible = candidates.loc[candidates["feasible"].to_numpy(bool), read]
    if feasible.empty:
        return None
    if capacity is None:         # the rows by position (speed: no lookup by id)
        capacity = feasible[capacity_columns].set_axis(names, axis=1)
        served = (capacity > 0).any(axis=1).to_numpy()
        capacity, rows = capacity[served], feasible[served]
    else:
        capacity = capacity[(capacity > 0).any(axis=1)]
        rows = feasible.loc[capacity.index]
    if capacity.empty:
        return None
    limited = {problem.catalog.gpu(g).id for g in problem.spec.inventory}
    at = prefilter_dominated(rows, capacity, limited)
    keep = capacity.index[at]
    if keep.is_monotonic_increasing:       # already sorted by id (the candidate table's order)
        cands, capacity = rows.iloc[at], capacity.iloc[at]
    else:
        keep = keep.sort_values()
        cands, capacity = feasible.loc[keep], capacity.loc[keep]
    cands = cands.rename(columns={"gpus": "gpus_per_replica"})
    cands = cands[["gpu", "gpus_per_replica", "usd_per_replica_hour",
                   *[c for c in CONFIG_COLUMNS + ("name",) if c in cands.columns]]]
    cands = cands.assign(gpus_per_replica=cands["gpus_per_replica"].astype(int))
    spec = problem.spec
    return PlanningInstance(
        candidates=cands, capacity_per_s=capacity,
        rate_per_s=pd.Series({w.name: w.rate_per_s for w in problem.workloads}),
        inventory_gpus={problem.catalog.gpu(g).id: n for g, n in spec.inventory.items()},
        budget_usd_per_hour=spec.budget_usd_per_hour,
        max_distinct_configs=spec.constraints.max_distinct_configs,
        redundancy_workloads=tuple(spec.constraints.redundancy),
        slices_per_workload=spec.optimize.slices_per_workload,
    )


def solver_options(problem: Problem, time_limit_s: float | None = None) -> SolverOptions:
    opt = problem.spec.optimize
    return SolverOptions(time_limit_s=time_limit_s or opt.time_limit_s, num_workers=opt.num_workers)


@dataclass(frozen=True, eq=False)
class Solutions:
    """What the optimizer found for one planning instance.

    ``found``: the plans of :func:`plan_alternatives`, in the order found; ``solves``: the
    result of every CP-SAT solve, in order; ``in_model``: the candidates left in the model
    after its dominance pruning (None without an instance).
    """

    found: list[FoundPlan]
    solves: list
    in_model: int | None = None

    @property
    def first(self):
        """The first solve's result when it found a plan (None otherwise)."""
        return self.found[0].result if self.found else None

    @property
    def undecided(self) -> bool:
        """No plan, and the first solve's time limit left feasibility undecided."""
        return not self.found and bool(self.solves) and self.solves[0].status == SolveStatus.UNKNOWN

    @property
    def status(self) -> str:
        """The solve's status: the first solve's, else ``unknown`` or ``infeasible``."""
        return str(self.first.status) if self.first is not None else "unknown" if self.undecided else "infeasible"

    def summary(self) -> dict:
        """:func:`solver_summary` of the first solve (of the undecided one when it found nothing)."""
        return solver_summary(self.first if self.first is not None or not self.undecided else self.solves[0])


def find_plans(problem: Problem, instance: PlanningInstance | None, k: int, options: SolverOptions) -> Solutions:
    """The optimum, its equal-cost face and alternatives for k ranks, under the problem's
    ``optimize:`` settings (:func:`planner.optimize.alternatives.plan_alternatives`)."""
    if instance is None:
        return Solutions(found=[], solves=[])
    opt = problem.spec.optimize
    built = build_model(instance, emit=False)      # plan_alternatives emits what it solves
    solves: list = []
    found = plan_alternatives(
        instance, k, options,
        min_load_fraction=(MIN_ALTERNATIVE_LOAD_FRACTION if opt.min_alternative_load_fraction is None
                           else opt.min_alternative_load_fraction),
        face_limit=EQUAL_COST_PLANS_LIMIT if opt.equal_cost_plans is None else opt.equal_cost_plans,
        statuses=solves, built=built)
    return Solutions(found=found, solves=solves, in_model=len(built.candidates))


def has_plan(problem: Problem) -> bool:
    """Whether some plan meets the problem (one solve: no ranking, fronts or diagnosis)."""
    candidates, _ = search_candidates(problem)
    return bool(find_plans(problem, planning_instance(problem, candidates), 1, solver_options(problem)).found)


def candidate_counts(candidates: pd.DataFrame, solutions: Solutions) -> dict:
    """Candidates enumerated, feasible, rejected per reason, and (with an instance) left in
    the model and pruned as dominated (before the model or by its pruning)."""
    counts = {"enumerated": int(len(candidates)), "feasible": int(candidates["feasible"].sum()),
              "rejected": rejection_counts(candidates) if "infeasible_reason" in candidates else {}}
    if solutions.in_model is not None:
        counts["in_model"] = solutions.in_model
        counts["pruned_dominated"] = counts["feasible"] - counts["in_model"]
    return counts


def predicted_latency(problem: Problem, candidates: pd.DataFrame, params: ProblemParams,
                      plans: list[tuple[pd.DataFrame, pd.DataFrame]]) -> list[pd.DataFrame]:
    """p95 TTFT/TPOT of each deployment at the rate routed to each of its replicas.

    ``params``: the problem's serving parameters (those of the candidates).
    ``plans`` holds ``(deployments, routing)`` pairs; the routing of every plan comes back with
    ``rate_per_replica_per_s``, ``ttft_p95_s`` and ``tpot_p95_s``. All plans are evaluated in one
    vectorized call per workload.
    """
    if problem.measured or all(routing.empty for _, routing in plans):
        return [routing.assign(ttft_p95_s=np.nan, tpot_p95_s=np.nan) for _, routing in plans]
    # One row per (plan, routed workload, deployment); the load seen is the replica's total load.
    ids, workloads, per_replica, loads = [], [], [], []
    for deployments, routing in plans:
        at = pd.Index(deployments["candidate_id"]).get_indexer(routing["candidate_id"])
        ids.append(routing["candidate_id"].to_numpy(object))
        workloads.append(routing["workload"].to_numpy(object))
        per_replica.append(routing["rate_per_s"].to_numpy() / deployments["replicas"].to_numpy()[at])
        loads.append(deployments["load_fraction"].to_numpy()[at])
    ids_all, workload_all, per_replica_all, load_all = (np.concatenate(v) for v in (ids, workloads, per_replica, loads))
    latency = {key: np.full(len(ids_all), np.nan) for key in ("ttft_p95_s", "tpot_p95_s")}
    for w in problem.workloads:
        part = np.flatnonzero(workload_all == w.name)
        if not len(part):
            continue
        rows = candidates.iloc[candidates.index.get_indexer(ids_all[part])]
        traffic = TrafficArrays.from_distributions(w.prompt, w.output, w.prefix_cache_hit_fraction)
        cap = rows[f"central_capacity_per_s[{w.name}]"].to_numpy()
        equivalent_rate = np.maximum(load_all[part] * cap, per_replica_all[part])
        roles = candidate_roles(rows)
        for role in dict.fromkeys(roles):
            mine = roles == role
            sub = rows[mine]
            arrays, sub_params = workload_arrays(problem, sub, w), params.of(sub)
            if role != "both":  # the disaggregated model only for rows with roles (process start)
                from planner.disagg_roles import pool_scale_out_bytes_per_s, role_latency
            state = (state_at_rate(arrays, sub_params, traffic, equivalent_rate[mine]) if role == "both" else
                     role_latency(role, arrays, sub_params, traffic, equivalent_rate[mine],
                                  pool_scale_out_bytes_per_s(problem.catalog, problem.gpus)))
            for key, values in latency.items():
                values[part[mine]] = state[key]
    out, start = [], 0
    for (_, routing), rate in zip(plans, per_replica):
        end = start + len(routing)
        done = routing.assign(rate_per_replica_per_s=rate, ttft_p95_s=latency["ttft_p95_s"][start:end],
                              tpot_p95_s=latency["tpot_p95_s"][start:end])
        done.attrs = {}
        keys = list(zip(done["candidate_id"], done["workload"]))
        out.append(done.reset_index(drop=True) if keys == sorted(keys) else
                   done.sort_values(["candidate_id", "workload"], ignore_index=True))
        start = end
    return out


def central_load(candidates: pd.DataFrame, deployments: pd.DataFrame, routing: pd.DataFrame,
                 pools: np.ndarray | None = None) -> pd.DataFrame:
    """``deployments`` with ``load_fraction`` relative to the central capacities at SLO.

    The optimizer loads replicas against the capacities it buys (with the margins of
    :mod:`planner.margins`; kept as ``planned_load_fraction``); the outputs report the load
    against the central prediction: sum over routed workloads of rate per replica / central
    capacity at SLO. ``pools``: :func:`~planner.optimize.prune.candidate_pools` of
    ``candidates``, when the caller has it (speed: once for all plans, not per plan).
    """
    if routing.empty:
        return deployments
    at = candidates.index.get_indexer(routing["candidate_id"])
    cap = np.empty(len(routing))
    workloads = routing["workload"].to_numpy(object)
    for w in dict.fromkeys(workloads):
        mine = workloads == w
        cap[mine] = candidates[f"central_capacity_per_s[{w}]"].to_numpy(float)[at[mine]]
    share = group_sums(pd.Index(routing["candidate_id"]), routing["rate_per_s"].to_numpy(float) / cap,
                       pd.Index(deployments["candidate_id"]))
    load = share / deployments["replicas"].to_numpy(float)
    columns = {"planned_load_fraction": deployments["load_fraction"].to_numpy(), "load_fraction": load}
    if "role" in deployments.columns:
        keys = None if pools is None else pools[candidates.index.get_indexer(deployments["candidate_id"])]
        columns["pool"] = pool_ids(deployments, keys)
    return deployments.assign(**columns)


def pool_ids(deployments: pd.DataFrame, keys: np.ndarray | None = None) -> np.ndarray:
    """The ``pool`` of each deployment (with a ``role`` column): a pool is the prefill and
    decode deployments serving one model's disaggregated traffic with one weight format and
    KV dtype (:data:`planner.optimize.prune.POOL_KEY`; the optimizer's ``pd_balance`` per
    workload and pool; a model's workloads share its pools). Its id is the model id, or
    ``<model>-<format>-kv-<kv dtype>`` where the plan has several pools of one model; None
    for the aggregated (``both``) deployments. ``keys``: the deployments' pool keys
    (:func:`~planner.optimize.prune.candidate_pools`), when the caller has them."""
    keys = (candidate_pools(deployments) if keys is None else keys).tolist()
    models = deployments["model"].to_numpy(object).tolist()
    per_model: dict = {}
    for model, key in zip(models, keys):
        if key:
            per_model.setdefault(model, set()).add(key)

    def pool_id(model, key):
        if not key:
            return None
        if len(per_model[model]) == 1:
            return model
        _, fmt, kv = key.split("|")
        return f"{model}-{fmt}-kv-{kv}"

    return np.array([pool_id(m, k) for m, k in zip(models, keys)], dtype=object)


def _traffic_weighted(routing: pd.DataFrame, column: str) -> float:
    """The rate-weighted mean of a latency column over a plan's routed traffic (0 if unknown)."""
    values = routing[column].to_numpy(float)
    weights = routing["rate_per_s"].to_numpy(float)
    ok = np.isfinite(values) & (weights > 0)
    return float(np.average(values[ok], weights=weights[ok])) if ok.any() else 0.0


def rank_plans(problem: Problem, candidates: pd.DataFrame, params: ProblemParams, found: list[FoundPlan],
               k: int) -> list[RankedPlan]:
    """Rank 1: the fastest optimum; then admissible alternatives by cost, latency, ids.

    The key is cost, then traffic-weighted p95 TPOT, then TTFT, then the sorted ids
    (docs/problem-format.md 1.8, ``top_k``). Rank 1 is the least key among the optimum's equal-cost face, which
    :func:`plan_alternatives` enumerates whatever k is, so plan #1 does not depend on
    ``--top``. Ranks 2..k are drawn from the other admissible plans (minimum load rule).
    """
    # the plans' candidates, found once (speed: no lookup in the whole table per plan)
    rows = lookup.rows(candidates, sorted({c for f in found for c in f.plan.deployments["candidate_id"]}))
    pools = candidate_pools(rows) if "role" in rows.columns else None
    found = [replace(f, plan=replace(f.plan, deployments=central_load(rows, f.plan.deployments, f.plan.routing,
                                                                      pools)))
             for f in found]
    latencies = predicted_latency(problem, rows, params, [(f.plan.deployments, f.plan.routing) for f in found])

    def key(item):
        f, routing = item
        return (round(f.plan.usd_per_hour, 9), round(_traffic_weighted(routing, "tpot_p95_s"), 9),
                round(_traffic_weighted(routing, "ttft_p95_s"), 9),
                tuple(sorted(f.plan.deployments["candidate_id"])))

    items = list(zip(found, latencies))
    if not items:
        return []
    best = min((it for it in items if it[0].optimal_cost), key=key)
    others = sorted((it for it in items if it is not best and it[0].admissible), key=key)
    ordered = [best, *others][:k]
    return [RankedPlan(rank=i, usd_per_hour=f.plan.usd_per_hour,
                       deployments=with_quality(problem, f.plan.deployments), routing=routing,
                       gpus_by_type=f.plan.gpus_by_type, **usd_per_million_by_basis(problem, f.plan.usd_per_hour))
            for i, (f, routing) in enumerate(ordered, start=1)]


def solver_summary(result) -> dict:
    if result is None:
        return {"status": "infeasible", "objective_usd_per_hour": None, "best_bound_usd_per_hour": None,
                "gap": None, "wall_time_s": 0.0, "params": {}, "scales": {}}
    return {"status": str(result.status), "objective_usd_per_hour": result.objective_usd_per_hour,
            "best_bound_usd_per_hour": result.best_bound_usd_per_hour, "gap": result.gap,
            "wall_time_s": result.wall_time_s, "params": result.solver_params, "scales": result.scales}
