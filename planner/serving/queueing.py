"""Capacity at SLO and the state at a rate of one continuous-batching replica: bisections on
its mean decode occupancy n over :mod:`planner.serving.replica_state` (the state at an
occupancy, docs/serving-model.md section 9, whose public names this module re-exports).

Capacity at SLO is lambda(n*) for the largest n* <= min(max batch, KV capacity) meeting
both p95 SLOs (bisection on n; both p95s increase with n).
"""

from __future__ import annotations

import numpy as np

from planner.serving.arrays import ConfigArrays
from planner.serving.parallel import map_in_threads, row_ranges, thread_count
from planner.serving.params import ServingParams
from planner.serving.replica_state import (MAX_BRANCHING_RATIO, QUEUE_CORRELATION, TrafficArrays,  # noqa: F401
                                           _n_max, _state_parts, _tpot_p95, p95_floors,         # (re-exported)
                                           param_rows, state_at_occupancy, step_model, tpot_bracket)
from planner.serving.roofline import StepModel
from planner.serving.tails import (P95, erlang_c_halfin_whitt, exponential_tail_p95,  # noqa: F401
                                   exponential_tail_quantile, mixture_p95_bracket,     # (re-exported)
                                   mixture_p95_offset)

#: Bisection steps on the occupancy n (precision n_max / 2^steps).
CAPACITY_BISECTION_STEPS = 13


def capacity_at_slo(c: ConfigArrays, p: ServingParams, t: TrafficArrays, slo_ttft_p95_s,
                    slo_tpot_p95_s, steps: int = CAPACITY_BISECTION_STEPS,
                    model: StepModel | None = None) -> dict:
    """Largest Poisson rate [1/s] one replica carries with both p95s within the SLOs.

    Returns arrays: max_rate_per_s (0 where even a trickle misses an SLO), the state at
    that rate (ttft_p95_s, tpot_p95_s, occupancy), and ``slo_violated_at_low_load``
    ("ttft", "tpot" or "" per row: which SLO a trickle of load already misses).
    ``model``: :func:`step_model` of ``c``, ``p``, ``t`` when the caller has it.
    """
    return capacities_at_slos(c, p, t, [(slo_ttft_p95_s, slo_tpot_p95_s)], steps, model)[0]


#: Share of the rows at which a second SLO pair's state (its occupancies differ from the
#: first pair's there) is computed on every row rather than on those rows (taking the
#: rows' step model and merging costs more than the few rows more; the numbers are the same).
FULL_STATE_SHARE = 0.9
#: Rows per thread below which the capacity bisection does not share its rows between
#: threads (:mod:`planner.serving.parallel`): shorter numpy calls leave the GIL-held
#: Python between them too large a share.
THREAD_MIN_ROWS = 4096


#: Share of the rows at least that no occupancy can serve (:func:`_never_met`) for
#: :func:`capacities_at_slos` to set them apart (a take of the arrays costs about a state).
SETTLED_MIN_SHARE = 0.05


def _never_met(c: ConfigArrays, p: ServingParams, t: TrafficArrays, steps: StepModel, n_max, slos) -> list:
    """Per SLO pair, the rows where no occupancy in [0, n_max] meets it: a p95 floor of
    :func:`p95_floors` above its SLO (the bisection's decisions there are all "no")."""
    ttft_floor, tpot_floor = p95_floors(c, p, t, steps, n_max)
    return [(ttft_floor > a) | (tpot_floor > b) for a, b in slos]


