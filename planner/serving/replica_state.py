"""The state of one continuous-batching replica under Poisson load at a mean decode occupancy.

Analytic and vectorized (docs/serving-model.md section 9); checked against the discrete-event simulator
by ``benchmarks/bench_queueing_vs_sim.py``. The state of a replica is parametrized by its
mean decode occupancy n (sequences decoding); everything else is explicit in n:

* iteration times from :class:`planner.serving.roofline.StepModel` at the length-biased
  decode context E[P] + E[O](1 + cv_O^2)/2: decode-only steps s_d(n), and the prefill of
  one request per prompt stratum (full chunks of C tokens, then the remainder, each
  iteration also advancing the n decodes); ``extra`` = its time beyond plain decode steps;
* Little's law: tau(n) = s_d(n) + n extra / (E[O] - 1) is the mean step interval and
  lambda(n) = n / ((E[O] - 1) tau(n));
* self-excitation: each arrival lengthens the lives of the requests decoding (its
  prefill, and one more decoder for about half their remaining life), branching ratio
  phi = lambda (extra + b (E[O] - 1)/2), b = ds_d/dn; occupancy and arrival counts have
  1/(1 - phi)^2 times their Poisson variance, and requests see n + 1/(1 - phi)^2 decoders;
* TPOT p95: tau plus the p95 of a mixture over output strata of normal spreads: arrivals
  during a life (compound Poisson, inflated) add their prefill time over the O - 1 tokens
  and b/2 through occupancy; plus the occupancy the request starts with;
* TTFT p95: residual of the iteration in progress + prefill queue ahead (M/G/1,
  Pollaczek-Khinchine mean, exponential tail) + wait for a slot (Halfin-Whitt, inflated
  variance), correlated with QUEUE_CORRELATION; combined in quadrature with the own
  prefill time (the p95 prompt's).

The bisections on n (capacity at SLO, state at a rate) are in :mod:`planner.serving.queueing`,
which re-exports this module's public names; :func:`p95_floors` bounds the p95s over all
occupancies for them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.serving.arrays import ConfigArrays, scaled
from planner.serving.memory import max_concurrency
from planner.serving.params import ServingParams
from planner.serving.roofline import StepModel
from planner.serving.tails import (P95, exponential_tail_p95, halfin_whitt_wait_p95, mixture_p95_bracket,
                                   mixture_p95_offset, on_rows)

#: Correlation of the residual step and the queue waits ahead of a new request.
QUEUE_CORRELATION = 0.5
#: Largest branching ratio (life extension per arrival x rate) treated as stable.
MAX_BRANCHING_RATIO = 0.95


@dataclass(frozen=True)
class TrafficArrays:
    """Length statistics of a traffic class, broadcastable against the configurations.

    Attributes
    ----------
    prompt_mean_tokens, prompt_p95_tokens : prompt mean and 95th percentile.
    prompt_strata_tokens, prompt_strata_attention_tokens : tuples of arrays, the mean
        prompt of each of ``PROMPT_STRATA`` equal-probability strata and its E[P^2]/E[P]
        (prefill cost is convex in P: the strata carry the spread into the mean).
    output_mean_tokens, output_cv2 : output mean and squared coefficient of variation.
    prompt_strata_var : variance of the prompt within each stratum.
    output_strata_inv : E[1/(O - 1)] within each of ``OUTPUT_STRATA`` equal-probability
        strata of the outputs O > 1 (a request's TPOT spread scales with 1/(O - 1)).
    prefix_hit_fraction : share of prompt tokens served from the prefix cache (no prefill
        compute; the attention context is unchanged).
    """

    prompt_mean_tokens: np.ndarray
    prompt_p95_tokens: np.ndarray
    prompt_strata_tokens: tuple
    prompt_strata_attention_tokens: tuple
    prompt_strata_var: tuple
    output_mean_tokens: np.ndarray
    output_cv2: np.ndarray
    output_strata_inv: tuple
    prefix_hit_fraction: np.ndarray

    #: Samples drawn (seeded) to estimate moments of non-analytic distributions.
    MOMENT_SAMPLES = 20000
    #: Equal-probability strata of the prompt and output distributions.
    PROMPT_STRATA = 3
    OUTPUT_STRATA = 4

    @classmethod
    def from_distributions(cls, prompt, output, prefix_hit_fraction=0.0) -> "TrafficArrays":
        """From two :mod:`planner.traffic` distributions (moments from seeded samples)."""
        rng = np.random.default_rng(0)
        sp = np.sort(prompt.sample(rng, cls.MOMENT_SAMPLES).astype(float))
        so = output.sample(rng, cls.MOMENT_SAMPLES).astype(float)
        long = np.sort(so[so > 1])
        long = long if long.size else np.array([2.0])      # outputs of 1 token have no TPOT
        long = np.resize(long, max(long.size, cls.OUTPUT_STRATA))
        strata = np.array_split(sp, cls.PROMPT_STRATA)
        f = lambda x: np.asarray(float(x), float)  # noqa: E731
        return cls(f(prompt.mean), f(prompt.quantile(P95)),
                   tuple(f(s.mean()) for s in strata), tuple(f((s ** 2).mean() / s.mean()) for s in strata),
                   tuple(f(s.var()) for s in strata), f(output.mean), f(so.var() / so.mean() ** 2),
                   tuple(f(np.mean(1.0 / (s - 1.0))) for s in np.array_split(long, cls.OUTPUT_STRATA)),
                   f(prefix_hit_fraction))

    @property
    def decode_context_tokens(self) -> np.ndarray:
        """Mean context of the sequences decoding: E[P] + E[O](1 + cv_O^2)/2 (length-biased)."""
        return self.prompt_mean_tokens + self.output_mean_tokens * (1.0 + self.output_cv2) / 2.0


def step_model(c: ConfigArrays, p: ServingParams, t: TrafficArrays) -> StepModel:
    """The iteration-time model of configurations ``c`` at the traffic's decode context."""
    return StepModel(c, p, t.decode_context_tokens)


def state_at_occupancy(c: ConfigArrays, p: ServingParams, t: TrafficArrays, n,
                       steps: StepModel | None = None, slots=None, within: tuple | None = None) -> dict:
    """Rate, mean and p95 latencies of a replica whose mean decode occupancy is ``n``.

    ``c.batch`` is the max batch B; ``c.context_tokens`` the mean decode context.
    ``steps``: :func:`step_model` of ``c``, ``p``, ``t`` and ``slots``: ``_n_max(c, p)``,
    when the caller already has them (a bisection calls this many times).
    ``within = (ttft_slo_s, tpot_slo_s)``, scalars: the TPOT p95 (its normal mixture, the
    costliest part) only on the rows that may meet both (stable, TTFT p95 and mean TPOT
    within them; the p95 is at least the mean); +inf elsewhere, where no SLO pair at most
    as loose is met either way (a bisection's decisions).
    Returns arrays: rate_per_s, tpot_mean_s, tpot_p95_s, ttft_p95_s, stable (bool).
    """
    steps = steps or step_model(c, p, t)
    slots = _n_max(c, p) if slots is None else slots
    state = _state_parts(steps, t, n, slots, p.prefill_chunk_tokens, p.request_overhead_s)
    tau, common, per_inv = state["tpot_mean_s"], state.pop("tpot_common"), state.pop("tpot_per_inv")
    stable, ttft_p95 = state["stable"], state["ttft_p95_s"]
    # (not "> bound" rather than "<= bound": NaN rows get their p95 computed, as without ``within``)
    may_meet = None if within is None else stable & ~(ttft_p95 > within[0]) & ~(tau > within[1])
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot_p95 = _tpot_p95(tau, common, per_inv, t.output_strata_inv, may_meet)
    return {"rate_per_s": state["rate_per_s"], "tpot_mean_s": tau, "tpot_p95_s": np.where(stable, tpot_p95, np.inf),
            "ttft_p95_s": ttft_p95, "stable": stable, "occupancy": state["occupancy"]}


def _state_parts(steps: StepModel, t: TrafficArrays, n, slots, chunk, request_overhead_s,
                 tpot_slo_s=None) -> dict:
    """:func:`state_at_occupancy` without its TPOT p95: the same arrays but ``tpot_p95_s``,
    with the parts of that p95's spreads, ``tpot_common`` and ``tpot_per_inv`` (see
    :func:`_tpot_p95`). Its inputs are all it reads of the configurations and parameters:
    their step model, slots ``_n_max(c, p)`` and ``p.prefill_chunk_tokens``,
    ``p.request_overhead_s`` (:func:`param_rows` takes rows of them).

    ``tpot_slo_s`` (a bisection's state, its TPOT SLOs): also ``_tpot_bracket``
    (:func:`tpot_bracket`), and the TTFT p95 only on the rows that may meet that SLO
    (stable, the bracket's low end within it; elsewhere, where no such SLO pair is met,
    +inf, or the number where :func:`planner.serving.tails.on_rows` computes every row)."""
    n = np.asarray(n, dtype=float)
    out_m1 = np.maximum(t.output_mean_tokens - 1.0, 1.0)
    hit = 1.0 - t.prefix_hit_fraction

    at_n = steps.decode_terms(n)          # shared by every step with n decoders

    def step(batch, tokens=0.0, prompt=None):
        return steps.time(batch, tokens, prompt, terms=at_n if batch is n else None)

    s_d = step(n)
    slope = step(n + 1.0) - s_d                                   # b: step time per decoder
    # Prefill of one request, per prompt stratum: full chunks, then the remainder.
    s_full = step(n, chunk, t.prompt_p95_tokens)
    per_token = np.maximum(s_full - s_d, 0.0) / chunk              # prefill time per prompt token
    chunks = _ChunkedPrefill(s_full, s_d)
    extra = extra2 = service = service2 = None       # sums over the strata (_sum: the first term as it is)
    m = len(t.prompt_strata_tokens)
    per_token2 = per_token ** 2
    for tokens, attn, var_p in zip(t.prompt_strata_tokens, t.prompt_strata_attention_tokens,
                                   t.prompt_strata_var):
        eff = np.maximum(tokens * hit, 1.0)
        full = np.ceil(eff / chunk) - 1.0
        cost = chunks.cost(full, step(n, eff - full * chunk, attn))  # time of its prefill steps
        over = cost - chunks.decode_steps(full)                    # beyond plain decode steps
        extra = _sum(extra, over / m)
        spread = scaled(per_token2 * var_p, hit ** 2)             # the stratum's prompt spread
        extra2 = _sum(extra2, (over ** 2 + spread) / m)
        service = _sum(service, cost / m)
        service2 = _sum(service2, (cost ** 2 + spread) / m)
    # Arrivals lengthen the lives of the requests decoding, which see more arrivals: a
    # branching ratio phi inflates occupancy and arrival-count variances by 1/(1-phi)^2.
    with np.errstate(divide="ignore", invalid="ignore"):
        tau0 = s_d + n * extra / out_m1
        rate0 = n / (out_m1 * tau0)
        phi = np.clip(rate0 * (extra + slope * out_m1 / 2.0), 0.0, MAX_BRANCHING_RATIO)
        burst2 = 1.0 / (1.0 - phi) ** 2
        # Requests see the occupancy length-biased: n + Var(n)/n = n + burst^2.
        tau = tau0 + slope * burst2
        rate = n / (out_m1 * tau)
        # TPOT spread of a request with O output tokens: arrivals during its life (compound
        # Poisson, inflated), each adding its prefill time over the O - 1 tokens and b/2
        # through occupancy; plus the occupancy it starts with. p95 over the O strata.
        arrivals, slope2 = rate * tau * burst2, slope ** 2   # (computed once: the same products)
        common = arrivals * (extra * slope + slope2 * out_m1 / 4.0) + slope2 * n / 3.0
        per_inv = arrivals * extra2

    # TTFT p95: prefill service of the p95 prompt, queueing for the prefill lane and slots.
    service_p95 = _p95_prompt_service(t, chunk, hit, chunks, lambda tokens: step(n, tokens, t.prompt_p95_tokens))
    rho = rate * service                 # share of time spent in prefill iterations
    with np.errstate(invalid="ignore", over="ignore"):
        time_in_system = service + out_m1 * tau
        offered = rate * time_in_system
    stable = (rho < 1.0) & (offered < slots) & (n <= slots) & (slots >= 1) & (phi < MAX_BRANCHING_RATIO)
    out = {"rate_per_s": rate, "tpot_mean_s": tau, "stable": stable, "occupancy": n, "tpot_common": common,
           "tpot_per_inv": per_inv}
    terms = (rate, service, service2, s_full, s_d, rho, service_p95, slots, burst2, time_in_system, offered,
             request_overhead_s)
    if tpot_slo_s is None:
        ttft_p95 = _ttft_p95(*terms)
    else:
        out["_tpot_bracket"] = tpot_bracket(out, t.output_strata_inv)
        ttft_p95 = on_rows(_ttft_p95, terms, stable & ~(out["_tpot_bracket"][0] > tpot_slo_s), np.inf)
    out["ttft_p95_s"] = np.where(stable, ttft_p95, np.inf)
    return out


def _ttft_p95(rate, service, service2, s_full, s_d, rho, service_p95, slots, burst2, time_in_system, offered,
              request_overhead_s) -> np.ndarray:
    """The TTFT p95 of :func:`_state_parts` (before the unstable rows' +inf) from its terms."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # Residual of the iteration in progress at arrival: a prefill iteration (length
        # ~ E[cost^2]/E[cost], at most a full chunk) with probability rho, else a decode step.
        s_long = np.minimum(service2 / service, s_full)
        r_mean = 0.5 * (rho * s_long + (1.0 - rho) * s_d)
        r_p95 = np.where(rho > 1.0 - P95, s_long * (1.0 - (1.0 - P95) / rho), s_d)
        # Prefill queue ahead (M/G/1, Pollaczek-Khinchine, exponential tail).
        w_mean = np.where(rho < 1.0, rate * service2 / (2.0 * (1.0 - rho)), np.inf)
        w_p95 = exponential_tail_p95(rho, w_mean / np.maximum(rho, 1e-300))
        # Slots: M/M/c with the bursty occupancy's variance (Halfin-Whitt).
        w_slot = halfin_whitt_wait_p95(slots, offered, burst2,
                                       time_in_system / np.maximum(slots - offered, 1e-300))
        # Residual, prefill queue and slot wait are positively correlated (busy periods
        # bring all three): their deviations combine with correlation QUEUE_CORRELATION;
        # the own prefill is independent of them.
        r_dev, w_dev = r_p95 - r_mean, w_p95 - w_mean + w_slot
        queued_dev = np.sqrt(r_dev ** 2 + w_dev ** 2 + 2.0 * QUEUE_CORRELATION * r_dev * w_dev)
        ttft_p95 = r_mean + w_mean + service + np.sqrt(queued_dev ** 2
                                                       + np.maximum(service_p95 - service, 0.0) ** 2)
        return ttft_p95 + request_overhead_s  # server, tokenizer, streaming (calibrated)


def tpot_bracket(s: dict, inverse_lives) -> tuple:
    """``(tau + low, tau + high, sure)`` of a :func:`_state_parts` state: the TPOT p95's
    bracket (:func:`planner.serving.tails.mixture_p95_bracket` of its spreads). Speed (the
    same numbers): where every row's spread parts are >= 0, the spreads sqrt(common +
    per_inv E[1/(O - 1)]) never decrease with the inverse life (rounding is monotone), so
    the smallest and largest are those of the smallest and largest inverse lives."""
    common, per_inv = s["tpot_common"], s["tpot_per_inv"]
    lives = inverse_lives
    if (len(lives) > 2 and all(np.ndim(v) == 0 for v in lives) and (common >= 0.0).all()
            and (per_inv >= 0.0).all()):
        lives = (min(lives, key=float), max(lives, key=float))
    with np.errstate(invalid="ignore", over="ignore"):
        low, high, sure = mixture_p95_bracket([np.sqrt(common + per_inv * inv) for inv in lives])
        return s["tpot_mean_s"] + low, s["tpot_mean_s"] + high, sure


def param_rows(value, rows):
    """A parameter's values at configuration rows ``rows``, as :meth:`ServingParams.take`
    takes them: a 1-D array of more than one element indexed, anything else kept."""
    arr = np.asarray(value)
    return arr[rows] if arr.ndim == 1 and arr.size > 1 else value


def _p95_prompt_service(t: TrafficArrays, chunk, hit, chunks: "_ChunkedPrefill", step) -> np.ndarray:
    """The prefill time of the p95 prompt: its full chunks, then ``step(rest_tokens)``."""
    p95_eff = np.maximum(t.prompt_p95_tokens * hit, 1.0)
    full_chunks = np.ceil(np.maximum(p95_eff, 1.0) / chunk) - 1.0
    return chunks.cost(full_chunks, step(p95_eff - full_chunks * chunk))


def _tpot_p95(tau, common, per_inv, inverse_lives, rows=None) -> np.ndarray:
    """tau + the p95 offset of the mixture over the output strata of normal spreads
    sqrt(common + per_inv E[1/(O - 1)]) (:func:`state_at_occupancy`); with a mask ``rows``,
    on those rows only (+inf elsewhere; any shape, the others broadcast against it)."""
    if rows is None or rows.all():
        return tau + mixture_p95_offset([np.sqrt(common + per_inv * inv) for inv in inverse_lives])
    out = np.full(np.shape(rows), np.inf)
    at = np.flatnonzero(rows)
    if at.size:
        def pick(v):
            return np.broadcast_to(v, out.shape).reshape(-1)[at] if np.ndim(v) else v
        common, per_inv = pick(common), pick(per_inv)
        out.reshape(-1)[at] = pick(tau) + mixture_p95_offset([np.sqrt(common + per_inv * pick(inv))
                                                              for inv in inverse_lives])
    return out


class _ChunkedPrefill:
    """The prefill terms of :func:`state_at_occupancy` with ``full`` whole chunks of time
    ``s_full`` before the rest, without the passes that change no bit where ``full`` is the
    scalar 0 (prompts shorter than a chunk): 0 x s_full = 0 and 0 + x = x where s_full is
    finite (step times are >= +0, never -0), and 1 x s_d = s_d always."""

    def __init__(self, s_full, s_d):
        self.s_full, self.s_d, self._finite = s_full, s_d, None

    def _none(self, full) -> bool:
        if not (np.ndim(full) == 0 and full == 0.0):
            return False
        if self._finite is None:
            self._finite = bool(np.isfinite(self.s_full).all())
        return self._finite

    def cost(self, full, rest):
        """full x s_full + rest: the time of a prefill's steps."""
        return rest if self._none(full) else full * self.s_full + rest

    def decode_steps(self, full):
        """(full + 1) x s_d: the same number of plain decode steps."""
        return self.s_d if np.ndim(full) == 0 and full == 0.0 else (full + 1.0) * self.s_d


