"""Build the CP-SAT model of a planning instance: replicas, traffic units, and their limits."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd
from ortools.sat.python import cp_model

from planner.optimize.instance import PlanningInstance
from planner.optimize.prune import (block_codes, candidate_pools, candidate_roles, prune_dominated,
                                    prune_dominated_pools, prune_replica_multiples, role_blocks)
from planner.optimize.scaling import (COST_UNITS_PER_USD, LOAD_UNITS_PER_REPLICA, MAX_SCALED_MAGNITUDE,
                                      check_magnitudes, cost_units, limit_cost_units,
                                      replica_upper_bounds, scale_loads)
from planner.schema import PlanningInputError


class PlanModel(cp_model.CpModel):
    """A CpModel without the pre-PEP 8 aliases (``AddBoolOr`` for ``add_bool_or``, ...) that
    OR-Tools binds onto every model and every clone, about 1.7 ms each (issue 19: a ranking
    clones its models some 25 times, a Pareto sweep over 100); the planner calls the PEP 8
    names only. Clones are PlanModels too."""

    def _add_pre_pep8_methods(self) -> None:
        """Bind nothing (OR-Tools' constructor hook)."""

    def clone(self) -> PlanModel:
        clone = PlanModel()
        clone.proto.copy_from(self.proto)
        clone.rebuild_constant_map()
        return clone


@dataclass(frozen=True, eq=False)
class BuiltModel:
    """A CP-SAT model with its variables keyed by candidate and the scaling it used.

    Attributes
    ----------
    model : cp_model.CpModel
        Minimizes ``cost_expr``; never mutated after building (solvers work on clones).
    instance : PlanningInstance
        The instance it was built from.
    candidates : pandas.DataFrame
        Kept candidates, sorted by ``candidate_id``.
    pruned : pandas.Series
        Pruned ``candidate_id`` -> id of a kept candidate dominating it.
    workloads : tuple of str
        Canonical (sorted) workload order.
    replicas, use, spare : pandas.Series
        IntVar / BoolVar per kept candidate; ``spare`` only for candidates able to
        serve a redundancy workload.
    replica_upper : pandas.Series
        Upper bound of each ``replicas`` variable.
    traffic : pandas.Series
        IntVar of traffic units per (candidate_id, workload) pair the candidate can serve.
    traffic_units : pandas.Series
        Pieces per workload.
    price_units : pandas.Series
        Scaled price per replica [cost units / h].
    load_coef : pandas.Series
        Scaled load of one traffic unit, per (candidate_id, workload) pair.
    load_units_per_replica : pandas.Series
        Load units one replica carries, per candidate.
    cost_expr : cp_model.LinearExpr
        Scaled cost [cost units / h].
    tie_break_weights : pandas.Series
        Distinct weights 1..n per candidate, in the order of a hash of ``candidate_id``.
    tie_break_expr : cp_model.LinearExpr
        sum_j tie_break_weights_j * replicas_j, the secondary objective.
    scales : dict
        Scale constants and modes, for the run record.
    """

    model: cp_model.CpModel
    instance: PlanningInstance
    candidates: pd.DataFrame
    pruned: pd.Series
    workloads: tuple[str, ...]
    replicas: pd.Series
    use: pd.Series
    spare: pd.Series
    replica_upper: pd.Series
    traffic: pd.Series
    traffic_units: pd.Series
    price_units: pd.Series
    load_coef: pd.Series
    load_units_per_replica: pd.Series
    cost_expr: cp_model.LinearExpr
    tie_break_weights: pd.Series
    tie_break_expr: cp_model.LinearExpr
    scales: dict


def build_model(instance: PlanningInstance, *, prune: bool = True, emit: bool = True) -> BuiltModel:
    """Build the min-cost CP-SAT model of an instance.

    Parameters
    ----------
    instance : PlanningInstance
        The validated problem.
    prune : bool, default True
        Drop dominated candidates first (see :func:`prune_dominated`), then the
        prefill/decode pools another pool covers (:func:`prune_dominated_pools`) and the
        prefill/decode candidates replicas of a smaller one replace
        (:func:`prune_replica_multiples`).
    emit : bool, default True
        False: the scaled data only, ``model``, the variables and the expressions None (the
        variable Series hold None with their index), for
        :func:`planner.optimize.blocks.split_model`, which emits the independent blocks
        alone, and :func:`planner.optimize.blocks.emitted`, which emits the whole model.

    Returns
    -------
    BuiltModel

    Raises
    ------
    PlanningInputError
        When the scaled model would overflow the integer guard.

    Notes
    -----
    Variables: replicas y_j in [0, U_j], use_j, spare_j, traffic units x_jk in [0, Q_k].
    Constraints: ``serve[k]``: sum_j x_jk = Q_k over the aggregated and prefill-role
    candidates; ``pd_balance[k]`` (per pool key when there are several): sum of x_jk over a
    pool's decode-role candidates = the sum over its prefill-role ones (disaggregated serving,
    docs/serving-model.md 14.5);
    ``load[j]``: sum_k a_jk x_jk + L_j spare_j
    <= L_j y_j; ``spare[j,k]``: x_jk <= Q_k spare_j for redundancy workloads;
    ``use_link[j]``: use_j <= y_j <= U_j use_j; ``inventory_gpus[g]``; ``budget_usd_per_hour``;
    ``max_distinct_configs``. Objective: minimize sum_j price_j y_j.
    """
    workloads = instance.workloads
    cands = instance.candidates.sort_index()
    cap_frame = instance.capacity_per_s.loc[cands.index, list(workloads)].astype(float)
    if prune:
        block, labels = block_codes(cands)
        pruned = prune_dominated(cands, role_blocks(labels[block], cap_frame), blocks=block)
    else:
        pruned = pd.Series(dtype=object, name="dominated_by")
    keep = ~cands.index.isin(pruned.index)
    # then whole prefill/decode pools another pool covers, and prefill/decode candidates that
    # replicas of a smaller one replace (each rule keeps the optimum of what the previous left)
    for rule in (prune_dominated_pools, prune_replica_multiples) if prune else ():
        more = rule(cands[keep], cap_frame[keep])
        pruned = pd.concat([pruned, more]).sort_index() if len(more) else pruned
        keep &= ~cands.index.isin(more.index)
    cands, cap_frame = cands[keep], cap_frame[keep]
    ids = pd.Index(cands.index, name="candidate_id")
    q = instance.traffic_units()
    scaling = scale_loads(instance.rate_per_s[list(workloads)].to_numpy(float), q.to_numpy(), cap_frame)
    cap = cap_frame.to_numpy()
    red = np.isin(np.array(workloads), list(instance.redundancy_workloads))
    can_spare = (cap[:, red] > 0).any(axis=1)
    price_units, cost_exact = cost_units(cands["usd_per_replica_hour"])
    budget_units = (None if instance.budget_usd_per_hour is None
                    else limit_cost_units(instance.budget_usd_per_hour))
    gpr = cands["gpus_per_replica"].to_numpy(np.int64)
    upper = replica_upper_bounds(scaling, q.to_numpy(), can_spare)
    problems = check_magnitudes(upper, price_units, budget_units)
    if problems:
        raise PlanningInputError(problems)
    for pos, gpu in enumerate(cands["gpu"]):
        if gpu in instance.inventory_gpus:
            upper[pos] = min(upper[pos], instance.inventory_gpus[gpu] // gpr[pos])
        if budget_units is not None:
            upper[pos] = min(upper[pos], budget_units // price_units[pos])

    scales = {"cost_units_per_usd": COST_UNITS_PER_USD,
              "cost_scaling": "exact" if cost_exact else "rounded_up",
              "load_scaling": "exact" if scaling.exact else "rounded_up",
              "load_units_per_replica": (LOAD_UNITS_PER_REPLICA if not scaling.exact
                                         else "per candidate, lcm of its piece-load denominators"),
              "max_load_units_per_replica": int(scaling.units.max()) if len(ids) else 0,
              "max_load_overestimate_replicas": scaling.max_overestimate_replicas,
              "traffic_units": {w: int(v) for w, v in q.items()},
              "max_scaled_magnitude": MAX_SCALED_MAGNITUDE}
    rows, cols = np.nonzero(cap > 0)
    pairs = pd.MultiIndex.from_arrays([ids[rows], np.array(workloads, dtype=object)[cols]],
                                      names=["candidate_id", "workload"])
    upper_s, price_s = pd.Series(upper, index=ids, dtype=np.int64), pd.Series(price_units, index=ids)
    coef_s = pd.Series(scaling.coef[rows, cols], index=pairs, dtype=np.int64)
    units_s, weights = pd.Series(scaling.units, index=ids), tie_break_weights(ids)
    if not emit:
        none = {"dtype": object}
        return BuiltModel(model=None, instance=instance, candidates=cands, pruned=pruned, workloads=workloads,
                          replicas=pd.Series(None, index=ids, **none), use=pd.Series(None, index=ids, **none),
                          spare=pd.Series(None, index=ids[can_spare], **none), replica_upper=upper_s,
                          traffic=pd.Series(None, index=pairs, **none), traffic_units=q, price_units=price_s,
                          load_coef=coef_s, load_units_per_replica=units_s, cost_expr=None,
                          tie_break_weights=weights, tie_break_expr=None, scales=scales)
    return emit_model(instance, cands, pruned, workloads, q, upper_s, price_s, coef_s, units_s,
                      ids[can_spare], weights, scales, budget_units=budget_units,
                      max_distinct_configs=instance.max_distinct_configs)


def emit_model(instance: PlanningInstance, cands: pd.DataFrame, pruned: pd.Series, workloads: tuple[str, ...],
               q: pd.Series, upper: pd.Series, price_units: pd.Series, coef: pd.Series, units: pd.Series,
               spare_ids: pd.Index, weights: pd.Series, scales: dict, *, budget_units: int | None,
               max_distinct_configs: int | None) -> BuiltModel:
    """The CP-SAT model (variables and constraints of :func:`build_model`) of scaled data.

    ``cands``: kept candidates in ``candidate_id`` order; ``upper``, ``price_units``,
    ``units`` (load units per replica) and ``weights`` (tie-break) per candidate; ``coef``:
    the scaled load of one traffic unit per (candidate_id, workload) pair that can serve,
    in candidate then workload order; ``q``: traffic units per workload of ``workloads``;
    ``spare_ids``: the candidates that can serve a redundancy workload.
    :func:`planner.optimize.blocks.split_model` emits independent parts of a model with
    the same data, restricted.
    """
    ids = pd.Index(cands.index, name="candidate_id")
    pairs = coef.index
    upper_arr, units_arr = upper.to_numpy(np.int64), units.to_numpy(np.int64)
    gpr = cands["gpus_per_replica"].to_numpy(np.int64)
    can_spare = ids.isin(spare_ids)
    red_names = set(instance.redundancy_workloads)
    rows = ids.get_indexer(pairs.get_level_values("candidate_id"))
    pair_wl = np.asarray(pairs.get_level_values("workload"), dtype=object)
    coef_arr = coef.to_numpy(np.int64)
    q_of = q.to_dict()

    model = PlanModel()
    model.name = "llm_deployment_plan"
    # the variables new_int_var_series / new_bool_var_series make, in their order (speed: the
    # ids as a list once, no lookup of each bound by label)
    id_list = ids.tolist()
    replicas = pd.Series([model.new_int_var(0, int(u), f"replicas[{cid}]") for cid, u in zip(id_list, upper_arr)],
                         index=ids, dtype=object)
    use = pd.Series([model.new_bool_var(f"use[{cid}]") for cid in id_list], index=ids, dtype=object)
    spare_index = ids[can_spare]
    spare = pd.Series([model.new_bool_var(f"spare[{cid}]") for cid in spare_index.tolist()], index=spare_index,
                      dtype=object)
    tvars = [model.new_int_var(0, int(min(q_of[w], (units_arr[j] * upper_arr[j]) // c)),
                               f"traffic_units[{id_list[j]},{w}]")
             for j, w, c in zip(rows, pair_wl, coef_arr)]
    traffic = pd.Series(tvars, index=pairs, dtype=object)
    ys, uses = list(replicas), list(use)
    spares = dict(zip(spare.index, spare))
    coefs = [int(c) for c in coef_arr]
    by_candidate: list[list[int]] = [[] for _ in range(len(ids))]
    for i, j in enumerate(rows):
        by_candidate[j].append(i)

    role_of = candidate_roles(cands)[rows]
    pool_of = candidate_pools(cands)[rows]
    for name in workloads:
        mine_k = pair_wl == name
        served = [tvars[i] for i in np.flatnonzero(mine_k & (role_of != "decode"))]
        model.add(cp_model.LinearExpr.sum(served) == int(q_of[name])).with_name(f"serve[{name}]")
        pools = sorted(set(pool_of[mine_k & (role_of != "both")]))
        for pool in pools:
            # Every request a pool prefills it decodes (same traffic units; one weight format and
            # KV dtype on both sides, prune.POOL_KEY).
            in_pool = mine_k & (pool_of == pool)
            prefilled = [tvars[i] for i in np.flatnonzero(in_pool & (role_of == "prefill"))]
            decoded = [tvars[i] for i in np.flatnonzero(in_pool & (role_of == "decode"))]
            suffix = "" if len(pools) == 1 else f",{pool}"
            model.add(cp_model.LinearExpr.sum(decoded) == cp_model.LinearExpr.sum(prefilled)).with_name(
                f"pd_balance[{name}{suffix}]")
    for j, cid in enumerate(id_list):
        mine = by_candidate[j]
        mine_vars = [tvars[i] for i in mine]
        load = cp_model.LinearExpr.weighted_sum(mine_vars, [coefs[i] for i in mine])
        u = int(units_arr[j])
        y, used = ys[j], uses[j]
        if can_spare[j]:
            s = spares[cid]
            model.add(load + u * s <= u * y).with_name(f"load[{cid}]")
            for i in mine:
                if pair_wl[i] in red_names:
                    model.add(tvars[i] <= int(q_of[pair_wl[i]]) * s).with_name(f"spare[{cid},{pair_wl[i]}]")
        else:
            model.add(load <= u * y).with_name(f"load[{cid}]")
        model.add(y <= int(upper_arr[j]) * used).with_name(f"use_link[{cid}]")
        model.add(y >= used).with_name(f"use_floor[{cid}]")
        # A deployed candidate carries traffic: no idle deployments (never optimal; this
        # keeps the k-best alternatives meaningful).
        model.add(cp_model.LinearExpr.sum(mine_vars) >= used).with_name(f"use_serves[{cid}]")
    gpus = cands["gpu"].to_numpy(object)
    for gpu, count in sorted(instance.inventory_gpus.items()):
        mask = gpus == gpu
        if mask.any():
            model.add(cp_model.LinearExpr.weighted_sum([ys[j] for j in np.flatnonzero(mask)],
                                                       [int(g) for g in gpr[mask]])
                      <= int(count)).with_name(f"inventory_gpus[{gpu}]")
    cost_expr = cp_model.LinearExpr.weighted_sum(ys, [int(p) for p in price_units])
    if budget_units is not None:
        model.add(cost_expr <= budget_units).with_name("budget_usd_per_hour")
    if max_distinct_configs is not None:
        model.add(cp_model.LinearExpr.sum(uses) <= max_distinct_configs).with_name(
            "max_distinct_configs")
    model.minimize(cost_expr)
    tie_break_expr = cp_model.LinearExpr.weighted_sum(ys, [int(w) for w in weights])
    return BuiltModel(model=model, instance=instance, candidates=cands, pruned=pruned,
                      workloads=workloads, replicas=replicas, use=use, spare=spare,
                      replica_upper=upper, traffic=traffic, traffic_units=q, price_units=price_units,
                      load_coef=coef, load_units_per_replica=units, cost_expr=cost_expr,
                      tie_break_weights=weights, tie_break_expr=tie_break_expr, scales=scales)


def tie_break_weights(ids: pd.Index) -> pd.Series:
    """Distinct weights 1..n ordered by a hash of each id: fixed per id set, free of id patterns.

    Sequential ids (``...-tp1``, ``...-tp2``) would give arithmetic weight patterns that
    let equal-cost plans tie in the weighted sum too; a hash order makes that unlikely.
    """
    digest = [hashlib.blake2b(str(i).encode(), digest_size=8).hexdigest() for i in ids]
    order = sorted(range(len(ids)), key=lambda pos: (digest[pos], str(ids[pos])))
    weights = np.empty(len(ids), dtype=np.int64)
    weights[order] = np.arange(1, len(ids) + 1)
    return pd.Series(weights, index=ids, name="tie_break_weight")
