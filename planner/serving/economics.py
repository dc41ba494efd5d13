"""Cost per million tokens, the decode batch knee, and the training estimate (C = 6ND)."""

from __future__ import annotations

import numpy as np

from planner.units import SECONDS_PER_DAY, SECONDS_PER_HOUR, TOKENS_PER_MILLION

#: Adam mixed precision: BF16 weights and gradients (4 B) + FP32 master and two moments (12 B).
ADAM_MIXED_PRECISION_BYTES_PER_PARAM = 16.0
#: FLOPs per parameter per training token (forward 2, backward 4).
TRAINING_FLOPS_PER_PARAM_TOKEN = 6.0
#: The knee's recommended max_num_seqs lies in [1.0, 1.5] x B_knee (decode-batch-knee seed).
KNEE_RECOMMENDATION_MAX_FACTOR = 1.5
#: Fallback rounding when no power of two lies in that range (engines' CUDA-graph sizes).
KNEE_ROUNDING_MULTIPLE = 8


def usd_per_million_tokens(gpus, usd_per_gpu_hour, tokens_per_s) -> np.ndarray:
    """N_gpus * price / (tokens/s * 3600) * 1e6 [USD per 1M tokens]."""
    with np.errstate(divide="ignore"):
        return (np.asarray(gpus, dtype=float) * np.asarray(usd_per_gpu_hour, dtype=float)
                / (np.asarray(tokens_per_s, dtype=float) * SECONDS_PER_HOUR) * TOKENS_PER_MILLION)


def b_knee(weight_bytes, kv_bytes_per_seq) -> np.ndarray:
    """B_knee = model bytes / KV bytes per sequence: where KV reads equal weight reads."""
    return np.asarray(weight_bytes, dtype=float) / np.asarray(kv_bytes_per_seq, dtype=float)


def recommended_max_num_seqs(knee) -> np.ndarray:
    """Smallest power of two in [B_knee, 1.5 B_knee]; else B_knee rounded up to a multiple of 8.

    Examples: 59.8 -> 64, 15.0 -> 16, 239 -> 256, 210 -> 256.
    """
    knee = np.maximum(np.asarray(knee, dtype=float), 1.0)
    power = 2.0 ** np.ceil(np.log2(knee - 1e-9))
    rounded = np.ceil(knee / KNEE_ROUNDING_MULTIPLE) * KNEE_ROUNDING_MULTIPLE
    return np.where(power <= KNEE_RECOMMENDATION_MAX_FACTOR * knee, power, rounded).astype(int)


def training_estimate(params, tokens, peak_flops_per_s, gpus, mfu) -> dict:
    """C = 6ND, duration = C / (GPUs * pi * MFU), Adam state 16 B/param."""
    flops = TRAINING_FLOPS_PER_PARAM_TOKEN * float(params) * float(tokens)
    seconds = flops / (gpus * peak_flops_per_s * mfu)
    return {"flops": flops, "seconds": seconds, "days": seconds / SECONDS_PER_DAY,
            "optimizer_state_bytes": ADAM_MIXED_PRECISION_BYTES_PER_PARAM * float(params)}
