"""Exhaustive reference optimum for tiny instances, sharing no code with the CP-SAT model."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from planner.optimize.instance import DEFAULT_TRAFFIC_UNITS, PlanningInstance

MAX_CANDIDATES = 4
MAX_WORKLOADS = 2
MAX_VECTORS = 200_000
_NEG = -(10**9)


@dataclass(frozen=True)
class BruteOptimum:
    """Cheapest feasible replica vector found by enumeration."""

    usd_per_hour: float
    replicas: dict[str, int]


def brute_force_optimum(instance: PlanningInstance) -> BruteOptimum | None:
    """Minimum cost of a tiny instance by enumerating replica vectors.

    Parameters
    ----------
    instance : PlanningInstance
        At most 4 candidates and 2 workloads, with small rates.

    Returns
    -------
    BruteOptimum or None
        None when no replica vector within the bounds admits a routing (infeasible).

    Raises
    ------
    ValueError
        When the instance is too large to enumerate.

    Notes
    -----
    Replica vectors y with y_j <= ceil(sum_k rate_k / cap_jk) + 1 are sorted by exact
    cost; the first one that passes inventory, budget and distinct-config limits and
    admits a routing is optimal. Routing feasibility is decided exactly on the same
    traffic pieces as the model (``slices_per_workload`` or ``DEFAULT_TRAFFIC_UNITS``):
    a fractional greedy screen (a relaxation), then a max-plus dynamic program over
    candidates of the most pieces of workload 2 that fit given the pieces of workload 1,
    including the N+1 spare.
    """
    ids = sorted(instance.candidates.index)
    wls = list(instance.workloads)
    if len(ids) > MAX_CANDIDATES or len(wls) > MAX_WORKLOADS:
        raise ValueError("brute force is for <= 4 candidates and <= 2 workloads")
    cands = instance.candidates.loc[ids]
    cap = [[_decimal(instance.capacity_per_s.at[i, w]) for w in wls] for i in ids]
    rate = [_decimal(instance.rate_per_s[w]) for w in wls]
    red = [w in instance.redundancy_workloads for w in wls]
    pieces = [instance.slices_per_workload or DEFAULT_TRAFFIC_UNITS] * len(wls)
    bounds = [math.ceil(sum((rate[k] / c for k, c in enumerate(row) if c > 0), Fraction(0))) + 1
              for row in cap]
    if math.prod(b + 1 for b in bounds) > MAX_VECTORS:
        raise ValueError("too many replica vectors to enumerate")
    price = [_decimal(p) for p in cands["usd_per_replica_hour"]]
    den = math.lcm(*(p.denominator for p in price))
    vectors = np.array(list(itertools.product(*(range(b + 1) for b in bounds))), dtype=np.int64)
    cost_units = vectors @ np.array([int(p * den) for p in price], dtype=np.int64)
    order = np.lexsort(tuple(vectors[:, ::-1].T) + (cost_units,))
    for y in map(tuple, vectors[order].tolist()):
        if _within_limits(instance, cands, y, price) and _routable(y, cap, rate, red, pieces):
            cost = sum(p * n for p, n in zip(price, y))
            return BruteOptimum(float(cost), dict(zip(ids, map(int, y))))
    return None


def _decimal(value) -> Fraction:
    """The rational the user wrote (shortest decimal repr of the float)."""
    return Fraction(repr(float(value)))


def _within_limits(instance, cands, y, price) -> bool:
    gpus: dict[str, int] = {}
    for gpu, gpr, n in zip(cands["gpu"], cands["gpus_per_replica"], y):
        gpus[gpu] = gpus.get(gpu, 0) + int(gpr) * n
    if any(gpus.get(g, 0) > limit for g, limit in instance.inventory_gpus.items()):
        return False
    budget = instance.budget_usd_per_hour
    if budget is not None and sum(p * n for p, n in zip(price, y)) > _decimal(budget):
        return False
    k = instance.max_distinct_configs
    return k is None or sum(1 for n in y if n > 0) <= k


def _fractional_ok(y, cap, rate) -> bool:
    """Fractional routing without spares (a relaxation): greedy by comparative advantage."""
    need = [[rate[k] / c if c > 0 else None for k, c in enumerate(row)] for row in cap]
    if len(rate) == 1:
        return sum((n / r[0] for n, r in zip(y, need) if r[0] is not None), Fraction(0)) >= 1
    order = sorted((j for j in range(len(y)) if need[j][0] is not None),
                   key=lambda j: Fraction(0) if need[j][1] is None else need[j][0] / need[j][1])
    left = [Fraction(n) for n in y]
    todo = Fraction(1)
    for j in order:
        share = min(todo, left[j] / need[j][0])
        todo -= share
        left[j] -= share * need[j][0]
    served2 = sum((left[j] / need[j][1] for j in range(len(y)) if need[j][1] is not None), Fraction(0))
    return todo == 0 and served2 >= 1


def _routable(y, cap, rate, red, pieces) -> bool:
    if not _fractional_ok(y, cap, rate):
        return False
    q1 = pieces[0]
    best = np.zeros(1, dtype=np.int64)      # most workload-2 pieces per workload-1 pieces so far
    for j, n in enumerate(y):
        best = _maxplus(best, _most_second(n, cap[j], rate, red, pieces), q1)
    if len(rate) == 1:
        return len(best) > q1 and best[q1] >= 0
    return len(best) > q1 and best[q1] >= pieces[1]


def _most_second(n, cap_row, rate, red, pieces) -> np.ndarray:
    """For x1 = 0..Q1 pieces of workload 1 on this deployment, the most workload-2 pieces."""
    q1 = pieces[0]
    load = [rate[k] / (pieces[k] * c) if c > 0 else None for k, c in enumerate(cap_row)]
    den = math.lcm(*(a.denominator for a in load if a is not None)) if any(load) else 1
    units = [None if a is None else int(a * den) for a in load]
    x1 = np.arange(q1 + 1, dtype=np.int64) if units[0] is not None else np.zeros(1, np.int64)
    used = x1 * (units[0] or 0)
    spare1 = np.where((x1 > 0) & red[0], den, 0)
    out = np.where(n * den - used - spare1 >= 0, 0, _NEG)         # x2 = 0
    if len(units) == 2 and units[1] is not None:
        spare = np.where(((x1 > 0) & red[0]) | red[1], den, 0)
        room = n * den - used - spare
        most = np.minimum(np.where(room >= 0, room // units[1], -1), pieces[1])
        out = np.where(most >= 1, np.maximum(out, most), out)
    return out


def _maxplus(best: np.ndarray, f: np.ndarray, limit: int) -> np.ndarray:
    size = min(len(best) + len(f) - 1, limit + 1)
    out = np.full(size, _NEG, dtype=np.int64)
    for t in np.flatnonzero(best > _NEG // 2):
        if t >= size:
            break
        span = min(len(f), size - t)
        np.maximum(out[t:t + span], best[t] + f[:span], out=out[t:t + span])
    out[out < _NEG // 2] = _NEG
    return out
