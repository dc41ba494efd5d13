"""p95 TTFT and TPOT of one continuous-batching replica under Poisson load, and capacity at SLO.

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

Capacity at SLO is lambda(n*) for the largest n* <= min(max batch, KV capacity) meeting
both p95 SLOs (bisection on n; both p95s increase with n).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.serving.arrays import ConfigArrays, scaled
from planner.serving.memory import max_concurrency
from planner.serving.parallel import map_in_threads, row_ranges, thread_count
from planner.serving.params import ServingParams
from planner.serving.roofline import StepModel
from planner.serving.tails import (P95, erlang_c_halfin_whitt, exponential_tail_p95,  # noqa: F401
                                   exponential_tail_quantile, mixture_p95_bracket,     # (re-exported)
                                   mixture_p95_offset)

#: Correlation of the residual step and the queue waits ahead of a new request.
QUEUE_CORRELATION = 0.5
#: Largest branching ratio (life extension per arrival x rate) treated as stable.
MAX_BRANCHING_RATIO = 0.95
#: Bisection steps on the occupancy n (precision n_max / 2^steps).
CAPACITY_BISECTION_STEPS = 13


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
    state = _state_parts(c, p, t, n, steps, slots)
    tau, common, per_inv = state["tpot_mean_s"], state.pop("tpot_common"), state.pop("tpot_per_inv")
    stable, ttft_p95 = state["stable"], state["ttft_p95_s"]
    # (not "> bound" rather than "<= bound": NaN rows get their p95 computed, as without ``within``)
    may_meet = None if within is None else stable & ~(ttft_p95 > within[0]) & ~(tau > within[1])
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot_p95 = _tpot_p95(tau, common, per_inv, t.output_strata_inv, may_meet)
    return {"rate_per_s": state["rate_per_s"], "tpot_mean_s": tau, "tpot_p95_s": np.where(stable, tpot_p95, np.inf),
            "ttft_p95_s": ttft_p95, "stable": stable, "occupancy": state["occupancy"]}


def _state_parts(c: ConfigArrays, p: ServingParams, t: TrafficArrays, n, steps: StepModel | None = None,
                 slots=None) -> dict:
    """:func:`state_at_occupancy` without its TPOT p95: the same arrays but ``tpot_p95_s``,
    with the parts of that p95's spreads, ``tpot_common`` and ``tpot_per_inv`` (see
    :func:`_tpot_p95`)."""
    n = np.asarray(n, dtype=float)
    out_m1 = np.maximum(t.output_mean_tokens - 1.0, 1.0)
    hit = 1.0 - t.prefix_hit_fraction
    chunk = p.prefill_chunk_tokens

    steps = steps or step_model(c, p, t)
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
    slots = _n_max(c, p) if slots is None else slots
    service_p95 = _p95_prompt_service(t, chunk, hit, chunks, lambda tokens: step(n, tokens, t.prompt_p95_tokens))
    rho = rate * service                 # share of time spent in prefill iterations
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
        time_in_system = service + out_m1 * tau
        offered = rate * time_in_system
        p_wait = erlang_c_halfin_whitt(slots, offered, burst2)
        w_slot = exponential_tail_p95(p_wait, time_in_system / np.maximum(slots - offered, 1e-300))
        # Residual, prefill queue and slot wait are positively correlated (busy periods
        # bring all three): their deviations combine with correlation QUEUE_CORRELATION;
        # the own prefill is independent of them.
        r_dev, w_dev = r_p95 - r_mean, w_p95 - w_mean + w_slot
        queued_dev = np.sqrt(r_dev ** 2 + w_dev ** 2 + 2.0 * QUEUE_CORRELATION * r_dev * w_dev)
        ttft_p95 = r_mean + w_mean + service + np.sqrt(queued_dev ** 2
                                                       + np.maximum(service_p95 - service, 0.0) ** 2)
        ttft_p95 = ttft_p95 + p.request_overhead_s  # server, tokenizer, streaming (calibrated)
    stable = (rho < 1.0) & (offered < slots) & (n <= slots) & (slots >= 1) & (phi < MAX_BRANCHING_RATIO)
    return {"rate_per_s": rate, "tpot_mean_s": tau, "ttft_p95_s": np.where(stable, ttft_p95, np.inf),
            "stable": stable, "occupancy": n, "tpot_common": common, "tpot_per_inv": per_inv}


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
#: first pair's there) is computed on every row rather than on those rows (taking ~50
#: columns and merging costs more than the few rows more; the numbers are the same).
FULL_STATE_SHARE = 0.9
#: Rows per thread below which the capacity bisection does not share its rows between
#: threads (:mod:`planner.serving.parallel`): shorter numpy calls leave the GIL-held
#: Python between them too large a share.
THREAD_MIN_ROWS = 4096


#: Relative slack of the p95 floors of :func:`_p95_floors` (their rounding errors are
#: below FLOOR_GUARD x 1e-15).
FLOOR_SLACK = 1e-9
#: Largest n_max (full chunks + 1) / (E[O] - 1) of a row with floors (it bounds the
#: rounding of a prefill's time beyond its decode steps, which can be -1 ulp).
FLOOR_GUARD = 1e5
#: Share of the rows at least that no occupancy can serve (:func:`_never_met`) for
#: :func:`capacities_at_slos` to set them apart (a take of the arrays costs about a state).
SETTLED_MIN_SHARE = 0.05


def _p95_floors(c: ConfigArrays, p: ServingParams, t: TrafficArrays, steps: StepModel, n_max) -> tuple:
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


def _never_met(c: ConfigArrays, p: ServingParams, t: TrafficArrays, steps: StepModel, n_max, slos) -> list:
    """Per SLO pair, the rows where no occupancy in [0, n_max] meets it: a p95 floor of
    :func:`_p95_floors` above its SLO (the bisection's decisions there are all "no")."""
    ttft_floor, tpot_floor = _p95_floors(c, p, t, steps, n_max)
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

    def state(n, within=None, parts=True):
        if parts:   # a bisection's state: its decisions need no TPOT p95 (see _meets)
            return _state_parts(c, p, t, n, steps_model, n_max)
        return state_at_occupancy(c, p, t, n, steps_model, n_max, within)

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
                sub = (_state_parts(c.take(differ), p.take(differ), t, n[differ], steps_model.take(differ),
                                    n_max[differ]) if parts else
                       state_at_occupancy(c.take(differ), p.take(differ), t, n[differ],
                                          steps_model.take(differ), n_max[differ], within))
                merged = {key: value.copy() for key, value in out[0].items()}
                for key, value in sub.items():
                    merged[key][differ] = value
                out.append(merged)
        return out

    def ok(s, slo, j):
        met = _meets(s, slo, t.output_strata_inv)
        return met if never is None else met & ~never[j]

    los = [np.zeros(shape) for shape in shapes]
    his = [np.broadcast_to(n_max, shape).astype(float) for shape in shapes]
    tops = states(his)
    top_ok = [ok(s, slo, j) for j, (s, slo) in enumerate(zip(tops, slos))]
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
        kept, tops, top_ok, ever, lambda rows: _state_parts(c.take(rows), p.take(rows), t, np.zeros(rows.size),
                                                            steps_model.take(rows), n_max[rows]),
        t.output_strata_inv)
    trickles = states([np.full(shape, 1e-6) for shape in shapes], loosest, parts=False)   # which SLO fails at a trickle
    out = []
    for (ttft_slo, tpot_slo), n_star, final, trickle in zip(slos, n_stars, finals, trickles):
        rate = np.where(n_star > 0, final["rate_per_s"], 0.0)
        first = np.where(trickle["ttft_p95_s"] > ttft_slo, "ttft",
                         np.where(trickle["tpot_p95_s"] > tpot_slo, "tpot", ""))
        out.append({"max_rate_per_s": np.nan_to_num(rate), "ttft_p95_s": final["ttft_p95_s"],
                    "tpot_p95_s": final["tpot_p95_s"], "occupancy": n_star, "slo_violated_at_low_load": first})
    return out


