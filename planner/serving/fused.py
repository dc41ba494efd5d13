"""The serving playground's quantities in one fused pass over row blocks (speed; issue 19).

:func:`evaluate_rows` returns exactly what :func:`planner.serving.evaluate.evaluate_reference`
(the plain composition of :mod:`planner.serving.memory`, :mod:`planner.serving.roofline`
and :mod:`planner.serving.economics`) returns for one-dimensional dense-layout inputs, bit
for bit (``tests/test_serving.py``): every output is computed by the same float64
operations in the same order, and only the work around them changes:

* every shared intermediate once per block (weights, KV per sequence and per GPU, decode
  FLOPs per token, the link terms' coefficients), the outputs written in place into
  preallocated arrays (no per-block copies);
* the terms that apply to few rows (MoE expert reads, sliding windows, MLA's replicated
  latent, GPUs without a scale-up link) computed on those rows only, the others taking
  the value the general expression gives them exactly (``1 - 1**x = 0``, ``x + 0 = x``);
* selections by a 0/1 factor or a small table instead of ``where`` where the selected
  values are finite (``where`` on an unordered mask costs 3-8 times a multiply).
"""

from __future__ import annotations

import numpy as np

from planner.serving.arrays import LINK_FAST, ConfigArrays, scaled
from planner.serving.parallel import run_in_threads
from planner.serving.params import ServingParams
from planner.serving.roofline import saturation_tokens
from planner.units import SECONDS_PER_HOUR, TOKENS_PER_MILLION

#: Labels of the decode bound, indexed by ``memory_bound`` (a take is 2-3x faster than where).
_BOUND_LABELS = np.array(["compute", "memory"])

#: The outputs, in the order of :func:`planner.serving.evaluate.evaluate_reference`.
_KEYS = ("weights_bytes", "weights_bytes_per_gpu", "kv_bytes_per_token", "kv_bytes_per_seq",
         "kv_budget_bytes_per_gpu", "kv_bytes_needed_per_gpu", "max_concurrency", "fits",
         "arithmetic_intensity", "kv_arithmetic_intensity", "ridge_point", "bound", "t_mem_s", "t_comp_s",
         "t_comm_s", "tpot_s", "prefill_s", "queue_wait_s", "ttft_s", "throughput_tokens_per_s",
         "per_user_tokens_per_s", "expert_read_fraction", "b_knee")
_FLOAT_KEYS = tuple(k for k in _KEYS if k not in ("fits", "bound"))
#: Outputs allocated zero-filled: :func:`_block` writes only their nonzero rows.
_ZERO_KEYS = ("expert_read_fraction", "queue_wait_s")


def latency_outputs(tpot, prefill, wait, throughput, p: ServingParams) -> dict:
    """The playground's latency and throughput entries (section 7 of docs/serving-model.md)."""
    return {"tpot_s": tpot, "prefill_s": prefill, "queue_wait_s": wait,
            "ttft_s": wait + prefill + tpot + p.request_overhead_s,
            "throughput_tokens_per_s": throughput, "per_user_tokens_per_s": 1.0 / tpot}


