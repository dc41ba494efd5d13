"""Capacities at the Pareto fronts' targets: the candidate pool, its occupancy curves, bounds,
the survivors of dominance and their exact capacities (:mod:`planner.pareto` solves the points).

For a target t on p95 TPOT (or TTFT), every workload's SLO becomes min(SLO, t) and the
capacities at SLO of the candidates are recomputed exactly (the same bisection as the
search, :func:`planner.serving.queueing.capacity_at_slo`). The fronts consider a pool of
candidates, per configuration the one with the largest feasible max batch
(:func:`front_pool`: more slots never lower a capacity). Occupancy curves of the pool are
computed once per sweep; at each target they bound every capacity from below and above
(:func:`capacity_bounds`); a candidate that a strong candidate (exact capacity) beats even
on those bounds is dropped (:func:`survivor_sets`), and only the survivors' capacities
are bisected. Where a candidate's own p95 at its SLO capacity already meets the target its
capacity is the search's (the bisection takes the same steps).

Speed (issue 19): the exact capacities of every (front, target) of a sweep are bisected
together, one vectorized call per workload and stage (strong sets, then survivors) on the
configuration arrays of the curves, instead of one call per point; the bisection is
elementwise, so every capacity is the one a call per point gives.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner import dimensions
from planner.configs import distinct_configs
from planner.margins import Margins
from planner.optimize.prune import candidate_blocks, candidate_roles
from planner.parameters import ProblemParams
from planner.problem import Problem
from planner.search import workload_arrays, workload_capacity
from planner.serving.queueing import TrafficArrays, capacities_at_slos, occupancy_curve

#: Points of the occupancy curves the capacity bounds are read from (quadratic grid).
FRONT_CURVE_POINTS = 16
#: Block of rows per dominance test (memory: block x strong rows x workloads booleans).
DOMINANCE_BLOCK = 512
#: Candidates per workload (best lower bound of capacity per price) that may dominate others.
STRONG_PER_WORKLOAD = 32


def front_pool(feasible: pd.DataFrame) -> np.ndarray:
    """Positions of the candidates the fronts consider: per configuration (model, GPU, TP,
    PP, formats), the feasible one with the largest max batch that serves some workload.

    A larger max batch only adds slots at the same price: at every occupancy its p95s are
    at most those of a smaller one (the decode step does not depend on the slot count), so
    its capacity at any target is at least as large, up to the bisection's resolution.
    """
    caps = feasible[[c for c in feasible.columns if c.startswith("capacity_per_s[")]].to_numpy(float)
    serving = np.flatnonzero((caps > 0).any(axis=1))
    keys = [n for n in dimensions.NAMES if n != "max_batch"]
    codes = dimensions.CandidateTable(feasible).take(serving).factorize(keys)[0]
    batch = feasible["max_batch"].to_numpy()[serving]
    order = np.lexsort((serving, -batch, codes))
    first = np.ones(len(order), dtype=bool)
    first[1:] = codes[order][1:] != codes[order][:-1]
    return np.sort(serving[order[first]])


class Curves:
    """Occupancy curves of the front pool's candidates that serve each workload at its SLO.

    ``pool``: the rows of ``feasible`` considered (:func:`front_pool`); ``rows[w]``:
    positions into ``pool`` of the candidates of workload w with capacity > 0 at the
    problem's SLO (a tighter target can only lower a capacity); ``arrays[w]``,
    ``params[w]``, ``traffic[w]``: their serving-model inputs, which the exact capacities
    reuse; ``distinct[w]``: ``(curve, inverse)``, the curve of each distinct configuration
    and, per row, the index of its configuration (``curves[w]`` is ``curve[inverse]``).
    """

    def __init__(self, problem: Problem, feasible: pd.DataFrame, params: ProblemParams):
        self.problem, self.feasible, self.serving_params = problem, feasible, params
        self.pool = front_pool(feasible)
        self.frame = feasible.iloc[self.pool]
        self.names = [w.name for w in problem.workloads]
        self.rows, self.curves, self.arrays, self.params, self.traffic = {}, {}, {}, {}, {}
        self.distinct = {}
        self.used, self.optimum = (), None
        self.gpu_types, self.blocks = self.frame["gpu"].to_numpy(), candidate_blocks(self.frame)
        # integer codes of both, for the dominance test's pairwise comparisons
        self.gpu_codes, self.block_codes = pd.factorize(self.gpu_types)[0], pd.factorize(self.blocks)[0]
        self.price = self.frame["usd_per_replica_hour"].to_numpy(float)
        self.gpus = self.frame["gpus"].to_numpy(float)
        both = candidate_roles(self.frame) == "both"  # role rows: no curve (capacity_bounds)
        for w in problem.workloads:
            cap = self.frame[f"capacity_per_s[{w.name}]"].to_numpy(float)
            pos = np.flatnonzero((self.frame["model"].to_numpy() == w.model) & (cap > 0) & both)
            if not len(pos):
                continue
            rows = self.frame.iloc[pos]
            self.rows[w.name] = pos
            self.arrays[w.name], self.params[w.name] = workload_arrays(problem, rows, w), params.of(rows)
            self.traffic[w.name] = TrafficArrays.from_distributions(w.prompt, w.output, w.prefix_cache_hit_fraction)
            # once per distinct configuration (twins have the same curve), then every row's
            first, inverse = distinct_configs(self.arrays[w.name], self.params[w.name])
            curve = occupancy_curve(self.arrays[w.name].take(first), self.params[w.name].take(first),
                                    self.traffic[w.name], FRONT_CURVE_POINTS)
            self.curves[w.name] = {key: value[inverse] for key, value in curve.items()}
            self.distinct[w.name] = (curve, inverse)

    def fastest(self, metric: str) -> float:
        """The smallest target at which every workload still has some candidate (trickle load)."""
        worst = 0.0
        for curve in self.curves.values():
            worst = max(worst, float(np.nanmin(curve[metric][:, 0])))
        return worst


def front_slos(workload, metric: str, target_s):
    """The workload's (TTFT, TPOT) SLOs with ``metric`` tightened to ``target_s`` (a number or an array)."""
    ttft, tpot = workload.slo.ttft_p95_s, workload.slo.tpot_p95_s
    if np.ndim(target_s):
        return ((ttft, np.minimum(tpot, target_s)) if metric == "tpot_p95_s"
                else (np.minimum(ttft, target_s), tpot))
    if metric == "tpot_p95_s":
        return ttft, min(tpot, target_s)
    return min(ttft, target_s), tpot


