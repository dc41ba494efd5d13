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


def _largest_occupancy(d: disagg.DisaggArrays, t: TrafficArrays, good, shape, steps: int) -> np.ndarray:
    """Largest decode occupancy n in [0, slots] with ``good(n)`` (monotone: true up to n*)."""
    slots = disagg.decode_slots(d, t)
    hi = np.broadcast_to(slots, np.broadcast_shapes(np.shape(slots), shape)).astype(float)
    lo = np.zeros_like(hi)
    top_ok = good(hi)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        ok = good(mid)
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return np.where(top_ok, hi, lo)


def prefill_ttft_p95_s(d: disagg.DisaggArrays, t: TrafficArrays, rate_per_s,
                       svc: dict | None = None) -> np.ndarray:
    """The prefill part of TTFT_95 at ``rate_per_s`` on one prefill replica [s] (inf when
    overloaded): W_mean + E[S + X] + sqrt((W_95 - W_mean)^2 + (S_95 + X_95 - E[S + X])^2)
    + request overhead (section 14.2 without the decode terms). ``svc``: the
    :func:`planner.serving.disagg.prefill_service` of ``d`` when the caller has it."""
    svc = disagg.prefill_service(d, t) if svc is None else svc
    queue = disagg.prefill_queue(1.0, rate_per_s, svc["mean_s"], svc["second_moment_s2"])
    with np.errstate(invalid="ignore", over="ignore"):
        own_dev = np.maximum(svc["p95_own_s"] - svc["mean_own_s"], 0.0)
        dev = np.sqrt((queue["p95_s"] - queue["mean_s"]) ** 2 + own_dev ** 2)
        ttft = queue["mean_s"] + svc["mean_own_s"] + dev + d.prefill_params.request_overhead_s
    return np.where(queue["utilization"] < 1.0, ttft, np.inf)


def prefill_capacity(d: disagg.DisaggArrays, t: TrafficArrays, budget_s, svc: dict | None = None) -> dict:
    """Largest rate [1/s] one prefill replica carries with :func:`prefill_ttft_p95_s` <= ``budget_s``
    (bisection on the rate in [0, 1/E[S]); the TTFT increases with the rate). ``svc``: as
    for :func:`prefill_ttft_p95_s` (the service does not depend on the rate: computed once)."""
    svc = disagg.prefill_service(d, t) if svc is None else svc
    mean_s = svc["mean_s"]
    budget = np.asarray(budget_s, dtype=float)
    hi = np.broadcast_to(1.0 / mean_s, np.broadcast_shapes(np.shape(mean_s), budget.shape)).astype(float)
    lo = np.zeros_like(hi)
    for _ in range(PREFILL_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        ok = prefill_ttft_p95_s(d, t, mid, svc) <= budget
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    trickle = prefill_ttft_p95_s(d, t, np.zeros_like(lo), svc)
    rate = np.where(trickle <= budget, lo, 0.0)
    ttft = np.where(rate > 0, prefill_ttft_p95_s(d, t, rate, svc), trickle)
    return {"rate_per_s": rate, "ttft_p95_s": ttft}


def decode_capacity(d: disagg.DisaggArrays, t: TrafficArrays, tpot_slo_s, slot_wait_s,
                    steps: int = CAPACITY_BISECTION_STEPS) -> dict:
    """Largest rate [1/s] one decode replica carries with its TPOT p95 <= ``tpot_slo_s`` and
    its slot wait p95 <= ``slot_wait_s`` (bisection on the occupancy n in [0, slots])."""
    model = StepModel(d.decode, d.decode_params, t.decode_context_tokens)

    def good(n):
        s = disagg.decode_state(d, t, n, model)
        return s["stable"] & (s["tpot_p95_s"] <= tpot_slo_s) & (s["slot_wait_p95_s"] <= slot_wait_s)

    n = _largest_occupancy(d, t, good, np.shape(tpot_slo_s), steps)
    state = disagg.decode_state(d, t, n, model)
    rate = np.where(n > 0, np.nan_to_num(state["rate_per_s"]), 0.0)
    trickle = disagg.decode_state(d, t, np.full_like(n, 1e-9), model)["tpot_p95_s"]
    return {"rate_per_s": rate, "tpot_p95_s": np.where(n > 0, state["tpot_p95_s"], trickle)}


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
    target never raises a prefill capacity).
    """
    allowance = DECODE_TTFT_ALLOWANCE_TPOTS * workload.slo.tpot_p95_s
    d = _pair(role, arrays, params, scale_out_bytes_per_s)
    results = {}
    svc = disagg.prefill_service(d, traffic) if role == "prefill" else None  # one for every SLO pair

    def capacity(ttft_slo_s, tpot_slo_s):
        if role == "prefill":
            got = prefill_capacity(d, traffic, ttft_slo_s - allowance, svc)
        else:
            got = decode_capacity(d, traffic, tpot_slo_s, workload.slo.tpot_p95_s)
        results[ttft_slo_s, tpot_slo_s] = got
        return got["rate_per_s"]

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
    n = _largest_occupancy(d, traffic, lambda n: disagg.decode_state(d, traffic, n, model)["rate_per_s"] <= rate,
                           rate.shape, disagg.RATE_BISECTION_STEPS)
    state = disagg.decode_state(d, traffic, n, model)
    short = ~state["stable"] | (state["rate_per_s"] < rate * (1.0 - disagg.RATE_TOLERANCE))
    return {"ttft_p95_s": nan, "tpot_p95_s": np.where(short, np.inf, state["tpot_p95_s"])}


def pool_scale_out_bytes_per_s(catalog, gpus) -> float:
    """The slowest per-GPU scale-out bandwidth of ``gpus`` [B/s]: the KV link of any pairing."""
    return min(disagg.scale_out_bytes_per_s(catalog.gpu(g)) for g in gpus)