def _meets(s: dict, slo, inverse_lives) -> np.ndarray:
    """Whether the :func:`_state_parts` state ``s`` meets ``slo = (ttft_p95_s, tpot_p95_s)``:
    stable, TTFT p95 and TPOT p95 within them, the decisions of :func:`state_at_occupancy`'s
    p95s, bit for bit. The TPOT p95, tau + the mixture's offset, is decided by the bracket
    the offset lies in (:func:`planner.serving.tails.mixture_p95_bracket`: within the SLO
    at its top, above it at its bottom); the mixture only on the rows it leaves open."""
    if "_tpot_bracket" not in s:    # (the same state serves the pairs at the same occupancy)
        with np.errstate(invalid="ignore", over="ignore"):
            low, high, sure = mixture_p95_bracket([np.sqrt(s["tpot_common"] + s["tpot_per_inv"] * inv)
                                                   for inv in inverse_lives])
            s["_tpot_bracket"] = (s["tpot_mean_s"] + low, s["tpot_mean_s"] + high, sure)
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


def _finals(kept: list, tops: list, top_ok: list, ever: list, at_zero, inverse_lives) -> list[dict]:
    """Per SLO pair, the kept states at n*: the top's where it is good, the last good mid's
    where one was, elsewhere ``at_zero(rows)`` (the state at n = 0 of those rows, computed
    once for every pair); with their TPOT p95 (as :func:`state_at_occupancy`'s)."""
    zero_rows = [~(top | e) for top, e in zip(top_ok, ever)]
    rows = np.flatnonzero(np.logical_or.reduce(zero_rows))
    zero = at_zero(rows) if rows.size else None
    for keep, top, ok_top, need in zip(kept, tops, top_ok, zero_rows):
        for key in _KEPT_KEYS:
            np.copyto(keep[key], top[key], where=ok_top)
            if zero is not None:
                keep[key][rows] = np.where(need[rows], zero[key], keep[key][rows])
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot_p95 = _tpot_p95(keep["tpot_mean_s"], keep["tpot_common"], keep["tpot_per_inv"], inverse_lives)
        keep["tpot_p95_s"] = np.where(keep["stable"], tpot_p95, np.inf)
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
        return _state_parts(c, p, t, ns, model, n_max)["rate_per_s"] < rate

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
