"""GPU memory budget: weights, KV cache per token and per sequence, fit and concurrency."""

from __future__ import annotations

import numpy as np

from planner.serving import moe
from planner.serving.arrays import ConfigArrays
from planner.serving.params import ServingParams


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