def _sum(total, term):
    """total + term, or ``term`` itself for the first term (0.0 + x = x: the sums' terms are
    never -0, their parts being >= +0 times)."""
    return term if total is None else total + term


def _n_max(c: ConfigArrays, p: ServingParams) -> np.ndarray:
    return np.minimum(c.batch, max_concurrency(c, p)).astype(float)


#: Relative slack of the p95 floors of :func:`p95_floors` (their rounding errors are
#: below FLOOR_GUARD x 1e-15).
FLOOR_SLACK = 1e-9
#: Largest n_max (full chunks + 1) / (E[O] - 1) of a row with floors (it bounds the
#: rounding of a prefill's time beyond its decode steps, which can be -1 ulp).
FLOOR_GUARD = 1e5


def p95_floors(c: ConfigArrays, p: ServingParams, t: TrafficArrays, steps: StepModel, n_max) -> tuple:
    """Per row, numbers that :func:`state_at_occupancy`'s (TTFT p95, TPOT p95) are at least
    at every occupancy n in [0, n_max], where that is proven; -inf elsewhere.

    Where the step times never decrease with n (:meth:`StepModel.monotone_rows`), with
    rounding monotone: the TTFT p95 of a stable state is the request overhead (>= 0) plus
    at least the p95 prompt's prefill time (the other terms are >= 0) and the TPOT p95 at
    least tau >= the decode step s_d(n) (tau adds n x the prefill time beyond its decode
    steps, >= -1 ulp a step, and b burst^2 >= 0); both times are at least their value at
    n = 0; unstable states have infinite p95s. FLOOR_SLACK covers the rounding."""
    n0 = np.zeros(np.shape(n_max))
    chunk, hit = p.prefill_chunk_tokens, 1.0 - t.prefix_hit_fraction
    at0 = steps.decode_terms(n0)

    def step(tokens=0.0, prompt=None):
        return steps.time(n0, tokens, prompt, terms=at0)

    s_d = step()
    chunks = _ChunkedPrefill(step(chunk, t.prompt_p95_tokens), s_d)
    with np.errstate(invalid="ignore", over="ignore"):
        service_p95 = _p95_prompt_service(t, chunk, hit, chunks, lambda tokens: step(tokens, t.prompt_p95_tokens))
        full = np.maximum.reduce([np.ceil(np.maximum(tokens * hit, 1.0) / chunk) - 1.0
                                  for tokens in t.prompt_strata_tokens])
        out_m1 = np.maximum(t.output_mean_tokens - 1.0, 1.0)
        proven = (steps.monotone_rows() & (p.request_overhead_s >= 0.0)
                  & (n_max * (full + 1.0) / out_m1 <= FLOOR_GUARD) & (n_max >= 0.0))
        keep = 1.0 - FLOOR_SLACK
        return (np.where(proven, keep * (service_p95 + p.request_overhead_s), -np.inf),
                np.where(proven, keep * s_d, -np.inf))