def capacities_at_slos(c: ConfigArrays, p: ServingParams, t: TrafficArrays, slos, steps: int = CAPACITY_BISECTION_STEPS,
                       model: StepModel | None = None) -> list[dict]:
    """:func:`capacity_at_slo` of each ``(slo_ttft_p95_s, slo_tpot_p95_s)`` pair of ``slos``.

    Each pair has its own bisection on n (the same steps, the same numbers as one call per
    pair); a state that several pairs need at the same occupancy of a row (the top and the
    trickle, the first steps before the pairs' decisions part) is computed once, and the
    others on the rows where they differ only (speed: the search's central and margined SLOs).
    Rows (one-dimensional, scalar SLOs and traffic) are bisected in contiguous ranges by
    :func:`planner.serving.parallel.thread_count` threads: every row's numbers are its own,
    whichever range holds it.
    """
    n_max = _n_max(c, p)
    row_local = n_max.ndim == 1 and all(np.ndim(x) == 0 for pair in slos for x in pair) and _scalar_traffic(t)
    if not row_local:
        return _capacities_at_slos(c, p, t, slos, steps, model, n_max)
    model = model or step_model(c, p, t)
    never = _never_met(c, p, t, model, n_max, slos)
    settled = np.logical_and.reduce(never)
    if not (steps and settled.sum() >= max(SETTLED_MIN_SHARE * settled.size, 1)):
        return _in_threads(c, p, t, slos, steps, model, n_max, never)
    # Rows no occupancy serves for any pair: their top, n = 0 and trickle states only.
    out = []
    for rows, part_steps in ((np.flatnonzero(~settled), steps), (np.flatnonzero(settled), 0)):
        if rows.size:
            out.append((rows, _in_threads(c.take(rows), p.take(rows), t, slos, part_steps, model.take(rows),
                                          n_max[rows], [m[rows] for m in never])))
    return [{key: _scattered([(rows, r[j][key]) for rows, r in out], n_max.size) for key in out[0][1][j]}
            for j in range(len(slos))]


def _scattered(parts: list, size: int) -> np.ndarray:
    """One array of ``size`` rows from ``(rows, values)`` parts that cover them."""
    out = np.empty(size, dtype=np.result_type(*[values.dtype for _, values in parts]))
    for rows, values in parts:
        out[rows] = values
    return out


def _in_threads(c: ConfigArrays, p: ServingParams, t: TrafficArrays, slos, steps: int, model: StepModel,
                n_max: np.ndarray, never: list) -> list[dict]:
    """:func:`_capacities_at_slos` of rows that are their own, in contiguous ranges by threads."""
    parts = row_ranges(n_max.size, thread_count(), THREAD_MIN_ROWS)
    if len(parts) < 2:
        return _capacities_at_slos(c, p, t, slos, steps, model, n_max, never)
    results = map_in_threads(lambda rows: _capacities_at_slos(
        c.take(rows), p.take(rows), t, slos, steps, model.take(rows), n_max[rows], [m[rows] for m in never]),
        parts, len(parts))
    return [{key: np.concatenate([r[j][key] for r in results]) for key in results[0][j]}
            for j in range(len(slos))]


def _scalar_traffic(t: TrafficArrays) -> bool:
    """Whether every length statistic of ``t`` is a scalar (one traffic class for all rows)."""
    return all(np.ndim(x) == 0 for v in vars(t).values() for x in (v if isinstance(v, tuple) else (v,)))


