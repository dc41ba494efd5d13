"""p95 TTFT and TPOT of one continuous-batching replica under Poisson load, and capacity at SLO.

Analytic and vectorized (DESIGN section 5). The state of a replica is parametrized by its
mean decode occupancy n (sequences decoding); everything else is explicit in n:

* step kinds: decode-only steps s_d(n) and mixed steps s_m(n) that also carry a prefill
  chunk of t tokens (chunked prefill), both from :func:`mixed_step_time_s`;
* a request's prefill takes k = max(1, E[P]/C + 1/2) mixed steps of t = E[P]/k tokens;
* per decode step the fraction of mixed steps is f = n k / (E[O] - 1), so the mean step
  interval is tau(n) = s_d(n) + f (s_m(n) - s_d(n)) and the rate is, by Little's law,
  lambda(n) = n / ((E[O] - 1) tau(n)), increasing in n;
* TPOT p95: the step time at an occupancy quantile n + z sqrt(n) * damping (a request's
  TPOT averages over its decode), plus the p95 count of mixed steps over its life;
* TTFT p95: prefill queue (M/G/1, Pollaczek-Khinchine, exponential tail) + wait for a
  free slot (M/M/c, Halfin-Whitt approximation of Erlang C, exponential tail) + prefill
  service of the p95 prompt + the step in progress.

Capacity at SLO is lambda(n*) for the largest n* <= min(max batch, KV capacity) meeting
both p95 SLOs (bisection on n; both p95s increase with n).
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from planner.serving.arrays import ConfigArrays
from planner.serving.memory import max_concurrency
from planner.serving.params import ServingParams
from planner.serving.roofline import mixed_step_time_s

#: Quantile of the latency SLOs.
P95 = 0.95
Z95 = 1.6448536269514722
#: Bisection steps on the occupancy n (precision n_max / 2^steps).
CAPACITY_BISECTION_STEPS = 22


@dataclass(frozen=True)
class TrafficArrays:
    """Length statistics of a traffic class, broadcastable against the configurations.

    prompt_mean_tokens, prompt_p95_tokens, prompt_cv2 (squared coefficient of variation),
    output_mean_tokens, output_median_tokens, prefix_hit_fraction (share of prompt tokens
    served from the prefix cache: no prefill compute, attention context unchanged).
    """

    prompt_mean_tokens: np.ndarray
    prompt_p95_tokens: np.ndarray
    prompt_cv2: np.ndarray
    output_mean_tokens: np.ndarray
    output_median_tokens: np.ndarray
    prefix_hit_fraction: np.ndarray

    @classmethod
    def from_distributions(cls, prompt, output, prefix_hit_fraction=0.0) -> "TrafficArrays":
        """From two :mod:`planner.traffic` distributions."""
        sample = prompt.sample(np.random.default_rng(0), 20000).astype(float)
        cv2 = float(sample.var() / sample.mean() ** 2)
        return cls(np.asarray(prompt.mean, float), np.asarray(prompt.quantile(P95), float),
                   np.asarray(cv2, float), np.asarray(output.mean, float),
                   np.asarray(output.quantile(0.5), float), np.asarray(prefix_hit_fraction, float))


def erlang_c_halfin_whitt(servers, offered_load) -> np.ndarray:
    """P(wait) of M/M/c, Halfin-Whitt approximation: 1 / (1 + beta Phi(beta) / phi(beta)).

    ``beta = (c - a) / sqrt(a)``; 1 when a >= c, 0 when a = 0.
    """
    c = np.asarray(servers, dtype=float)
    a = np.asarray(offered_load, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = (c - a) / np.sqrt(np.maximum(a, 1e-300))
        # Phi(beta)/phi(beta) via the scaled complementary error function is overkill here;
        # beta is clipped where the probability is negligible anyway.
        b = np.clip(beta, -8.0, 8.0)
        phi = np.exp(-0.5 * b * b) / np.sqrt(2.0 * np.pi)
        Phi = 0.5 * (1.0 + _erf(b / np.sqrt(2.0)))
        p = 1.0 / (1.0 + b * Phi / phi)
    p = np.where(beta > 8.0, 0.0, p)
    return np.where(a >= c, 1.0, np.where(a <= 0, 0.0, np.clip(p, 0.0, 1.0)))


def _erf(x):
    """Vectorized erf (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7)."""
    x = np.asarray(x, dtype=float)
    s = np.sign(x)
    x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-x * x)
    return s * y


def exponential_tail_p95(p_wait, mean_wait_given_wait) -> np.ndarray:
    """p95 of a wait that is 0 w.p. 1 - p_wait and exponential(mean) otherwise."""
    p = np.asarray(p_wait, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mean_wait_given_wait * np.log(p / (1.0 - P95))
    return np.where(p > 1.0 - P95, t, 0.0)


def state_at_occupancy(c: ConfigArrays, p: ServingParams, t: TrafficArrays, n) -> dict:
    """Rate, mean and p95 latencies of a replica whose mean decode occupancy is ``n``.

    ``c.batch`` is the max batch B; ``c.context_tokens`` the mean decode context.
    Returns arrays: rate_per_s, tpot_mean_s, tpot_p95_s, ttft_p95_s, stable (bool).
    """
    n = np.asarray(n, dtype=float)
    out_m1 = np.maximum(t.output_mean_tokens - 1.0, 1.0)
    prompt_eff = t.prompt_mean_tokens * (1.0 - t.prefix_hit_fraction)
    chunk = p.prefill_chunk_tokens
    k = np.maximum(1.0, prompt_eff / chunk + 0.5)
    tokens = prompt_eff / k
    s_d = mixed_step_time_s(c, p, n, 0.0)
    s_m = mixed_step_time_s(c, p, n, tokens, prompt_tokens=t.prompt_mean_tokens)
    delta = s_m - s_d
    mixed_fraction = n * k / out_m1
    tau = s_d + mixed_fraction * delta
    rate = n / (out_m1 * tau)

    # TPOT p95: occupancy quantile (damped) and p95 number of mixed steps over a life.
    slots = np.minimum(c.batch, max_concurrency(c, p))
    n_q = np.minimum(n + Z95 * np.sqrt(n) * p.occupancy_spread_damping, np.maximum(slots, n))
    steps = np.maximum(t.output_median_tokens - 1.0, 1.0)
    mu_k = mixed_fraction * steps
    k95 = mu_k + Z95 * np.sqrt(mu_k)
    s_dq = mixed_step_time_s(c, p, n_q, 0.0)
    s_mq = mixed_step_time_s(c, p, n_q, tokens, prompt_tokens=t.prompt_mean_tokens)
    tpot_p95 = s_dq + np.minimum(k95 / steps, 1.0) * (s_mq - s_dq)

    # TTFT p95: prefill service of the p95 prompt, queueing for the prefill lane and slots.
    p95_eff = t.prompt_p95_tokens * (1.0 - t.prefix_hit_fraction)
    k_p95 = np.ceil(np.maximum(p95_eff, 1.0) / chunk)
    service_p95 = k_p95 * mixed_step_time_s(c, p, n, np.minimum(p95_eff, chunk),
                                            prompt_tokens=t.prompt_p95_tokens)
    service_mean = k * s_m
    rho = rate * service_mean
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_wait = rate * service_mean ** 2 * (1.0 + t.prompt_cv2) / (2.0 * (1.0 - rho))
        w_pf = exponential_tail_p95(rho, mean_wait / np.maximum(rho, 1e-300))
        time_in_system = service_mean + out_m1 * tau
        offered = rate * time_in_system
        p_wait = erlang_c_halfin_whitt(slots, offered)
        w_slot = exponential_tail_p95(p_wait, time_in_system / np.maximum(slots - offered, 1e-300))
    ttft_p95 = w_pf + w_slot + service_p95 + s_d
    stable = (rho < 1.0) & (offered < slots) & (n <= slots) & (slots >= 1)
    inf = np.inf
    return {"rate_per_s": rate, "tpot_mean_s": tau, "tpot_p95_s": np.where(stable, tpot_p95, inf),
            "ttft_p95_s": np.where(stable, ttft_p95, inf), "stable": stable, "occupancy": n}


def _n_max(c: ConfigArrays, p: ServingParams) -> np.ndarray:
    return np.minimum(c.batch, max_concurrency(c, p)).astype(float)


def capacity_at_slo(c: ConfigArrays, p: ServingParams, t: TrafficArrays, slo_ttft_p95_s,
                    slo_tpot_p95_s, steps: int = CAPACITY_BISECTION_STEPS) -> dict:
    """Largest Poisson rate [1/s] one replica carries with both p95s within the SLOs.

    Returns arrays: max_rate_per_s (0 where even a trickle misses an SLO), and the state
    at that rate (ttft_p95_s, tpot_p95_s, occupancy), plus ``binding`` ("ttft", "tpot",
    "slots" at capacity, "none" feasible nowhere -> see ``first_violation``).
    """
    n_max = _n_max(c, p)
    shape = np.broadcast_shapes(n_max.shape, np.shape(slo_ttft_p95_s), np.shape(slo_tpot_p95_s),
                                np.shape(t.prompt_mean_tokens))
    lo = np.zeros(shape)
    hi = np.broadcast_to(n_max, shape).astype(float)

    def ok(n):
        s = state_at_occupancy(c, p, t, n)
        return (s["ttft_p95_s"] <= slo_ttft_p95_s) & (s["tpot_p95_s"] <= slo_tpot_p95_s) & s["stable"], s

    top_ok, _ = ok(hi)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        good, _ = ok(mid)
        lo = np.where(good, mid, lo)
        hi = np.where(good, hi, mid)
    n_star = np.where(top_ok, np.broadcast_to(n_max, shape), lo)
    state = state_at_occupancy(c, p, t, n_star)
    rate = np.where(n_star > 0, state["rate_per_s"], 0.0)
    # Which SLO fails at a trickle (for the rejection reasons).
    trickle = state_at_occupancy(c, p, t, np.full(shape, 1e-6))
    first = np.where(trickle["ttft_p95_s"] > slo_ttft_p95_s, "ttft",
                     np.where(trickle["tpot_p95_s"] > slo_tpot_p95_s, "tpot", ""))
    return {"max_rate_per_s": np.nan_to_num(rate), "ttft_p95_s": state["ttft_p95_s"],
            "tpot_p95_s": state["tpot_p95_s"], "occupancy": n_star, "slo_violated_at_low_load": first}


def state_at_rate(c: ConfigArrays, p: ServingParams, t: TrafficArrays, rate_per_s,
                  steps: int = 40) -> dict:
    """The replica's state at a given Poisson rate (bisection on n); inf p95s if overloaded."""
    rate = np.asarray(rate_per_s, dtype=float)
    n_max = _n_max(c, p)
    shape = np.broadcast_shapes(n_max.shape, rate.shape)
    lo, hi = np.zeros(shape), np.broadcast_to(n_max, shape).astype(float)
    top = state_at_occupancy(c, p, t, hi)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        below = state_at_occupancy(c, p, t, mid)["rate_per_s"] < rate
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    state = state_at_occupancy(c, p, t, hi)
    overloaded = (top["rate_per_s"] < rate) | ~state["stable"]
    for key in ("tpot_p95_s", "ttft_p95_s", "tpot_mean_s"):
        state[key] = np.where(overloaded, np.inf, state[key])
    state["overloaded"] = overloaded
    return state