def capacity_bounds(curves: Curves, metric: str, target_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds (pool rows x workloads) of the pool's exact capacities.

    Where a curve's p95s increase with the occupancy n (docs/serving-model.md 9.2) its feasible grid
    points are a prefix; the bisection's n* lies within one bisection step below the
    first crossing, so above the grid point before the last feasible one and below the
    first infeasible one, and rates increase with n. Elsewhere the bounds are 0 and the
    capacity at the SLO. Candidates whose p95 at the SLO capacity meets the target keep
    that capacity exactly.
    """
    frame = curves.frame
    lo = np.zeros((len(frame), len(curves.names)))
    hi = np.zeros_like(lo)
    roles = candidate_roles(frame) != "both"  # their capacity at the SLO bounds a tighter target's
    for k, w in enumerate(curves.problem.workloads):
        hi[roles, k] = frame[f"capacity_per_s[{w.name}]"].to_numpy(float)[roles]
        if w.name not in curves.rows:
            continue
        pos, curve = curves.rows[w.name], curves.curves[w.name]
        exact = frame[f"capacity_per_s[{w.name}]"].to_numpy(float)[pos]
        own = frame[f"{metric}[{w.name}]"].to_numpy(float)[pos]
        # central p95s against the SLOs the confidence margin leaves (planner.margins)
        ttft, tpot = Margins.of(curves.problem).slos(*front_slos(w, metric, target_s))
        p_ttft, p_tpot, rate_raw = curve["ttft_p95_s"], curve["tpot_p95_s"], curve["rate_per_s"]
        with np.errstate(invalid="ignore"):
            monotone = ((np.diff(p_ttft, axis=1) >= 0) & (np.diff(p_tpot, axis=1) >= 0)
                        & ~(np.diff(rate_raw, axis=1) < 0)).all(axis=1)
        good = (p_ttft <= ttft) & (p_tpot <= tpot)
        points = good.shape[1]
        last = np.where(good.any(axis=1), points - 1 - np.argmax(good[:, ::-1], axis=1), -1)
        rows = np.arange(len(pos))
        rate = np.nan_to_num(rate_raw, nan=0.0)
        below = np.where(last >= 1, rate[rows, np.clip(last - 1, 0, None)], 0.0)
        above_rate = rate_raw[rows, np.clip(last + 1, 0, points - 1)]
        above = np.where((last < points - 1) & np.isfinite(above_rate), above_rate, exact)
        above = np.where(last < 0, 0.0, np.minimum(above, exact))
        unchanged = own <= (tpot if metric == "tpot_p95_s" else ttft)
        lo[pos, k] = np.where(unchanged, exact, np.where(monotone, np.minimum(below, above), 0.0))
        hi[pos, k] = np.where(unchanged, exact, np.where(monotone, above, exact))
    return lo, hi


def _strong(frame: pd.DataFrame, lo: np.ndarray, hi: np.ndarray, gpu: str | None) -> tuple[np.ndarray, np.ndarray]:
    """The live pool positions of a front (all GPU types, or one) and, as indices into
    them, its strong set (per workload the best lower bounds per price and overall)."""
    live = (hi > 0).any(axis=1)
    if gpu is not None:
        live &= frame["gpu"].to_numpy() == gpu
    idx = np.flatnonzero(live)
    if not len(idx):
        return idx, idx
    price = frame["usd_per_replica_hour"].to_numpy(float)[idx]
    strong = set()
    for k in range(lo.shape[1]):
        for value in (lo[idx, k] / price, lo[idx, k]):
            if (value > 0).any():
                strong.update(_largest(value, STRONG_PER_WORKLOAD).tolist())
    return idx, np.array(sorted(strong), dtype=int)


def _largest(value: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest values, ties to the earlier position: the first k of
    ``np.argsort(-value, kind="stable")``, by a partition instead of a full sort."""
    if len(value) <= k or np.isnan(value).any():
        return np.argsort(-value, kind="stable")[:k]
    threshold = -np.partition(-value, k - 1)[k - 1]          # the k-th largest value
    above = np.flatnonzero(value > threshold)
    at = np.flatnonzero(value == threshold)[:k - len(above)]
    chosen = np.concatenate([above, at])
    return chosen[np.argsort(-value[chosen], kind="stable")]


def _undominated(curves: Curves, hi: np.ndarray, limited: set, gpu: str | None, idx: np.ndarray,
                 s: np.ndarray, ls: np.ndarray) -> np.ndarray:
    """The positions ``idx`` that no strong ``idx[s]`` (exact capacities ``ls``) beats for sure.

    Rows are compared by the workloads they serve (upper bound > 0): only a strong row with
    a positive exact capacity on each of them can beat one (capacities are >= 0), and only
    on those workloads can it fall short.
    """
    price, gpus = curves.price[idx], curves.gpus[idx]
    t, role = curves.gpu_codes[idx], curves.block_codes[idx]
    free = (~np.isin(curves.gpu_types[idx][s], list(limited)) if gpu is None
            else np.zeros(len(s), dtype=bool))
    dropped = np.zeros(len(idx), dtype=bool)
    serves = ~(hi[idx] <= 0)   # NaN bounds count as served: nothing beats them
    patterns, group = _patterns(serves)
    for g, pattern in enumerate(patterns):
        cols = np.flatnonzero(pattern)
        mine = np.flatnonzero(group.ravel() == g)
        k_s = np.flatnonzero((ls[:, cols] > 0).all(axis=1) & ~np.isnan(ls).any(axis=1))
        if not len(cols) or not len(k_s):
            continue
        ks, free_s, cap_s = s[k_s], free[k_s], ls[k_s][:, cols]
        price_s, t_s, gpus_s, role_s = price[ks][None, :], t[ks][None, :], gpus[ks][None, :], role[ks][None, :]
        for start in range(0, len(mine), DOMINANCE_BLOCK):
            rows = mine[start:start + DOMINANCE_BLOCK]
            beats = price_s <= price[rows, None]
            beats &= free_s[None, :] | ((t_s == t[rows, None]) & (gpus_s <= gpus[rows, None]))
            beats &= role_s == role[rows, None]  # never a role or pool for another
            block = hi[idx[rows]][:, cols]
            for k in range(len(cols)):   # exact capacities of the strong >= upper bounds, workload by workload
                beats &= cap_s[None, :, k] >= block[:, None, k]
            dropped[rows] = beats.any(axis=1)
    dropped[s] = False
    return idx[~dropped]


def _patterns(serves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(serves, axis=0, return_inverse=True)`` of a boolean matrix: its distinct
    rows (sorted) and each row's index into them, from one integer per row (its bits, the
    first column the most significant: the same order) where the columns fit in 62 bits."""
    if serves.shape[1] > 62:
        return np.unique(serves, axis=0, return_inverse=True)
    weights = np.left_shift(1, np.arange(serves.shape[1] - 1, -1, -1, dtype=np.int64))
    codes, group = np.unique(serves.astype(np.int64) @ weights, return_inverse=True)
    return (codes[:, None] & weights[None, :]) != 0, group


def survivor_sets(curves: Curves, bounds: list, limited: set, exact: "Exact", keys: list) -> dict:
    """``{(gpu, i): capacities}`` of the pool positions a minimum-cost plan may need at
    target ``i`` of front ``gpu`` (None: all GPU types), for every key of ``keys``.

    ``bounds[i]``: :func:`capacity_bounds` at target i. A strong set (for each workload
    the ``STRONG_PER_WORKLOAD`` best lower bounds, and as many best lower bounds per
    price), whose exact capacities are computed, is always kept; another candidate j is
    dropped when a strong i beats it for sure: exact capacities of i >= upper bounds of j
    on every workload, price_i <= price_j, and either i's GPU type has no inventory limit
    (mixed front) or i has the same type and at most j's GPUs per replica. Replacing j's
    replicas by as many of i's then keeps every constraint at no higher cost, so no
    optimum needs j. The strong sets of all keys are bisected together, then the survivors.
    """
    frame = curves.frame
    strong = {key: _strong(frame, *bounds[key[1]], key[0]) for key in keys}
    exact.fill([(i, idx[s]) for (_, i), (idx, s) in strong.items()])
    kept = {}
    for (gpu, i), (idx, s) in strong.items():
        kept[gpu, i] = idx if not len(idx) else _undominated(curves, bounds[i][1], limited, gpu, idx, s,
                                                             exact.values[i, idx[s]])
    exact.fill([(i, pos) for (_, i), pos in kept.items()])
    return {key: exact.capacities(key[1], pos) for key, pos in kept.items()}


class Exact:
    """Exact capacities (pool rows x workloads) at each target of a sweep, each computed once."""

    def __init__(self, curves: Curves, metric: str, targets_s):
        self.curves, self.metric = curves, metric
        self.targets_s = np.asarray(targets_s, dtype=float)
        self.values = np.full((len(self.targets_s), len(curves.frame), len(curves.names)), np.nan)

    def capacities(self, i: int, positions: np.ndarray) -> pd.DataFrame:
        """The exact capacities at target ``i`` of the pool rows ``positions``."""
        self.fill([(i, positions)])
        frame = self.curves.frame
        return pd.DataFrame(self.values[i, positions], index=frame.index[positions], columns=self.curves.names)

    def fill(self, requests) -> None:
        """Compute the missing capacities of ``(target index, positions)`` requests in one batch."""
        if not requests:
            return
        at = np.concatenate([np.full(len(positions), i, dtype=int) for i, positions in requests])
        pos = np.concatenate([np.asarray(positions, dtype=int) for _, positions in requests])
        missing = np.isnan(self.values[at, pos, 0])
        at, pos = np.divmod(np.unique(at[missing] * len(self.curves.frame) + pos[missing]), len(self.curves.frame))
        if len(at):
            self.values[at, pos] = self._compute(at, pos)

    def _compute(self, at: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Capacities at min(SLO, target) (the search's bisection where the target binds)."""
        problem, frame = self.curves.problem, self.curves.frame
        rows = frame.iloc[positions]
        both = candidate_roles(rows) == "both"
        out = np.zeros((len(positions), len(self.curves.names)))
        margins = Margins.of(problem)
        for k, w in enumerate(problem.workloads):
            if w.name not in self.curves.rows:
                continue
            exact = rows[f"capacity_per_s[{w.name}]"].to_numpy(float)
            own = rows[f"{self.metric}[{w.name}]"].to_numpy(float)
            ttft, tpot = (np.broadcast_to(v, len(at)) for v in front_slos(w, self.metric, self.targets_s[at]))
            held_ttft, held_tpot = margins.slos(ttft, tpot)
            bind = (exact > 0) & ~(own <= (held_tpot if self.metric == "tpot_p95_s" else held_ttft))
            out[:, k] = exact
            batch = np.flatnonzero(bind & both)
            if len(batch):
                out[batch, k] = self._bisect(w, positions[batch], ttft[batch], tpot[batch], margins)
            for i in np.unique(at[bind & ~both]):   # prefill / decode rows: by role, per target
                mine = np.flatnonzero(bind & ~both & (at == i))
                sub = rows.iloc[mine]
                s_ttft, s_tpot = front_slos(w, self.metric, float(self.targets_s[i]))
                got = workload_capacity(problem, sub, w, self.curves.serving_params.of(sub),
                                        tpot_cap_s=s_tpot, ttft_cap_s=s_ttft, margins=margins)
                out[mine, k] = got["max_rate_per_s"]
        return out

    def _bisect(self, w, positions: np.ndarray, ttft: np.ndarray, tpot: np.ndarray, margins: Margins) -> np.ndarray:
        """:func:`planner.search.workload_capacity` of aggregated pool rows, one SLO pair per
        row: the curves' arrays of the rows, planned capacities under ``margins``."""
        ix = np.searchsorted(self.curves.rows[w.name], positions)
        arrays, params = self.curves.arrays[w.name].take(ix), self.curves.params[w.name].take(ix)
        traffic = self.curves.traffic[w.name]
        # once per distinct (configuration, SLO pair): twins of a configuration and the
        # same row at targets that give it the same SLOs have the same capacity
        ttft, tpot = (np.broadcast_to(np.asarray(v, dtype=float), ix.shape) for v in (ttft, tpot))
        first, inverse = distinct_configs(arrays, params, ttft, tpot)
        arrays, params, ttft, tpot = arrays.take(first), params.take(first), ttft[first], tpot[first]

        # the central and the margined SLOs bisected in one pass, as the search does
        pairs = [(ttft, tpot)] if margins.factor("ttft") == margins.factor("tpot") == 1.0 else [
            (ttft, tpot), margins.slos(ttft, tpot)]
        results = capacities_at_slos(arrays, params, traffic, pairs)
        return margins.planned_capacity(lambda *_: results[-1]["max_rate_per_s"], ttft, tpot,
                                        central=results[0]["max_rate_per_s"])[inverse]
