"""Capacities and latencies of prefill-role and decode-role candidates (disaggregated serving).

With ``search: disaggregation`` the search emits, besides the aggregated (``role: both``)
configurations, each configuration as a prefill replica and as a decode replica
(dimension ``role``, :mod:`planner.dimensions`). The optimizer pairs them in pools
(:mod:`planner.optimize.model`), so a role's capacity per replica must hold whatever the
other side of the pool is: these are the safe-side, separable bounds of
``docs/serving-model.md`` section 14.5, from the two-stage model of
:mod:`planner.serving.disagg`:

* prefill replica, at the TTFT SLO: the prefill queue of ONE replica (pooling n_p replicas
  behind one queue only shortens it), its own prefill and the KV transfer over ONE link at
  the slowest scale-out bandwidth of the problem's GPUs (any decode replica has at least
  one GPU), within the TTFT SLO less :data:`DECODE_TTFT_ALLOWANCE_TPOTS` x the workload's
  TPOT SLO (the decode side's share of the TTFT: the step in progress, at most one mean
  TPOT, and the slot wait, held below one TPOT SLO by the decode capacity);
* decode replica, at the TPOT SLO: decode-only steps (no prefill interference), with the
  decode slot wait's p95 at most the workload's TPOT SLO.

The pair's TTFT_95 (section 14.2) is at most the sum of the two parts: its deviations add in
quadrature, and sqrt(a^2 + b^2 + c^2) <= sqrt(a^2 + b^2) + c.
"""

from __future__ import annotations

import numpy as np

from planner.margins import Margins
from planner.serving import disagg
from planner.serving.arrays import ConfigArrays
from planner.serving.params import ServingParams
from planner.serving.queueing import CAPACITY_BISECTION_STEPS, TrafficArrays
from planner.serving.roofline import StepModel

#: The decode side's share of the TTFT SLO, in units of the workload's TPOT SLO: the decode
#: step in progress when the KV arrives (at most one mean TPOT <= TPOT p95 <= its SLO) plus
#: the wait for a decode slot (whose p95 the decode capacity holds below one TPOT SLO).
DECODE_TTFT_ALLOWANCE_TPOTS = 2.0
#: Bisection steps of the prefill capacity (relative precision 2^-steps of the saturation rate).
PREFILL_BISECTION_STEPS = 30


#: Configuration fields a prefill replica's capacity never reads (:func:`prefill_capacity`:
#: its own prefill service and queue, the decode side one GPU): its max batch.
PREFILL_UNREAD_FIELDS = ("batch",)


def capacity_key(roles, arrays: ConfigArrays) -> ConfigArrays:
    """``arrays`` as the role capacities read them, to find rows with the same capacities
    (:func:`planner.configs.distinct_configs`): the prefill rows' :data:`PREFILL_UNREAD_FIELDS`
    set to 0 (prefill replicas that differ only in their max batch have one capacity)."""
    prefill = np.asarray(roles) == "prefill"
    if not prefill.any():
        return arrays
    return arrays.replace(**{name: np.where(prefill, 0.0, getattr(arrays, name)) for name in PREFILL_UNREAD_FIELDS})


def _pair(role: str, arrays: ConfigArrays, params: ServingParams,
          scale_out_bytes_per_s: float) -> disagg.DisaggArrays:
    """The configuration on both sides of a pair; a prefill row faces a one-GPU decode side
    (one KV link)."""
    one = np.ones_like(np.asarray(arrays.tp, dtype=float))
    other = arrays.replace(tp=one, pp=one) if role == "prefill" else arrays
    return disagg.DisaggArrays(arrays, other, params, params, scale_out_bytes_per_s=scale_out_bytes_per_s)


def _largest_occupancy(slots, good, shape, steps: int) -> np.ndarray:
    """Largest decode occupancy n in [0, slots] with ``good(n)`` (monotone: true up to n*)."""
    hi = np.broadcast_to(slots, np.broadcast_shapes(np.shape(slots), shape)).astype(float)
    lo = np.zeros_like(hi)
    top_ok = good(hi)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        ok = good(mid)
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return np.where(top_ok, hi, lo)


