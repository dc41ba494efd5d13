"""Dominance pruning of candidates: drop those another candidate of the same GPU type beats."""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.dimensions import factorize_column
from planner.optimize.codes import column_codes, group_codes, stable_order
from planner.optimize.scaling import cost_units, to_fraction

NO_CAPACITY = "<serves no workload>"
NO_PARTNER = "<no candidate of the other role in its pool>"
#: Serving roles of a candidate (column ``role``; absent: every candidate is ``both``).
ROLES = ("both", "prefill", "decode")
#: What the prefill and decode replicas of one pool share: the model, its weights' format and
#: the KV dtype (the decode replica continues from the KV cache the prefill replica computed,
#: with the same weights).
POOL_KEY = ("model", "quantization", "kv_cache_dtype")
#: Pairs of candidates times workload columns :func:`prune_dominated` compares at once
#: (memory: a few booleans and integers each).
PAIRS_COMPARED_AT_ONCE = 1 << 20
#: Relative band around equality in which :func:`prune_replica_multiples` compares the
#: capacities as exact rationals; outside it the float comparison decides (a float and the
#: rational :func:`planner.optimize.scaling.to_fraction` reads from it differ by < 1e-16).
_FLOAT_SCREEN = 1e-12


def candidate_roles(candidates: pd.DataFrame) -> np.ndarray:
    """The ``role`` of each candidate (``both`` where the table has no such column)."""
    if "role" not in candidates.columns:
        return np.full(len(candidates), "both", dtype=object)
    return candidates["role"].fillna("both").to_numpy(object)


def candidate_pools(candidates: pd.DataFrame) -> np.ndarray:
    """The pool key (``POOL_KEY`` values joined by ``|``) of each prefill/decode candidate,
    ``""`` for aggregated ones: only replicas with the same key can hand a request over."""
    combinations = _combinations(candidates)
    if combinations is not None:
        key, roles, values = combinations
        return np.array(["" if r == "both" else "|".join(v) for r, v in zip(roles, values)], dtype=object)[key]
    roles = candidate_roles(candidates)
    cols = [c for c in POOL_KEY if c in candidates.columns]
    if not cols or (roles == "both").all():
        return np.full(len(candidates), "", dtype=object)
    key = _joined([candidates[col].astype(str).to_numpy(object) for col in cols], "|")
    return np.where(roles == "both", "", key)


def _joined(columns: list[np.ndarray], sep: str) -> np.ndarray:
    """``sep.join`` of each row's strings of ``columns`` (object arrays of str), built once per
    distinct combination and taken to the rows (an element-wise concatenation builds one
    string per row)."""
    key = np.zeros(len(columns[0]), dtype=np.int64)
    values = []
    for column in columns:
        codes, uniques = pd.factorize(column)
        key = key * len(uniques) + codes
        values.append(uniques)
    codes, keys = pd.factorize(key)
    texts = []
    for k in keys:
        parts = []
        for uniques in reversed(values):
            k, at = divmod(int(k), len(uniques))
            parts.append(uniques[at])
        texts.append(sep.join(reversed(parts)))
    return np.array(texts, dtype=object)[codes]


def candidate_blocks(candidates: pd.DataFrame) -> np.ndarray:
    """What a candidate can stand in for: ``both`` for aggregated candidates, the role and
    pool key (``prefill@<key>``, ``decode@<key>``) for the others. Dominance compares only
    candidates of one block: a prefill or decode replica serves a request only with a
    partner of the other role in its pool."""
    codes, labels = block_codes(candidates)
    return labels[codes]


