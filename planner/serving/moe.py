"""Expert parallelism and attention data parallelism: memory and step-time terms (issue 14).

Layout of one pipeline stage of N = ``tp`` GPUs (docs/serving-model.md section 13):

* **ep** = E: the routed experts are split over an expert-parallel group of E GPUs (whole
  experts per GPU, num_experts / E each), each expert sliced over N / E GPUs (MoE TP), so
  the expert weights per GPU stay R w / (N S). The FFN all-reduce of the MoE layers is
  replaced by an all-to-all dispatch (each token's hidden state to the GPUs of its k
  experts) and combine (their outputs back). E = 1 (default), or a dense model: today's TP.
* **attention_dp** = D: attention runs data-parallel on D ranks of N / D GPUs each; every
  rank holds the KV of its own sequences only (b / D of a batch of b), and the non-expert
  weights are replicated on every rank (each rank's attention TP group of N / D GPUs holds
  a full copy). D <= 1 (default): attention TP over N.

Every function returns the dense-layout value unchanged (the same array, bit for bit) on
rows whose layout is the default, so the hooks in :mod:`memory` and :mod:`roofline` leave
every existing number as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:   # no import cycle: arrays and params do not import this module
    from planner.serving.arrays import ConfigArrays
    from planner.serving.params import ServingParams


def ep_size(c: ConfigArrays) -> np.ndarray:
    """E: the expert-parallel group size, 1 for dense models and where ``ep`` <= 1."""
    return np.where(c.num_experts > 0, np.maximum(c.ep, 1.0), 1.0)


def attention_dp_ranks(c: ConfigArrays) -> np.ndarray:
    """D: attention data-parallel ranks per stage, 1 where attention DP is off."""
    return np.maximum(c.attention_dp, 1.0)


def has_layout(c: ConfigArrays) -> bool:
    """Whether any configuration of ``c`` uses expert parallelism or attention DP (cheap when
    the layout columns are the scalar defaults: the hooks call it on every step function)."""
    if np.any(c.attention_dp > 1.0):
        return True
    return bool(np.any(c.ep > 1.0) and np.any(ep_size(c) > 1.0))


def _dense_rows(c: ConfigArrays) -> np.ndarray:
    return (ep_size(c) <= 1.0) & (attention_dp_ranks(c) <= 1.0)


# ------------------------------------------------------------------ memory


def weights_bytes(c: ConfigArrays, plain) -> np.ndarray:
    """Weights one replica stores: (P - R) w D + R w [bytes] (``plain`` = P w where D = 1).

    The non-expert weights (attention, dense layers, shared experts, embeddings) are
    replicated on the D attention-DP ranks; the routed experts are stored once.
    """
    expert = c.routed_expert_params * c.weight_bytes_per_param
    stored = (c.params_total * c.weight_bytes_per_param - expert) * attention_dp_ranks(c) + expert
    return np.where(attention_dp_ranks(c) > 1.0, stored, plain)


def kv_head_share(c: ConfigArrays, group) -> np.ndarray:
    """Share of one sequence's KV heads each GPU of an attention TP group of ``group`` GPUs
    holds: ceil(n_kv / group) / n_kv (GQA), 1 (MLA: the latent is replicated)."""
    return np.where(c.kv_split_by_tp > 0, np.ceil(c.n_kv_heads / group) / c.n_kv_heads, 1.0)


def kv_fraction_per_gpu(c: ConfigArrays, plain) -> np.ndarray:
    """A sequence's KV share per GPU with attention DP: ceil(L/S)/L x share(N/D) / D.

    Each rank holds the KV of b / D sequences over its N / D GPUs, so per sequence of the
    replica a GPU holds 1 / D of the rank's share (MLA, D = N: 1/N instead of the whole
    latent on every TP rank). ``plain``: the attention-TP fraction (rows with D = 1).
    """
    d = attention_dp_ranks(c)
    layers = np.ceil(c.n_layers / c.pp) / c.n_layers
    split = layers * kv_head_share(c, np.maximum(c.tp / d, 1.0)) / d
    return np.where(d > 1.0, split, plain)


# ------------------------------------------------------------------ expert load imbalance


def expert_imbalance(c: ConfigArrays, p: ServingParams) -> np.ndarray:
    """lambda: the most loaded EP rank's tokens / the mean (``expert_load_imbalance``) where
    E > 1, else 1 (TP-sliced experts see every token's share evenly)."""
    return np.where(ep_size(c) > 1.0, p.expert_load_imbalance, 1.0)


def loaded_expert_fraction(c: ConfigArrays, p: ServingParams, fraction) -> np.ndarray:
    """Expert weights the most loaded EP rank reads: min(1, lambda phi_E) (``fraction`` =
    phi_E, returned unchanged where E = 1)."""
    lam = expert_imbalance(c, p)
    return np.where(lam != 1.0, np.minimum(1.0, lam * fraction), fraction)


def active_params(c: ConfigArrays, p: ServingParams) -> np.ndarray:
    """P_act with the most loaded rank's extra expert FLOPs: P_act + (lambda - 1) R k / E_n.

    The routed experts a token activates hold R k / E_n parameters (E_n experts, k per
    token); the step waits for the rank with lambda times the mean load. ``c.params_active``
    itself where lambda = 1.
    """
    if not np.any(ep_size(c) > 1.0):
        return c.params_active
    lam = expert_imbalance(c, p)
    routed_active = c.routed_expert_params * c.experts_per_token / np.maximum(c.num_experts, 1.0)
    return np.where(lam != 1.0, c.params_active + (lam - 1.0) * routed_active, c.params_active)


# ------------------------------------------------------------------ all-to-all


def dispatch_bytes_per_token(c: ConfigArrays, p: ServingParams) -> np.ndarray:
    """Bytes one token sends in the dispatch of one MoE layer: k d a_disp."""
    return c.experts_per_token * c.hidden_size * p.dispatch_bytes_per_element


def combine_bytes_per_token(c: ConfigArrays, p: ServingParams) -> np.ndarray:
    """Bytes one token receives in the combine of one MoE layer: k d a (BF16 outputs)."""
    return c.experts_per_token * c.hidden_size * p.activation_bytes


def scale_up_group(c: ConfigArrays) -> np.ndarray:
    """G: GPUs of an EP group on one scale-up domain, min(E, domain)."""
    return np.minimum(ep_size(c), c.domain_gpus)


def all_to_all_transfer_s(c: ConfigArrays, tokens, bytes_per_token) -> np.ndarray:
    """Transfer time of one all-to-all over the EP group, ``tokens`` tokens of the step, per
    GPU [s] (no fixed latency: :func:`all_to_all_latency_s`).

    Notes
    -----
    Each of the E ranks sends the k expert copies of its tokens/E tokens; an expert sits on
    any rank with probability 1/E, so (G - 1)/E of the bytes cross the scale-up link and
    (E - G)/E leave the domain over the scale-out network, G = min(E, domain). The two links
    work in parallel: ``max(V (G-1)/E / beta_link, V (E-G)/E / beta_out)``, V = tokens/E x
    bytes_per_token. No link where one is needed: infinite.
    """
    e = ep_size(c)
    g = scale_up_group(c)
    volume = np.asarray(tokens, dtype=float) / e * bytes_per_token
    inside, outside = volume * (g - 1.0) / e, volume * (e - g) / e
    with np.errstate(divide="ignore", invalid="ignore"):
        t_in = np.where(inside > 0, np.where(c.link_bytes_per_s > 0, inside / c.link_bytes_per_s, np.inf), 0.0)
        t_out = np.where(e > g, np.where(c.scale_out_bytes_per_s > 0, outside / c.scale_out_bytes_per_s, np.inf), 0.0)
    return np.maximum(t_in, t_out)


def all_to_all_latency_s(c: ConfigArrays, p: ServingParams, link_latency_s) -> np.ndarray:
    """Fixed latency of one dispatch + combine pair: tau (the scale-up link's all-reduce
    latency) when the group has a peer on the domain, plus ``scale_out_latency_s`` when it
    leaves the domain. One per pair, as one per all-reduce (reduce-scatter + all-gather):
    the MoE layer keeps the fixed cost of the FFN all-reduce it replaces."""
    g = scale_up_group(c)
    return np.where(g > 1.0, link_latency_s, 0.0) + np.where(ep_size(c) > g, p.scale_out_latency_s, 0.0)


def all_to_all_time_s(c: ConfigArrays, p: ServingParams, tokens, bytes_per_token, link_latency_s) -> np.ndarray:
    """One all-to-all with its fixed latency: transfer + latency [s]."""
    return all_to_all_transfer_s(c, tokens, bytes_per_token) + all_to_all_latency_s(c, p, link_latency_s)


def allreduce_time_s(c: ConfigArrays, p: ServingParams, group, rows, link_latency_s) -> np.ndarray:
    """One ring all-reduce of ``rows`` rows of d activations over ``group`` GPUs:
    2(g-1)/g a rows d / beta_link + tau, 0 for g = 1 (as ``roofline.tp_comm_time_s``)."""
    volume = 2.0 * (group - 1.0) / group * p.activation_bytes * np.asarray(rows, dtype=float) * c.hidden_size
    with np.errstate(divide="ignore", invalid="ignore"):
        transfer = np.where(c.link_bytes_per_s > 0, volume / c.link_bytes_per_s, np.inf)
    return np.where(group > 1.0, transfer + link_latency_s, 0.0)


def comm_time_s(c: ConfigArrays, p: ServingParams, tokens, plain, link_latency_s) -> np.ndarray:
    """Communication of one round of L layers with ``tokens`` rows, per GPU [s].

    ``L (AR(N/D, tokens/D) + FFN)``, FFN = AR(N, tokens) for E = 1 (with D > 1 the MoE TP
    gathers every rank's tokens: all-gather plus reduce-scatter, the volume of an
    all-reduce) or, for E > 1, the dispatch and combine transfers plus one fixed latency. With D = E = 1 this is the
    seed's 2L all-reduces; those rows return ``plain`` (``roofline.tp_comm_time_s``).
    """
    n, d, e = c.tp, attention_dp_ranks(c), ep_size(c)
    x = np.asarray(tokens, dtype=float)
    attention = allreduce_time_s(c, p, np.maximum(n / d, 1.0), x / d, link_latency_s)
    ffn_tp = allreduce_time_s(c, p, n, x, link_latency_s)
    ffn_ep = (all_to_all_transfer_s(c, x, dispatch_bytes_per_token(c, p))
              + all_to_all_transfer_s(c, x, combine_bytes_per_token(c, p)) + all_to_all_latency_s(c, p, link_latency_s))
    layout = c.n_layers * (attention + np.where(e > 1.0, ffn_ep, ffn_tp))
    return np.where(_dense_rows(c), plain, layout)
