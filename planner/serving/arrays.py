"""The configurations the serving model computes over: one numpy array per quantity."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

LINK_NONE, LINK_FAST, LINK_SLOW = 0, 1, 2  # none | nvlink/infinity-fabric | pcie/ethernet


@dataclass(frozen=True)
class ConfigArrays:
    """Columns of configurations (all broadcastable against each other).

    Model columns
        n_layers, hidden_size, n_kv_heads, head_dim, params_total, params_active,
        routed_expert_params, num_experts, experts_per_token, kv_elems_per_token_layer
        (K+V elements per token per layer: 2 n_kv d_h, or MLA kv_lora_rank + rope dim),
        kv_split_by_tp (1 for GQA heads split over TP, 0 for MLA's replicated latent),
        window_layers, window_tokens (sliding-window layers and their window).
    GPU columns
        memory_bytes, bandwidth_bytes_per_s, peak_flops_per_s (of the math unit used),
        link_bytes_per_s (per direction), link_kind (LINK_NONE/FAST/SLOW).
    Configuration columns
        tp, pp, weight_bytes_per_param, kv_bytes_per_element, batch (sequences per
        decode step), prompt_tokens, output_tokens, context_tokens (mean decode context).
    Layout columns (issue 14, :mod:`planner.serving.moe`; the defaults are the dense layout
    and leave every number unchanged)
        ep: expert-parallel group size inside the tp GPUs of a stage (1: experts split by
        TP); attention_dp: attention data-parallel ranks per stage (0 or 1: off; ``True``
        means tp ranks, SGLang's ``--enable-dp-attention`` with dp = tp);
        domain_gpus (GPUs per scale-up domain, inf: unbounded) and scale_out_bytes_per_s
        (per GPU and direction, 0: none), from the GPU catalog.
    """

    n_layers: np.ndarray
    hidden_size: np.ndarray
    n_kv_heads: np.ndarray
    head_dim: np.ndarray
    params_total: np.ndarray
    params_active: np.ndarray
    routed_expert_params: np.ndarray
    num_experts: np.ndarray
    experts_per_token: np.ndarray
    kv_elems_per_token_layer: np.ndarray
    kv_split_by_tp: np.ndarray
    window_layers: np.ndarray
    window_tokens: np.ndarray
    memory_bytes: np.ndarray
    bandwidth_bytes_per_s: np.ndarray
    peak_flops_per_s: np.ndarray
    link_bytes_per_s: np.ndarray
    link_kind: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    weight_bytes_per_param: np.ndarray
    kv_bytes_per_element: np.ndarray
    batch: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    context_tokens: np.ndarray
    ep: np.ndarray = 1.0
    attention_dp: np.ndarray = 0.0
    domain_gpus: np.ndarray = np.inf
    scale_out_bytes_per_s: np.ndarray = 0.0

    def __post_init__(self):
        if np.asarray(self.attention_dp).dtype == bool:   # True: attention DP over the tp ranks
            object.__setattr__(self, "attention_dp", np.where(self.attention_dp, self.tp, 0.0))
        for f in fields(self):
            object.__setattr__(self, f.name, np.asarray(getattr(self, f.name), dtype=float))

    def replace(self, **changes) -> "ConfigArrays":
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return ConfigArrays(**values)

    @property
    def shape(self) -> tuple:
        return np.broadcast_shapes(*(getattr(self, f.name).shape for f in fields(self)))

    def take(self, rows) -> "ConfigArrays":
        """The configurations at positions ``rows``: 1-D columns of more than one element are
        indexed; scalars and one-element columns (they broadcast) are kept."""
        return self.replace(**{f.name: v[rows] for f in fields(self)
                               if (v := getattr(self, f.name)).ndim == 1 and v.size > 1})


def scaled(value, factor):
    """``value * factor``, without the pass where ``factor`` is the scalar 1 (x * 1.0 = x
    bit for bit): for a parameter that is 1 unless calibrated or overridden."""
    return value if np.ndim(factor) == 0 and factor == 1.0 else value * factor


MODEL_COLUMNS = ("n_layers", "hidden_size", "n_kv_heads", "head_dim", "params_total",
                 "params_active", "routed_expert_params", "num_experts", "experts_per_token",
                 "kv_elems_per_token_layer", "kv_split_by_tp", "window_layers", "window_tokens")
GPU_COLUMNS = ("memory_bytes", "bandwidth_bytes_per_s", "link_bytes_per_s", "link_kind", "domain_gpus",
               "scale_out_bytes_per_s")


def model_columns(model) -> dict:
    """The model columns of a :class:`~planner.schema.ModelSpec` as scalars."""
    if model.attention == "mla":
        kv_elems, split = model.kv_lora_rank + model.qk_rope_head_dim, 0.0
    else:
        kv_elems, split = 2 * model.num_kv_heads * model.head_dim, 1.0
    return {
        "n_layers": model.num_layers, "hidden_size": model.hidden_size,
        "n_kv_heads": model.num_kv_heads, "head_dim": model.head_dim,
        "params_total": model.params_total, "params_active": model.params_active,
        "routed_expert_params": model.routed_expert_params,
        "num_experts": model.num_experts, "experts_per_token": model.experts_per_token,
        "kv_elems_per_token_layer": kv_elems, "kv_split_by_tp": split,
        "window_layers": model.sliding_window_layers,
        "window_tokens": model.sliding_window_tokens or 0,
    }


def gpu_columns(gpu) -> dict:
    """The GPU columns of a :class:`~planner.schema.GpuSpec` (peak FLOP/s chosen separately)."""
    kind = {"none": LINK_NONE, "nvlink": LINK_FAST, "infinity-fabric": LINK_FAST}.get(gpu.scale_up_link, LINK_SLOW)
    return {
        "memory_bytes": gpu.memory_bytes, "bandwidth_bytes_per_s": gpu.memory_bandwidth_bytes_per_s,
        "link_bytes_per_s": gpu.link_bytes_per_s, "link_kind": kind,
        "domain_gpus": gpu.max_gpus_per_scale_up_domain, "scale_out_bytes_per_s": gpu.scale_out_bytes_per_s,
    }


def math_flops_per_s(gpu, weight_format) -> tuple[float, bool]:
    """Peak FLOP/s the format's math runs at on ``gpu``, and whether it fell back to BF16.

    A format whose math unit the GPU lacks (FP8 on Ampere, FP4 on Hopper) runs weight-only:
    weights stored compressed, dequantized to BF16 math.
    """
    native = gpu.peak_flops_per_s(weight_format.math)
    if native is not None:
        return native, False
    bf16 = gpu.peak_flops_per_s("bf16")
    return (np.nan if bf16 is None else bf16), True
