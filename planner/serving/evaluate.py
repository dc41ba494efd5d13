"""The comprehensive serving playground: every quantity of docs/serving-model.md sections 2-7 at once."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from planner.dimensions import gpus_per_replica
from planner.serving import economics, memory, moe, roofline
from planner.serving.arrays import ConfigArrays
from planner.serving.fused import evaluate_rows, latency_outputs
from planner.serving.parallel import thread_count
from planner.serving.params import ServingParams


def seed_queue_wait_s(users, batch, prefill_s, output_tokens, tpot_s) -> np.ndarray:
    """The seed's closed-loop wait: ceil(U/b - 1) * (t_pf + o * TPOT), b = min(U, B_max)."""
    rounds = np.maximum(np.ceil(np.asarray(users, dtype=float) / batch - 1.0 - 1e-12), 0.0)
    with np.errstate(invalid="ignore"):
        return np.where(rounds > 0, rounds * (prefill_s + output_tokens * tpot_s), 0.0)


#: Rows per block, at least, when many configurations are evaluated: one block's
#: intermediates stay in the CPU cache, which makes the same element-wise arithmetic 2-3x
#: faster on 1M rows (``benchmarks/bench_serving.py``; 16384 rows: 10 % faster than 8192
#: with the fused pass, whose per-block cost is ~150 numpy calls); the numbers are those
#: of one pass, whatever the block size.
BLOCK_ROWS = 16384
#: Rows per block, at most (:func:`block_rows`). With two threads the Python between a
#: block's ~150 numpy calls holds the GIL, so fewer, larger blocks pay off even where their
#: intermediates leave the per-core L2 cache (issue 19, 1M rows, 2 threads on the 2-core
#: development machine, 2 alternating runs each: 9.1-9.4 M configurations/s at 16384 rows
#: per block, 10.3-12.6 at 32768, 11.1-13.1 at 65536, 11.5-12.3 at 131072; one thread
#: within its noise, 6-8 M/s at every size).
MAX_BLOCK_ROWS = 65536
#: Blocks per thread, at least, that :func:`block_rows` leaves when it enlarges blocks (the
#: threads share the blocks; more than one each evens out their ends).
BLOCKS_PER_THREAD = 2
#: Block sizes are multiples of this many rows: every block starts on a 64-byte cache line
#: of the float64 columns, and the 8-row picks of :func:`planner.serving.fused._pick` need
#: no ragged tail but in the last block.
BLOCK_ALIGN_ROWS = 8