def _flat(value, size: int) -> np.ndarray:
    """``value`` (a per-row array or a scalar) as ``size`` rows."""
    return np.broadcast_to(np.asarray(value, dtype=float), (size,))


def _rows_of(shape, bounds, settled) -> tuple:
    """The (bound, row) entries that a batched bisection still computes: per bound in
    ``bounds`` the flat rows not ``settled(bound)`` (a boolean array of ``shape``'s rows).
    Returns the rows per bound and, over all of them, the rows and the bound of each."""
    size = int(np.prod(shape))
    todo = [np.flatnonzero(~np.broadcast_to(settled(bound), shape).reshape(size)) for bound in bounds]
    rows = np.concatenate(todo) if todo else np.zeros(0, dtype=int)
    each = np.concatenate([np.full(len(at), bound, dtype=float) for at, bound in zip(todo, bounds)])
    return todo, rows, each


def _spread(shape, todo, values, fill) -> list:
    """Per bound, an array of ``shape``: ``values`` (the entries of :func:`_rows_of`, in
    order) at its rows, ``fill`` (an array of ``shape``) elsewhere."""
    out, start = [], 0
    for at in todo:
        full = np.array(np.broadcast_to(fill, shape), dtype=float).reshape(-1)
        full[at] = values[start:start + len(at)]
        out.append(full.reshape(shape))
        start += len(at)
    return out


def prefill_ttft_p95_s(d: disagg.DisaggArrays | None, t: TrafficArrays, rate_per_s,
                       svc: dict | None = None) -> np.ndarray:
    """The prefill part of TTFT_95 at ``rate_per_s`` on one prefill replica [s] (inf when
    overloaded): W_mean + E[S + X] + sqrt((W_95 - W_mean)^2 + (S_95 + X_95 - E[S + X])^2)
    + request overhead (section 14.2 without the decode terms). ``svc``: the
    :func:`planner.serving.disagg.prefill_service` of ``d`` when the caller has it (with
    :func:`_with_rate_free_terms`' terms: ``d`` not read, None in a bisection)."""
    svc = _with_rate_free_terms(disagg.prefill_service(d, t) if svc is None else svc, d)
    queue = disagg.prefill_queue(1.0, rate_per_s, svc["mean_s"], svc["second_moment_s2"], svc["cv2"])
    with np.errstate(invalid="ignore", over="ignore"):
        dev = np.sqrt((queue["p95_s"] - queue["mean_s"]) ** 2 + svc["own_dev2_s2"])
        ttft = queue["mean_s"] + svc["mean_own_s"] + dev + svc["request_overhead_s"]
    return np.where(queue["utilization"] < 1.0, ttft, np.inf)


def _with_rate_free_terms(svc: dict, d: disagg.DisaggArrays | None) -> dict:
    """``svc`` with the terms of :func:`prefill_ttft_p95_s` that do not depend on the rate
    (speed: a bisection on the rate computes them once, on its rows, and takes no arrays of
    ``d``): ``cv2`` (:func:`planner.serving.disagg.service_cv2`), ``own_dev2_s2``, the square
    of the own prefill's and transfer's deviation (p95 - mean, at least 0), and ``d``'s
    ``request_overhead_s``; ``svc`` itself where it has them (``d`` then not read)."""
    if "cv2" in svc:
        return svc
    with np.errstate(invalid="ignore", over="ignore"):
        own_dev = np.maximum(svc["p95_own_s"] - svc["mean_own_s"], 0.0)
        return dict(svc, cv2=disagg.service_cv2(svc["mean_s"], svc["second_moment_s2"]),
                    own_dev2_s2=own_dev ** 2, request_overhead_s=d.prefill_params.request_overhead_s)


