"""Simulating one replica: the settings, their checks and the runs (drawn or given requests)."""

from __future__ import annotations

import math

import numpy as np

from planner.serving.arrays import ConfigArrays
from planner.serving.memory import kv_budget_bytes_per_gpu, kv_bytes_per_seq, kv_fraction_per_gpu
from planner.serving.params import ServingParams
from planner.simulate.engine import Replica, StepTimes
from planner.simulate.stats import SimulationResult, request_overhead_s, summarize

#: Prompt tokens one continuous-batching iteration may prefill (chunked prefill budget;
#: vLLM's ``max_num_batched_tokens`` default with chunked prefill enabled).
DEFAULT_PREFILL_CHUNK_TOKENS = 2048

#: Fraction of the first arrivals left out of every statistic (the empty-system start-up).
DEFAULT_WARMUP_FRACTION = 0.05

#: Requests a full-replica simulation draws by default.
DEFAULT_REQUESTS = 20_000

#: Scheduler names accepted by :func:`simulate_replica`.
SCHEDULERS = ("continuous", "static")


# ------------------------------------------------------------------ validation

def check_simulation_inputs(*, rate_per_s: float, max_batch: int, requests: int,
                            scheduler: str = "continuous",
                            prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
                            warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
                            prefix_hit_fraction: float = 0.0) -> list[tuple[str, str]]:
    """Problems with the simulation settings, as ``(argument name, message)`` pairs.

    Parameters
    ----------
    rate_per_s, max_batch, requests, scheduler, prefill_chunk_tokens, warmup_fraction, prefix_hit_fraction
        As in :func:`simulate_replica`.

    Returns
    -------
    list of (str, str)
        Empty when every setting is valid. Callers map argument names onto their own
        vocabulary (CLI flags, YAML paths).
    """
    problems = []
    if not (isinstance(rate_per_s, (int, float)) and math.isfinite(rate_per_s) and rate_per_s > 0):
        problems.append(("rate_per_s", f"must be > 0, got {rate_per_s}"))
    if not max_batch >= 1:
        problems.append(("max_batch", f"must be >= 1, got {max_batch}"))
    if not requests >= 2:
        problems.append(("requests", f"must be >= 2, got {requests}"))
    if scheduler not in SCHEDULERS:
        problems.append(("scheduler", f"must be one of {', '.join(SCHEDULERS)}, got '{scheduler}'"))
    if not prefill_chunk_tokens >= 1:
        problems.append(("prefill_chunk_tokens", f"must be >= 1, got {prefill_chunk_tokens}"))
    if not 0.0 <= warmup_fraction < 1.0:
        problems.append(("warmup_fraction", f"must be in [0, 1), got {warmup_fraction}"))
    if not 0.0 <= prefix_hit_fraction < 1.0:
        problems.append(("prefix_hit_fraction", f"must be in [0, 1), got {prefix_hit_fraction}"))
    return problems


# ------------------------------------------------------------------ public API

def simulate_replica(arrays: ConfigArrays, params: ServingParams, *, rate_per_s: float, prompt, output,
                     max_batch: int, requests: int = DEFAULT_REQUESTS, seed: int = 0,
                     scheduler: str = "continuous",
                     prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
                     warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
                     prefix_hit_fraction: float = 0.0) -> SimulationResult:
    """Simulate one replica serving Poisson traffic; return latency and utilization statistics.

    Parameters
    ----------
    arrays : ConfigArrays
        One configuration (every field of size 1): model, GPU, TP/PP, formats.
    params : ServingParams
        Efficiencies and overheads of the step-time model.
    rate_per_s : float
        Poisson arrival rate [requests/s].
    prompt, output : LengthDistribution
        Prompt and output length distributions (:mod:`planner.traffic`) [tokens].
    max_batch : int
        Slots: most requests running at once (vLLM ``max_num_seqs``).
    requests : int
        Requests to draw (>= 2).
    seed : int
        Seed of the numpy Generator (arrivals, then prompts, then outputs).
    scheduler : {"continuous", "static"}
        Iteration-level scheduling with chunked prefill, or request-level static batches.
    prefill_chunk_tokens : int
        Prompt tokens one continuous iteration may prefill [tokens].
    warmup_fraction : float
        Fraction of the first arrivals left out of the statistics, in [0, 1).
    prefix_hit_fraction : float
        Share of every prompt served from the prefix cache, in [0, 1): a request prefills
        round((1 - h) p) tokens (at least 1), attending over its whole prompt p, as in the
        analytic model (problem YAML ``prefix_cache_hit_fraction``); its KV is the whole p.

    Returns
    -------
    SimulationResult

    Raises
    ------
    ValueError
        Invalid settings (see :func:`check_simulation_inputs`), more than one configuration,
        or weights that leave no KV budget.

    Notes
    -----
    Continuous: every iteration first admits arrived requests FCFS while fewer than
    ``max_batch`` run and their KV for prompt + output (reserved at admission, per GPU:
    ``kv_bytes_per_seq * kv_fraction_per_gpu``) fits ``kv_budget_bytes_per_gpu``; then
    prefills up to ``prefill_chunk_tokens`` prompt tokens FCFS over admitted requests still
    in prefill, while every prefilled request decodes one token. Step time =
    ``mixed_step_time_s(n_decode, chunk, mean decode context, p)`` with p the
    token-weighted prompt length of the chunk's requests (the chunked request's prompt when
    it is alone), memoized on 16-token buckets of context and p. The iteration completing a
    prefill produces the first token; output - 1 decode iterations follow. An idle replica
    jumps to the next arrival.

    Static: an idle replica takes up to ``max_batch`` arrived requests (KV permitting), runs
    one prefill step over all their prompt tokens (p = sum p_i^2 / sum p_i makes the
    attention FLOPs exact), then decodes until the longest finishes; finished requests leave
    their slots empty, and the step time uses the requests still decoding.

    Requests whose KV alone exceeds the budget are rejected (counted, never admitted).
    """
    problems = check_simulation_inputs(rate_per_s=rate_per_s, max_batch=max_batch, requests=requests,
                                       scheduler=scheduler, prefill_chunk_tokens=prefill_chunk_tokens,
                                       warmup_fraction=warmup_fraction,
                                       prefix_hit_fraction=prefix_hit_fraction)
    if problems:
        raise ValueError("; ".join(f"{name}: {msg}" for name, msg in problems))
    arrival, prompt_tokens, output_tokens = draw_requests(rate_per_s, prompt, output, requests, seed)
    return run_requests(arrays, params, arrival, prompt_tokens, output_tokens, max_batch=max_batch,
                        rate_per_s=float(rate_per_s), seed=int(seed), scheduler=scheduler,
                        prefill_chunk_tokens=prefill_chunk_tokens, warmup_fraction=warmup_fraction,
                        prefix_hit_fraction=prefix_hit_fraction)