def evaluate_rows(c: ConfigArrays, p: ServingParams, users, usd_per_gpu_hour, rows: int, block_rows: int,
                  threads: int = 1) -> dict:
    """:func:`planner.serving.evaluate.evaluate` of ``rows`` configurations, every input a
    scalar or an array of ``rows`` elements, in blocks of ``block_rows`` rows computed by
    ``threads`` threads (:mod:`planner.serving.parallel`; the same numbers for any count)."""
    columns = {name: getattr(c, name) for name in c.__dataclass_fields__}
    params = p.as_dict()
    # zero-filled from the allocator (no pass over them): the expert read fraction of dense
    # rows and, without users, every queue wait are exactly 0
    out = {key: (np.zeros if key in _ZERO_KEYS else np.empty)(rows) for key in _FLOAT_KEYS}
    out["fits"] = np.empty(rows, dtype=bool)
    out["bound"] = np.empty(rows, dtype=_BOUND_LABELS.dtype)
    if usd_per_gpu_hour is not None:
        out["usd_per_million_tokens"] = np.empty(rows)
        usd_per_gpu_hour = np.asarray(usd_per_gpu_hour, dtype=float)
    if users is not None:
        users = np.asarray(users, dtype=float)
    starts = iter(range(0, rows, block_rows))    # shared by the threads

    def work():
        with np.errstate(divide="ignore", invalid="ignore"):   # per thread (a context variable)
            for start in starts:
                cut = slice(start, min(rows, start + block_rows))
                _block({k: _cut(v, cut) for k, v in columns.items()}, {k: _cut(v, cut) for k, v in params.items()},
                       _cut(users, cut), _cut(usd_per_gpu_hour, cut), {k: v[cut] for k, v in out.items()})

    run_in_threads(work, min(threads, -(-rows // block_rows)))
    return {key: out[key] for key in _KEYS + tuple(k for k in out if k not in _KEYS)}


def _cut(value, cut: slice):
    return value[cut] if value is not None and np.ndim(value) == 1 else value


def _at(value, rows):
    """``value`` at positions ``rows`` (a scalar as it is)."""
    return value[rows] if np.ndim(value) else value


def _few(mask, n: int) -> np.ndarray | None:
    """Positions among ``n`` rows where ``mask`` holds, or None where it holds nowhere."""
    if np.ndim(mask) == 0:
        return np.arange(n) if mask else None
    rows = np.flatnonzero(mask)
    return rows if rows.size else None


def _expert_fraction(miss, saturated, tokens, known=None) -> np.ndarray:
    """1 - miss^tokens on MoE rows (roofline.expert_read_fraction), the power taken only
    where the result is not exactly 1.0 (``tokens > saturated``,
    :func:`planner.serving.roofline.saturation_tokens`) and, with ``known = (tokens0, fraction0)``, only where the token counts differ from
    ``tokens0`` (elsewhere ``fraction0`` is reused)."""
    m = miss.size
    tokens = _broadcast(tokens, m)
    if known is not None:
        out = known[1].copy()
        todo = _few(tokens != known[0], m)
        if todo is None:
            return out
        pending = todo[~(tokens[todo] > saturated[todo])]
        out[todo] = 1.0
    else:
        out = np.ones(m)
        pending = _few(~(tokens > saturated), m)
    if pending is not None and pending.size:
        out[pending] = 1.0 - miss[pending] ** tokens[pending]
    return out


def _block(c: dict, p: dict, users, usd, out: dict) -> None:
    """One block of :func:`evaluate_rows`: results into the views ``out``."""
    L, d, tp, pp, b, ctx = (c["n_layers"], c["hidden_size"], c["tp"], c["pp"], c["batch"],
                            c["context_tokens"])
    w, link = c["weight_bytes_per_param"], c["link_bytes_per_s"]
    n = out["tpot_s"].shape[0]
    nS = tp * pp
    # memory.py: weights, KV per token / sequence / GPU, budget, concurrency
    weights = np.multiply(c["params_total"], w, out=out["weights_bytes"])
    wpg = np.divide(weights, nS, out=out["weights_bytes_per_gpu"])
    per_layer = c["kv_elems_per_token_layer"] * c["kv_bytes_per_element"]
    L_kv = L * c["kv_elems_per_token_layer"]
    kv_token = np.multiply(L_kv, c["kv_bytes_per_element"], out=out["kv_bytes_per_token"])
    span = _broadcast(L * ctx, n)     # (L - L_w) ctx + L_w min(ctx, window) = L ctx where L_w = 0
    windowed = _few(c["window_layers"] > 0, n)
    if windowed is not None:
        wl, ctx_w = _at(c["window_layers"], windowed), _at(ctx, windowed)
        span[windowed] = (_at(L, windowed) - wl) * ctx_w + wl * np.minimum(ctx_w, _at(c["window_tokens"], windowed))
    kv_seq = np.multiply(per_layer, span, out=out["kv_bytes_per_seq"])
    heads = _broadcast(np.ceil(c["n_kv_heads"] / tp) / c["n_kv_heads"], n)
    replicated = _few(~(c["kv_split_by_tp"] > 0), n)   # MLA's latent: whole on every TP rank
    if replicated is not None:
        heads[replicated] = 1.0
    kv_fraction = np.ceil(L / pp) / L * heads
    budget = np.multiply(p["gpu_memory_utilization"], c["memory_bytes"], out=out["kv_budget_bytes_per_gpu"])
    budget -= wpg
    budget -= p["workspace_bytes"]
    kv_per_gpu = kv_seq * kv_fraction
    b_kv = b * kv_seq        # also the KV term of the arithmetic intensity
    kv_needed = np.multiply(b_kv, kv_fraction, out=out["kv_bytes_needed_per_gpu"])
    concurrency = np.divide(budget, kv_per_gpu, out=out["max_concurrency"])
    empty = _few(~(kv_per_gpu > 0), n)
    if empty is not None:
        concurrency[empty] = np.inf
    np.floor(concurrency, out=concurrency)
    np.maximum(concurrency, 0.0, out=concurrency)
    np.logical_and(budget > 0, kv_needed <= budget, out=out["fits"])
    # roofline.py: MoE expert reads on MoE rows only (elsewhere the read is the dense part)
    expert_bytes = c["routed_expert_params"] * w
    dense_read = weights - expert_bytes
    moe = _few(c["num_experts"] > 0, n)
    per_stage = b / pp
    micro = np.maximum(per_stage, np.minimum(b, 1.0))
    pt = c["prompt_tokens"]
    if moe is None:         # the expert read fraction stays 0 (zero-filled)
        read_micro = read_prompt = read_batch = dense_read
    else:
        experts = _at(c["num_experts"], moe)
        miss = _broadcast(1.0 - _at(c["experts_per_token"], moe) / np.maximum(experts, 1), moe.size)
        saturated = saturation_tokens(miss)
        stage_tokens = _at(per_stage, moe)
        stage_fraction = _expert_fraction(miss, saturated, stage_tokens)
        out["expert_read_fraction"][moe] = stage_fraction
        eb, base = _at(expert_bytes, moe), _at(dense_read, moe)

        def read(tokens, known, last=False):
            got = dense_read if last else dense_read.copy()   # the last one in place
            got[moe] = base + eb * _expert_fraction(miss, saturated, _at(tokens, moe), known)
            return got

        known = (stage_tokens, stage_fraction)   # the micro-batch is b/S but where b < S
        read_micro, read_prompt, read_batch = read(micro, known), read(pt, None), read(b, known, last=True)
    # the TP all-reduce and PP hand-off terms (roofline.tp_comm_time_s, pp_hop_time_s)
    a = p["activation_bytes"]
    coeff = 2.0 * (tp - 1.0) / tp * a
    tau = _link_latency(c["link_kind"], p)
    two_L = 2.0 * L
    multi = tp > 1
    on = multi if np.ndim(multi) == 0 else multi.astype(float)
    no_link = _few(~(link > 0), n)
    hop_lat, stages_m1 = p["pipeline_hop_latency_s"], pp - 1.0

    def comm(tokens):
        transfer = _broadcast(coeff * tokens * d / link, n)
        if no_link is not None:
            transfer[no_link] = np.inf
        t = two_L * (transfer + tau)
        t *= on
        if no_link is not None:   # inf * 0 is NaN: the reference's where there
            t[no_link] = np.where(_at(multi, no_link), _at(t, no_link), 0.0)
        return t

    def hop(tokens):
        transfer = _broadcast(a * tokens * d / link, n)
        if no_link is not None:
            transfer[no_link] = 0.0
        transfer += hop_lat
        transfer *= stages_m1
        return transfer

    # decode step (roofline.decode_times)
    flops_base = 2.0 * c["params_active"]
    four_Ld = 4.0 * L * d
    decode_flops = flops_base + four_Ld * ctx
    gpu_bytes = read_micro / nS
    gpu_bytes += micro * kv_seq * kv_fraction
    t_mem = gpu_bytes
    t_mem /= c["bandwidth_bytes_per_s"] * p["memory_efficiency"]
    peak = c["peak_flops_per_s"]
    t_comp = micro * decode_flops
    t_comp /= nS * peak * p["compute_efficiency"]
    t_comm = comm(micro)
    t_comm /= pp
    stage = np.maximum(t_mem, t_comp)
    stage += t_comm
    tpot = np.multiply(pp, stage, out=out["tpot_s"])
    tpot += hop(micro)
    tpot += p["step_overhead_s"]
    np.multiply(pp, t_mem, out=out["t_mem_s"])
    np.multiply(pp, t_comp, out=out["t_comp_s"])
    np.multiply(pp, t_comm, out=out["t_comm_s"])
    _BOUND_LABELS.take(np.greater_equal(t_mem, t_comp).view(np.uint8), out=out["bound"], mode="clip")
    # prefill (roofline.prefill_time_s)
    p_comp = two_L * d * pt
    p_comp += flops_base
    p_comp *= pt
    p_comp /= scaled(tp * peak * p["compute_efficiency"], p["prefill_compute_factor"])
    p_mem = read_prompt / (tp * c["bandwidth_bytes_per_s"] * p["memory_efficiency"])
    prefill = np.maximum(p_comp, p_mem, out=out["prefill_s"])
    prefill += comm(pt)
    prefill += hop(pt)
    # intensities, queue, latencies, economics
    intensity = np.multiply(b, decode_flops, out=out["arithmetic_intensity"])
    intensity /= read_batch + b_kv
    np.divide(four_Ld, kv_token, out=out["kv_arithmetic_intensity"])
    np.divide(peak, c["bandwidth_bytes_per_s"], out=out["ridge_point"])
    throughput = np.divide(b, tpot, out=out["throughput_tokens_per_s"])
    wait = out["queue_wait_s"]
    if users is None:       # U = b: ceil(U/b - 1) <= 0, no wait (zero-filled)
        ttft = np.add(prefill, tpot, out=out["ttft_s"])
    else:
        rounds = np.maximum(np.ceil(users / b - 1.0 - 1e-12), 0.0)
        wait[...] = np.where(rounds > 0, rounds * (prefill + c["output_tokens"] * tpot), 0.0)
        ttft = np.add(wait, prefill, out=out["ttft_s"])
        ttft += tpot
    ttft += p["request_overhead_s"]
    np.divide(1.0, tpot, out=out["per_user_tokens_per_s"])
    np.divide(weights, kv_seq, out=out["b_knee"])
    if usd is not None:
        cost = np.multiply(nS, usd, out=out["usd_per_million_tokens"])
        cost /= throughput * SECONDS_PER_HOUR
        cost *= TOKENS_PER_MILLION


def _broadcast(value, n: int) -> np.ndarray:
    """``value`` as a writable array of ``n`` elements (a fresh array unless it is one)."""
    value = np.asarray(value, dtype=float)
    return value if value.shape == (n,) else np.full(n, value)


def _link_latency(kind, p: dict):
    """roofline.allreduce_latency_s: NVLink-class links vs PCIe/Ethernet (a table lookup
    when both latencies are scalars)."""
    fast, slow = p["allreduce_latency_nvlink_s"], p["allreduce_latency_pcie_s"]
    if np.ndim(fast) or np.ndim(slow) or not np.ndim(kind):
        return np.where(kind == LINK_FAST, fast, slow)
    return np.array([slow, fast]).take((kind == LINK_FAST).view(np.uint8), mode="clip")
