"""Roofline step times: decode (TPOT), prefill, TP all-reduce, MoE expert reads, PP.

Every function takes :class:`ConfigArrays` (one element per configuration) and returns
arrays in SI units. With pipeline parallelism S, a decode round visits S stages, each with
1/S of the layers and a micro-batch of b/S sequences, so TPOT = S * stage time; the whole
round reads the weights once per micro-batch and the KV once (no single-request speed-up).
"""

from __future__ import annotations

import copy

import numpy as np

from planner.serving import moe
from planner.serving.arrays import LINK_FAST, ConfigArrays
from planner.serving.memory import kv_bytes_per_seq, kv_fraction_per_gpu, weights_bytes
from planner.serving.params import ServingParams


def ridge_point(peak_flops_per_s, bandwidth_bytes_per_s) -> np.ndarray:
    """pi / beta [FLOP/byte]: intensity above which a kernel is compute bound."""
    return np.asarray(peak_flops_per_s, dtype=float) / np.asarray(bandwidth_bytes_per_s, dtype=float)


def expert_read_fraction(c: ConfigArrays, tokens) -> np.ndarray:
    """Expected fraction of routed experts a step touches: 1 - (1 - k/E)^tokens (0 dense)."""
    moe = c.num_experts > 0
    if not np.any(moe):     # dense models only: no power to take
        return np.zeros(np.broadcast_shapes(moe.shape, np.shape(tokens)))
    with np.errstate(divide="ignore", invalid="ignore"):
        miss = np.where(moe, 1.0 - c.experts_per_token / np.maximum(c.num_experts, 1), 1.0)
    return np.where(moe, 1.0 - miss ** np.asarray(tokens, dtype=float), 0.0)


#: Below this value of tokens x ln(1 - k/E), (1 - k/E)^tokens < 2^-60 and the expert read
#: fraction 1 - (1 - k/E)^tokens rounds to exactly 1.0 in float64 (any result below 2^-54
#: does): the power need not be taken (issue 19; it is the costliest operation of a step).
SATURATED_LOG_MISS = -60.0 * np.log(2.0)


def saturation_tokens(miss) -> np.ndarray:
    """Token counts above which 1 - miss^tokens is exactly 1.0 (:data:`SATURATED_LOG_MISS`
    / ln miss; +inf-like where miss = 1): one comparison per row and token count then
    decides, instead of a product and a comparison (the rounding of the quotient moves the
    bound by an ulp, far inside the 2^-60 .. 2^-54 margin)."""
    with np.errstate(divide="ignore", over="ignore"):      # miss = 0: log -inf; miss = 1: +inf
        return SATURATED_LOG_MISS / np.minimum(np.log(miss), -np.finfo(float).tiny)


def missed_fraction(miss, saturated, tokens) -> np.ndarray:
    """1 - miss^tokens, the power taken only where ``tokens`` is not above ``saturated``
    (:func:`saturation_tokens` of ``miss``; 1.0 exactly there): the same numbers."""
    tokens = np.asarray(tokens, dtype=float)
    todo = ~(tokens > saturated)
    if todo.all():
        return 1.0 - miss ** tokens
    out = np.ones(todo.shape)
    if todo.any():
        out[todo] = 1.0 - np.broadcast_to(miss, todo.shape)[todo] ** np.broadcast_to(tokens, todo.shape)[todo]
    return out


def weight_read_bytes(c: ConfigArrays, tokens, p: ServingParams | None = None) -> np.ndarray:
    """M_w_read(b): dense part + routed experts * expert_read_fraction(b) [bytes] (with ``p``
    and expert parallelism: the most loaded rank's fraction, docs/serving-model.md section 13)."""
    expert_bytes = c.routed_expert_params * c.weight_bytes_per_param
    fraction = expert_read_fraction(c, tokens)
    if p is not None and moe.has_layout(c):   # issue 14: expert load imbalance
        fraction = moe.loaded_expert_fraction(c, p, fraction)
    return weights_bytes(c) - expert_bytes + expert_bytes * fraction


def allreduce_latency_s(c: ConfigArrays, p: ServingParams) -> np.ndarray:
    """tau per all-reduce: NVLink-class links vs PCIe/Ethernet."""
    return np.where(c.link_kind == LINK_FAST, p.allreduce_latency_nvlink_s, p.allreduce_latency_pcie_s)