def _capacities_at_slos(c: ConfigArrays, p: ServingParams, t: TrafficArrays, slos, steps: int,
                        model: StepModel | None, n_max: np.ndarray, never: list | None = None) -> list[dict]:
    """:func:`capacities_at_slos` in this thread (``n_max``: ``_n_max(c, p)``; ``never``: per
    pair, rows where no occupancy meets it (:func:`_never_met`): the pairs after the first
    take no state there, their decisions all "no")."""
    steps_model = model or step_model(c, p, t)
    shapes = [np.broadcast_shapes(n_max.shape, np.shape(a), np.shape(b), np.shape(t.prompt_mean_tokens))
              for a, b in slos]
    shared = n_max.ndim == 1 and all(s == n_max.shape for s in shapes) and _scalar_traffic(t)

    # The trickle's states take their TPOT p95 only where the loosest pair may be met.
    scalar_slos = all(np.ndim(x) == 0 for pair in slos for x in pair)
    loosest = (max(a for a, _ in slos), max(b for _, b in slos)) if shared and scalar_slos else None

    chunk, overhead = p.prefill_chunk_tokens, p.request_overhead_s
    # A bisection's states take their TTFT p95 only where the loosest TPOT SLO may be met
    # (_state_parts; no pair's decision reads it elsewhere): the pairs share them.
    bound = None if loosest is None else loosest[1]

    def state(n, within=None, parts=True):
        if parts:   # a bisection's state: its decisions need no TPOT p95 (see _meets)
            return _state_parts(steps_model, t, n, n_max, chunk, overhead, bound)
        return state_at_occupancy(c, p, t, n, steps_model, n_max, within)

    def rows_state(rows, n, bisection=True):      # the parts of the state of rows ``rows`` only
        return _state_parts(steps_model.take(rows), t, n, n_max[rows], param_rows(chunk, rows),
                            param_rows(overhead, rows), bound if bisection else None)

    def states(ns, within=None, parts=True):
        if not shared:
            return [state(n, within, parts) for n in ns]
        out = [state(ns[0], within, parts)]
        for j, n in enumerate(ns[1:], 1):
            differ = np.flatnonzero(~(n == ns[0]) if never is None else ~(n == ns[0]) & ~never[j])
            if not differ.size:
                out.append(out[0])
            elif differ.size >= FULL_STATE_SHARE * n.size:   # the take and merge would cost more
                out.append(state(n, within, parts))
            else:
                sub = (rows_state(differ, n[differ]) if parts else
                       state_at_occupancy(c.take(differ), p.take(differ), t, n[differ],
                                          steps_model.take(differ), n_max[differ], within))
                out.append(_merged(out[0], sub, differ))
        return out

    def ok(s, slo, j):
        met = _meets(s, slo, t.output_strata_inv)
        return met if never is None else met & ~never[j]

    los = [np.zeros(shape) for shape in shapes]
    his = [np.broadcast_to(n_max, shape).astype(float) for shape in shapes]
    hopeless = never is not None and all(m.all() for m in never)    # (no pair met anywhere: no top state)
    tops = None if hopeless else states(his)
    top_ok = ([np.zeros(shape, dtype=bool) for shape in shapes] if hopeless
              else [ok(s, slo, j) for j, (s, slo) in enumerate(zip(tops, slos))])
    # Speed (same numbers): with rows of their own, the state at each row's n* is kept as
    # the bisection passes it (the last good mid; the top where it is good) instead of
    # computed again; only rows that no mid satisfied get their state at n* = 0; the TPOT
    # p95 of the kept states once at the end.
    kept = [{key: np.zeros(shape) for key in _KEPT_KEYS} for shape in shapes] if shared else None
    ever = [np.zeros(shape, dtype=bool) for shape in shapes]
    for _ in range(steps):
        mids = [0.5 * (lo + hi) for lo, hi in zip(los, his)]
        at_mids = states(mids)
        good = [ok(s, slo, j) for j, (s, slo) in enumerate(zip(at_mids, slos))]
        los = [np.where(g, mid, lo) for g, mid, lo in zip(good, mids, los)]
        his = [np.where(g, hi, mid) for g, mid, hi in zip(good, mids, his)]
        if kept is not None:
            for keep, s, g, e in zip(kept, at_mids, good, ever):
                for key in _KEPT_KEYS:
                    np.copyto(keep[key], s[key], where=g)
                e |= g
    n_stars = [np.where(top, np.broadcast_to(n_max, shape), lo) for top, shape, lo in zip(top_ok, shapes, los)]
    finals = states(n_stars, parts=False) if kept is None else _finals(
        kept, tops, top_ok, ever, lambda rows: rows_state(rows, np.zeros(rows.size), bisection=False),
        t.output_strata_inv, n_stars)
    trickles = states([np.full(shape, 1e-6) for shape in shapes], loosest, parts=False)   # which SLO fails at a trickle
    out = []
    for (ttft_slo, tpot_slo), n_star, final, trickle in zip(slos, n_stars, finals, trickles):
        rate = np.where(n_star > 0, final["rate_per_s"], 0.0)
        first = np.where(trickle["ttft_p95_s"] > ttft_slo, "ttft",
                         np.where(trickle["tpot_p95_s"] > tpot_slo, "tpot", ""))
        out.append({"max_rate_per_s": np.nan_to_num(rate), "ttft_p95_s": final["ttft_p95_s"],
                    "tpot_p95_s": final["tpot_p95_s"], "occupancy": n_star, "slo_violated_at_low_load": first})
    return out


