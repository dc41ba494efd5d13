"""Independent blocks of a planning model, each solved on its own (issue 19).

Without a budget and a distinct-configuration limit, a row of the model (:func:`build_model`)
couples only candidates that serve a common workload (``serve``, ``pd_balance``) or share
an inventory-limited GPU type (``inventory_gpus``); the cost and the tie-break's weighted
replica sum are sums over candidates. The candidates then split into blocks (connected
components of the workloads they serve and the limited GPU types they use; in practice one
block per model) with no row in common, and every stage of :func:`run_solver` decomposes:

- the minimum cost is the sum of the blocks' minima, and the least weighted replica sum
  at that cost the sum of theirs;
- the plans at (cost, weighted sum) optimal are the products of the blocks' such plans, so
  the lexicographic minimum of the replicas, in ``candidate_id`` order, is the product of
  the blocks' minima (a block's coordinates are constrained by that block only), and so is
  the lexicographic minimum of the traffic with the replicas fixed.

Each block is a far smaller CP-SAT model (the large benchmark problem: three of about 45
candidates instead of one of 132), and a solve of it is far faster; the plan is the same
canonical plan (when every stage is proven optimal). The blocks keep the whole model's
scaling and tie-break weights (:func:`planner.optimize.model.emit_model` on the restricted
data).
"""

from __future__ import annotations

import numpy as np

from planner.optimize.model import BuiltModel, emit_model
from planner.optimize.scaling import limit_cost_units


def block_positions(built: BuiltModel) -> list[np.ndarray] | None:
    """Positions (into ``built.replicas``) of the candidates of each independent block.

    None when the model is one block: a budget or a distinct-configuration limit (rows over
    every candidate), a workload no candidate serves (infeasible as a whole), or a single
    connected component. Candidates that serve nothing (no traffic pair: at most 0
    replicas) belong to no block. Blocks are ordered by their first candidate.
    """
    inst = built.instance
    if inst.budget_usd_per_hour is not None or inst.max_distinct_configs is not None:
        return None
    pairs = built.traffic.index
    pair_wl = np.asarray(pairs.get_level_values("workload"), dtype=object)
    if set(pair_wl) != set(built.workloads):
        return None
    rows = built.replicas.index.get_indexer(pairs.get_level_values("candidate_id"))
    gpus = built.candidates["gpu"].to_numpy(object)
    # union-find over workloads and inventory-limited GPU types
    parent: dict = {}

    def find(node):
        while parent.setdefault(node, node) != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    def union(a, b):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    for j, w in zip(rows, pair_wl):
        union(("w", w), ("c", int(j)))
        if gpus[j] in inst.inventory_gpus:
            union(("g", gpus[j]), ("c", int(j)))
    served = np.unique(rows)
    first: dict = {}                # each root's block number, in order of first appearance
    labels = np.array([first.setdefault(find(("c", int(j))), len(first)) for j in served], dtype=np.intp)
    if labels.max(initial=0) < 1:
        return None
    return [served[labels == b] for b in range(labels.max() + 1)]


def split_model(built: BuiltModel) -> list[BuiltModel] | None:
    """The independent blocks of a model as models of their own (see the module docstring),
    or None when it is one block (:func:`block_positions`). ``built`` may be unemitted
    (``build_model(..., emit=False)``)."""
    positions = block_positions(built)
    if positions is None:
        return None
    return [_restricted(built, pos) for pos in positions]


def emitted(built: BuiltModel) -> BuiltModel:
    """``built`` with its CP-SAT model: itself when emitted, else the whole model emitted
    from its data (the model :func:`build_model` emits)."""
    if built.model is not None:
        return built
    return restricted(built, np.arange(len(built.replicas)))


def restricted(built: BuiltModel, pos: np.ndarray) -> BuiltModel:
    """The whole model's rows (every workload, the budget and the distinct-configuration
    limit) over the candidates at positions ``pos`` only: the others held at 0 replicas
    (:mod:`planner.optimize.bounded`)."""
    inst = built.instance
    budget = None if inst.budget_usd_per_hour is None else limit_cost_units(inst.budget_usd_per_hour)
    return _restricted(built, pos, budget, inst.max_distinct_configs, built.workloads)


def _restricted(built: BuiltModel, pos: np.ndarray, budget_units: int | None = None,
                max_distinct_configs: int | None = None, workloads: tuple | None = None) -> BuiltModel:
    """The model of the candidates at positions ``pos`` and of ``workloads`` (default: those
    they serve)."""
    ids = built.replicas.index[pos]
    mine = built.traffic.index.get_level_values("candidate_id").isin(ids)
    coef = built.load_coef[mine]
    if workloads is None:
        names = set(coef.index.get_level_values("workload"))
        workloads = tuple(w for w in built.workloads if w in names)
    return emit_model(
        built.instance, built.candidates.iloc[pos], built.pruned, workloads,
        built.traffic_units.loc[list(workloads)], built.replica_upper.iloc[pos],
        built.price_units.iloc[pos], coef, built.load_units_per_replica.iloc[pos],
        built.spare.index[built.spare.index.isin(ids)], built.tie_break_weights.iloc[pos], built.scales,
        budget_units=budget_units, max_distinct_configs=max_distinct_configs)
