"""Pre-filter of the candidate table before the model's dominance pruning (issue 19).

The search evaluates up to hundreds of thousands of candidates; most of them are beaten by
another one of the same GPU type, GPUs per replica and price. :func:`prefilter_dominated`
keeps, in vectorized passes, the few that some optimal plan may need, before the quadratic
:func:`planner.optimize.prune.prune_dominated` of :func:`planner.optimize.model.build_model`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.optimize.codes import column_codes, group_codes, stable_order
from planner.optimize.prune import block_codes, role_blocks


def prefilter_dominated(candidates: pd.DataFrame, capacity_per_s: pd.DataFrame,
                        limited_gpus=frozenset()) -> np.ndarray:
    """Positions of the candidates worth giving to the model (fast, vectorized, exact).

    Two passes over possibly hundreds of thousands of candidates, before the quadratic
    :func:`prune_dominated` sees the survivors: (1) within a group of the same GPU type,
    GPUs per replica, price (and model, when given; and :func:`candidate_blocks` label, when
    there are prefill/decode candidates), keep the capacity maxima; (2) across
    GPU types without an inventory limit, drop a candidate another one beats on price and
    on every workload's capacity (on the :func:`role_blocks` capacities: only within a
    block). Neither removes a candidate some optimal plan needs.

    Parameters
    ----------
    candidates : pandas.DataFrame
        Columns ``gpu``, ``gpus`` (or ``gpus_per_replica``), ``usd_per_replica_hour`` and
        optionally ``model``, ``role`` and the :data:`POOL_KEY` columns.
    capacity_per_s : pandas.DataFrame
        Same rows, one column per workload [1/s] (not :func:`role_blocks`: a group of
        pass (1) holds one block, whose rows' role-block capacities are these, moved to the
        block's columns; speed: pass (2) alone, on the few maxima, makes the role blocks).
    limited_gpus : set of str
        GPU types with an inventory limit (excluded from the cross-type pass).
    """
    gpus = "gpus" if "gpus" in candidates.columns else "gpus_per_replica"
    factorized: dict = {}
    columns = [column_codes(candidates, c, factorized)
               for c in ("gpu", gpus, "usd_per_replica_hour", "model") if c in candidates.columns]
    block, labels = block_codes(candidates, factorized)
    if len(labels) > 1 or (len(labels) and labels[0] != "both"):
        # a row with capacity is only dominated within its own block: a group per block
        columns.append((block, labels))
    first = _capacity_maxima(group_codes(columns), capacity_per_s)
    blocked = role_blocks(labels[block[first]], capacity_per_s.iloc[first], present=labels)
    second = ~_cheaper_elsewhere(candidates.iloc[first], blocked, set(limited_gpus))
    return first[second]


def _capacity_maxima(codes: np.ndarray, capacity: pd.DataFrame, block: int = 512) -> np.ndarray:
    """Positions of the rows not weakly dominated in capacity within their group.

    Rows of one group (``codes``: same GPU type, GPUs per replica and price) whose capacity
    vector another row of the group matches or beats on every workload can never be needed
    by a minimum-cost plan (of exact duplicates the first row stays). This vectorized
    pre-filter leaves the optimizer's own pruning only the few maxima.
    """
    cap = capacity.to_numpy(float)
    keep = np.zeros(len(cap), dtype=bool)
    # the groups' rows by one stable sort (each group's rows in position order, as
    # np.flatnonzero(codes == code) gives them, without a pass over all rows per group)
    by_code = stable_order(codes)
    starts = np.flatnonzero(np.r_[True, codes[by_code][1:] != codes[by_code][:-1]])
    sizes = np.diff(np.r_[starts, len(codes)])
    simple = _keep_group_maxima(cap, by_code, starts, sizes, keep)
    for start, size in zip(starts[~simple], sizes[~simple]):
        rows = by_code[start:start + size]
        c = cap[rows]
        live = c.any(axis=0)
        c = c[:, live]
        # rank: larger total first, ties by position; a row can only be dominated by an
        # earlier one in this order.
        order = np.lexsort((rows, -c.sum(axis=1)))
        c = c[order]
        if c.shape[1] <= 1:
            keep[rows[order[0]]] = True
            continue
        if c.shape[1] == 2:  # sweep: sorted by the first dimension, keep new maxima of the second
            order2 = np.lexsort((np.arange(len(c)), -c[:, 1], -c[:, 0]))
            second = c[order2, 1]
            best_before = np.concatenate([[-np.inf], np.maximum.accumulate(second)[:-1]])
            keep[rows[order[order2[second > best_before]]]] = True
            continue
        dominated = np.zeros(len(rows), dtype=bool)
        for start in range(0, len(rows), block):
            stop = min(start + block, len(rows))
            ge = (c[None, :, :] >= c[start:stop, None, :]).all(axis=2)   # [i, j]: j >= i
            earlier = np.arange(len(rows))[None, :] < np.arange(start, stop)[:, None]
            dominated[start:stop] = (ge & earlier).any(axis=1)
        keep[rows[order[~dominated]]] = True
    return np.flatnonzero(keep)


def _keep_group_maxima(cap: np.ndarray, by_code: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                       keep: np.ndarray) -> np.ndarray:
    """Of :func:`_capacity_maxima`: the groups with finite capacities and at most one column
    any of their rows serves (a role's block, one workload; or none), all at once: each
    keeps its row of largest capacity (ties: the first position), as the per-group ranking
    keeps ``order[0]``. Marks them in ``keep``; returns which groups (in ``starts`` order)
    were handled."""
    if not len(starts):
        return np.zeros(0, dtype=bool)
    sorted_cap = cap[by_code]
    served = np.logical_or.reduceat(sorted_cap != 0, starts, axis=0).sum(axis=1)   # NaN counts, as any()
    finite = np.logical_and.reduceat(np.isfinite(sorted_cap).all(axis=1), starts)
    simple = (served <= 1) & finite
    group = np.repeat(np.arange(len(starts)), sizes)
    # the one served column's value is the row's sum (the other columns are zeros); a group's
    # rows are in position order, so the first at its group's maximum is the one to keep
    # (speed: no sort by value)
    total = sorted_cap.sum(axis=1)
    top = np.flatnonzero(simple[group] & (total == np.maximum.reduceat(total, starts)[group]))
    keep[by_code[top[np.r_[True, group[top][1:] != group[top][:-1]]] if len(top) else top]] = True
    return simple


def _cheaper_elsewhere(rows: pd.DataFrame, capacity: pd.DataFrame, limited_gpus: set, block: int = 256) -> np.ndarray:
    """Rows some other row beats on price and on every capacity, across GPU types.

    Only GPU types without an inventory limit compete this way (with a limit, a costlier
    candidate of another type may be needed); j is dropped when some i costs no more per
    replica and carries at least as much of every workload (ties: the first id stays).
    Replacing j's replicas by i's keeps loads, budget, N+1 and distinct-config limits.
    """
    free = ~rows["gpu"].isin(limited_gpus).to_numpy()
    cap = capacity.to_numpy(float)
    price = rows["usd_per_replica_hour"].to_numpy(float)
    dims = np.column_stack([cap, -price])
    idx = np.flatnonzero(free)
    order = idx[np.lexsort((idx, price[idx], -cap[idx].sum(axis=1)))]
    d = dims[order]
    dropped = np.zeros(len(rows), dtype=bool)
    for start in range(0, len(order), block):
        stop = min(start + block, len(order))
        ge = (d[None, :, :] >= d[start:stop, None, :]).all(axis=2)
        earlier = np.arange(len(order))[None, :] < np.arange(start, stop)[:, None]
        dropped[order[start:stop]] = (ge & earlier).any(axis=1)
    return dropped