def _merged(state: dict, sub: dict, rows: np.ndarray) -> dict:
    """A copy of the state ``state`` with ``sub`` (the same entries, of rows ``rows``) at
    those rows (the TPOT bracket's three arrays each)."""
    out = {}
    for key, value in state.items():
        if key == "_tpot_bracket":
            out[key] = tuple(v.copy() for v in value)
            for whole, part in zip(out[key], sub[key]):
                whole[rows] = part
        else:
            out[key] = value.copy()
            out[key][rows] = sub[key]
    return out


def _meets(s: dict, slo, inverse_lives) -> np.ndarray:
    """Whether the :func:`_state_parts` state ``s`` meets ``slo = (ttft_p95_s, tpot_p95_s)``:
    stable, TTFT p95 and TPOT p95 within them, the decisions of :func:`state_at_occupancy`'s
    p95s, bit for bit. The TPOT p95, tau + the mixture's offset, is decided by the bracket
    the offset lies in (:func:`planner.serving.tails.mixture_p95_bracket`: within the SLO
    at its top, above it at its bottom); the mixture only on the rows it leaves open."""
    if "_tpot_bracket" not in s:    # (the same state serves the pairs at the same occupancy)
        s["_tpot_bracket"] = tpot_bracket(s, inverse_lives)
    low, high, sure = s["_tpot_bracket"]
    ttft_slo, tpot_slo = slo
    candidate = (s["ttft_p95_s"] <= ttft_slo) & s["stable"]
    met = candidate & sure & (high <= tpot_slo)
    open_rows = candidate & ~met & ~(low > tpot_slo)
    if open_rows.any():
        with np.errstate(divide="ignore", invalid="ignore"):
            exact = _tpot_p95(s["tpot_mean_s"], s["tpot_common"], s["tpot_per_inv"], inverse_lives, open_rows)
        met = met | (open_rows & (exact <= tpot_slo))
    return met


#: The state entries :func:`capacities_at_slos` keeps during its bisection (at n*: the
#: reported rate, TTFT p95 and, from the last three, the TPOT p95).
_KEPT_KEYS = ("rate_per_s", "ttft_p95_s", "stable", "tpot_mean_s", "tpot_common", "tpot_per_inv")


def _finals(kept: list, tops: list, top_ok: list, ever: list, at_zero, inverse_lives, n_stars: list) -> list[dict]:
    """Per SLO pair, the kept states at n*: the top's where it is good, the last good mid's
    where one was, elsewhere ``at_zero(rows)`` (the state at n = 0 of those rows, computed
    once for every pair); with their TPOT p95 (as :func:`state_at_occupancy`'s), the first
    pair's where a pair's n* is the first's (the same state)."""
    zero_rows = [~(top | e) for top, e in zip(top_ok, ever)]
    rows = np.flatnonzero(np.logical_or.reduce(zero_rows))
    zero = at_zero(rows) if rows.size else None
    for j, (keep, top, ok_top, need) in enumerate(zip(kept, tops or [None] * len(kept), top_ok, zero_rows)):
        for key in _KEPT_KEYS:
            if top is not None:     # (None: no top state, none good)
                np.copyto(keep[key], top[key], where=ok_top)
            if zero is not None:
                keep[key][rows] = np.where(need[rows], zero[key], keep[key][rows])
        own = None if j == 0 else ~(n_stars[j] == n_stars[0])
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot_p95 = _tpot_p95(keep["tpot_mean_s"], keep["tpot_common"], keep["tpot_per_inv"], inverse_lives, own)
        keep["tpot_p95_s"] = np.where(keep["stable"], tpot_p95, np.inf)
        if own is not None:
            np.copyto(keep["tpot_p95_s"], kept[0]["tpot_p95_s"], where=~own)
    return kept


