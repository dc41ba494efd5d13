"""GPU memory budget: weights, KV cache per token and per sequence, fit and concurrency;
the attention-data-parallel layout and TensorRT-LLM's KV budget rule."""

from __future__ import annotations

import numpy as np

from planner.serving import moe
from planner.serving.arrays import ConfigArrays
from planner.serving.params import ServingParams

#: TensorRT-LLM gives the KV cache this fraction of the memory left after weights and
#: activations (``kv_cache_free_gpu_mem_fraction``; aiconfigurator's
#: TRTLLM_DEFAULT_FREE_GPU_MEMORY_FRACTION); vLLM and SGLang cap total use instead
#: (``gpu_memory_utilization`` / ``mem_fraction_static``), as the planner's memory model does.
TRTLLM_FREE_MEMORY_FRACTION = 0.9


def weights_bytes(c: ConfigArrays) -> np.ndarray:
    """M_w = P * w [bytes], the whole model's weights (with attention DP: as one replica
    stores them, :func:`planner.serving.moe.weights_bytes`)."""
    plain = c.params_total * c.weight_bytes_per_param
    return moe.weights_bytes(c, plain) if moe.has_layout(c) else plain   # issue 14: attention DP


def weights_bytes_per_gpu(c: ConfigArrays) -> np.ndarray:
    """M_w / (N * S) [bytes]: weights split by tensor and pipeline parallelism."""
    return weights_bytes(c) / (c.tp * c.pp)


def kv_bytes_per_token(c: ConfigArrays) -> np.ndarray:
    """Bytes of K and V one token adds over all layers (before any window cap).

    Notes
    -----
    GQA: 2 L n_kv d_h k_b. MLA: L (kv_lora_rank + rope_dim) k_b.
    """
    return c.n_layers * c.kv_elems_per_token_layer * c.kv_bytes_per_element


def kv_bytes_per_seq(c: ConfigArrays, context_tokens=None) -> np.ndarray:
    """KV bytes of one sequence at ``context_tokens`` (default: the mean context).

    Notes
    -----
    Sliding-window layers hold at most the window:
    ``per_layer * (L_full * ctx + L_window * min(ctx, window))``.
    """
    ctx = c.context_tokens if context_tokens is None else np.asarray(context_tokens, dtype=float)
    per_layer = c.kv_elems_per_token_layer * c.kv_bytes_per_element
    full_layers = c.n_layers - c.window_layers
    return per_layer * (full_layers * ctx + c.window_layers * np.minimum(ctx, c.window_tokens))


def kv_fraction_per_gpu(c: ConfigArrays) -> np.ndarray:
    """Fraction of a sequence's KV bytes one GPU of the replica holds.

    Notes
    -----
    PP splits layers over S stages (ceil(L/S)/L per GPU). TP splits GQA KV heads over N
    GPUs, ``ceil(n_kv/N)/n_kv`` (heads are replicated, not split, when N > n_kv); MLA's
    latent cache is replicated on every TP rank.
    """
    layers = np.ceil(c.n_layers / c.pp) / c.n_layers
    heads = np.where(c.kv_split_by_tp > 0, np.ceil(c.n_kv_heads / c.tp) / c.n_kv_heads, 1.0)
    plain = layers * heads
    return moe.kv_fraction_per_gpu(c, plain) if moe.has_layout(c) else plain   # issue 14: attention DP


def kv_budget_bytes_per_gpu(c: ConfigArrays, p: ServingParams) -> np.ndarray:
    """util * memory - weights per GPU - workspace [bytes]; negative when weights do not fit."""
    return p.gpu_memory_utilization * c.memory_bytes - weights_bytes_per_gpu(c) - p.workspace_bytes


def max_concurrency(c: ConfigArrays, p: ServingParams, context_tokens=None) -> np.ndarray:
    """Sequences whose KV fits at once: floor(KV budget / KV per sequence per GPU), >= 0."""
    per_gpu = kv_bytes_per_seq(c, context_tokens) * kv_fraction_per_gpu(c)
    budget = kv_budget_bytes_per_gpu(c, p)
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.floor(np.where(per_gpu > 0, budget / per_gpu, np.inf))
    return np.maximum(n, 0.0)


def engine_memory_params(c: ConfigArrays, p: ServingParams, engines) -> ServingParams:
    """``p`` with TensorRT-LLM rows' memory budget expressed as the planner's utilization.

    Notes
    -----
    TensorRT-LLM: KV = f (M - W - ws) with f = TRTLLM_FREE_MEMORY_FRACTION, which equals the
    planner's u M - W - ws for u = (f (M - W - ws) + W + ws) / M (per GPU; clipped to
    [0, 1]). Other engines keep ``p.gpu_memory_utilization``.
    """
    engines = np.asarray(engines, dtype=object)
    trt = engines == "trtllm"
    if not trt.any():
        return p
    weights = weights_bytes_per_gpu(c)
    fixed = weights + p.workspace_bytes
    util = (TRTLLM_FREE_MEMORY_FRACTION * np.maximum(c.memory_bytes - fixed, 0.0) + fixed) / c.memory_bytes
    util = np.clip(util, 0.0, 1.0)
    base = np.broadcast_to(np.asarray(p.gpu_memory_utilization, dtype=float), util.shape)
    return p.with_overrides(gpu_memory_utilization=np.where(trt, util, base))
