"""The GPU-count frontier of one period: every minimal vector of GPUs per type that serves it.

When every candidate serves one workload, the GPUs of a type are split among workloads and
a workload's capacity on n GPUs of type g is B_gk(n), the best sum of replica capacities
that fits in n GPUs (an unbounded knapsack over that type's candidates, solved exactly by
dynamic programming). A vector n serves workload k iff sum_g B_gk(n_g) >= demand_k; the
period's feasible set is the sum of the workloads' sets, upward closed. The fleet model then
picks one minimal vector per period (one Boolean per vector): its linear relaxation is the
convex hull of each period's integer fleets, far tighter than replica variables, so the
multi-period solve stays fast. Too large a frontier (many GPU types, huge fleets) returns
None and the fleet model falls back to replica variables.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

#: Most grid points enumerated per workload, and most vectors kept per period, before the
#: fleet model falls back to replica variables.
MAX_GRID_POINTS = 200_000
MAX_FRONTIER_VECTORS = 2_000


def _knapsack(weights: list[int], values: list[int], n_max: int) -> tuple[np.ndarray, np.ndarray]:
    """best[n]: max sum of values within n GPUs; pick[n]: the candidate added last (-1: none)."""
    best = np.zeros(n_max + 1, dtype=np.int64)
    pick = np.full(n_max + 1, -1, dtype=np.int64)
    for n in range(1, n_max + 1):
        best[n], pick[n] = best[n - 1], -1
        for i, (w, v) in enumerate(zip(weights, values)):
            if w <= n and best[n - w] + v > best[n]:
                best[n], pick[n] = best[n - w] + v, i
    return best, pick


def _minimal(points: np.ndarray) -> np.ndarray:
    """Rows of ``points`` not dominated (>= in every column, > in one) by another row, sorted."""
    points = np.unique(points, axis=0)
    ge = (points[:, None, :] >= points[None, :, :]).all(axis=2)
    np.fill_diagonal(ge, False)  # unique rows: ge off the diagonal means dominated
    return points[~ge.any(axis=1)]


def _grid_minimal(feasible: np.ndarray) -> np.ndarray:
    """Minimal points of an upward-closed Boolean grid: feasible, and infeasible one GPU less."""
    minimal = feasible.copy()
    for axis in range(feasible.ndim):
        less = np.zeros_like(feasible)
        index = [slice(None)] * feasible.ndim
        index[axis] = slice(1, None)
        shifted = [slice(None)] * feasible.ndim
        shifted[axis] = slice(None, -1)
        less[tuple(index)] = feasible[tuple(shifted)]
        minimal &= ~less
    return np.argwhere(minimal)


_CACHE: dict = {}
#: Frontiers kept in memory (the options and sensitivity rows of a problem share them).
CACHE_ENTRIES = 4096


def cached_frontier(demand, cap_units, gpr, gpu_of, n_types, inventory=None):
    """:func:`period_frontier`, memoized on its inputs (same period, same capacities)."""
    key = (tuple(demand), cap_units.tobytes(), cap_units.shape, tuple(gpr), tuple(gpu_of), n_types,
           None if inventory is None else inventory.tobytes())
    if key not in _CACHE:
        if len(_CACHE) >= CACHE_ENTRIES:
            _CACHE.clear()
        _CACHE[key] = period_frontier(demand, cap_units, gpr, gpu_of, n_types, inventory)
    return _CACHE[key]


def period_frontier(demand: list[int], cap_units: np.ndarray, gpr: list[int], gpu_of: list[int],
                    n_types: int, inventory: np.ndarray | None = None):
    """The minimal GPU vectors of one period, each with its replicas per candidate.

    Parameters
    ----------
    demand : list of int
        Rate to serve per workload, in rate units (rounded up).
    cap_units : array (candidates, workloads)
        Capacity of one replica in rate units (rounded down); each row has at most one > 0.
    gpr, gpu_of : list of int
        GPUs per replica and GPU type index of each candidate.
    n_types : int
    inventory : array, optional
        Most GPUs per type.

    Returns
    -------
    list of (vector, replicas) or None
        ``vector``: GPUs per type (tuple); ``replicas``: {candidate index: replicas}. None
        when the frontier is too large, [] when no fleet serves the period.
    """
    per_workload = []
    for k, need in enumerate(demand):
        if need <= 0:
            per_workload.append([((0,) * n_types, {})])
            continue
        tables, limits = [], []
        for g in range(n_types):
            mine = [j for j in range(len(gpr)) if gpu_of[j] == g and cap_units[j, k] > 0]
            if not mine:
                tables.append((mine, np.zeros(1, np.int64), np.full(1, -1)))
                limits.append(0)
                continue
            n_max = min(math.ceil(need / cap_units[j, k]) * gpr[j] for j in mine)
            if inventory is not None:
                n_max = min(n_max, int(inventory[g]))
            best, pick = _knapsack([gpr[j] for j in mine], [int(cap_units[j, k]) for j in mine], n_max)
            tables.append((mine, best, pick))
            limits.append(n_max)
        if math.prod(n + 1 for n in limits) > MAX_GRID_POINTS:
            return None
        axes = np.meshgrid(*[np.arange(n + 1) for n in limits], indexing="ij")
        served = sum(tables[g][1][axes[g]] for g in range(n_types))
        minimal = _grid_minimal(served >= need)
        if not len(minimal):
            return []
        options = []
        for vec in minimal:
            reps: dict = {}
            for g in range(n_types):
                mine, _, pick = tables[g]
                n = int(vec[g])
                while n > 0:
                    i = int(pick[n])
                    if i < 0:
                        n -= 1
                        continue
                    reps[mine[i]] = reps.get(mine[i], 0) + 1
                    n -= gpr[mine[i]]
            # GPUs actually used by the replicas (the knapsack may leave some idle).
            used = [0] * n_types
            for j, r in reps.items():
                used[gpu_of[j]] += r * gpr[j]
            options.append((tuple(used), reps))
        per_workload.append(options)
    combined = [((0,) * n_types, {})]
    for options in per_workload:
        sums = {}
        for (va, ra), (vb, rb) in itertools.product(combined, options):
            v = tuple(a + b for a, b in zip(va, vb))
            if inventory is not None and any(x > int(c) for x, c in zip(v, inventory)):
                continue
            if v not in sums:
                sums[v] = ra | rb
        if not sums or len(sums) > MAX_FRONTIER_VECTORS * 10:
            return [] if not sums else None
        vectors = _minimal(np.array(list(sums), dtype=np.int64))
        if len(vectors) > MAX_FRONTIER_VECTORS:
            return None
        combined = [(tuple(int(x) for x in v), sums[tuple(int(x) for x in v)]) for v in vectors]
    return combined
