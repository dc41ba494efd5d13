"""Discrete-event simulation of a disaggregated deployment: a prefill pool feeding a decode pool.

The referee of :mod:`planner.serving.disagg`, as :mod:`planner.simulate` is of
:mod:`planner.serving.queueing`. Seeded Poisson arrivals with sampled lengths go through:

1. a router in front of the prefill pool, sending each request to the prefill replica with
   the least predicted work left (the replica's backlog of prefill time, from the same step
   model; with one request per replica at a time this is the pool-wide FCFS M/G/c queue of
   the analytic model);
2. the prefill replicas, each run by the simulator's engine
   (:func:`planner.simulate.run_requests` with one output token: chunked prefill, no
   decodes, KV admission), which give each request's prefill completion;
3. the KV transfer, a delay of :func:`planner.serving.disagg.kv_transfer_time_s` per request
   (no network contention);
4. the decode replicas, in round-robin order of KV arrival, each run by the same engine with
   ``prefilled=True`` (admission when a slot and KV fit, then o - 1 decode steps, no
   prefill interference).

TTFT is KV arrival and admission in the decode pool (the first token streams from there)
minus arrival, plus the prefill pool's ``request_overhead_s``; TPOT is the decode time over
o - 1 tokens. Deterministic for a given seed.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from planner.serving.disagg import DisaggArrays, kv_transfer_time_s
from planner.serving.roofline import StepModel
from planner.simulate.stats import RunRecord, per_request
from planner.simulate import (DEFAULT_PREFILL_CHUNK_TOKENS, DEFAULT_REQUESTS, DEFAULT_WARMUP_FRACTION,
                              check_simulation_inputs, draw_requests, request_overhead_s, run_requests)


@dataclass(frozen=True)
class PDSimulationResult(RunRecord):
    """Statistics of one simulated disaggregated deployment (SI units), plus per-request times.

    Latency statistics cover the measured requests (arrivals after the warm-up that both
    pools admitted); the throughputs cover the window from the first measured arrival to
    the last arrival.

    Attributes
    ----------
    rate_per_s, seed, prefill_replicas, decode_replicas : the run's settings.
    requests, rejected_requests : measured requests; requests whose KV fits neither pool.
    ttft_p50_s, ttft_p95_s, ttft_mean_s : time to first token [s] (see the module notes).
    tpot_p50_s, tpot_p95_s, tpot_mean_s : time per output token after the first [s].
    prefill_wait_mean_s : mean arrival -> prefill admission [s].
    prefill_time_mean_s : mean prefill admission -> prefill completion [s].
    kv_transfer_mean_s : mean KV transfer time [s].
    decode_wait_mean_s : mean KV arrival -> decode admission [s].
    throughput_tokens_per_s : output tokens of the requests finishing in the window / window.
    window_s : length of the measured window [s].
    arrival_s, prefill_done_s, kv_arrival_s, first_token_s, finish_s : per-request times [s].
    prompt_tokens, output_tokens, measured : per-request lengths and the measured mask.
    """

    rate_per_s: float
    seed: int
    prefill_replicas: int
    decode_replicas: int
    prefill_wait_mean_s: float
    prefill_time_mean_s: float
    kv_transfer_mean_s: float
    decode_wait_mean_s: float
    throughput_tokens_per_s: float
    window_s: float
    prefill_done_s: np.ndarray = per_request()
    kv_arrival_s: np.ndarray = per_request()


def _scalar(value) -> float:
    return float(np.asarray(value, dtype=float).reshape(-1)[0])


def predicted_prefill_s(d: DisaggArrays, prompt_tokens, computed_tokens, chunk_tokens: int) -> np.ndarray:
    """Prefill time of each request alone on an idle prefill replica [s] (the router's estimate).

    ceil(t/C) - 1 full chunks and the remainder, each an iteration of the step model with no
    decoder, attending over the whole prompt (``computed_tokens`` t of ``prompt_tokens``).
    """
    step = StepModel(d.prefill, d.prefill_params, np.asarray(prompt_tokens, dtype=float)).time
    t = np.asarray(computed_tokens, dtype=float)
    full = np.ceil(t / chunk_tokens) - 1.0
    p = np.asarray(prompt_tokens, dtype=float)
    return full * step(0.0, float(chunk_tokens), p) + step(0.0, t - full * chunk_tokens, p)


def route_least_work(arrival_s, work_s, replicas: int) -> np.ndarray:
    """Replica of each request (arrival order): the one whose predicted backlog empties first.

    A replica's backlog is the predicted work of the requests sent to it not yet done,
    served FCFS (ties to the lowest index). With exact work this is the pool-wide FCFS
    queue of an M/G/c system.
    """
    free = [(0.0, k) for k in range(replicas)]
    out = np.empty(len(arrival_s), dtype=np.int64)
    pairs = zip(np.asarray(arrival_s, float).tolist(), np.asarray(work_s, float).tolist())
    for i, (a, w) in enumerate(pairs):
        at, k = heapq.heappop(free)
        out[i] = k
        heapq.heappush(free, (max(at, a) + w, k))
    return out


def simulate_pd(d: DisaggArrays, *, rate_per_s: float, prompt, output, requests: int = DEFAULT_REQUESTS,
                seed: int = 0, prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
                warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
                prefix_hit_fraction: float = 0.0) -> PDSimulationResult:
    """Simulate a prefill pool feeding a decode pool under Poisson traffic.

    Parameters
    ----------
    d : DisaggArrays
        One deployment (every configuration field of size 1): the pools' configurations,
        parameters and sizes (integers), the transfer bandwidth. ``d.prefill.batch`` and
        ``d.decode.batch`` are the max running requests of a prefill and a decode replica
        (1 on the prefill side: one request's chunks at a time, as the analytic model).
    rate_per_s, prompt, output, requests, seed, prefill_chunk_tokens, warmup_fraction, prefix_hit_fraction
        As in :func:`planner.simulate.simulate_replica` (arrivals, then prompts, then outputs
        from ``numpy.random.default_rng(seed)``).

    Returns
    -------
    PDSimulationResult

    Raises
    ------
    ValueError
        Invalid settings, pool sizes below 1, or a pool whose weights leave no KV budget.
    """
    problems = check_simulation_inputs(rate_per_s=rate_per_s, max_batch=min(_scalar(d.prefill.batch),
                                                                            _scalar(d.decode.batch)),
                                       requests=requests, prefill_chunk_tokens=prefill_chunk_tokens,
                                       warmup_fraction=warmup_fraction,
                                       prefix_hit_fraction=prefix_hit_fraction)
    n_p, n_d = _scalar(d.prefill_replicas), _scalar(d.decode_replicas)
    for name, n in (("prefill_replicas", n_p), ("decode_replicas", n_d)):
        if not (n >= 1 and n == math.floor(n)):
            problems.append((name, f"must be an integer >= 1, got {n}"))
    if problems:
        raise ValueError("; ".join(f"{name}: {msg}" for name, msg in problems))
    arrival, prompt_tokens, output_tokens = draw_requests(rate_per_s, prompt, output, requests, seed)
    return run_pd_requests(d, arrival, prompt_tokens, output_tokens, rate_per_s=float(rate_per_s),
                           seed=int(seed),
                           prefill_chunk_tokens=prefill_chunk_tokens, warmup_fraction=warmup_fraction,
                           prefix_hit_fraction=prefix_hit_fraction)


def run_pd_requests(d: DisaggArrays, arrival_s, prompt_tokens, output_tokens, *, rate_per_s: float, seed: int,
                    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
                    warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
                    prefix_hit_fraction: float = 0.0) -> PDSimulationResult:
    """Run given requests (sorted arrivals [s], prompt and output tokens) through the two pools."""
    arrival = np.asarray(arrival_s, dtype=float)
    prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
    output_tokens = np.asarray(output_tokens, dtype=np.int64)
    common = {"rate_per_s": float(rate_per_s), "seed": int(seed), "prefill_chunk_tokens": int(prefill_chunk_tokens)}
    prefill_admit, prefill_done = run_prefill_pool(d, arrival, prompt_tokens,
                                                   prefix_hit_fraction=prefix_hit_fraction, **common)
    transfer = np.broadcast_to(kv_transfer_time_s(d, prompt_tokens.astype(float)), (len(arrival),)).astype(float)
    kv_arrival = prefill_done + transfer
    first, finish = run_decode_pool(d, kv_arrival, prompt_tokens, output_tokens, **common)
    return _summarize(d, arrival, prefill_admit, prefill_done, kv_arrival, first, finish, prompt_tokens,
                      output_tokens, transfer, rate_per_s=rate_per_s, seed=seed,
                      warmup_fraction=warmup_fraction)


def run_prefill_pool(d: DisaggArrays, arrival_s, prompt_tokens, *, rate_per_s: float, seed: int,
                     prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
                     prefix_hit_fraction=0.0) -> tuple[np.ndarray, np.ndarray]:
    """Prefill admission and completion times [s] of given requests (sorted arrivals) on the
    prefill pool of ``d`` (steps 1-2 of the module notes; ``prefix_hit_fraction`` a number or
    one per request). NaN for a request whose KV fits no prefill replica."""
    arrival = np.asarray(arrival_s, dtype=float)
    prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
    n = len(arrival)
    hit = np.broadcast_to(np.asarray(prefix_hit_fraction, dtype=float), (n,))
    computed = np.maximum(np.floor((1.0 - hit) * prompt_tokens + 0.5), 1)
    work = predicted_prefill_s(d, prompt_tokens, computed, prefill_chunk_tokens)
    admit, done = np.full(n, np.nan), np.full(n, np.nan)
    route = route_least_work(arrival, work, int(_scalar(d.prefill_replicas)))
    for k in range(int(_scalar(d.prefill_replicas))):
        idx = np.flatnonzero(route == k)
        if not idx.size:
            continue
        r = run_requests(d.prefill, d.prefill_params, arrival[idx], prompt_tokens[idx],
                         np.ones(idx.size, np.int64), max_batch=int(_scalar(d.prefill.batch)),
                         prefix_hit_fraction=hit[idx], rate_per_s=rate_per_s, seed=seed, warmup_fraction=0.0,
                         prefill_chunk_tokens=prefill_chunk_tokens)
        admit[idx], done[idx] = r.admit_s, r.first_token_s
    return admit, done


def run_decode_pool(d: DisaggArrays, kv_arrival_s, prompt_tokens, output_tokens, *, rate_per_s: float,
                    seed: int, prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS) -> tuple[np.ndarray, np.ndarray]:
    """First-token and finish times [s] of given requests on the decode pool of ``d`` (step 4 of
    the module notes: round robin in order of KV arrival ``kv_arrival_s``, any order, NaN for
    a request that never left the prefill pool). NaN for a request whose KV fits no decode replica."""
    kv_arrival = np.asarray(kv_arrival_s, dtype=float)
    prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
    output_tokens = np.asarray(output_tokens, dtype=np.int64)
    n, n_d = len(kv_arrival), int(_scalar(d.decode_replicas))
    admitted = np.isfinite(kv_arrival)
    order = np.flatnonzero(admitted)[np.argsort(kv_arrival[admitted], kind="stable")]
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    for k in range(n_d):
        idx = order[k::n_d]
        if not idx.size:
            continue
        r = run_requests(d.decode, d.decode_params, kv_arrival[idx], prompt_tokens[idx], output_tokens[idx],
                         max_batch=int(_scalar(d.decode.batch)), prefilled=True, rate_per_s=rate_per_s,
                         seed=seed, warmup_fraction=0.0, prefill_chunk_tokens=prefill_chunk_tokens)
        first[idx], finish[idx] = r.first_token_s, r.finish_s
    return first, finish


def _p50_p95_mean(values: np.ndarray) -> tuple[float, float, float]:
    """Median, 95th percentile and mean of ``values`` (NaN when empty)."""
    if not values.size:
        return math.nan, math.nan, math.nan
    p50, p95 = np.percentile(values, [50, 95])
    return float(p50), float(p95), float(values.mean())


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if values.size else math.nan


def _summarize(d, arrival, prefill_admit, prefill_done, kv_arrival, first, finish, prompt_tokens,
               output_tokens,
               transfer, *, rate_per_s, seed, warmup_fraction) -> PDSimulationResult:
    n = len(arrival)
    done = np.isfinite(first)
    measured = done.copy()
    measured[: int(math.floor(warmup_fraction * n))] = False
    ttft = (first - arrival)[measured] + request_overhead_s(d.prefill_params)
    multi = measured & (output_tokens > 1)
    tpot = (finish - first)[multi] / (output_tokens[multi] - 1)
    w0 = float(arrival[int(math.floor(warmup_fraction * n))])
    w1 = float(arrival[-1])
    window = w1 - w0
    in_window = done & (finish >= w0) & (finish <= w1)
    ttft_p50, ttft_p95, ttft_mean = _p50_p95_mean(ttft)
    tpot_p50, tpot_p95, tpot_mean = _p50_p95_mean(tpot)
    return PDSimulationResult(
        rate_per_s=float(rate_per_s), seed=int(seed), prefill_replicas=int(_scalar(d.prefill_replicas)),
        decode_replicas=int(_scalar(d.decode_replicas)), requests=int(measured.sum()),
        rejected_requests=int((~done).sum()),
        ttft_p50_s=ttft_p50, ttft_p95_s=ttft_p95, ttft_mean_s=ttft_mean,
        tpot_p50_s=tpot_p50, tpot_p95_s=tpot_p95, tpot_mean_s=tpot_mean,
        prefill_wait_mean_s=_mean((prefill_admit - arrival)[measured]),
        prefill_time_mean_s=_mean((prefill_done - prefill_admit)[measured]),
        kv_transfer_mean_s=_mean(transfer[measured]),
        decode_wait_mean_s=_mean((first - kv_arrival)[measured]),
        throughput_tokens_per_s=float(output_tokens[in_window].sum() / window) if window > 0 else math.nan,
        window_s=window, arrival_s=arrival, prefill_done_s=prefill_done, kv_arrival_s=kv_arrival,
        first_token_s=first, finish_s=finish, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
        measured=measured)
