"""The comprehensive serving playground: every quantity of DESIGN section 4 at once."""

from __future__ import annotations

import numpy as np

from planner.serving import economics, memory, roofline
from planner.serving.arrays import ConfigArrays
from planner.serving.params import ServingParams


def seed_queue_wait_s(users, batch, prefill_s, output_tokens, tpot_s) -> np.ndarray:
    """The seed's closed-loop wait: ceil(U/b - 1) * (t_pf + o * TPOT), b = min(U, B_max)."""
    rounds = np.maximum(np.ceil(np.asarray(users, dtype=float) / batch - 1.0 - 1e-12), 0.0)
    with np.errstate(invalid="ignore"):
        return np.where(rounds > 0, rounds * (prefill_s + output_tokens * tpot_s), 0.0)


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
    """
    users = c.batch if users is None else np.asarray(users, dtype=float)
    decode = roofline.decode_times(c, p)
    prefill = roofline.prefill_time_s(c, p)
    kv_seq = memory.kv_bytes_per_seq(c)
    budget = memory.kv_budget_bytes_per_gpu(c, p)
    kv_needed = c.batch * kv_seq * memory.kv_fraction_per_gpu(c)
    tpot = decode["tpot_s"]
    throughput = c.batch / tpot
    wait = seed_queue_wait_s(users, c.batch, prefill, c.output_tokens, tpot)
    out = {
        "weights_bytes": memory.weights_bytes(c),
        "weights_bytes_per_gpu": memory.weights_bytes_per_gpu(c),
        "kv_bytes_per_token": memory.kv_bytes_per_token(c),
        "kv_bytes_per_seq": kv_seq,
        "kv_budget_bytes_per_gpu": budget,
        "kv_bytes_needed_per_gpu": kv_needed,
        "max_concurrency": memory.max_concurrency(c, p),
        "fits": (budget > 0) & (kv_needed <= budget),
        "arithmetic_intensity": roofline.decode_arithmetic_intensity(c),
        "kv_arithmetic_intensity": roofline.kv_read_arithmetic_intensity(c),
        "ridge_point": roofline.ridge_point(c.peak_flops_per_s, c.bandwidth_bytes_per_s),
        "bound": np.where(decode["memory_bound"], "memory", "compute"),
        "t_mem_s": decode["t_mem_s"],
        "t_comp_s": decode["t_comp_s"],
        "t_comm_s": decode["t_comm_s"],
        "tpot_s": tpot,
        "prefill_s": prefill,
        "queue_wait_s": wait,
        "ttft_s": wait + prefill + tpot + p.request_overhead_s,
        "throughput_tokens_per_s": throughput,
        "per_user_tokens_per_s": 1.0 / tpot,
        "expert_read_fraction": roofline.expert_read_fraction(c, c.batch / c.pp),
        "b_knee": economics.b_knee(memory.weights_bytes(c), kv_seq),
    }
    if usd_per_gpu_hour is not None:
        out["usd_per_million_tokens"] = economics.usd_per_million_tokens(
            c.tp * c.pp, usd_per_gpu_hour, throughput)
    return out