def block_codes(candidates: pd.DataFrame, factorized: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, labels)``: the :func:`candidate_blocks` label of each row is
    ``labels[codes]``; ``labels`` (object array) holds each label present once.
    ``factorized``: the columns' codes by name (:func:`column_codes`), shared with the caller.

    Speed: the labels are made once per distinct combination of ``role`` and the
    :data:`POOL_KEY` columns (:func:`_combinations`), not joined per row."""
    if "role" not in candidates.columns:
        return np.zeros(len(candidates), dtype=np.int64), np.array(["both"], dtype=object)
    combinations = _combinations(candidates, factorized)
    if combinations is None:
        codes, labels = pd.factorize(_blocks_of_rows(candidates))
        return codes, np.asarray(labels, dtype=object)
    key, roles, values = combinations
    codes, labels = pd.factorize(np.array(["both" if r == "both" else f"{r}@{'|'.join(v)}"
                                           for r, v in zip(roles, values)], dtype=object))
    return codes[key], np.asarray(labels, dtype=object)


def _combinations(candidates: pd.DataFrame, factorized: dict | None = None) -> tuple | None:
    """``(codes, roles, values)``: per row the code of its combination of ``role`` and the
    :data:`POOL_KEY` columns present, and per combination its role (a missing one is
    ``both``) and its pool values, for the labels of :func:`candidate_pools` and
    :func:`candidate_blocks` made once per combination. None (then they are joined row by
    row) without a role column, with a role or pool column not of a string dtype, or with
    a missing pool value."""
    columns = [c for c in ("role", *POOL_KEY) if c in candidates.columns]
    if "role" not in columns or not all(isinstance(candidates[c].dtype, pd.StringDtype) for c in columns):
        return None
    factorized = {} if factorized is None else factorized
    parts = [column_codes(candidates, c, factorized) for c in columns]
    if any((codes < 0).any() for codes, _ in parts[1:]):
        return None
    # a missing role (code -1) is ``both``: its own code 0, so no row is missing here
    key = group_codes([(codes + 1, range(len(uniques) + 1)) for codes, uniques in parts])
    # each combination's first row (codes are numbered in order of first appearance)
    first = np.flatnonzero(key > np.maximum.accumulate(np.r_[-1, key[:-1]]))
    (role_codes, role_values), pool_parts = parts[0], parts[1:]
    roles = ["both" if role_codes[f] < 0 else role_values[role_codes[f]] for f in first]
    values = [[uniques[codes[f]] for codes, uniques in pool_parts] for f in first]
    return key, roles, values


def _blocks_of_rows(candidates: pd.DataFrame) -> np.ndarray:
    """:func:`candidate_blocks` joined row by row."""
    roles = candidate_roles(candidates)
    both = roles == "both"
    if both.all():   # aggregated candidates only: no per-row string concatenation
        return np.full(len(candidates), "both", dtype=object)
    return np.where(both, "both", _joined([roles, candidate_pools(candidates)], "@"))


def role_blocks(blocks: np.ndarray, capacity_per_s: pd.DataFrame, present=None) -> pd.DataFrame:
    """The capacities with one block of workload columns per :func:`candidate_blocks` label
    present: a candidate's capacities sit in its own block, zeros elsewhere, so dominance on
    these columns never lets a candidate replace one of another role or pool. Without
    roles other than ``both``: the capacities themselves. ``present``: the labels to make
    blocks for (default: those of ``blocks``; given, the columns of some rows of a larger
    table are that table's)."""
    # the labels compared once, not per row
    codes, labels = pd.factorize(np.asarray(blocks, dtype=object), use_na_sentinel=False)
    present = sorted(labels if present is None else set(present), key=lambda b: (b != "both", b))
    if present == ["both"] or not present:
        return capacity_per_s
    cap = capacity_per_s.to_numpy(float)
    width = cap.shape[1]
    position = {b: i for i, b in enumerate(present)}
    at = np.array([position[b] for b in labels], dtype=np.int64)      # a label's block position
    out = np.zeros((len(cap), len(present) * width))
    # each row's capacities into its block's columns (zeros elsewhere)
    out[np.arange(len(cap))[:, None], at[codes][:, None] * width + np.arange(width)] = cap
    columns = [f"{c}@{b}" for b in present for c in capacity_per_s.columns]
    return pd.DataFrame(out, index=capacity_per_s.index, columns=columns)


def prune_dominated(candidates: pd.DataFrame, capacity_per_s: pd.DataFrame,
                    block: int = PAIRS_COMPARED_AT_ONCE, blocks: np.ndarray | None = None) -> pd.Series:
    """Find candidates that can be removed without changing the optimum.

    Parameters
    ----------
    candidates : pandas.DataFrame
        Sorted by ``candidate_id``; columns ``gpu``, ``gpus_per_replica``,
        ``usd_per_replica_hour``.
    capacity_per_s : pandas.DataFrame
        Same index and order, one column per workload [1/s].
    block : int, default :data:`PAIRS_COMPARED_AT_ONCE`
        Pairs of candidates (of one GPU type) times workload columns compared at once
        (memory: a few booleans and integers each; at least one candidate's pairs).
    blocks : numpy.ndarray, optional
        Integer codes of the candidates' :func:`candidate_blocks` labels when
        ``capacity_per_s`` are their :func:`role_blocks` capacities: then a candidate that
        serves something is only dominated within its block, and only the pairs of one GPU
        type and block are compared (speed).

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
    pruned candidate has a kept dominator: of j's dominators the first, by larger
    capacity sum, fewer GPUs, lower price, then position, that no candidate dominates (a
    candidate dominating one of j's dominators dominates j too).
    """
    cap = capacity_per_s.to_numpy(float)
    ids = candidates.index.to_numpy()
    useless = ~(cap > 0).any(axis=1)
    gpu = factorize_column(candidates["gpu"])
    groups = group_codes([gpu] if blocks is None else [gpu, pd.factorize(blocks)])
    rows = np.flatnonzero(~useless)
    rows = rows[stable_order(groups[rows])]    # by group; a group's rows in position order
    c = cap[rows]
    total = c.sum(axis=1)
    g = candidates["gpus_per_replica"].to_numpy(float)[rows]
    p = candidates["usd_per_replica_hour"].to_numpy(float)[rows]
    pairs = _GroupPairs(groups[rows], max(int(block) // max(c.shape[1], 1), 1))

    def dominates(e, k):        # per pair: row k dominates row e
        weak = (c[k] >= c[e]).all(axis=1) & (g[k] <= g[e]) & (p[k] <= p[e])
        strict = (c[k] > c[e]).any(axis=1) | (g[k] < g[e]) | (p[k] < p[e]) | (rows[k] < rows[e])
        return weak & strict & (k != e)

    dominated = np.zeros(len(rows), dtype=bool)
    for e, k in pairs.of(np.arange(len(rows))):
        dominated[e[dominates(e, k)]] = True
    rank = np.empty(len(rows), dtype=np.int64)
    by_rank = np.lexsort((rows, p, g, -total))
    rank[by_rank] = np.arange(len(rows))
    chosen = np.full(len(rows), len(rows))            # of the dominated rows: the least rank of a kept dominator
    for e, k in pairs.of(np.flatnonzero(dominated)):
        kept = dominates(e, k) & ~dominated[k]
        np.minimum.at(chosen, e[kept], rank[k[kept]])
    at = np.flatnonzero(dominated)
    if (chosen[at] == len(rows)).any():
        raise AssertionError("a dominated row without a kept dominator")   # a strict partial order
    dominated_by = dict(zip(ids[rows[at]].tolist(), map(str, ids[rows[by_rank[chosen[at]]]])))
    for j in np.flatnonzero(useless):
        dominated_by[ids[j]] = NO_CAPACITY
    pruned = pd.Series(dominated_by, dtype=object, name="dominated_by")
    pruned.index.name = "candidate_id"
    return pruned.sort_index()


class _GroupPairs:
    """The pairs (e, k) of rows of one group, from rows numbered by group (``groups``
    sorted), in batches of about ``per_batch`` pairs (at least one row's)."""

    def __init__(self, groups: np.ndarray, per_batch: int):
        starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]]) if len(groups) else np.zeros(0, np.int64)
        sizes = np.diff(np.r_[starts, len(groups)])
        self.first = np.repeat(starts, sizes)         # per row: its group's first row and size
        self.size = np.repeat(sizes, sizes)
        self.per_batch = per_batch

    def of(self, e_rows: np.ndarray):
        """Batches ``(e, k)``: every row k of the group of each row of ``e_rows``."""
        counts = self.size[e_rows]
        ends = np.cumsum(counts)
        start = 0
        while start < len(e_rows):
            stop = max(start + 1, int(np.searchsorted(ends, ends[start] - counts[start] + self.per_batch,
                                                      side="right")))
            rows, n = e_rows[start:stop], counts[start:stop]
            offset = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
            yield np.repeat(rows, n), np.repeat(self.first[rows], n) + offset
            start = stop