def tp_comm_time_s(c: ConfigArrays, p: ServingParams, tokens) -> np.ndarray:
    """t_comm = 2L (2(N-1)/N * a*tokens*d / beta_link + tau) for N > 1, else 0.

    ``tokens`` rows cross each all-reduce (the batch in decode, the prompt in prefill);
    a = activation bytes (2 for BF16, the seed's "2bd").
    """
    n = c.tp
    volume = 2.0 * (n - 1.0) / n * p.activation_bytes * np.asarray(tokens, dtype=float) * c.hidden_size
    with np.errstate(divide="ignore", invalid="ignore"):
        transfer = np.where(c.link_bytes_per_s > 0, volume / c.link_bytes_per_s, np.inf)
    t = 2.0 * c.n_layers * (transfer + allreduce_latency_s(c, p))
    t = np.where(n > 1, t, 0.0)
    # issue 14: attention DP / expert-parallel all-to-all (moe.py)
    return moe.comm_time_s(c, p, tokens, t, allreduce_latency_s(c, p)) if moe.has_layout(c) else t


def pp_hop_time_s(c: ConfigArrays, p: ServingParams, tokens) -> np.ndarray:
    """Activation hand-offs between S stages: (S-1) * (a*tokens*d / link + hop latency)."""
    volume = p.activation_bytes * np.asarray(tokens, dtype=float) * c.hidden_size
    with np.errstate(divide="ignore", invalid="ignore"):
        transfer = np.where(c.link_bytes_per_s > 0, volume / c.link_bytes_per_s, 0.0)
    return (c.pp - 1.0) * (transfer + p.pipeline_hop_latency_s)


def micro_batch(batch, stages) -> np.ndarray:
    """Sequences per micro-batch when ``batch`` sequences cycle through ``stages`` stages.

    b/S, but at least one sequence while any is present: with fewer sequences than stages
    each micro-batch holds one sequence (and some stages idle).
    """
    b = np.asarray(batch, dtype=float)
    return np.maximum(b / stages, np.minimum(b, 1.0))


def decode_flops_per_token(c: ConfigArrays, context_tokens=None, p: ServingParams | None = None) -> np.ndarray:
    """2 P_act + 4 L d c [FLOP]: weights plus attention over the context (with ``p``: the most
    loaded expert-parallel rank's P_act, :func:`planner.serving.moe.active_params`)."""
    ctx = c.context_tokens if context_tokens is None else context_tokens
    active = c.params_active if p is None else moe.active_params(c, p)   # issue 14
    return 2.0 * active + 4.0 * c.n_layers * c.hidden_size * ctx


def decode_times(c: ConfigArrays, p: ServingParams, batch=None, context_tokens=None) -> dict:
    """One decode step of ``batch`` sequences (default ``c.batch``) at mean context.

    Returns
    -------
    dict of arrays: ``t_mem_s``, ``t_comp_s``, ``t_comm_s``, ``tpot_s``, ``bytes_read_per_gpu``,
    ``flops``, ``memory_bound`` (bool).

    Notes
    -----
    Per micro-batch m = b/S on one stage (L/S layers), per GPU:
    t_mem = (M_w_read(m)/(N S) + m c M_KV f_kv) / (beta eta_m), f_kv the GPU's share of
    the KV (1/(N S) for GQA with N <= n_kv; replicated heads and MLA latents cost more),
    t_comp = m (2 P_act + 4 L d c) / (N S pi eta_c), t_comm over L/S layers;
    TPOT = S (max(t_mem, t_comp) + t_comm) + PP hops + step overhead. For S = 1 this is
    the seed's TPOT = max(t_mem, t_comp) + t_comm.
    """
    b = c.batch if batch is None else np.asarray(batch, dtype=float)
    ctx = c.context_tokens if context_tokens is None else np.asarray(context_tokens, dtype=float)
    micro = micro_batch(b, c.pp)
    nS = c.tp * c.pp
    gpu_bytes = weight_read_bytes(c, micro, p) / nS + micro * kv_bytes_per_seq(c, ctx) * kv_fraction_per_gpu(c)
    flops = micro * decode_flops_per_token(c, ctx, p)
    t_mem = gpu_bytes / (c.bandwidth_bytes_per_s * p.memory_efficiency)
    t_comp = flops / (nS * c.peak_flops_per_s * p.compute_efficiency)
    t_comm = tp_comm_time_s(c, p, micro) / c.pp
    stage = np.maximum(t_mem, t_comp) + t_comm
    tpot = c.pp * stage + pp_hop_time_s(c, p, micro) + p.step_overhead_s
    return {"t_mem_s": c.pp * t_mem, "t_comp_s": c.pp * t_comp, "t_comm_s": c.pp * t_comm,
            "tpot_s": tpot, "bytes_read_per_gpu": gpu_bytes * c.pp, "flops": flops * c.pp,
            "memory_bound": t_mem >= t_comp}


