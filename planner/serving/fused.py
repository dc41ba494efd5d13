"""The serving playground's quantities in one fused pass (speed; issue 19).

:func:`fused_evaluate` returns exactly what :func:`planner.serving.evaluate.evaluate`
returns. The decode step and the prefill come from the serving model's one implementation
of each (:func:`planner.serving.roofline.decode_times`, :func:`~planner.serving.roofline.prefill_time_s`);
the memory quantities, intensities and economics are computed from the same equations as
:mod:`planner.serving.memory`, :mod:`planner.serving.roofline` and
:mod:`planner.serving.economics` in the same float64 operation order
(``tests/test_serving.py`` checks bit equality with
:func:`planner.serving.evaluate.evaluate_reference`), with every shared intermediate
computed once (weights, KV per sequence and per GPU, decode FLOPs per token) and the MoE
power taken only on MoE rows.
"""

from __future__ import annotations

import numpy as np

from planner.dimensions import gpus_per_replica
from planner.serving import roofline
from planner.serving.arrays import ConfigArrays
from planner.serving.params import ServingParams
from planner.units import SECONDS_PER_HOUR, TOKENS_PER_MILLION


#: Labels of the decode bound, indexed by ``memory_bound`` (a take is 2-3x faster than where).
_BOUND_LABELS = np.array(["compute", "memory"])


def _expert_fraction(miss, moe, tokens, known=None):
    """1 - miss^tokens on MoE rows, 0 elsewhere (roofline.expert_read_fraction).

    ``known = (tokens0, fraction0)``: a fraction already computed for other token counts;
    rows where the counts are equal reuse it instead of taking the power again.
    """
    shape = np.broadcast_shapes(np.shape(moe), np.shape(tokens), np.shape(miss))
    if not moe.any():
        return np.zeros(shape)
    todo = np.broadcast_to(moe, shape)
    frac = np.zeros(shape)
    if known is not None:
        same = np.broadcast_to(np.asarray(known[0]) == tokens, shape)
        np.copyto(frac, np.broadcast_to(known[1], shape), where=same)
        todo = todo & ~same
    power = np.power(np.broadcast_to(miss, shape), np.broadcast_to(tokens, shape), where=todo, out=np.ones(shape))
    np.subtract(1.0, power, out=frac, where=todo)
    return frac


def latency_outputs(tpot, prefill, wait, throughput, p: ServingParams) -> dict:
    """The playground's latency and throughput entries (section 7 of docs/serving-model.md)."""
    return {"tpot_s": tpot, "prefill_s": prefill, "queue_wait_s": wait,
            "ttft_s": wait + prefill + tpot + p.request_overhead_s,
            "throughput_tokens_per_s": throughput, "per_user_tokens_per_s": 1.0 / tpot}


def fused_evaluate(c: ConfigArrays, p: ServingParams, users=None, usd_per_gpu_hour=None) -> dict:
    """See :func:`planner.serving.evaluate.evaluate` (same arguments, same results)."""
    users = c.batch if users is None else np.asarray(users, dtype=float)
    tp, pp, b, ctx, pt = c.tp, c.pp, c.batch, c.context_tokens, c.prompt_tokens
    L, d = c.n_layers, c.hidden_size
    nS = gpus_per_replica(c)
    # memory.py
    weights = c.params_total * c.weight_bytes_per_param
    weights_per_gpu = weights / nS
    per_layer = c.kv_elems_per_token_layer * c.kv_bytes_per_element
    kv_seq = per_layer * ((L - c.window_layers) * ctx + c.window_layers * np.minimum(ctx, c.window_tokens))
    heads = np.where(c.kv_split_by_tp > 0, np.ceil(c.n_kv_heads / tp) / c.n_kv_heads, 1.0)
    kv_fraction = np.ceil(L / pp) / L * heads
    budget = p.gpu_memory_utilization * c.memory_bytes - weights_per_gpu - p.workspace_bytes
    kv_needed = b * kv_seq * kv_fraction
    kv_per_gpu = kv_seq * kv_fraction
    with np.errstate(divide="ignore", invalid="ignore"):
        concurrency = np.maximum(np.floor(np.where(kv_per_gpu > 0, budget / kv_per_gpu, np.inf)), 0.0)
    # roofline.py: MoE reads, link terms
    moe = np.asarray(c.num_experts > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        miss = np.where(moe, 1.0 - c.experts_per_token / np.maximum(c.num_experts, 1), 1.0)
    expert_bytes = c.routed_expert_params * c.weight_bytes_per_param
    decode_flops_per_token = 2.0 * c.params_active + 4.0 * L * d * ctx
    # the decode step and the prefill: the serving model's one implementation of each
    decode = roofline.decode_times(c, p)
    prefill = roofline.prefill_time_s(c, p)
    tpot = decode["tpot_s"]
    # intensities, queue, economics
    per_stage = b / pp
    expert_fraction = _expert_fraction(miss, moe, per_stage)
    read_batch = weights - expert_bytes + expert_bytes * _expert_fraction(miss, moe, b, (per_stage, expert_fraction))
    throughput = b / tpot
    rounds = np.maximum(np.ceil(np.asarray(users, dtype=float) / b - 1.0 - 1e-12), 0.0)
    with np.errstate(invalid="ignore"):
        wait = np.where(rounds > 0, rounds * (prefill + c.output_tokens * tpot), 0.0)
    out = {
        "weights_bytes": weights,
        "weights_bytes_per_gpu": weights_per_gpu,
        "kv_bytes_per_token": L * c.kv_elems_per_token_layer * c.kv_bytes_per_element,
        "kv_bytes_per_seq": kv_seq,
        "kv_budget_bytes_per_gpu": budget,
        "kv_bytes_needed_per_gpu": kv_needed,
        "max_concurrency": concurrency,
        "fits": (budget > 0) & (kv_needed <= budget),
        "arithmetic_intensity": b * decode_flops_per_token / (read_batch + b * kv_seq),
        "kv_arithmetic_intensity": 4.0 * L * d / (L * c.kv_elems_per_token_layer * c.kv_bytes_per_element),
        "ridge_point": c.peak_flops_per_s / c.bandwidth_bytes_per_s,
        "bound": _BOUND_LABELS.take(np.asarray(decode["memory_bound"]).view(np.uint8)),
        "t_mem_s": decode["t_mem_s"],
        "t_comp_s": decode["t_comp_s"],
        "t_comm_s": decode["t_comm_s"],
        **latency_outputs(tpot, prefill, wait, throughput, p),
        "expert_read_fraction": expert_fraction,
    }
    with np.errstate(divide="ignore", invalid="ignore"):   # no KV (zero context): infinite knee
        out["b_knee"] = weights / kv_seq
    if usd_per_gpu_hour is not None:
        with np.errstate(divide="ignore"):
            out["usd_per_million_tokens"] = (nS * np.asarray(usd_per_gpu_hour, dtype=float)
                                             / (throughput * SECONDS_PER_HOUR) * TOKENS_PER_MILLION)
    return out
