"""The load models of ``planner accuracy``: how a benchmark drove the engine, as step times.

* :func:`closed_loop`: ``concurrency`` N users, the staggered steady state blended with the
  synchronized first wave of the run (:class:`Harness`), quantiles of their mixture;
* :func:`open_loop`: ``request_rate``, Poisson arrivals, Pollaczek-Khinchine and Erlang C;
* :func:`burst`: R requests submitted at once (``max_throughput`` with a known count);
* :func:`static_batch`: N prompts prefilled together, then decoded together (``static_batch``
  N and ``single``, N = 1).

All take :class:`planner.serving.arrays.ConfigArrays` and :class:`ServingParams` (fields
may be per-row arrays) and return per-row arrays; :mod:`planner.accuracy` maps the rows of a
measurement file onto them.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from planner.serving import memory
from planner.serving.arrays import ConfigArrays
from planner.serving.params import ServingParams
from planner.serving.queueing import erlang_c_halfin_whitt, exponential_tail_quantile
from planner.serving.roofline import StepModel

#: Fixed-point iterations of the closed loop (damped).
CLOSED_LOOP_ITERATIONS = 30
#: Bisection steps of the open-loop occupancy (precision slots / 2^steps).
OPEN_LOOP_BISECTION_STEPS = 24
#: Damping of the occupancy spread one request's TPOT sees (it averages the step time over
#: its decode): quantiles use n + z_q sqrt(n) * this.
OCCUPANCY_SPREAD_DAMPING = 0.5
#: Cap of the prefill lane's utilization in the M/D/1 wait (the closed loop self-limits).
RHO_CAP = 0.98
#: Default weight of the synchronized first wave in a closed-loop run (1 / requests per
#: user): NVIDIA aiconfigurator assumes "requests 10x of concurrency"
#: (``sdk/backends/trtllm_backend.py``, its TTFT correction). Calibrated (globally).
FIRST_WAVE_WEIGHT = 0.1

@dataclass(frozen=True)
class Harness:
    """How the benchmark client drove the engine (not a property of the serving model).

    first_wave_weight: share of a closed-loop run's requests that behave like the
    synchronized first wave (all users submitting at once), per row or scalar.
    """

    first_wave_weight: object = FIRST_WAVE_WEIGHT

    def take(self, index) -> "Harness":
        w = np.asarray(self.first_wave_weight, dtype=float)
        return Harness(w[index] if w.ndim == 1 and w.size > 1 else w)


def _chunking(p: ServingParams, prompt):
    """k = max(1, p/C + 1/2) prefill chunks of t = p/k tokens (C = ``prefill_chunk_tokens``)."""
    k = np.maximum(1.0, prompt / p.prefill_chunk_tokens + 0.5)
    return k, prompt / k


_STEP_CACHE: dict = {}


def step_model(c: ConfigArrays, p: ServingParams) -> StepModel:
    """The :class:`StepModel` of ``(c, p)``, built once for the repeated step times of one
    load model (the fixed points call it dozens of times with the same arrays)."""
    if _STEP_CACHE.get("c") is not c or _STEP_CACHE.get("p") is not p:
        _STEP_CACHE.update(c=c, p=p, model=StepModel(c, p))
    return _STEP_CACHE["model"]


def step_mix(c: ConfigArrays, p: ServingParams, n, prompt, output) -> dict:
    """Mean step time tau(n) with n sequences decoding and their replacements prefilling.

    Notes
    -----
    Per step n/(o-1) requests finish and as many prompts must be prefilled: T = n p/(o-1)
    prompt tokens per step, carried by mixed steps of t = p/k tokens (chunked prefill).
    The mixed fraction is f = min(1, T/t); when T > t every step carries T tokens.
    tau = (1 - f) s_d(n) + f s_m(n, max(t, T)) [s] (for T <= t the relation of
    :func:`planner.serving.queueing.state_at_occupancy`). The prefill lane's load is
    rho = T / C (C prompt tokens per step at most).
    """
    n = np.asarray(n, dtype=float)
    out_m1 = np.maximum(output - 1.0, 1.0)
    k, t = _chunking(p, prompt)
    need = n * prompt / out_m1
    f = np.minimum(1.0, need / t)
    s_d = step_model(c, p).time(n, 0.0)
    s_m = step_model(c, p).time(n, np.maximum(t, need), prompt)
    s_chunk = step_model(c, p).time(n, t, prompt)
    return {"tau_s": (1.0 - f) * s_d + f * s_m, "s_d": s_d, "prefill_service_s": k * s_chunk,
            "rho": np.minimum(need / p.prefill_chunk_tokens, RHO_CAP)}


def wave_prefill_s(c: ConfigArrays, p: ServingParams, requests, prompt, budget_tokens=None,
                   max_prompts=np.inf) -> np.ndarray:
    """Time to prefill ``requests`` prompts submitted together: max(1, R p / C, R / B) steps
    of R p / steps tokens each (batched, chunked prefill) [s]. C: ``budget_tokens`` where
    given (a prefill-only worker's step budget), else ``p.prefill_chunk_tokens``; B:
    ``max_prompts`` per step (an engine's max batch; no limit by default)."""
    requests = np.asarray(requests, dtype=float)
    tokens = requests * prompt
    steps = np.maximum(1.0, tokens / (p.prefill_chunk_tokens if budget_tokens is None else budget_tokens))
    steps = np.maximum(steps, requests / max_prompts)
    return steps * step_model(c, p).time(0.0, tokens / steps, prompt)


def _z(q) -> np.ndarray:
    """Standard normal quantile of q (0 where q is NaN: the mean)."""
    q = np.asarray(q, dtype=float)
    flat = [NormalDist().inv_cdf(v) if np.isfinite(v) else 0.0 for v in q.reshape(-1)]
    return np.array(flat, dtype=float).reshape(q.shape)


def exponential_wait(mean_wait, p_wait, q) -> np.ndarray:
    """Wait that is 0 w.p. 1 - P and exponential otherwise: its mean (q NaN) or q-quantile.

    Notes
    -----
    Mean ``mean_wait``; quantile (mean_wait / P) ln(P / (1 - q)) where P > 1 - q, else 0
    (:func:`planner.serving.queueing.exponential_tail_quantile`).
    """
    q = np.asarray(q, dtype=float)
    p_wait = np.clip(np.asarray(p_wait, dtype=float), 1e-12, 1.0)
    tail = exponential_tail_quantile(p_wait, mean_wait / p_wait, np.minimum(q, 1.0 - 1e-12))
    return np.where(np.isfinite(q), tail, mean_wait)


def closed_loop(c: ConfigArrays, p: ServingParams, users, slots, prompt, output,
                first_wave_weight=FIRST_WAVE_WEIGHT, quantile=np.nan, poll_steps=1.0,
                balance_ranks=1.0, balance_timeout_steps=0.0) -> dict:
    """TPOT, TTFT (mean, or the ``quantile`` where given) and rate of a closed loop of ``users``.

    Notes
    -----
    A = min(U, slots) requests hold KV slots. Two limits of a closed loop of identical
    requests are blended with the weight w of the synchronized first wave:

    * staggered (steady state): requests cycle through the prefill wait W, the prefill
      service S (k mixed steps) and o - 1 steps of tau(n); fixed point (damped) of
      n = A (o-1) tau / C_s, C_s = W + S + (o-1) tau, with the M/D/1 wait
      W = rho S / (2 (1 - rho)); an arriving request meets the other A - 1 requests:
      TTFT_s = S + (A - 1)/A (W + K tau/2) (half a step in progress, K = 1: the engine
      looks for new requests between every two steps; an engine that polls every K decode
      steps, ``poll_steps``, leaves an arrival waiting for the rest of a K-step poll cycle,
      uniform on [0, K tau], docs/serving-model.md section 14.6); an engine that balances
      new prefills over D attention-DP ranks (``balance_ranks``; TensorRT-LLM
      ``attention_dp_config.enable_balance``) holds them until every rank has one or
      T = ``balance_timeout_steps`` steps passed: a window W_b = min((D - 1)/lambda, T tau)
      from the first waiting arrival (where A >= D), uniform over the window's arrivals, so
      TTFT_s = S + (A - 1)/A (W + (K tau + W_b)/2);
    * synchronized wave: all A prompts prefill together in T_pf (:func:`wave_prefill_s`),
      then all decode: TTFT_w = (A + 1)/(2A) T_pf, TPOT_w = s_d(A) + (A - 1)/(2A) T_pf/(o - 1),
      C_w = T_pf + (o - 1) s_d(A).

    TTFT = (1-w) TTFT_s + w TTFT_w + (U - A)/lambda, TPOT likewise,
    lambda = A / ((1-w) C_s + w C_w) [1/s]. Quantiles (an approximation): TTFT's is the
    quantile of the mixture of the two populations (:func:`mixture_ttft_quantile`: a share
    1 - w of requests staggered, with the waits' exponential tails and the step in progress,
    a share w in the wave, uniform over T_pf), plus the slot wait; TPOT's blends the wave's
    spread q T_pf / (o - 1) and the step in progress q tau with the same weight.
    """
    users = np.asarray(users, dtype=float)
    w = np.asarray(first_wave_weight, dtype=float)
    q = np.asarray(quantile, dtype=float)
    poll = np.maximum(np.asarray(poll_steps, dtype=float), 1.0)
    quant = np.isfinite(q)
    out_m1 = np.maximum(output - 1.0, 1.0)
    active = np.maximum(np.minimum(users, np.asarray(slots, dtype=float)), 1.0)
    n = active.copy()
    others = (active - 1.0) / active  # an arriving request meets the other A - 1 only
    polled = others * (poll - 1.0) / 2.0   # mean poll wait beyond the step in progress, in steps
    ranks = np.asarray(balance_ranks, dtype=float)
    balanced = (ranks > 1.0) & (active >= ranks)
    window = np.zeros(np.broadcast_shapes(np.shape(active), np.shape(ranks)))

    def balance_window(cycle, tau):   # W_b: until every rank has a prefill, or the timeout
        lam = active / cycle
        return np.where(balanced, np.minimum((ranks - 1.0) / lam, balance_timeout_steps * tau), 0.0)

    for _ in range(CLOSED_LOOP_ITERATIONS):
        mix = step_mix(c, p, n, prompt, output)
        wait = (mix["rho"] * mix["prefill_service_s"] / (2.0 * (1.0 - mix["rho"])) + polled * mix["tau_s"]
                + others * window / 2.0)
        cycle = wait + mix["prefill_service_s"] + out_m1 * mix["tau_s"]
        n = 0.5 * n + 0.5 * active * out_m1 * mix["tau_s"] / cycle
        window = 0.5 * window + 0.5 * balance_window(cycle, mix["tau_s"])
    mix = step_mix(c, p, n, prompt, output)
    tau, service, rho = mix["tau_s"], mix["prefill_service_s"], mix["rho"]
    wait = rho * service / (2.0 * (1.0 - rho))
    cycle_s = wait + polled * tau + others * window / 2.0 + service + out_m1 * tau
    residual = poll * tau + window   # the width of the admission window an arrival lands in
    ttft_s = others * (exponential_wait(wait, rho, q) + np.where(quant, q, 0.5) * residual) + service
    t_pf = wave_prefill_s(c, p, active, prompt)
    s_full = step_model(c, p).time(active, 0.0)
    ttft_w = np.where(quant, q, (active + 1.0) / (2.0 * active)) * t_pf
    tpot_w = s_full + np.where(quant, q, (active - 1.0) / (2.0 * active)) * t_pf / out_m1
    cycle_w = t_pf + out_m1 * s_full
    rate = active / ((1.0 - w) * cycle_s + w * cycle_w)
    slot_wait = np.maximum(users - active, 0.0) / rate * np.where(quant, 2.0 * q, 1.0)
    ttft = (1.0 - w) * ttft_s + w * ttft_w
    if quant.any():  # a quantile of the two populations is not the blend of their quantiles
        mixed = mixture_ttft_quantile(np.where(quant, q, 0.5), w, service, others, wait, rho, residual, t_pf)
        ttft = np.where(quant, mixed, ttft)
    ttft = ttft + slot_wait
    return {"tpot_s": (1.0 - w) * tau + w * tpot_w, "ttft_s": ttft, "rate_per_s": rate, "occupancy": n}


#: Bisection steps of the closed-loop TTFT mixture quantile.
MIXTURE_BISECTION_STEPS = 30


def mixture_ttft_quantile(q, w, service, others, wait, rho, tau, t_pf) -> np.ndarray:
    """The q-quantile x of a TTFT that is staggered with probability 1 - w, in the wave with
    probability w: (1 - w) F_s(x) + w F_w(x) = q.

    Notes
    -----
    Staggered quantiles x_s(p) = others (E(p) + p tau) + service (E: the prefill wait's
    exponential tail, :func:`exponential_wait`); the wave is uniform on [0, T_pf]. Bisection
    on p with x = x_s(p) (F_s(x) = p); where even the staggered maximum x_s(1) leaves
    (1 - w) + w F_w < q, the quantile is the wave's: T_pf (q - (1 - w)) / w. w = 0 gives
    x_s(q), w = 1 gives q T_pf.
    """
    q, w = np.asarray(q, dtype=float), np.asarray(w, dtype=float)
    t_pf = np.maximum(np.asarray(t_pf, dtype=float), 1e-300)

    def x_s(p):
        return others * (exponential_wait(wait, rho, p) + p * tau) + service

    def cdf(p):
        return (1.0 - w) * p + w * np.clip(x_s(p) / t_pf, 0.0, 1.0)

    shape = np.broadcast_shapes(q.shape, np.shape(service), np.shape(t_pf), w.shape)
    lo, hi = np.zeros(shape), np.full(shape, 1.0 - 1e-9)
    for _ in range(MIXTURE_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        below = cdf(mid) < q
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    x = x_s(hi)
    wave_side = cdf(np.full(shape, 1.0 - 1e-9)) < q
    wave_x = t_pf * (q - (1.0 - w)) / np.maximum(w, 1e-12)
    return np.where(wave_side, np.maximum(wave_x, x), x)


def open_loop(c: ConfigArrays, p: ServingParams, rate, prompt, output, requests=np.nan,
              quantile=np.nan) -> dict:
    """TPOT, TTFT (mean or ``quantile``) and achieved rate at a Poisson ``rate`` per replica.

    ``c.batch`` holds the replica's slots (max batch and KV capacity).

    Notes
    -----
    The mean occupancy n solves lambda = n / ((o - 1) tau(n)) (bisection; tau(n) of
    :func:`step_mix`, Little's law as in :func:`planner.serving.queueing.state_at_occupancy`).
    TTFT = M/G/1 prefill wait (Pollaczek-Khinchine, fixed prompts) + Erlang-C slot wait
    P(wait) T / (slots - a) (Halfin-Whitt) + prefill service S + half a step in progress.
    Past the capacity mu the finite run of R requests builds a backlog whose mean wait is
    (R/2)(1/mu - 1/lambda) (infinite when R is unknown). Quantiles: exponential tails of
    the waits, TPOT at the occupancy n + z_q sqrt(n) d (d = OCCUPANCY_SPREAD_DAMPING).
    """
    rate = np.asarray(rate, dtype=float)
    q = np.asarray(quantile, dtype=float)
    quant = np.isfinite(q)
    slots = np.maximum(np.minimum(c.batch, memory.max_concurrency(c, p)), 1.0)
    out_m1 = np.maximum(output - 1.0, 1.0)
    shape = np.broadcast_shapes(slots.shape, rate.shape, np.shape(prompt))
    lo, hi = np.zeros(shape), np.broadcast_to(slots, shape).astype(float)
    mu = hi / (out_m1 * step_mix(c, p, hi, prompt, output)["tau_s"])
    over = mu < rate
    for _ in range(OPEN_LOOP_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        below = mid / (out_m1 * step_mix(c, p, mid, prompt, output)["tau_s"]) < rate
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    n = np.where(over, slots, hi)
    mix = step_mix(c, p, n, prompt, output)
    tau, service = mix["tau_s"], mix["prefill_service_s"]
    achieved = np.where(over, mu, rate)
    rho = np.minimum(achieved * service, RHO_CAP)
    w_pf = achieved * service ** 2 / (2.0 * (1.0 - rho))
    in_system = service + out_m1 * tau
    offered = np.minimum(achieved * in_system, slots * RHO_CAP)
    p_wait = erlang_c_halfin_whitt(slots, offered)
    w_slot = p_wait * in_system / (slots - offered)
    requests = np.asarray(requests, dtype=float)
    known = np.isfinite(requests)
    backlog = np.nan_to_num(requests) * np.where(quant, q, 0.5) * np.maximum(1.0 / mu - 1.0 / rate, 0.0)
    backlog = np.where(over, np.where(known, backlog, np.inf), 0.0)
    ttft = (exponential_wait(w_pf, rho, q) + exponential_wait(w_slot, p_wait, q) + service
            + np.where(quant, q, 0.5) * tau + backlog)
    n_q = np.clip(n + _z(q) * np.sqrt(n) * OCCUPANCY_SPREAD_DAMPING, 0.0, slots)
    tpot = np.where(quant, step_mix(c, p, n_q, prompt, output)["tau_s"], tau)
    return {"tpot_s": tpot, "ttft_s": ttft, "rate_per_s": achieved, "occupancy": n}


def burst(c: ConfigArrays, p: ServingParams, requests, slots, prompt, output) -> dict:
    """R requests submitted at once (``max_throughput`` with a known request count).

    Notes
    -----
    The first m = min(R, slots) requests are prefilled together (:func:`wave_prefill_s`),
    their mean TTFT is (m + 1)/(2m) T_pf(m); the other R - m wait for slots freed at the
    steady-state rate mu (the staggered closed loop of m), on average (R - m + 1)/(2 mu) + S.
    Duration T_pf(m) + (R - m)/mu + (o - 1) tau; the achieved rate is R / duration.
    """
    requests = np.asarray(requests, dtype=float)
    m = np.maximum(np.minimum(requests, slots), 1.0)
    steady = closed_loop(c, p, m, m, prompt, output, first_wave_weight=0.0)
    t_pf = wave_prefill_s(c, p, m, prompt)
    mu = steady["rate_per_s"]
    later = np.maximum(requests - m, 0.0)
    single = wave_prefill_s(c, p, 1.0, prompt)
    ttft = (m * (m + 1.0) / (2.0 * m) * t_pf + later * ((later + 1.0) / (2.0 * mu) + single)) / requests
    duration = t_pf + later / mu + np.maximum(output - 1.0, 0.0) * steady["tpot_s"]
    return {"tpot_s": steady["tpot_s"], "ttft_s": ttft, "rate_per_s": requests / duration,
            "occupancy": steady["occupancy"]}


def static_batch(c: ConfigArrays, p: ServingParams, batch, prompt, output) -> dict:
    """``batch`` requests prefilled in one step, then decoded together (``static_batch`` N;
    ``single``: N = 1).

    Notes
    -----
    TTFT = T_pf = s(0, N p) (one step of N p prompt tokens), TPOT = s_d(N), rate
    N / (T_pf + (o - 1) s_d(N)), s the step time of :class:`planner.serving.roofline.StepModel`.
    """
    s_d = step_model(c, p).time(batch, 0.0)
    t_pf = step_model(c, p).time(0.0, batch * prompt, prompt)
    return {"tpot_s": s_d, "ttft_s": t_pf, "rate_per_s": batch / (t_pf + np.maximum(output - 1.0, 0.0) * s_d)}