def decode_arithmetic_intensity(c: ConfigArrays, batch=None) -> np.ndarray:
    """FLOP per byte of one decode step: b(2P_act + 4Ldc) / (M_w_read(b) + b c M_KV)."""
    b = c.batch if batch is None else np.asarray(batch, dtype=float)
    return b * decode_flops_per_token(c) / (weight_read_bytes(c, b) + b * kv_bytes_per_seq(c))


def kv_read_arithmetic_intensity(c: ConfigArrays) -> np.ndarray:
    """Attention's own intensity 4Ldc / (c * KV bytes per token), batch-independent.

    Notes
    -----
    For BF16 GQA this is d / (n_kv d_h) (Llama 3 8B: 4096 / 1024 = 4 FLOP/byte).
    """
    return 4.0 * c.n_layers * c.hidden_size / (c.n_layers * c.kv_elems_per_token_layer * c.kv_bytes_per_element)


def prefill_time_s(c: ConfigArrays, p: ServingParams, prompt_tokens=None) -> np.ndarray:
    """t_pf = max(p(2P_act + 2Ldp)/(N pi eta_c phi), M_w_read(p)/(N beta eta_m)) + t_comm(p).

    phi = ``prefill_compute_factor`` (1 in the seeds).

    With PP the stages run one after the other: the same total work plus hops.
    """
    pt = c.prompt_tokens if prompt_tokens is None else np.asarray(prompt_tokens, dtype=float)
    flops = pt * (2.0 * moe.active_params(c, p) + 2.0 * c.n_layers * c.hidden_size * pt)
    t_comp = flops / (c.tp * c.peak_flops_per_s * p.compute_efficiency * p.prefill_compute_factor)
    t_mem = weight_read_bytes(c, pt, p) / (c.tp * c.bandwidth_bytes_per_s * p.memory_efficiency)
    return np.maximum(t_comp, t_mem) + tp_comm_time_s(c, p, pt) + pp_hop_time_s(c, p, pt)


def pipeline_bubble_fraction(stages, micro_batches) -> np.ndarray:
    """GPipe bubble (S - 1) / (m + S - 1)."""
    s = np.asarray(stages, dtype=float)
    return (s - 1.0) / (np.asarray(micro_batches, dtype=float) + s - 1.0)


def prefill_flops_per_token(c: ConfigArrays, prompt_tokens) -> np.ndarray:
    """2 P_act + 2 L d p [FLOP]: per prompt token, attention over half the prompt on average."""
    return 2.0 * c.params_active + 2.0 * c.n_layers * c.hidden_size * np.asarray(prompt_tokens, dtype=float)


