"""Build a :class:`ModelSpec` from a HuggingFace ``config.json`` (no download, a local path).

Supported families: Llama/Qwen2/Qwen3/Mistral dense (GQA, optional sliding window),
Mixtral and Qwen3-MoE, DeepSeek-V3 (MLA + MoE with shared experts), gpt-oss (alternating
sliding/full attention, MoE), Llama 4 (chunked attention, interleaved MoE).

Parameter counts are derived from the dimensions: embeddings (and an untied LM head),
attention projections, FFN/experts and routers; norms and biases are ignored (< 0.1%).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import ValidationError

from planner import limits
from planner.schema import ModelSpec, PlanningInputError
from planner.yamlio import validation_problems

#: FFN matrices per expert or dense MLP (gate, up, down) in SwiGLU models.
SWIGLU_MATRICES = 3


def _attention_params(c: dict, d: int, heads: int, kv_heads: int, head_dim: int) -> tuple[float, dict]:
    if "kv_lora_rank" in c and c.get("kv_lora_rank"):
        rope, nope = c["qk_rope_head_dim"], c["qk_nope_head_dim"]
        v_dim, kv_rank, q_rank = c["v_head_dim"], c["kv_lora_rank"], c.get("q_lora_rank")
        q = d * q_rank + q_rank * heads * (nope + rope) if q_rank else d * heads * (nope + rope)
        kv = d * (kv_rank + rope) + kv_rank * heads * (nope + v_dim)
        o = heads * v_dim * d
        return q + kv + o, {"attention": "mla", "kv_lora_rank": kv_rank, "qk_rope_head_dim": rope}
    return d * heads * head_dim * 2 + 2 * d * kv_heads * head_dim, {"attention": "gqa"}


def _moe_layout(c: dict, n_layers: int) -> tuple[int, int, int, int, int]:
    """(experts, experts per token, MoE layers, expert FFN size, shared experts)."""
    experts = c.get("num_local_experts") or c.get("num_experts") or c.get("n_routed_experts") or 0
    if not experts:
        return 0, 0, 0, 0, 0
    k = c.get("num_experts_per_tok") or c.get("experts_per_token")
    expert_ff = c.get("moe_intermediate_size") or c["intermediate_size"]
    if "first_k_dense_replace" in c:
        moe_layers = n_layers - c["first_k_dense_replace"]
    elif "interleave_moe_layer_step" in c:
        moe_layers = n_layers // c["interleave_moe_layer_step"]
    elif "decoder_sparse_step" in c:
        moe_layers = n_layers // c["decoder_sparse_step"] - len(c.get("mlp_only_layers") or [])
    else:
        moe_layers = n_layers
    shared = c.get("n_shared_experts") or (1 if c.get("model_type") == "llama4" else 0)
    return experts, k, moe_layers, expert_ff, shared


def _sliding(c: dict, n_layers: int) -> tuple[int | None, int]:
    """(window tokens, number of windowed layers)."""
    types = c.get("layer_types")
    if types:
        n = sum(t in ("sliding_attention", "chunked_attention") for t in types)
        return (c.get("sliding_window") if n else None), n
    if c.get("attention_chunk_size") and c.get("model_type") == "llama4":
        no_rope = c.get("no_rope_layers")
        n = sum(no_rope) if no_rope else n_layers - n_layers // 4
        return c["attention_chunk_size"], n
    window = c.get("sliding_window")
    if window and c.get("use_sliding_window", True):
        max_window_layers = c.get("max_window_layers")
        n = n_layers - max_window_layers if max_window_layers is not None and c.get("model_type", "").startswith("qwen") else n_layers
        return window, n
    return None, 0


def imported_model_id(path: Path) -> str:
    """The model id of an imported config: its file name (``org--name_config.json`` -> ``name``),
    lower-cased, with every run of characters outside ``a-z 0-9 . _ -`` replaced by ``-``
    (so a hostile file name never reaches a launch script or a report as written)."""
    stem = path.name.removesuffix(".json").removesuffix("_config").split("--")[-1].lower()
    return re.sub(r"[^a-z0-9._-]+", "-", stem).strip("-._")[:64] or "imported-model"


def model_from_hf_config(path: str | Path, model_id: str | None = None) -> ModelSpec:
    """Read a HuggingFace ``config.json`` into a :class:`ModelSpec`.

    Raises
    ------
    PlanningInputError
        When the file is missing, not JSON, or lacks the fields of a decoder-only model.
    """
    path = Path(path)
    try:
        raw = json.loads(limits.read_text_bounded(path))
    except FileNotFoundError:
        raise PlanningInputError(f"{path}: file not found") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise PlanningInputError(f"{path}: not a readable JSON config: {exc}"[:300]) from None
    if not isinstance(raw, dict):
        raise PlanningInputError(f"{path}: expected a JSON object at the top level, got {type(raw).__name__}")
    text_config = raw.get("text_config") or {}
    if not isinstance(text_config, dict):
        raise PlanningInputError(f"{path}: text_config: expected a JSON object, got {type(text_config).__name__}")
    c = {**raw, **text_config}
    problems = _field_problems(c)
    if problems:
        raise PlanningInputError([f"{path}: {p}" for p in problems])
    try:
        return _model_spec(c, path, model_id)
    except PlanningInputError:
        raise
    except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError) as exc:
        what = f"missing field {exc.args[0]}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        raise PlanningInputError(f"{path}: malformed config ({what}"[:300] + ")") from None


#: Integer fields read from a config.json: must be integers >= 1 when present and not null ...
_POSITIVE_INT_FIELDS = (
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "intermediate_size_mlp", "moe_intermediate_size", "shared_expert_intermediate_size",
    "kv_lora_rank", "q_lora_rank", "v_head_dim", "num_local_experts", "num_experts", "n_routed_experts",
    "num_experts_per_tok", "experts_per_token", "max_position_embeddings", "sliding_window",
    "attention_chunk_size", "interleave_moe_layer_step", "decoder_sparse_step", "vocab_size")
#: ... and these >= 0.
_NON_NEGATIVE_INT_FIELDS = ("qk_rope_head_dim", "qk_nope_head_dim", "first_k_dense_replace", "n_shared_experts",
                            "max_window_layers")
#: Largest value of an integer config field (sizes beyond it overflow the int64 arrays).
MAX_CONFIG_INT = 2**31


def _field_problems(c: dict) -> list[str]:
    """Type and range problems of the integer fields, one line per field."""
    out = []
    for key in _POSITIVE_INT_FIELDS + _NON_NEGATIVE_INT_FIELDS:
        value = c.get(key)
        if value is None:
            continue
        low = 1 if key in _POSITIVE_INT_FIELDS else 0
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_CONFIG_INT:
            out.append(f"{key}: expected an integer in [{low}, {MAX_CONFIG_INT}], got {value!r}"[:200])
    return out


def _model_spec(c: dict, path: Path, model_id: str | None) -> ModelSpec:
    n_layers, d, heads = (c.get(k) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads"))
    for key, value in (("num_hidden_layers", n_layers), ("hidden_size", d), ("num_attention_heads", heads)):
        if value is None:
            raise PlanningInputError(f"{path}: missing field {key} (not a decoder-only LLM config?)")
    kv_heads = c.get("num_key_value_heads") or heads
    head_dim = c.get("head_dim") or d // heads
    vocab = c.get("vocab_size", 0)

    attn, attn_fields = _attention_params(c, d, heads, kv_heads, head_dim)
    experts, k, moe_layers, expert_ff, shared = _moe_layout(c, n_layers)
    dense_ff = c.get("intermediate_size_mlp") or c.get("intermediate_size") or 4 * d
    dense_layers = n_layers - moe_layers
    per_expert = SWIGLU_MATRICES * d * expert_ff
    routed = moe_layers * experts * per_expert
    shared_ff = c.get("shared_expert_intermediate_size") or expert_ff
    ffn = (dense_layers * SWIGLU_MATRICES * d * dense_ff + routed
           + moe_layers * (shared * SWIGLU_MATRICES * d * shared_ff + d * experts))
    embeddings = vocab * d * (1 if c.get("tie_word_embeddings") else 2)
    total = embeddings + n_layers * attn + ffn
    active = total - routed * (1 - k / experts) if experts else total
    window, window_layers = _sliding(c, n_layers)

    name = model_id or imported_model_id(path)
    try:
        return ModelSpec(
            id=name, name=name, hf_config=str(path),
            params_total=float(total), params_active=float(active),
            routed_expert_params=float(routed), num_experts=experts, experts_per_token=k or 0,
            num_layers=n_layers, hidden_size=d, num_attention_heads=heads,
            num_kv_heads=kv_heads, head_dim=head_dim,
            intermediate_size=dense_ff, moe_intermediate_size=expert_ff if experts else None,
            vocab_size=vocab or None,
            sliding_window_tokens=window, sliding_window_layers=window_layers,
            max_context_tokens=c.get("max_position_embeddings") or 4096,
            source=f"HuggingFace config.json at {path} (parameters derived from dimensions)",
            **attn_fields,
        )
    except ValidationError as exc:
        raise PlanningInputError([f"{path}: {p}" for p in validation_problems(exc)]) from None
