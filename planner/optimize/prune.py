"""Dominance pruning of candidates: drop those another candidate of the same GPU type beats."""

from __future__ import annotations

import numpy as np
import pandas as pd

NO_CAPACITY = "<serves no workload>"


def prune_dominated(candidates: pd.DataFrame, capacity_per_s: pd.DataFrame) -> pd.Series:
    """Find candidates that can be removed without changing the optimum.

    Parameters
    ----------
    candidates : pandas.DataFrame
        Sorted by ``candidate_id``; columns ``gpu``, ``gpus_per_replica``,
        ``usd_per_replica_hour``.
    capacity_per_s : pandas.DataFrame
        Same index and order, one column per workload [1/s].

    Returns
    -------
    pandas.Series
        Indexed by pruned ``candidate_id``, value: the id of a kept candidate that
        dominates it, or ``NO_CAPACITY`` for a candidate that serves no workload.

    Notes
    -----
    j is dominated by i when both have the same GPU type, ``gpus_per_replica_i <=
    gpus_per_replica_j``, ``price_i <= price_j`` and ``cap_ik >= cap_jk`` for every
    workload k, with at least one strict inequality, or all equal and i first in
    ``candidate_id`` order. Replacing j's replicas by as many of i's keeps every
    constraint: loads, N+1 spares (the spare of a merged deployment survives the
    merge), GPUs of that type, budget and the count of distinct configurations do not
    grow, and the cost does not rise. The relation is a strict partial order, so every
    pruned candidate has a kept dominator.
    """
    cap = capacity_per_s.to_numpy(float)
    gpr = candidates["gpus_per_replica"].to_numpy(float)
    price = candidates["usd_per_replica_hour"].to_numpy(float)
    ids = candidates.index.to_numpy()
    dominated_by: dict[str, str] = {}
    useless = ~(cap > 0).any(axis=1)
    for gpu, rows in candidates.groupby("gpu", sort=True).indices.items():
        rows = np.sort(rows[~useless[rows]])
        c, g, p = cap[rows], gpr[rows], price[rows]
        for pos, j in enumerate(rows):
            weak = (c >= c[pos]).all(axis=1) & (g <= g[pos]) & (p <= p[pos])
            strict = (c > c[pos]).any(axis=1) | (g < g[pos]) | (p < p[pos])
            earlier = np.arange(len(rows)) < pos
            dominators = weak & (strict | earlier)
            dominators[pos] = False
            if dominators.any():
                dominated_by[ids[j]] = _kept_dominator(rows[dominators], c[dominators], g[dominators],
                                                       p[dominators], ids)
    for j in np.flatnonzero(useless):
        dominated_by[ids[j]] = NO_CAPACITY
    pruned = pd.Series(dominated_by, dtype=object, name="dominated_by")
    pruned.index.name = "candidate_id"
    return pruned.sort_index()


def _kept_dominator(rows, cap, gpr, price, ids) -> str:
    """The maximal element among the dominators (none of them dominates it)."""
    order = np.lexsort((rows, price, gpr, -cap.sum(axis=1)))
    for pos in order:
        beaten = ((cap >= cap[pos]).all(axis=1) & (gpr <= gpr[pos]) & (price <= price[pos])
                  & ((cap > cap[pos]).any(axis=1) | (gpr < gpr[pos]) | (price < price[pos])
                     | (rows < rows[pos])))
        beaten[pos] = False
        if not beaten.any():
            return str(ids[rows[pos]])
    return str(ids[rows[order[0]]])  # unreachable for a strict partial order