class StepModel:
    """Continuous-batching iteration times of fixed configurations, for many (n, t) queries.

    Everything that does not depend on the decode batch n or the prefill chunk t is
    computed once; :meth:`time` then costs a few array operations. This is the one
    implementation of the mixed step (:func:`mixed_step_time_s` wraps it).

    Notes
    -----
    The chunk's ``t`` prompt tokens share the step's weight read with the ``n`` decodes
    (chunked prefill, Sarathi-Serve). Per GPU, with rows m = (n + t)/S per micro-batch:
    bytes = M_w_read(m)/(N S) + (n/S) c M_KV f_kv; FLOPs = n (2 P_act + 4 L d c)
    + t (2 P_act + 2 L d p); time = S max(bytes/(beta eta_m), FLOPs/(N S pi eta_c))
    + TP all-reduces over m rows + PP hops + step overhead.
    """

    def __init__(self, c: ConfigArrays, p: ServingParams, context_tokens=None):
        ctx = c.context_tokens if context_tokens is None else np.asarray(context_tokens, dtype=float)
        nS = c.tp * c.pp
        expert = c.routed_expert_params * c.weight_bytes_per_param
        self.pp = c.pp
        self.dense_bytes = (weights_bytes(c) - expert) / nS
        self.expert_bytes = expert / nS
        with np.errstate(divide="ignore", invalid="ignore"):
            self.miss = np.where(c.num_experts > 0, 1.0 - c.experts_per_token / np.maximum(c.num_experts, 1), 1.0)
        self.saturated = saturation_tokens(self.miss)   # above: no expert power to take (1.0)
        self.kv_bytes_per_decoder = kv_bytes_per_seq(c, ctx) * kv_fraction_per_gpu(c) / c.pp
        self.mem_s_per_byte = c.pp / (c.bandwidth_bytes_per_s * p.memory_efficiency)
        self.decode_flops = decode_flops_per_token(c, ctx, p)
        # Prefill math runs at eta_c * prefill_compute_factor: its FLOPs count 1/factor.
        phi = p.prefill_compute_factor
        self.prefill_flops_base = 2.0 * moe.active_params(c, p) / phi
        self.prefill_flops_per_prompt_token = 2.0 * c.n_layers * c.hidden_size / phi
        self.comp_s_per_flop = 1.0 / (nS * c.peak_flops_per_s * p.compute_efficiency)
        one, zero = tp_comm_time_s(c, p, 1.0), tp_comm_time_s(c, p, 0.0)
        with np.errstate(invalid="ignore"):
            self.comm_per_row = np.where(np.isfinite(one), one - zero, np.inf)  # no link: inf
        self.comm_fixed = zero
        self.hop_per_row = pp_hop_time_s(c, p, 1.0) - pp_hop_time_s(c, p, 0.0)
        self.fixed = pp_hop_time_s(c, p, 0.0) + p.step_overhead_s + self.comm_fixed
        self.prompt_tokens = c.prompt_tokens
        # Dense models read no routed experts: the expert term is exactly 0 (no power), and
        # the weight read does not depend on the step (computed once).
        self.has_experts = bool(np.any(self.expert_bytes > 0))
        with np.errstate(invalid="ignore"):
            self.dense_read = None if self.has_experts else self.dense_bytes + self.expert_bytes * 0.0
        self.layout = (c, p) if moe.has_layout(c) else None   # issue 14: expert load imbalance
        self._dense_mem = not self.has_experts and self.layout is None   # see decode_terms
        self._prefill_memo: dict = {}

    #: Prefill terms kept per (chunk, prompt) pair of scalars (:meth:`_prefill_flops`).
    PREFILL_MEMO_SIZE = 16

    def take(self, rows) -> "StepModel":
        """The model of the configurations at positions ``rows`` (as :meth:`ConfigArrays.take`:
        1-D arrays of more than one element are indexed, scalars kept); the same times."""
        out = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, np.ndarray) and value.ndim == 1 and value.size > 1:
                setattr(out, name, value[rows])
        if self.layout is not None:
            out.layout = (self.layout[0].take(rows), self.layout[1].take(rows))
        out._prefill_memo = {}
        return out

    def monotone_rows(self) -> np.ndarray:
        """Rows whose :meth:`time` provably never decreases as the decode batch n grows, for
        any fixed prefill tokens >= 0 and prompt, nor as the prefill tokens grow (at n >= 0),
        in floating point too: every term is a sum or product of non-negative terms and of
        n, and rounding is monotone. That needs a weight read that does not depend on the
        step (no routed experts, no expert-parallel layout) and non-negative coefficients
        (NaN ones fail the test)."""
        if self.layout is not None:
            return np.zeros(np.shape(self.pp), dtype=bool)
        ok = (self.expert_bytes == 0.0) & (self.pp > 0.0)
        for v in (self.kv_bytes_per_decoder, self.mem_s_per_byte, self.decode_flops, self.prefill_flops_base,
                  self.prefill_flops_per_prompt_token, self.comp_s_per_flop, self.comm_per_row, self.hop_per_row,
                  self.fixed):
            ok = ok & (v >= 0.0)
        return ok

    def decode_terms(self, decode_batch) -> tuple:
        """The parts of :meth:`time` that depend on the decode batch only: pass them as
        ``terms`` to several :meth:`time` calls with the same batch (same numbers). A dense
        model's memory time is one of them (its weight read does not depend on the step's
        rows); None otherwise."""
        n = np.asarray(decode_batch, dtype=float)
        decoders = micro_batch(n, self.pp)
        kv_read = decoders * self.pp * self.kv_bytes_per_decoder
        dense_mem = (self.dense_read + kv_read) * self.mem_s_per_byte if self._dense_mem else None
        return n, decoders, kv_read, decoders * self.decode_flops, dense_mem

    def time(self, decode_batch, prefill_tokens=0.0, prompt_tokens=None, terms: tuple | None = None) -> np.ndarray:
        """Seconds of one iteration with ``decode_batch`` decodes and ``prefill_tokens``
        prompt tokens from prompts of length ``prompt_tokens`` (default: the configured);
        ``terms``: :meth:`decode_terms` of ``decode_batch``, if already computed."""
        terms = terms if terms is not None else self.decode_terms(decode_batch)
        n, decoders, kv_read, decode_flops, dense_mem = terms
        t = np.asarray(prefill_tokens, dtype=float)
        pt = self.prompt_tokens if prompt_tokens is None else np.asarray(prompt_tokens, dtype=float)
        # Speed (same numbers): the decoders' micro-batch once; a decode-only step (t = 0)
        # has rows = that micro-batch and no prefill term (0 x a finite cost, added to a
        # positive time); a dense model no expert term.
        decode_only = t.ndim == 0 and t == 0.0
        rows = decoders if decode_only else micro_batch(n + t, self.pp)
        if dense_mem is not None:     # a dense model: (dense read + KV read) x s/byte, kept
            t_mem = dense_mem
        else:
            if self.has_experts or self.layout is not None:
                fraction = missed_fraction(self.miss, self.saturated, rows)
            read = self.dense_bytes + self.expert_bytes * fraction if self.has_experts else self.dense_read
            if self.layout is not None:   # issue 14: the most loaded EP rank's experts (moe.py)
                read = self.dense_bytes + self.expert_bytes * moe.loaded_expert_fraction(*self.layout, fraction)
            read = read + kv_read
            t_mem = read * self.mem_s_per_byte
        flops = decode_flops
        if not decode_only:
            flops = flops + self._prefill_flops(t, pt)
        t_comp = flops * self.pp * self.comp_s_per_flop
        return np.maximum(t_mem, t_comp) + self.comm_per_row * rows + self.hop_per_row * rows + self.fixed

    def _prefill_flops(self, t: np.ndarray, pt) -> np.ndarray:
        """The chunk's FLOPs term m(t) (2 P_act + 2 L d p) / phi; for scalar ``t`` and ``pt``
        kept (it does not depend on the decode batch: a bisection asks for it every step)."""
        if t.ndim or np.ndim(pt):
            return micro_batch(t, self.pp) * (self.prefill_flops_base + self.prefill_flops_per_prompt_token * pt)
        key = (float(t), float(pt))
        got = self._prefill_memo.get(key)
        if got is None:
            if len(self._prefill_memo) >= self.PREFILL_MEMO_SIZE:
                self._prefill_memo.clear()
            got = self._prefill_memo[key] = micro_batch(t, self.pp) * (
                self.prefill_flops_base + self.prefill_flops_per_prompt_token * pt)
        return got


def mixed_step_time_s(c: ConfigArrays, p: ServingParams, decode_batch, prefill_tokens,
                      context_tokens=None, prompt_tokens=None) -> np.ndarray:
    """One continuous-batching iteration: ``decode_batch`` decodes plus a prefill chunk.

    See :class:`StepModel` for the equations. With ``prefill_tokens = 0`` this equals
    :func:`decode_times`' TPOT; with ``decode_batch = 0``, a whole prompt and S = 1 it
    equals :func:`prefill_time_s` (plus the step overhead). With S > 1 the rows are
    split into S micro-batches that pipeline through the stages, as in decode.
    """
    return StepModel(c, p, context_tokens).time(decode_batch, prefill_tokens, prompt_tokens)