def _unbeaten_ranks(rows: np.ndarray, gpu, cap, gpr, price) -> np.ndarray:
    """Of the kept dominator among ``rows`` (one pool's rows of one role): each row's rank in
    the order of :func:`prune_dominated` (larger capacity sum, fewer GPUs, lower price,
    position), ``len(rows)`` for a row that another row of ``rows`` beats. The kept
    dominator of a row i is the first of its dominators in ``rows`` that no row beats (a
    row beating a dominator of i dominates i too: weak dominance on one GPU type is
    transitive), so the first of i's dominators beaten by none of them: the least of their
    ranks here."""
    c, g, p, t = cap[rows], gpr[rows], price[rows], gpu[rows]
    weak = ((c[:, None, :] >= c[None, :, :]).all(axis=2) & (g[:, None] <= g[None, :])
            & (p[:, None] <= p[None, :]) & (t[:, None] == t[None, :]))   # [k, e]: k weakly dominates e
    strict = ((c[:, None, :] > c[None, :, :]).any(axis=2) | (g[:, None] < g[None, :])
              | (p[:, None] < p[None, :]) | (rows[:, None] < rows[None, :]))
    beats = weak & strict
    beats[np.diag_indices(len(rows))] = False
    rank = np.empty(len(rows), dtype=np.int64)
    rank[np.lexsort((rows, p, g, -c.sum(axis=1)))] = np.arange(len(rows))
    return np.where(beats.any(axis=0), len(rows), rank)


