"""Disaggregated prefill/decode serving: p95 TTFT and TPOT of a prefill pool feeding a decode pool.

Analytic and vectorized over configurations, like :mod:`planner.serving.queueing`
(equations: ``docs/serving-model.md``, section 14). A deployment is a prefill pool of n_p
replicas of one configuration and a decode pool of n_d replicas of another (possibly on
another GPU type), linked by the scale-out network:

* prefill replica: prefill-only iterations (no decode interference); a request's prompt
  runs in chunks of C tokens, so its service time is ``f s(0, C) + s(0, rest)`` with the
  mixed step s of :class:`planner.serving.roofline.StepModel` at no decoder;
* prefill pool: one FCFS queue in front of n_p such replicas, an M/G/c queue (exact
  Erlang C, Allen-Cunneen mean wait, exponential tail; for n_p = 1 it is the
  Pollaczek-Khinchine wait of queueing.py);
* KV transfer: the prompt's KV bytes over the scale-out network, in parallel over
  min(GPUs of a prefill replica, GPUs of a decode replica) links;
* decode replica: decode-only steps (no prefill interference), the occupancy
  parametrization, burst factor and TPOT mixture of queueing.py with no prefill work per
  arrival; a wait for a decode slot (Halfin-Whitt) when the slots bind.

The state of the pair is explicit in the decode occupancy n per decode replica: the pool
rate is lambda = n_d lambda_d(n), the prefill queue is evaluated at that rate. Capacity at
SLO bisects n, as :func:`planner.serving.queueing.capacity_at_slo` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.serving.arrays import ConfigArrays
from planner.serving.memory import kv_bytes_per_seq, max_concurrency
from planner.serving.params import ServingParams
from planner.serving.queueing import (CAPACITY_BISECTION_STEPS, MAX_BRANCHING_RATIO, P95, TrafficArrays,
                                      exponential_tail_p95)
from planner.serving.roofline import StepModel
from planner.serving.tails import halfin_whitt_wait_p95, normal_p95_offset
from planner.units import GIGA

#: Per-GPU scale-out bandwidth per direction used when the GPU catalog has none [GB/s]:
#: one 400 Gb/s NIC per GPU (InfiniBand NDR / ConnectX-7, the DGX H100 and DGX B200
#: reference designs: 8 x 400 Gb/s compute ports for 8 GPUs) = 50 GB/s.
DEFAULT_SCALE_OUT_GB_PER_S_PER_DIRECTION = 50.0
#: Fixed time of one KV hand-off outside the bytes on the wire (connection set-up,
#: metadata, completion notice) [s]. 0: not measured; the calibrated request overhead
#: (``request_overhead_s``) carries the fixed per-request costs.
DEFAULT_KV_TRANSFER_LATENCY_S = 0.0
#: Relative step of the finite difference that gives the prefill cost's slope in the prompt.
SLOPE_STEP = 1.01
#: Largest pool size :func:`pool_sizes_for_rate` tries.
MAX_POOL_REPLICAS = 64
#: Bisection steps of :func:`state_at_rate` (precision slots / 2^steps).
RATE_BISECTION_STEPS = 40
#: Relative shortfall of the bisected rate that :func:`state_at_rate` calls overloaded.
RATE_TOLERANCE = 1e-6


def scale_out_bytes_per_s(gpu) -> float:
    """Per-GPU scale-out bandwidth per direction of a catalog GPU [B/s].

    The GPU catalog field ``scale_out_gb_per_s_per_direction`` where the catalog has it,
    else :data:`DEFAULT_SCALE_OUT_GB_PER_S_PER_DIRECTION`.
    """
    value = getattr(gpu, "scale_out_gb_per_s_per_direction", None)
    return float(DEFAULT_SCALE_OUT_GB_PER_S_PER_DIRECTION if value is None else value) * GIGA


def transfer_bytes_per_s(prefill_gpu, decode_gpu) -> float:
    """Scale-out bandwidth per GPU of a prefill -> decode path: the slower end [B/s]."""
    return min(scale_out_bytes_per_s(prefill_gpu), scale_out_bytes_per_s(decode_gpu))


@dataclass(frozen=True)
class DisaggArrays:
    """A disaggregated deployment per configuration row (all fields broadcast together).

    Attributes
    ----------
    prefill, decode : ConfigArrays
        The prefill and decode replica configurations (same model; GPU, TP, PP, formats
        and max batch may differ). ``decode.batch`` is the decode replica's max batch.
    prefill_params, decode_params : ServingParams
        Step-time parameters of each pool (calibrations differ per GPU and engine). The
        TTFT's ``request_overhead_s`` and the chunk C are the prefill pool's.
    prefill_replicas, decode_replicas : array
        n_p and n_d.
    scale_out_bytes_per_s : array
        Per-GPU bandwidth of the prefill -> decode path, per direction [B/s]
        (:func:`transfer_bytes_per_s`).
    kv_transfer_latency_s : array
        Fixed time per KV hand-off [s].
    """

    prefill: ConfigArrays
    decode: ConfigArrays
    prefill_params: ServingParams
    decode_params: ServingParams
    prefill_replicas: object = 1.0
    decode_replicas: object = 1.0
    scale_out_bytes_per_s: object = DEFAULT_SCALE_OUT_GB_PER_S_PER_DIRECTION * GIGA
    kv_transfer_latency_s: object = DEFAULT_KV_TRANSFER_LATENCY_S

    def take(self, rows) -> "DisaggArrays":
        """The deployments at positions ``rows`` (as :meth:`ConfigArrays.take`: 1-D arrays of
        more than one element are indexed, scalars and one-element arrays kept); the same numbers."""
        def pick(value):
            arr = np.asarray(value)
            return arr[rows] if arr.ndim == 1 and arr.size > 1 else value

        prefill, prefill_params = self.prefill.take(rows), self.prefill_params.take(rows)
        # one side taken once where both sides are one object (a role row's pair)
        decode = prefill if self.decode is self.prefill else self.decode.take(rows)
        same = self.decode_params is self.prefill_params
        decode_params = prefill_params if same else self.decode_params.take(rows)
        return DisaggArrays(prefill, decode, prefill_params, decode_params, pick(self.prefill_replicas),
                            pick(self.decode_replicas), pick(self.scale_out_bytes_per_s),
                            pick(self.kv_transfer_latency_s))

    def with_replicas(self, prefill_replicas=None, decode_replicas=None) -> "DisaggArrays":
        """A copy with other pool sizes."""
        return DisaggArrays(self.prefill, self.decode, self.prefill_params, self.decode_params,
                            self.prefill_replicas if prefill_replicas is None else prefill_replicas,
                            self.decode_replicas if decode_replicas is None else decode_replicas,
                            self.scale_out_bytes_per_s, self.kv_transfer_latency_s)


# ------------------------------------------------------------------ the terms

def kv_transfer_time_s(d: DisaggArrays, prompt_tokens) -> np.ndarray:
    """X(p) = M_KV,seq(p) / (g beta_so) + tau_x [s], g = min(N_p S_p, N_d S_d) parallel links.

    The whole prompt's KV (all layers, all heads) moves once; each GPU of the smaller
    replica sends or receives its share over its own NIC.
    """
    links = np.minimum(d.prefill.tp * d.prefill.pp, d.decode.tp * d.decode.pp)
    wire = kv_bytes_per_seq(d.prefill, np.asarray(prompt_tokens, dtype=float))
    with np.errstate(divide="ignore"):
        return wire / (links * np.asarray(d.scale_out_bytes_per_s, dtype=float)) + d.kv_transfer_latency_s


def prefill_service(d: DisaggArrays, t: TrafficArrays) -> dict:
    """Service time of one request on an idle prefill replica, with its KV transfer.

    Returns arrays: ``mean_s`` (E[S], prefill only), ``second_moment_s2`` (E[S^2]),
    ``p95_own_s`` (prefill + transfer of the p95 prompt) and ``mean_own_s`` (E[S] + E[X]).

    Notes
    -----
    Per prompt stratum i (P_i' = max(P_i (1 - h), 1) computed tokens attending over A_i):
    k_i = max(1, P_i'/C + 1/2) iterations of P_i'/k_i tokens, cost_i = k_i s(0, P_i'/k_i, A_i)
    (the chunk count averaged over the prompts of a stratum: ceil(P_i'/C) at the stratum
    mean would charge a whole memory-bound remainder step to a mean just above C);
    E[S] = mean_i cost_i, E[S^2] = mean_i (cost_i^2 + g_i^2 V_i (1 - h)^2), g_i the cost's
    derivative in the prompt at the stratum (prompt and attention length scaled together:
    the attention term makes the cost convex).
    """
    p = d.prefill_params
    chunk = p.prefill_chunk_tokens
    hit = 1.0 - t.prefix_hit_fraction
    step = StepModel(d.prefill, p, t.decode_context_tokens).time

    def cost(tokens, attention):
        eff = np.maximum(tokens * hit, 1.0)
        k = np.maximum(1.0, eff / chunk + 0.5)
        return k * step(0.0, eff / k, attention), eff

    mean, second, transfer = 0.0, 0.0, 0.0
    m = len(t.prompt_strata_tokens)
    strata = zip(t.prompt_strata_tokens, t.prompt_strata_attention_tokens, t.prompt_strata_var)
    for tokens, attn, var_p in strata:
        c_i, eff = cost(tokens, attn)
        slope = (cost(tokens * SLOPE_STEP, attn * SLOPE_STEP)[0] - c_i) / (eff * (SLOPE_STEP - 1.0))
        mean = mean + c_i / m
        second = second + (c_i ** 2 + slope ** 2 * var_p * hit ** 2) / m
        transfer = transfer + kv_transfer_time_s(d, tokens) / m
    cost_95, _ = cost(t.prompt_p95_tokens, t.prompt_p95_tokens)
    return {"mean_s": mean, "second_moment_s2": second, "mean_own_s": mean + transfer,
            "p95_own_s": cost_95 + kv_transfer_time_s(d, t.prompt_p95_tokens)}


def erlang_c(servers, offered_load) -> np.ndarray:
    """P(wait) of M/M/c with c = ``servers`` (integers >= 1) and offered load a, exact.

    Erlang B by its recursion B_k = a B_{k-1} / (k + a B_{k-1}), B_0 = 1, then
    C = B_c / (1 - (a/c)(1 - B_c)); 1 where a >= c.
    """
    c = np.maximum(np.round(np.asarray(servers, dtype=float)), 1.0)
    a = np.asarray(offered_load, dtype=float)
    shape = np.broadcast_shapes(c.shape, a.shape)
    c, a = np.broadcast_to(c, shape), np.broadcast_to(a, shape)
    if c.ndim == 0 and c == 1.0:     # (speed: one server, B_1 = a / (1 + a); a B_0 = a x 1 = a exactly)
        b = a / (1.0 + a)
    else:
        b = np.ones(shape)
        for k in range(1, int(c.max(initial=1.0)) + 1):
            b = np.where(k <= c, a * b / (k + a * b), b)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = b / (1.0 - a / c * (1.0 - b))
    return np.where(a >= c, 1.0, np.where(a <= 0.0, 0.0, np.clip(p, 0.0, 1.0)))


def service_cv2(mean_s, second_moment_s2) -> np.ndarray:
    """cs^2 = E[S^2]/E[S]^2 - 1 (at least 0) of a service time with those moments."""
    return np.maximum(second_moment_s2 / np.maximum(mean_s, 1e-300) ** 2 - 1.0, 0.0)


def prefill_queue(servers, rate_per_s, mean_s, second_moment_s2, cv2=None) -> dict:
    """Wait in the pool-wide FCFS queue of ``servers`` prefill replicas (M/G/c).

    Returns arrays ``p_wait`` (Erlang C), ``mean_s`` and ``p95_s`` of the wait, ``utilization``.

    Notes
    -----
    a = lambda E[S], rho = a / c, cs^2 = E[S^2]/E[S]^2 - 1; Allen-Cunneen: a waiting
    request waits exponentially with mean E[S] (1 + cs^2) / (2 (c - a)); W_mean = P_wait x
    that, W_95 from the exponential tail (as queueing.py's prefill queue; c = 1 gives
    Pollaczek-Khinchine exactly). Infinite when rho >= 1. ``cv2``: :func:`service_cv2` of the
    moments when the caller has it (a bisection on the rate asks at many rates).
    """
    c = np.asarray(servers, dtype=float)
    a = np.asarray(rate_per_s, dtype=float) * mean_s
    cs2 = service_cv2(mean_s, second_moment_s2) if cv2 is None else cv2
    p_wait = erlang_c(c, a)
    below = a < c
    with np.errstate(divide="ignore", invalid="ignore"):
        given = np.where(below, mean_s * (1.0 + cs2) / (2.0 * (c - a)), np.inf)
        mean = np.where(below, p_wait * given, np.inf)
    p95 = np.where(below, exponential_tail_p95(p_wait, given), np.inf)
    return {"p_wait": p_wait, "mean_s": mean, "p95_s": p95, "utilization": a / c}


def decode_slots(d: DisaggArrays, t: TrafficArrays) -> np.ndarray:
    """Sequences one decode replica runs at once: min(B, KV capacity at E[P] + E[O]/2)."""
    ctx = t.prompt_mean_tokens + t.output_mean_tokens / 2.0
    return np.minimum(d.decode.batch, max_concurrency(d.decode, d.decode_params, ctx)).astype(float)


def decode_state(d: DisaggArrays | None, t: TrafficArrays, n, steps: StepModel | None = None,
                 slots=None) -> dict:
    """One decode replica at mean occupancy ``n`` (decode-only steps).

    Returns arrays: ``rate_per_s`` (per replica), ``tpot_mean_s``, ``tpot_p95_s``,
    ``slot_wait_p95_s``, ``burst``, ``stable``. ``steps`` / ``slots``: the decode side's
    :class:`StepModel` and :func:`decode_slots` when the caller has them (a bisection
    asks for many occupancies of the same replicas); with both, ``d`` is not read (None:
    a bisection's rows take no configuration arrays).

    Notes
    -----
    queueing.py sections 9.3-9.4 with no prefill work per arrival (Delta = 0):
    phi = lambda0 b_s O1 / 2 with lambda0 = n / (O1 s_d), Bu = 1/(1 - phi)^2,
    tau = s_d(n) + b_s Bu, lambda = n / (O1 tau); the TPOT spread is one normal,
    sd^2 = lambda tau Bu b_s^2 O1 / 4 + b_s^2 n / 3, TPOT_95 = tau + z_95 sd. A request
    holds a slot for O1 tau; the slot wait is the Halfin-Whitt one of queueing.py.
    """
    n = np.asarray(n, dtype=float)
    out_m1 = np.maximum(t.output_mean_tokens - 1.0, 1.0)
    step = (steps or StepModel(d.decode, d.decode_params, t.decode_context_tokens)).time
    s_d = step(n)
    slope = step(n + 1.0) - s_d
    with np.errstate(divide="ignore", invalid="ignore"):
        rate0 = n / (out_m1 * s_d)
        phi = np.clip(rate0 * slope * out_m1 / 2.0, 0.0, MAX_BRANCHING_RATIO)
        burst = 1.0 / (1.0 - phi) ** 2
        tau = s_d + slope * burst
        rate = n / (out_m1 * tau)
        sd = np.sqrt(rate * tau * burst * slope ** 2 * out_m1 / 4.0 + slope ** 2 * n / 3.0)
        tpot_p95 = tau + normal_p95_offset(sd)
        slots = decode_slots(d, t) if slots is None else slots
        holding = out_m1 * tau
        offered = rate * holding
        slot_wait = halfin_whitt_wait_p95(slots, offered, burst,
                                          holding / np.maximum(slots - offered, 1e-300))
    stable = (offered < slots) & (n <= slots) & (slots >= 1) & (phi < MAX_BRANCHING_RATIO)
    return {"rate_per_s": rate, "tpot_mean_s": tau, "tpot_p95_s": tpot_p95, "slot_wait_p95_s": slot_wait,
            "burst": burst, "stable": stable}


# ------------------------------------------------------------------ the pair

def state_at_occupancy(d: DisaggArrays, t: TrafficArrays, n, steps: StepModel | None = None,
                       decode: dict | None = None) -> dict:
    """The deployment at mean decode occupancy ``n`` per decode replica.

    Returns arrays: ``rate_per_s`` (the whole deployment), ``ttft_p95_s``, ``tpot_p95_s``,
    ``tpot_mean_s``, ``prefill_utilization``, ``kv_transfer_s`` (mean), ``stable``,
    ``occupancy``. ``decode``: :func:`decode_state` at ``n`` when the caller has it.

    Notes
    -----
    lambda = n_d lambda_d(n); TTFT_95 = W_mean + E[S + X] + r_mean + sqrt((W_95 - W_mean)^2
    + (S_95 + X_95 - E[S + X])^2 + W_slot^2 + (r_95 - r_mean)^2) + request overhead: the
    prefill queue, the own prefill and transfer (both grow with the prompt), the decode
    slot wait and the decode step in progress when the KV arrives deviate independently
    (different pools). The step in progress: busy w.p. u = 1 - e^-n, then uniform on
    [0, tau]: r_mean = u tau / 2, r_95 = tau (1 - 0.05/u) if u > 0.05, else 0.
    """
    dec = decode_state(d, t, n, steps) if decode is None else decode
    rate = np.asarray(d.decode_replicas, dtype=float) * dec["rate_per_s"]
    svc = prefill_service(d, t)
    queue = prefill_queue(d.prefill_replicas, rate, svc["mean_s"], svc["second_moment_s2"])
    tau = dec["tpot_mean_s"]
    with np.errstate(invalid="ignore", over="ignore"):
        own_dev = np.maximum(svc["p95_own_s"] - svc["mean_own_s"], 0.0)
        # The decode step in progress when the KV arrives (busy w.p. 1 - e^-n), uniform.
        busy = 1.0 - np.exp(-np.asarray(n, dtype=float))
        r_mean = 0.5 * busy * tau
        r_p95 = np.where(busy > 1.0 - P95, tau * (1.0 - (1.0 - P95) / np.maximum(busy, 1e-300)), 0.0)
        dev = np.sqrt((queue["p95_s"] - queue["mean_s"]) ** 2 + own_dev ** 2 + dec["slot_wait_p95_s"] ** 2
                      + (r_p95 - r_mean) ** 2)
        ttft = queue["mean_s"] + svc["mean_own_s"] + r_mean + dev + d.prefill_params.request_overhead_s
    stable = dec["stable"] & (queue["utilization"] < 1.0)
    inf = np.inf
    return {"rate_per_s": rate, "ttft_p95_s": np.where(stable, ttft, inf),
            "tpot_p95_s": np.where(stable, dec["tpot_p95_s"], inf), "tpot_mean_s": dec["tpot_mean_s"],
            "prefill_utilization": queue["utilization"], "kv_transfer_s": svc["mean_own_s"] - svc["mean_s"],
            "stable": stable, "occupancy": n}


def pool_capacities(d: DisaggArrays, t: TrafficArrays) -> dict:
    """Saturation rates of the two pools [requests/s], without SLOs.

    ``prefill_per_s`` = n_p / E[S] (prefill-only service, no decode interference);
    ``decode_per_s`` = n_d B' / (O1 s_d(B')) with B' = :func:`decode_slots` (decode step at
    max batch, no prefill interference); ``pair_per_s`` = the smaller.
    """
    svc = prefill_service(d, t)
    slots = decode_slots(d, t)
    out_m1 = np.maximum(t.output_mean_tokens - 1.0, 1.0)
    s_max = StepModel(d.decode, d.decode_params, t.decode_context_tokens).time(slots)
    with np.errstate(divide="ignore", invalid="ignore"):
        prefill = np.asarray(d.prefill_replicas, dtype=float) / svc["mean_s"]
        decode = np.asarray(d.decode_replicas, dtype=float) * slots / (out_m1 * s_max)
    return {"prefill_per_s": prefill, "decode_per_s": decode, "pair_per_s": np.minimum(prefill, decode)}


def _bisect(d: DisaggArrays, t: TrafficArrays, evaluate, good, steps: int):
    """Largest n in [0, slots] with ``good(evaluate(n))`` (a predicate monotone in n)."""
    slots = decode_slots(d, t)
    shape = np.broadcast_shapes(np.shape(slots), np.shape(d.prefill_replicas), np.shape(d.decode_replicas))
    lo, hi = np.zeros(shape), np.broadcast_to(slots, shape).astype(float)
    top_ok = good(evaluate(hi))
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        ok = good(evaluate(mid))
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return np.where(top_ok, hi, lo)


def _decode_model(d: DisaggArrays, t: TrafficArrays) -> StepModel:
    return StepModel(d.decode, d.decode_params, t.decode_context_tokens)


def capacity_at_slo(d: DisaggArrays, t: TrafficArrays, slo_ttft_p95_s, slo_tpot_p95_s,
                    steps: int = CAPACITY_BISECTION_STEPS) -> dict:
    """Largest Poisson rate [1/s] the deployment carries with both p95s within the SLOs.

    Returns arrays ``max_rate_per_s`` (0 where a trickle already misses an SLO),
    ``ttft_p95_s``, ``tpot_p95_s``, ``occupancy`` (per decode replica) at that rate.
    Bisection on the decode occupancy (both p95s increase with it).
    """
    model = _decode_model(d, t)

    def good(s):
        return s["stable"] & (s["ttft_p95_s"] <= slo_ttft_p95_s) & (s["tpot_p95_s"] <= slo_tpot_p95_s)

    n_star = _bisect(d, t, lambda n: state_at_occupancy(d, t, n, model), good, steps)
    state = state_at_occupancy(d, t, n_star, model)
    rate = np.where(n_star > 0, state["rate_per_s"], 0.0)
    return {"max_rate_per_s": np.nan_to_num(rate), "ttft_p95_s": state["ttft_p95_s"],
            "tpot_p95_s": state["tpot_p95_s"], "occupancy": n_star}


def saturation_rate(d: DisaggArrays, t: TrafficArrays, steps: int = CAPACITY_BISECTION_STEPS) -> np.ndarray:
    """The largest rate [1/s] at which both pools are stable (no SLO)."""
    model = _decode_model(d, t)
    n_star = _bisect(d, t, lambda n: state_at_occupancy(d, t, n, model), lambda s: s["stable"], steps)
    state = state_at_occupancy(d, t, n_star, model)
    return np.where(state["stable"], state["rate_per_s"], 0.0)


def state_at_rate(d: DisaggArrays, t: TrafficArrays, rate_per_s, steps: int = RATE_BISECTION_STEPS) -> dict:
    """The deployment's state at a given Poisson rate; infinite p95s where it is overloaded.

    The decode occupancy solves n_d lambda_d(n) = rate (bisection on the decode pool
    alone); the prefill pool is explicit at that rate.
    """
    rate = np.asarray(rate_per_s, dtype=float)
    model = _decode_model(d, t)
    per_replica = rate / np.asarray(d.decode_replicas, dtype=float)
    n = _bisect(d, t, lambda n: decode_state(d, t, n, model)["rate_per_s"], lambda r: r <= per_replica, steps)
    state = state_at_occupancy(d, t, n, model)
    # The largest occupancy falls short of the rate: the decode pool cannot carry it.
    overloaded = ~state["stable"] | (state["rate_per_s"] < rate * (1.0 - RATE_TOLERANCE))
    for key in ("ttft_p95_s", "tpot_p95_s"):
        state[key] = np.where(overloaded, np.inf, state[key])
    state["overloaded"] = overloaded
    return state


def decode_capacity_at_slo(d: DisaggArrays, t: TrafficArrays, slo_tpot_p95_s,
                           steps: int = CAPACITY_BISECTION_STEPS) -> np.ndarray:
    """Largest rate [1/s] one decode replica carries with its TPOT p95 within the SLO."""
    model = _decode_model(d, t)

    def good(s):
        return s["stable"] & (s["tpot_p95_s"] <= slo_tpot_p95_s)

    n_star = _bisect(d, t, lambda n: decode_state(d, t, n, model), good, steps)
    return np.where(n_star > 0, decode_state(d, t, n_star, model)["rate_per_s"], 0.0)


def prefill_capacity_at_slo(d: DisaggArrays, t: TrafficArrays, slo_ttft_p95_s, decode_step_s=0.0,
                            steps: int = RATE_BISECTION_STEPS) -> np.ndarray:
    """Largest rate [1/s] the prefill pool (``d.prefill_replicas``) carries within the TTFT SLO.

    The prefill side of :func:`state_at_occupancy`'s TTFT: W_mean + E[S + X] + sqrt((W_95 -
    W_mean)^2 + (S_95 + X_95 - E[S + X])^2) + request overhead + ``decode_step_s`` (an
    allowance for the decode side, e.g. one decode step for the step in progress; the slot
    wait is left out). Bisection on the rate in [0, n_p / E[S]]. With n_p = 1 it is a
    per-replica capacity that a pool of any size exceeds per replica (pooling shortens the
    queue): the safe coefficient of a linear model.
    """
    svc = prefill_service(d, t)
    n_p = np.asarray(d.prefill_replicas, dtype=float)

    def ttft(rate):
        q = prefill_queue(n_p, rate, svc["mean_s"], svc["second_moment_s2"])
        own_dev = np.maximum(svc["p95_own_s"] - svc["mean_own_s"], 0.0)
        with np.errstate(invalid="ignore"):
            return (q["mean_s"] + svc["mean_own_s"] + np.sqrt((q["p95_s"] - q["mean_s"]) ** 2 + own_dev ** 2)
                    + d.prefill_params.request_overhead_s + decode_step_s)

    shape = np.broadcast_shapes(np.shape(svc["mean_s"]), np.shape(slo_ttft_p95_s))
    hi = np.broadcast_to(n_p / svc["mean_s"], shape) * (1.0 - RATE_TOLERANCE)
    lo = np.zeros_like(hi)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        ok = ttft(mid) <= slo_ttft_p95_s
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return np.where(ttft(np.zeros_like(lo)) <= slo_ttft_p95_s, lo, 0.0)


def pool_sizes_for_rate(d: DisaggArrays, t: TrafficArrays, rate_per_s, slo_ttft_p95_s, slo_tpot_p95_s,
                        max_replicas: int = MAX_POOL_REPLICAS) -> dict:
    """Smallest pools that carry ``rate_per_s`` within the SLOs: how to split a rate.

    n_d = ceil(rate / c_d), c_d the rate one decode replica carries within the TPOT SLO
    (:func:`decode_capacity_at_slo`; the TPOT does not depend on the prefill pool); then
    n_p is the smallest count, up to ``max_replicas``, whose TTFT p95 (prefill queue of
    n_p replicas, transfer, decode slot wait at n_d) is within its SLO. Returns arrays
    ``prefill_replicas`` and ``decode_replicas`` (0 where no count up to ``max_replicas``
    works) and the ``state`` at those counts (at least 1 each).
    """
    rate = np.asarray(rate_per_s, dtype=float)
    cap = decode_capacity_at_slo(d, t, slo_tpot_p95_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        n_d = np.where(cap > 0, np.maximum(np.ceil(rate / cap * (1.0 - RATE_TOLERANCE)), 1.0), np.inf)
    n_d = np.where(n_d <= max_replicas, n_d, 0.0)
    sized = d.with_replicas(decode_replicas=np.maximum(n_d, 1.0))
    model = _decode_model(d, t)
    n = _bisect(sized, t, lambda n: decode_state(sized, t, n, model)["rate_per_s"],
                lambda r: r <= rate / np.maximum(n_d, 1.0), RATE_BISECTION_STEPS)
    decode = decode_state(sized, t, n, model)
    n_p = np.zeros(np.broadcast_shapes(np.shape(n_d), np.shape(slo_ttft_p95_s)))
    for k in range(max_replicas, 0, -1):
        s = state_at_occupancy(sized.with_replicas(prefill_replicas=float(k)), t, n, model, decode)
        n_p = np.where(s["ttft_p95_s"] <= slo_ttft_p95_s, float(k), n_p)
    n_p = np.where(n_d > 0, n_p, 0.0)
    state = state_at_rate(d.with_replicas(np.maximum(n_p, 1.0), np.maximum(n_d, 1.0)), t, rate)
    return {"prefill_replicas": n_p, "decode_replicas": n_d, "state": state}
