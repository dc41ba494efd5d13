"""Independent numpy check of a plan against its instance (shares no code with the model)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from planner.optimize.prune import candidate_pools, candidate_roles

if TYPE_CHECKING:   # annotations only: the checker shares no code with the model
    from planner.optimize.instance import PlanningInstance
    from planner.optimize.solve import Plan

RATE_RTOL = 1e-6       # served rate vs demanded rate, relative
LOAD_ATOL = 1e-9       # replicas
COST_RTOL = 1e-9       # relative


def check_plan(instance: PlanningInstance, plan: Plan) -> list[str]:
    """List every constraint a plan violates.

    Parameters
    ----------
    instance : PlanningInstance
        The problem the plan claims to solve.
    plan : Plan
        Deployments and routing to check.

    Returns
    -------
    list of str
        One message per violation; empty when the plan is valid.

    Notes
    -----
    Checks: known candidates with integer replicas >= 1; every workload served
    (sum of routed rates equals its rate within ``RATE_RTOL``); routing only to deployed
    candidates that can serve the workload; per deployment sum_k rate_jk / cap_jk <=
    replicas (minus the N+1 spare when it serves a redundancy workload) + ``LOAD_ATOL``;
    slices routed whole; inventory per GPU type; budget; distinct configurations; and
    the arithmetic of the gpus and usd_per_hour columns and totals.
    """
    out: list[str] = []
    dep, routing = plan.deployments, plan.routing
    cands = instance.candidates
    ids = dep["candidate_id"].astype(str).to_numpy()
    unknown = sorted(set(ids) - set(cands.index))
    if unknown:
        return [f"deployments: unknown candidate ids {unknown}"]
    if len(set(ids)) != len(ids):
        out.append("deployments: a candidate appears twice")
    replicas = dep["replicas"].to_numpy()
    if not (np.equal(np.mod(replicas, 1), 0) & (replicas >= 1)).all():
        out.append("deployments: replicas must be integers >= 1")
    rows = cands.loc[ids]
    for col in ("gpu", "gpus_per_replica"):
        if not (dep[col].to_numpy() == rows[col].to_numpy()).all():
            out.append(f"deployments.{col}: differs from the candidate's")
    out += _check_routing(instance, routing, set(ids))
    out += _check_loads(instance, dep, routing)

    gpus = replicas * rows["gpus_per_replica"].to_numpy()
    if not np.array_equal(dep["gpus"].to_numpy(), gpus):
        out.append("deployments.gpus: != replicas * gpus_per_replica")
    by_type = pd.Series(gpus, index=rows["gpu"].to_numpy()).groupby(level=0).sum()
    if {str(g): int(n) for g, n in by_type.items()} != dict(plan.gpus_by_type):
        out.append("gpus_by_type: does not match the deployments")
    for gpu, limit in instance.inventory_gpus.items():
        if by_type.get(gpu, 0) > limit:
            out.append(f"inventory {gpu}: {int(by_type[gpu])} GPUs > {limit}")
    cost = replicas * rows["usd_per_replica_hour"].to_numpy(float)
    if not np.allclose(dep["usd_per_hour"].to_numpy(float), cost, rtol=COST_RTOL, atol=0):
        out.append("deployments.usd_per_hour: != replicas * usd_per_replica_hour")
    total = float(np.sum(cost))
    if not np.isclose(plan.usd_per_hour, total, rtol=COST_RTOL, atol=0):
        out.append(f"usd_per_hour: {plan.usd_per_hour} != sum of deployments {total}")
    budget = instance.budget_usd_per_hour
    if budget is not None and total > budget * (1 + COST_RTOL):
        out.append(f"budget: {total} USD/h > {budget}")
    k = instance.max_distinct_configs
    if k is not None and len(ids) > k:
        out.append(f"max_distinct_configs: {len(ids)} deployments > {k}")
    return out


def _check_routing(instance, routing: pd.DataFrame, deployed: set[str]) -> list[str]:
    out = []
    rate = instance.rate_per_s.astype(float)
    stray = sorted(set(routing["candidate_id"]) - deployed)
    if stray:
        out.append(f"routing: traffic sent to candidates without replicas {stray}")
    if (routing["rate_per_s"].to_numpy(float) < 0).any():
        out.append("routing: negative rate")
    roles = pd.Series(candidate_roles(instance.candidates), index=instance.candidates.index)
    role = roles.reindex(routing["candidate_id"]).fillna("both").to_numpy()
    # A request is served once by an aggregated or a prefill replica; the decode replicas of
    # its pool carry exactly the rate the prefill replicas do.
    served = routing[role != "decode"].groupby("workload")["rate_per_s"].sum().reindex(rate.index, fill_value=0.0)
    pools = pd.Series(candidate_pools(instance.candidates), index=instance.candidates.index)
    keyed = routing.assign(_pool=pools.reindex(routing["candidate_id"]).fillna("").to_numpy())
    prefilled = keyed[role == "prefill"].groupby(["workload", "_pool"])["rate_per_s"].sum()
    decoded = keyed[role == "decode"].groupby(["workload", "_pool"])["rate_per_s"].sum()
    for workload in rate.index:
        if not np.isclose(served[workload], rate[workload], rtol=RATE_RTOL, atol=0):
            out.append(f"workload {workload}: served {served[workload]} of {rate[workload]} req/s")
    for workload, pool in sorted(set(prefilled.index) | set(decoded.index)):
        p, d = prefilled.get((workload, pool), 0.0), decoded.get((workload, pool), 0.0)
        if not np.isclose(p, d, rtol=RATE_RTOL, atol=0):
            out.append(f"workload {workload}: pool {pool} prefilled {p} but decoded {d} req/s")
    extra = sorted(set(routing["workload"]) - set(rate.index))
    if extra:
        out.append(f"routing: unknown workloads {extra}")
    slices = instance.slices_per_workload
    if slices is not None and len(routing):
        pieces = routing["rate_per_s"].to_numpy(float) / rate.loc[routing["workload"]].to_numpy() * slices
        if not np.allclose(pieces, np.rint(pieces), rtol=0, atol=1e-6):
            out.append(f"routing: a workload is split finer than {slices} slices")
    return out


def _check_loads(instance, dep: pd.DataFrame, routing: pd.DataFrame) -> list[str]:
    out = []
    known = routing[routing["workload"].isin(instance.capacity_per_s.columns)
                    & routing["candidate_id"].isin(instance.capacity_per_s.index)]
    cap = instance.capacity_per_s.to_numpy(float)[
        instance.capacity_per_s.index.get_indexer(known["candidate_id"]),
        instance.capacity_per_s.columns.get_indexer(known["workload"])]
    rate = known["rate_per_s"].to_numpy(float)
    bad = (cap <= 0) & (rate > 0)
    for cid, wl in zip(known["candidate_id"][bad], known["workload"][bad]):
        out.append(f"routing: {cid} cannot serve {wl} (capacity 0)")
    load = pd.Series(np.where(cap > 0, rate / np.where(cap > 0, cap, 1.0), 0.0),
                     index=known["candidate_id"].to_numpy()).groupby(level=0).sum()
    red = known["workload"].isin(instance.redundancy_workloads).to_numpy() & (rate > 0)
    needs_spare = set(known["candidate_id"][red])
    for cid, replicas in zip(dep["candidate_id"], dep["replicas"]):
        spare = 1 if cid in needs_spare else 0
        if load.get(cid, 0.0) > replicas - spare + LOAD_ATOL:
            what = "replicas - 1 (N+1 spare)" if spare else "replicas"
            out.append(f"load {cid}: {load.get(cid, 0.0):.9g} replicas of load > {what} = {replicas - spare}")
    return out