def draw_requests(rate_per_s: float, prompt, output, requests: int, seed: int):
    """Seeded Poisson arrivals [s], then prompt and output lengths [tokens], in that order."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.standard_exponential(requests)) / rate_per_s
    return (arrival, np.asarray(prompt.sample(rng, requests), dtype=np.int64),
            np.asarray(output.sample(rng, requests), dtype=np.int64))


def run_requests(arrays: ConfigArrays, params: ServingParams, arrival_s, prompt_tokens, output_tokens, *,
                 max_batch: int, rate_per_s: float, seed: int, scheduler: str = "continuous",
                 prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
                 warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
                 prefix_hit_fraction=0.0, prefilled: bool = False) -> SimulationResult:
    """Run given requests (sorted arrival times [s], prompt and output tokens) through one replica.

    :func:`simulate_replica` draws them from one traffic class; :mod:`planner.verify` from a
    routed mix of classes. ``rate_per_s`` and ``seed`` are recorded in the result;
    ``prefix_hit_fraction`` (a number, or one per request) as in :func:`simulate_replica`;
    ``prefilled``: the requests arrive with their KV and first token (a disaggregated decode
    replica, :mod:`planner.simulate_pd`): no prefill, admission starts o - 1 decodes. Raises
    ``ValueError`` for more than one configuration or weights that leave no KV budget.
    """
    if np.size(arrays.tp) != 1:
        raise ValueError(f"simulate_replica takes one configuration, got {np.size(arrays.tp)}")
    budget = float(np.asarray(kv_budget_bytes_per_gpu(arrays, params)).reshape(-1)[0])
    if not budget > 0:
        raise ValueError(f"no KV budget: the weights leave {budget:.3g} bytes per GPU")
    arrival = np.asarray(arrival_s, dtype=float)
    prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
    output_tokens = np.asarray(output_tokens, dtype=np.int64)
    requests = len(arrival)
    kv_per_gpu = kv_bytes_per_seq(arrays, prompt_tokens + output_tokens) * kv_fraction_per_gpu(arrays)
    kv_bytes = np.ceil(np.broadcast_to(kv_per_gpu, (requests,))).astype(np.int64)

    first_measured = int(math.floor(warmup_fraction * requests))
    window = (float(arrival[first_measured]), float(arrival[-1]))
    steps = StepTimes(arrays, params)
    missed = 1.0 - np.asarray(prefix_hit_fraction, dtype=float)
    computed = np.maximum(np.floor(missed * prompt_tokens + 0.5), 1) * (not prefilled)
    sim = Replica(steps, arrival.tolist(), prompt_tokens.tolist(), output_tokens.tolist(),
                  kv_bytes.tolist(), int(math.floor(budget)), int(max_batch), window,
                  prefill=np.broadcast_to(computed, (requests,)).astype(np.int64).tolist())
    if scheduler == "continuous":
        sim.run_continuous(int(prefill_chunk_tokens))
    else:
        sim.run_static()
    return summarize(sim, scheduler=scheduler, rate_per_s=float(rate_per_s), seed=int(seed),
                     max_batch=int(max_batch), prefill_chunk_tokens=int(prefill_chunk_tokens),
                     first_measured=first_measured, arrival=arrival, prompt_tokens=prompt_tokens,
                     output_tokens=output_tokens, request_overhead_s=request_overhead_s(params))