def prune_replica_multiples(candidates: pd.DataFrame, capacity_per_s: pd.DataFrame) -> pd.Series:
    """Find prefill/decode candidates that several replicas of a smaller one replace.

    Parameters
    ----------
    candidates : pandas.DataFrame
        Columns ``gpu``, ``gpus_per_replica``, ``usd_per_replica_hour`` and optionally
        ``role`` and the :data:`POOL_KEY` columns; aggregated (``both``) candidates are
        left alone.
    capacity_per_s : pandas.DataFrame
        Same index and order, one column per workload [1/s].

    Returns
    -------
    pandas.Series
        Indexed by pruned ``candidate_id``, value: the id of a kept candidate m >= 2 of
        whose replicas replace one of it.

    Notes
    -----
    j is replaced by i when both are of one :func:`candidate_blocks` block (role and pool)
    and GPU type and, for m = min(floor(G_j / G_i), floor(c_j / c_i)) >= 2 (G GPUs per
    replica, c the price in the model's integer cost units), m cap_ik >= cap_jk for every
    workload k (exactly, in the model's rationals). Each replica of j becomes m replicas of
    i (merged with i's deployment if there is one): no more GPUs of that type, no higher
    cost, the traffic j carried fits (the model's rounded-up load per traffic unit on i is
    at most m times the one on j), an N+1 spare replica of j leaves m >= 1 spare replicas
    of i, and the number of distinct configurations does not grow; replicas beyond the load
    and one spare can then be removed. The relation is transitive (m multiplies) and G
    strictly decreases along it, so every pruned candidate has a kept replacement.
    """
    roles, blocks = candidate_roles(candidates), candidate_blocks(candidates)
    ids = candidates.index.to_numpy()
    cap = capacity_per_s.to_numpy(float)
    gpr = candidates["gpus_per_replica"].to_numpy(np.int64)
    price, _ = cost_units(candidates["usd_per_replica_hour"])
    gpu = candidates["gpu"].to_numpy(object)
    by: dict[int, list[int]] = {}
    fractions: dict[int, list] = {}

    def exact(row: int) -> list:
        """The row's capacities as the model's rationals (each row's once)."""
        if row not in fractions:
            fractions[row] = [to_fraction(c) for c in cap[row]]
        return fractions[row]

    rows = np.flatnonzero(roles != "both")
    groups = group_codes([pd.factorize(blocks[rows]), pd.factorize(gpu[rows])])   # block and GPU type
    rows = rows[stable_order(groups)]
    normal = (cap == 0) | (cap >= np.finfo(float).tiny)      # relative rounding bounds hold
    per_batch = max(PAIRS_COMPARED_AT_ONCE // max(cap.shape[1], 1), 1)
    for a, b in _GroupPairs(np.sort(groups), per_batch).of(np.arange(len(rows))):
        # per pair (j, i): m of i replacing j (0 unless G_i < G_j), then the float screen of
        # the capacities; the exact check only on the pairs that pass it
        j, i = rows[a], rows[b]
        m = np.minimum(gpr[j] // np.maximum(gpr[i], 1), price[j] // np.maximum(price[i], 1))
        m = np.where((gpr[i] < gpr[j]) & (price[i] > 0), m, 0)     # (a free i: m undefined, 0 as before)
        scaled = m[:, None] * cap[i]
        screen = (m >= 2) & (scaled >= cap[j] * (1 - _FLOAT_SCREEN)).all(axis=1)
        # clear of the screen's band the floats decide (the rationals are within 1e-16 of them)
        sure = ((scaled >= cap[j] * (1 + _FLOAT_SCREEN)) & normal[j]).all(axis=1)
        for at in np.flatnonzero(screen):
            jj, ii, mult = int(j[at]), int(i[at]), int(m[at])
            if sure[at] or all(mult * x >= y for x, y in zip(exact(ii), exact(jj))):
                by.setdefault(jj, []).append(ii)
    pruned = pd.Series({str(ids[j]): str(ids[min(i for i in dominators if i not in by)])
                        for j, dominators in by.items()}, dtype=object, name="dominated_by")
    pruned.index.name = "candidate_id"
    return pruned.sort_index()


def prune_dominated_pools(candidates: pd.DataFrame, capacity_per_s: pd.DataFrame) -> pd.Series:
    """Find the prefill/decode pools that can be removed without changing the optimum.

    Parameters
    ----------
    candidates : pandas.DataFrame
        Columns ``gpu``, ``gpus_per_replica``, ``usd_per_replica_hour``, ``role`` and the
        :data:`POOL_KEY` columns (without roles: nothing is pruned).
    capacity_per_s : pandas.DataFrame
        Same index and order, one column per workload [1/s] (not :func:`role_blocks`).

    Returns
    -------
    pandas.Series
        Indexed by pruned ``candidate_id``, value: the id of a kept candidate of the same
        role that dominates it (in a pool that covers its pool), or ``NO_PARTNER`` for a
        candidate whose pool has no candidate of the other role.

    Notes
    -----
    Pool B *covers* pool A when every prefill candidate of A is weakly dominated (same GPU
    type, no more GPUs per replica, no higher price, at least the capacity of every
    workload) by a prefill candidate of B, and every decode candidate of A by a decode
    candidate of B. Then any plan using A maps to one using B at no higher cost: each of
    A's deployments becomes as many replicas of its dominator (merged with B's deployment
    of that candidate if there is one); the traffic each carried moves with it, so B's
    ``pd_balance`` holds (its prefilled and decoded traffic grow by the same amount), and
    loads, N+1 spares, GPUs per type, budget and the number of distinct configurations do
    not grow. A is dropped when some pool B covers it and A does not cover B, or both
    cover each other and B's key sorts first: a strict partial order, so some kept pool
    covers every dropped one. A pool with prefill candidates but no decode ones (or the
    reverse) serves nothing (``pd_balance`` holds its traffic at 0; a deployment must
    carry traffic).
    """
    roles, pools = candidate_roles(candidates), candidate_pools(candidates)
    ids = candidates.index.to_numpy()
    keys = sorted(set(pools[roles != "both"]))
    members = _members(pools, roles, keys)
    dominated_by: dict[str, str] = {}
    live = []
    for key in keys:
        if len(members[key, "prefill"]) and len(members[key, "decode"]):
            live.append(key)
        else:
            dominated_by.update({str(ids[j]): NO_PARTNER for role in ("prefill", "decode")
                                 for j in members[key, role]})
    cap = capacity_per_s.to_numpy(float)
    gpu = pd.factorize(candidates["gpu"])[0]   # integer codes: equal GPU types, equal codes
    gpr = candidates["gpus_per_replica"].to_numpy(float)
    price = candidates["usd_per_replica_hour"].to_numpy(float)

    def weak(rows_b, rows_a) -> np.ndarray:
        """[i, j]: candidate rows_b[j] weakly dominates rows_a[i]."""
        return ((gpu[rows_b][None, :] == gpu[rows_a][:, None])
                & (gpr[rows_b][None, :] <= gpr[rows_a][:, None])
                & (price[rows_b][None, :] <= price[rows_a][:, None])
                & (cap[rows_b][None, :, :] >= cap[rows_a][:, None, :]).all(axis=2))

    def weak_pairs(rows_b, rows_a) -> np.ndarray:
        """Per pair: candidate rows_b[i] weakly dominates rows_a[i] (of one GPU type)."""
        return ((gpr[rows_b] <= gpr[rows_a]) & (price[rows_b] <= price[rows_a])
                & (cap[rows_b] >= cap[rows_a]).all(axis=1))

    covered = np.ones((len(live), len(live)), dtype=bool)   # [a, b]: pool b covers pool a
    for role in ("prefill", "decode"):
        covered &= _pools_covered([members[key, role] for key in live], weak_pairs, gpu,
                                  max(PAIRS_COMPARED_AT_ONCE // max(cap.shape[1], 1), 1))
    covered[np.diag_indices(len(live))] = False
    # live is sorted: b < a as strings is position b < position a
    earlier = np.arange(len(live))[None, :] < np.arange(len(live))[:, None]
    beats = covered & (~covered.T | earlier)                 # [a, b]: pool b beats pool a
    beats = {(live[b], live[a]) for a, b in zip(*np.nonzero(beats))}
    dropped = {a for b, a in beats}
    ranks: dict = {}         # (kept pool, role): _unbeaten_ranks of its rows, once
    for a in sorted(dropped):
        b = next(b for b in live if b not in dropped and (b, a) in beats)
        for role in ("prefill", "decode"):
            rows_a, rows_b = members[a, role], members[b, role]
            if (b, role) not in ranks:
                ranks[b, role] = _unbeaten_ranks(rows_b, gpu, cap, gpr, price)
            chosen = np.where(weak(rows_b, rows_a), ranks[b, role][None, :], len(rows_b))
            if (chosen.min(axis=1, initial=len(rows_b)) == len(rows_b)).any():
                raise AssertionError("a covered row without a kept dominator")   # strict partial order
            dominated_by.update(zip(map(str, ids[rows_a]), map(str, ids[rows_b[chosen.argmin(axis=1)]])))
    pruned = pd.Series(dominated_by, dtype=object, name="dominated_by")
    pruned.index.name = "candidate_id"
    return pruned.sort_index()


def _members(pools: np.ndarray, roles: np.ndarray, keys: list) -> dict:
    """Of :func:`prune_dominated_pools`: ``{(key, role): positions}`` of the prefill and decode
    rows of each pool key of ``keys``, in position order (one stable sort, not a comparison
    of every row per pool and role)."""
    codes, uniques = pd.factorize(pools)
    at_key = {k: i for i, k in enumerate(keys)}
    key_of = np.array([at_key.get(u, -1) for u in uniques], dtype=np.int64)[codes] if len(codes) else codes
    side = np.where(roles == "prefill", 0, np.where(roles == "decode", 1, -1))
    slot = np.where((key_of >= 0) & (side >= 0), 2 * key_of + side, -1)
    order = np.argsort(slot, kind="stable")
    order = order[slot[order] >= 0]
    parts = np.split(order, np.cumsum(np.bincount(slot[order], minlength=2 * len(keys)))[:-1])
    return {(key, role): parts[2 * i + s] for i, key in enumerate(keys) for s, role in enumerate(("prefill", "decode"))}


def _pools_covered(pools: list[np.ndarray], weak_pairs, gpu: np.ndarray, per_batch: int) -> np.ndarray:
    """Of :func:`prune_dominated_pools`, for one role: [a, b] true when every candidate of
    ``pools[a]`` (rows, each pool non-empty) has a weak dominator in ``pools[b]``. One pass
    over the pairs of the role's rows of one GPU type (``gpu``: integer codes per row;
    ``weak_pairs(dominators, rows)`` per pair), in batches of about ``per_batch`` pairs,
    instead of one per pair of pools."""
    if not pools:
        return np.zeros((0, 0), dtype=bool)
    rows = np.concatenate(pools)
    sizes = [len(p) for p in pools]
    pool = np.repeat(np.arange(len(pools)), sizes)
    order = np.argsort(gpu[rows], kind="stable")          # by GPU type: only those pairs compare
    has = np.zeros((len(rows), len(pools)), dtype=bool)    # [i, b]: some row of pool b dominates i
    for e, k in _GroupPairs(gpu[rows][order], per_batch).of(np.arange(len(rows))):
        i, j = order[e], order[k]
        ok = weak_pairs(rows[j], rows[i])
        has[i[ok], pool[j[ok]]] = True
    return np.logical_and.reduceat(has, np.cumsum([0] + sizes[:-1]), axis=0)