#: Most bisection levels :func:`state_at_rate` decides per state call (2^levels - 1
#: occupancies per row), and most points (rows x occupancies) of one such call.
RATE_TREE_LEVELS = 5
RATE_TREE_POINTS = 4096


def state_at_rate(c: ConfigArrays, p: ServingParams, t: TrafficArrays, rate_per_s,
                  steps: int = 40) -> dict:
    """The replica's state at a given Poisson rate (bisection on n); inf p95s if overloaded.

    Speed (the same numbers): a call decides several steps of the bisection at once, at
    every occupancy the next ``levels`` steps may visit (:func:`_bisect_levels`)."""
    rate = np.asarray(rate_per_s, dtype=float)
    n_max = _n_max(c, p)
    shape = np.broadcast_shapes(n_max.shape, rate.shape)
    lo, hi = np.zeros(shape), np.broadcast_to(n_max, shape).astype(float)
    model = step_model(c, p, t)
    top = state_at_occupancy(c, p, t, hi, model)
    size = max(int(np.prod(shape)), 1)
    levels = max(1, min(RATE_TREE_LEVELS, int(np.log2(RATE_TREE_POINTS / size + 1))))

    def below(ns):
        return _state_parts(model, t, ns, n_max, p.prefill_chunk_tokens, p.request_overhead_s)["rate_per_s"] < rate

    done = 0
    while done < steps:
        lo, hi = _bisect_levels(lo, hi, min(levels, steps - done), below)
        done += levels
    state = state_at_occupancy(c, p, t, hi, model)
    overloaded = (top["rate_per_s"] < rate) | ~state["stable"]
    for key in ("tpot_p95_s", "ttft_p95_s", "tpot_mean_s"):
        state[key] = np.where(overloaded, np.inf, state[key])
    state["overloaded"] = overloaded
    return state


def _bisect_levels(lo, hi, levels: int, below) -> tuple:
    """``levels`` steps of the bisection ``mid = (lo + hi) / 2; lo = mid where below(mid),
    else hi = mid`` with one call of ``below``, on every occupancy they may visit (the
    complete tree of 2^levels - 1 mids per row, stacked on a new first axis): the same
    ``lo``, ``hi`` bit for bit, each mid computed from the same two numbers as the step
    that would visit it, whatever ``below`` is (no monotonicity needed)."""
    if levels == 1:
        mid = 0.5 * (lo + hi)
        go = below(mid)
        return np.where(go, mid, lo), np.where(go, hi, mid)
    bounds, mids = [(lo, hi)], []
    for _ in range(levels):          # heap order: node i's halves are 2i + 1 (low), 2i + 2
        nxt = []
        for a, b in bounds:
            mid = 0.5 * (a + b)
            mids.append(mid)
            nxt += [(a, mid), (mid, b)]
        bounds = nxt
    points = np.stack(mids)
    go_all = np.broadcast_to(below(points), points.shape)
    node = np.zeros((1,) + np.shape(lo), dtype=np.intp)
    for _ in range(levels):
        mid, go = np.take_along_axis(points, node, 0)[0], np.take_along_axis(go_all, node, 0)[0]
        lo, hi = np.where(go, mid, lo), np.where(go, hi, mid)
        node = 2 * node + 1 + go
    return lo, hi