def prefill_capacities(d: disagg.DisaggArrays, t: TrafficArrays, budgets_s, svc: dict | None = None) -> list:
    """Per TTFT budget [s] in ``budgets_s`` (scalars), the largest rate [1/s] one prefill
    replica carries with :func:`prefill_ttft_p95_s` <= the budget: a dict of arrays
    ``rate_per_s`` and ``ttft_p95_s`` (at that rate; the trickle's where it is 0).

    Bisection on the rate in [0, 1/E[S]) (the TTFT increases with the rate), every budget's
    in one pass. ``svc``: as for :func:`prefill_ttft_p95_s` (the service does not depend on
    the rate: computed once). Speed (the same numbers as one bisection per budget over
    every row): a row whose trickle misses a budget has rate 0 there whatever its
    bisection finds, so only the other rows are bisected.
    """
    svc = _with_rate_free_terms(disagg.prefill_service(d, t) if svc is None else svc, d)
    shape = np.shape(svc["mean_s"])
    trickle = prefill_ttft_p95_s(d, t, np.zeros(shape), svc)
    todo, rows, budget = _rows_of(shape, budgets_s, lambda b: ~(trickle <= b))
    flat = int(np.prod(shape))
    sub_svc = {key: _flat(value, flat)[rows] for key, value in svc.items()}   # (all the rows' states read)
    hi = (1.0 / sub_svc["mean_s"]).astype(float)
    lo = np.zeros_like(hi)
    for _ in range(PREFILL_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        ok = prefill_ttft_p95_s(None, t, mid, sub_svc) <= budget
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    ttft = np.where(lo > 0, prefill_ttft_p95_s(None, t, lo, sub_svc), _flat(trickle, flat)[rows])
    rates = _spread(shape, todo, lo, np.zeros(shape))
    ttfts = _spread(shape, todo, ttft, trickle)
    return [{"rate_per_s": r, "ttft_p95_s": x} for r, x in zip(rates, ttfts)]


def decode_capacities(d: disagg.DisaggArrays, t: TrafficArrays, tpot_slos_s, slot_wait_s,
                      steps: int = CAPACITY_BISECTION_STEPS) -> list:
    """Per TPOT SLO [s] in ``tpot_slos_s`` (scalars), the largest rate [1/s] one decode
    replica carries with its TPOT p95 <= the SLO and its slot wait p95 <= ``slot_wait_s``:
    a dict of arrays ``rate_per_s`` and ``tpot_p95_s`` (at that rate; the trickle's where
    it is 0).

    Bisection on the occupancy n in [0, slots], every SLO's in one pass, with one step model
    and one slot count. Speed (the same numbers as one bisection per SLO over every row):
    where a row's decode step never decreases with n (:meth:`StepModel.monotone_rows`),
    every state's TPOT p95 is at least s_d(0) (TPOT_95 = tau + z sd >= tau = s_d(n) + b_s Bu
    >= s_d(n) >= s_d(0), with b_s = s_d(n + 1) - s_d(n) >= 0, Bu >= 1, and rounding
    monotone; or NaN), so a row with s_d(0) above the SLO has n* = 0 (every bisection
    decision "no"): rate 0 and the trickle's TPOT, without a bisection.
    """
    model = StepModel(d.decode, d.decode_params, t.decode_context_tokens)
    slots = disagg.decode_slots(d, t)
    shape = np.shape(slots)
    flat = int(np.prod(shape))
    trickle = disagg.decode_state(d, t, np.full(shape, 1e-9), model, slots)["tpot_p95_s"]
    floor = np.where(model.monotone_rows(), model.time(np.zeros(shape)), -np.inf)
    todo, rows, bound = _rows_of(shape, tpot_slos_s, lambda slo: floor > slo)
    sub_model, sub_slots = model.take(rows), _flat(slots, flat)[rows]   # (the states read no other arrays)

    def good(n):
        s = disagg.decode_state(None, t, n, sub_model, sub_slots)
        return s["stable"] & (s["tpot_p95_s"] <= bound) & (s["slot_wait_p95_s"] <= slot_wait_s)

    n = _largest_occupancy(sub_slots, good, (), steps)
    state = disagg.decode_state(None, t, n, sub_model, sub_slots)
    rate = np.where(n > 0, np.nan_to_num(state["rate_per_s"]), 0.0)
    tpot = np.where(n > 0, state["tpot_p95_s"], _flat(trickle, flat)[rows])
    rates = _spread(shape, todo, rate, np.zeros(shape))
    tpots = _spread(shape, todo, tpot, trickle)
    return [{"rate_per_s": r, "tpot_p95_s": x} for r, x in zip(rates, tpots)]


def role_capacity(role: str, arrays: ConfigArrays, params: ServingParams, traffic: TrafficArrays,
                  workload, ttft_s: float, tpot_s: float, margins: Margins,
                  scale_out_bytes_per_s: float) -> dict:
    """Capacity at SLO of prefill-role or decode-role rows for one workload, in the keys of
    :func:`planner.search.workload_capacity`: ``max_rate_per_s`` (what the optimizer buys
    under ``margins``), ``central_rate_per_s``, ``ttft_p95_s`` (prefill rows: the prefill
    part; decode rows: NaN), ``tpot_p95_s`` (decode rows; prefill rows: NaN) and
    ``slo_violated_at_low_load`` (``ttft`` / ``tpot`` / '').

    ``ttft_s`` / ``tpot_s``: the SLOs (possibly tightened by a front's target); the decode
    allowance and the slot-wait bound use the workload's own TPOT SLO (so a tighter TPOT
    target never raises a prefill capacity). The central and the margined SLOs'
    capacities come from one batched bisection (:func:`prefill_capacities`,
    :func:`decode_capacities`).
    """
    allowance = DECODE_TTFT_ALLOWANCE_TPOTS * workload.slo.tpot_p95_s
    d = _pair(role, arrays, params, scale_out_bytes_per_s)
    pairs = list(dict.fromkeys([(ttft_s, tpot_s), margins.slos(ttft_s, tpot_s)]))
    if role == "prefill":
        got = prefill_capacities(d, traffic, [ttft - allowance for ttft, _ in pairs])
    else:
        got = decode_capacities(d, traffic, [tpot for _, tpot in pairs], workload.slo.tpot_p95_s)
    results = dict(zip(pairs, got))

    def capacity(ttft_slo_s, tpot_slo_s):
        return results[ttft_slo_s, tpot_slo_s]["rate_per_s"]

    planned = margins.planned_capacity(capacity, ttft_s, tpot_s)
    central = results[ttft_s, tpot_s]
    held = results.get(margins.slos(ttft_s, tpot_s), central)
    nan = np.full(np.shape(planned), np.nan)
    ok = central["rate_per_s"] > 0
    violated = np.where(held["rate_per_s"] > 0, "", "ttft" if role == "prefill" else "tpot").astype(object)
    return {"max_rate_per_s": planned, "central_rate_per_s": central["rate_per_s"],
            "ttft_p95_s": np.where(ok, central["ttft_p95_s"], np.nan) if role == "prefill" else nan,
            "tpot_p95_s": np.where(ok, central["tpot_p95_s"], np.nan) if role == "decode" else nan,
            "slo_violated_at_low_load": violated}


def role_latency(role: str, arrays: ConfigArrays, params: ServingParams, traffic: TrafficArrays,
                 rate_per_replica_per_s, scale_out_bytes_per_s: float) -> dict:
    """``ttft_p95_s`` (prefill rows: the prefill part) and ``tpot_p95_s`` (decode rows) of
    role rows at the rate each replica carries; the other metric is NaN (it belongs to the
    pool's other side)."""
    d = _pair(role, arrays, params, scale_out_bytes_per_s)
    rate = np.asarray(rate_per_replica_per_s, dtype=float)
    nan = np.full(rate.shape, np.nan)
    if role == "prefill":
        return {"ttft_p95_s": prefill_ttft_p95_s(d, traffic, rate), "tpot_p95_s": nan}
    model = StepModel(d.decode, d.decode_params, traffic.decode_context_tokens)
    slots = disagg.decode_slots(d, traffic)

    def carried(n):
        return disagg.decode_state(d, traffic, n, model, slots)["rate_per_s"] <= rate

    n = _largest_occupancy(slots, carried, rate.shape, disagg.RATE_BISECTION_STEPS)
    state = disagg.decode_state(d, traffic, n, model, slots)
    short = ~state["stable"] | (state["rate_per_s"] < rate * (1.0 - disagg.RATE_TOLERANCE))
    return {"ttft_p95_s": nan, "tpot_p95_s": np.where(short, np.inf, state["tpot_p95_s"])}


def pool_scale_out_bytes_per_s(catalog, gpus) -> float:
    """The slowest per-GPU scale-out bandwidth of ``gpus`` [B/s]: the KV link of any pairing."""
    return min(disagg.scale_out_bytes_per_s(catalog.gpu(g)) for g in gpus)