def block_rows(rows: int, threads: int) -> int:
    """Rows per block of :func:`evaluate` on ``rows`` rows and ``threads`` threads.

    The rows split into ``BLOCKS_PER_THREAD`` blocks per thread, of [BLOCK_ROWS,
    MAX_BLOCK_ROWS] rows; where that leaves several blocks, their count is rounded up to a
    multiple of ``threads`` (or of itself where it is smaller: at most twice as many blocks)
    and the rows shared evenly among them (sizes rounded up to ``BLOCK_ALIGN_ROWS``): the
    threads then get the same rows, where blocks of the bounds would leave one thread a
    ragged last block less (1M rows, 2 threads: 16 blocks of 62,504 rows, 8 per thread,
    instead of 15 of 65,536 and one of 16,960, which keep one thread busy for 8 full
    blocks and the other for 7.26: the call waits for the first)."""
    threads = max(threads, 1)
    size = int(min(MAX_BLOCK_ROWS, max(BLOCK_ROWS, -(-rows // (BLOCKS_PER_THREAD * threads)))))
    blocks = -(-rows // size)
    if blocks <= 1:
        return size
    share = min(threads, blocks)
    blocks = -(-blocks // share) * share
    even = -(-rows // blocks)
    return int(-(-even // BLOCK_ALIGN_ROWS) * BLOCK_ALIGN_ROWS)


def evaluate(c: ConfigArrays, p: ServingParams, users=None, usd_per_gpu_hour=None) -> dict:
    """Evaluate configurations; ``c.batch`` is the decode batch b = min(U, B_max).

    Parameters
    ----------
    c : ConfigArrays
        Configurations (arrays broadcast together).
    p : ServingParams
        Efficiencies and overheads.
    users : array_like, optional
        Concurrent users U of the seed's closed loop (default: the batch).
    usd_per_gpu_hour : array_like, optional
        Price per GPU-hour; NaN where unknown.

    Returns
    -------
    dict of numpy arrays keyed like ``planner eval --json`` (SI units).

    Notes
    -----
    One-dimensional inputs (every input a scalar or an array of one length) are evaluated
    block by block (:func:`block_rows` rows each) by the fused pass of :mod:`planner.serving.fused`
    (same float64 arithmetic, element by element), which computes shared intermediates
    once and equals :func:`evaluate_reference` bit for bit; other inputs (broadcast in
    several dimensions, or an expert-parallel / attention-DP layout) by the reference.
    """
    if moe.has_layout(c):   # issue 14: expert parallelism / attention DP (the fused pass has neither)
        return evaluate_reference(c, p, users, usd_per_gpu_hour)
    rows = _block_rows(c, p, users, usd_per_gpu_hour)
    if rows is None:        # inputs broadcast in more than one dimension
        return evaluate_reference(c, p, users, usd_per_gpu_hour)
    threads = thread_count()
    return evaluate_rows(c, p, users, usd_per_gpu_hour, rows, block_rows(rows, threads), threads)


def _block_rows(c: ConfigArrays, p: ServingParams, users, usd) -> int | None:
    """The row count when every input is a scalar or one array of that length, else None."""
    shape = c.shape
    if len(shape) != 1:
        return None
    n = shape[0]
    values = [getattr(c, f.name) for f in fields(c)] + list(p.as_dict().values()) + [users, usd]
    ok = all(v is None or np.ndim(v) == 0 or np.shape(v) == (n,) for v in values)
    return n if ok else None


def evaluate_reference(c: ConfigArrays, p: ServingParams, users=None, usd_per_gpu_hour=None) -> dict:
    """:func:`evaluate` composed from the modular equations (the reference the fused pass
    :func:`planner.serving.fused.evaluate_rows` must match bit for bit)."""
    users = c.batch if users is None else np.asarray(users, dtype=float)
    decode = roofline.decode_times(c, p)
    prefill = roofline.prefill_time_s(c, p)
    weights = memory.weights_bytes(c)
    kv_seq = memory.kv_bytes_per_seq(c)
    kv_fraction = memory.kv_fraction_per_gpu(c)
    kv_per_gpu = kv_seq * kv_fraction
    budget = memory.kv_budget_bytes_per_gpu(c, p)
    kv_needed = c.batch * kv_seq * kv_fraction
    tpot = decode["tpot_s"]
    throughput = c.batch / tpot
    wait = seed_queue_wait_s(users, c.batch, prefill, c.output_tokens, tpot)
    with np.errstate(divide="ignore", invalid="ignore"):
        concurrency = np.maximum(np.floor(np.where(kv_per_gpu > 0, budget / kv_per_gpu, np.inf)), 0.0)
    out = {
        "weights_bytes": weights,
        "weights_bytes_per_gpu": memory.weights_bytes_per_gpu(c),
        "kv_bytes_per_token": memory.kv_bytes_per_token(c),
        "kv_bytes_per_seq": kv_seq,
        "kv_budget_bytes_per_gpu": budget,
        "kv_bytes_needed_per_gpu": kv_needed,
        "max_concurrency": concurrency,
        "fits": (budget > 0) & (kv_needed <= budget),
        "arithmetic_intensity": roofline.decode_arithmetic_intensity(c),
        "kv_arithmetic_intensity": roofline.kv_read_arithmetic_intensity(c),
        "ridge_point": roofline.ridge_point(c.peak_flops_per_s, c.bandwidth_bytes_per_s),
        "bound": np.where(decode["memory_bound"], "memory", "compute"),
        "t_mem_s": decode["t_mem_s"],
        "t_comp_s": decode["t_comp_s"],
        "t_comm_s": decode["t_comm_s"],
        **latency_outputs(tpot, prefill, wait, throughput, p),
        "expert_read_fraction": roofline.expert_read_fraction(c, c.batch / c.pp),
        "b_knee": economics.b_knee(weights, kv_seq),
    }
    if usd_per_gpu_hour is not None:
        out["usd_per_million_tokens"] = economics.usd_per_million_tokens(
            gpus_per_replica(c), usd_per_gpu_hour, throughput)
    return out