def saturation_rate(c: ConfigArrays, p: ServingParams, t: TrafficArrays,
                    steps: int = CAPACITY_BISECTION_STEPS) -> np.ndarray:
    """The largest Poisson rate [1/s] the replica sustains at all (no SLO): its capacity."""
    n_max = _n_max(c, p)
    shape = np.broadcast_shapes(n_max.shape, np.shape(t.prompt_mean_tokens))
    lo, hi = np.zeros(shape), np.broadcast_to(n_max, shape).astype(float) * (1 - 1e-9)
    model = step_model(c, p, t)
    top = state_at_occupancy(c, p, t, hi, model)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        good = state_at_occupancy(c, p, t, mid, model)["stable"]
        lo, hi = np.where(good, mid, lo), np.where(good, hi, mid)
    n_star = np.where(top["stable"], hi, lo)
    return state_at_occupancy(c, p, t, n_star, model)["rate_per_s"]


#: Points of an occupancy curve (see :func:`occupancy_curve`).
CURVE_POINTS = 20


def occupancy_curve(c: ConfigArrays, p: ServingParams, t: TrafficArrays, points: int = CURVE_POINTS) -> dict:
    """Rate, p95 TTFT and p95 TPOT on a grid of occupancies n in [0, n_max], per row.

    The p95s do not depend on the SLOs, so one curve answers the capacity at SLO for any
    SLO (Pareto sweeps) by interpolation: see :func:`capacity_from_curve`. Arrays have
    shape (rows, points); the grid is quadratic in n (denser at low load).
    """
    n_max = np.atleast_1d(_n_max(c, p)).astype(float)
    grid = (np.linspace(0.0, 1.0, points) ** 2)[None, :] * n_max[:, None]
    grid[:, 0] = np.minimum(1e-6, n_max)
    expand = {}
    from dataclasses import fields

    for f in fields(c):
        v = getattr(c, f.name)
        expand[f.name] = v[:, None] if np.ndim(v) else v
    p_rows = p.with_overrides(**{k: np.asarray(v)[:, None] for k, v in p.as_dict().items() if np.ndim(v)})
    state = state_at_occupancy(c.replace(**expand), p_rows, t, grid, slots=n_max[:, None])
    ok = state["stable"] & (n_max[:, None] >= 1)
    return {"occupancy": grid, "rate_per_s": np.where(ok, state["rate_per_s"], np.nan),
            "ttft_p95_s": np.where(ok, state["ttft_p95_s"], np.inf),
            "tpot_p95_s": np.where(ok, state["tpot_p95_s"], np.inf)}


def capacity_from_curve(curve: dict, slo_ttft_p95_s, slo_tpot_p95_s) -> np.ndarray:
    """Capacity at SLO [1/s] per row from an :func:`occupancy_curve` (linear interpolation
    of the first SLO crossing between grid points; 0 where even the first point fails)."""
    ttft, tpot, rate = curve["ttft_p95_s"], curve["tpot_p95_s"], curve["rate_per_s"]
    good = (ttft <= slo_ttft_p95_s) & (tpot <= slo_tpot_p95_s)
    # Both p95s increase with n: the feasible points are a prefix of the grid.
    last = np.where(good.any(axis=1), good.shape[1] - 1 - np.argmax(good[:, ::-1], axis=1), -1)
    rows = np.arange(len(last))
    at = np.clip(last, 0, good.shape[1] - 1)
    nxt = np.clip(last + 1, 0, good.shape[1] - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        def frac(v, slo):
            a, b = v[rows, at], v[rows, nxt]
            return np.where(np.isfinite(b) & (b > a), np.clip((slo - a) / (b - a), 0.0, 1.0), 0.0)
        f = np.minimum(frac(ttft, slo_ttft_p95_s), frac(tpot, slo_tpot_p95_s))
        f = np.where(nxt > at, f, 0.0)
        r_next = np.where(np.isfinite(rate[rows, nxt]), rate[rows, nxt], rate[rows, at])
        cap = rate[rows, at] + f * (r_next - rate[rows, at])
    return np.where(last >= 0, np.nan_to_num(cap), 0.0)
