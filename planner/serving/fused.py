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
from planner.serving.buffers import Scratch, staggered
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
    # staggered (:mod:`planner.serving.buffers`); zero-filled from the allocator: the expert
    # read fraction of dense rows and, without users, every queue wait are exactly 0
    float_keys = _FLOAT_KEYS + (("usd_per_million_tokens",) if usd_per_gpu_hour is not None else ())
    out = {key: staggered(rows, i, zero=key in _ZERO_KEYS) for i, key in enumerate(float_keys)}
    out["fits"] = staggered(rows, len(out), bool)
    out["bound"] = staggered(rows, len(out), _BOUND_LABELS.dtype)
    if usd_per_gpu_hour is not None:
        usd_per_gpu_hour = np.asarray(usd_per_gpu_hour, dtype=float)
    if users is not None:
        users = np.asarray(users, dtype=float)
    starts = iter(range(0, rows, block_rows))    # shared by the threads

    def work():
        scratch = Scratch(min(rows, block_rows))   # this thread's temporaries, reused block to block
        with np.errstate(divide="ignore", invalid="ignore"):   # per thread (a context variable)
            for start in starts:
                cut = slice(start, min(rows, start + block_rows))
                _block({k: _cut(v, cut) for k, v in columns.items()}, {k: _cut(v, cut) for k, v in params.items()},
                       _cut(users, cut), _cut(usd_per_gpu_hour, cut), {k: v[cut] for k, v in out.items()}, scratch)

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


def _expert_fraction(miss, saturated, tokens) -> np.ndarray:
    """1 - miss^tokens on MoE rows (roofline.expert_read_fraction), the power taken only
    where the result is not exactly 1.0 (``tokens > saturated``,
    :func:`planner.serving.roofline.saturation_tokens`)."""
    m = miss.size
    tokens = _broadcast(tokens, m)
    out = np.ones(m)
    pending = _few(~(tokens > saturated), m)
    if pending is not None:
        out[pending] = 1.0 - miss[pending] ** tokens[pending]
    return out


def _block(c: dict, p: dict, users, usd, out: dict, scratch: Scratch) -> None:
    """One block of :func:`evaluate_rows`: results into the views ``out``, temporaries in
    ``scratch`` (the thread's buffers, :mod:`planner.serving.buffers`)."""
    L, d, tp, pp, b, ctx = (c["n_layers"], c["hidden_size"], c["tp"], c["pp"], c["batch"],
                            c["context_tokens"])
    w, link = c["weight_bytes_per_param"], c["link_bytes_per_s"]
    n = out["tpot_s"].shape[0]

    def t(name):
        return scratch(name, n)

    mul, div = np.multiply, np.divide
    nS = mul(tp, pp, out=t("nS"))
    # memory.py: weights, KV per token / sequence / GPU, budget, concurrency
    weights = mul(c["params_total"], w, out=out["weights_bytes"])
    wpg = div(weights, nS, out=out["weights_bytes_per_gpu"])
    per_layer = mul(c["kv_elems_per_token_layer"], c["kv_bytes_per_element"], out=t("per_layer"))
    L_kv = mul(L, c["kv_elems_per_token_layer"], out=t("L_kv"))
    kv_token = mul(L_kv, c["kv_bytes_per_element"], out=out["kv_bytes_per_token"])
    span = mul(L, ctx, out=t("span"))  # (L - L_w) ctx + L_w min(ctx, window) = L ctx where L_w = 0
    windowed = _few(c["window_layers"] > 0, n)
    if windowed is not None:
        wl, ctx_w = _at(c["window_layers"], windowed), _at(ctx, windowed)
        span[windowed] = (_at(L, windowed) - wl) * ctx_w + wl * np.minimum(ctx_w, _at(c["window_tokens"], windowed))
    kv_seq = mul(per_layer, span, out=out["kv_bytes_per_seq"])
    heads = div(c["n_kv_heads"], tp, out=t("heads"))
    np.ceil(heads, out=heads)
    div(heads, c["n_kv_heads"], out=heads)
    replicated = _few(~(c["kv_split_by_tp"] > 0), n)   # MLA's latent: whole on every TP rank
    if replicated is not None:
        heads[replicated] = 1.0
    kv_fraction = div(L, pp, out=t("kv_fraction"))
    np.ceil(kv_fraction, out=kv_fraction)
    div(kv_fraction, L, out=kv_fraction)
    kv_fraction *= heads
    budget = mul(p["gpu_memory_utilization"], c["memory_bytes"], out=out["kv_budget_bytes_per_gpu"])
    budget -= wpg
    budget -= p["workspace_bytes"]
    kv_per_gpu = mul(kv_seq, kv_fraction, out=t("kv_per_gpu"))
    b_kv = mul(b, kv_seq, out=t("b_kv"))        # also the KV term of the arithmetic intensity
    kv_needed = mul(b_kv, kv_fraction, out=out["kv_bytes_needed_per_gpu"])
    concurrency = div(budget, kv_per_gpu, out=out["max_concurrency"])
    holds = np.greater(kv_per_gpu, 0.0, out=t("holds").view(bool)[:n])
    if not holds.all():     # no KV per sequence (rare): unbounded
        concurrency[~holds] = np.inf
    np.floor(concurrency, out=concurrency)
    np.maximum(concurrency, 0.0, out=concurrency)
    np.logical_and(budget > 0, kv_needed <= budget, out=out["fits"])
    # roofline.py: MoE expert reads on MoE rows only (elsewhere the read is the dense part)
    expert_bytes = mul(c["routed_expert_params"], w, out=t("expert_bytes"))
    dense_read = np.subtract(weights, expert_bytes, out=t("dense_read"))
    moe = _few(c["num_experts"] > 0, n)
    per_stage = div(b, pp, out=t("per_stage"))
    micro = np.minimum(b, 1.0, out=t("micro"))
    np.maximum(per_stage, micro, out=micro)
    pt = c["prompt_tokens"]
    if moe is None:         # the expert read fraction stays 0 (zero-filled)
        read_micro = read_prompt = read_batch = dense_read
    else:
        m = moe.size
        experts = _at(c["num_experts"], moe)
        miss = _broadcast(1.0 - _at(c["experts_per_token"], moe) / np.maximum(experts, 1), m)
        saturated = saturation_tokens(miss)
        stage_tokens = _broadcast(_at(per_stage, moe), m)
        fraction = out["expert_read_fraction"]
        fraction[moe] = _expert_fraction(miss, saturated, stage_tokens)
        eb, base = _at(expert_bytes, moe), _at(dense_read, moe)
        # at b/S tokens on every row: dense rows read no expert (x 0), MoE rows base + eb f
        read_stage = mul(expert_bytes, fraction, out=t("read_stage"))
        np.add(dense_read, read_stage, out=read_stage)

        def read(name, tokens):
            """The weight read at ``tokens`` per row: the one at b/S, except on the MoE
            rows where ``tokens`` differ (the micro-batch where b < S, the batch where S > 1)."""
            tokens = _broadcast(_at(tokens, moe), m)
            todo = _few(tokens != stage_tokens, m)
            if todo is None:
                return read_stage
            got = t(name)
            got[...] = read_stage
            got[moe[todo]] = base[todo] + eb[todo] * _expert_fraction(miss[todo], saturated[todo], tokens[todo])
            return got

        read_micro, read_batch = read("read_micro", micro), read("read_batch", b)
        read_prompt = t("read_prompt")
        read_prompt[...] = dense_read
        read_prompt[moe] = base + eb * _expert_fraction(miss, saturated, _at(pt, moe))
    # the TP all-reduce and PP hand-off terms (roofline.tp_comm_time_s, pp_hop_time_s)
    a = p["activation_bytes"]
    coeff = np.subtract(tp, 1.0, out=t("coeff"))
    mul(2.0, coeff, out=coeff)
    div(coeff, tp, out=coeff)
    coeff *= a
    tau = _link_latency(c["link_kind"], p, t("tau"))
    two_L = mul(2.0, L, out=t("two_L"))
    multi = np.greater(tp, 1, out=t("multi").view(bool)[:n])
    two_L_on = mul(two_L, multi, out=t("two_L_on"))   # (2L y) x 0/1 = (2L x 0/1) y for y >= 0, inf, NaN
    no_link = _few(~(link > 0), n)
    hop_lat = p["pipeline_hop_latency_s"]
    stages_m1 = np.subtract(pp, 1.0, out=t("stages_m1"))

    def comm(tokens, name):
        transfer = mul(coeff, tokens, out=t("transfer"))
        transfer *= d
        transfer /= link
        if no_link is not None:
            transfer[no_link] = np.inf
        transfer += tau
        got = mul(two_L_on, transfer, out=t(name))
        if no_link is not None:   # inf * 0 is NaN: the reference's where there
            got[no_link] = np.where(_at(multi, no_link), _at(got, no_link), 0.0)
        return got

    def hop(tokens):
        transfer = mul(a, tokens, out=t("transfer"))
        transfer *= d
        transfer /= link
        if no_link is not None:
            transfer[no_link] = 0.0
        transfer += hop_lat
        transfer *= stages_m1
        return transfer

    # decode step (roofline.decode_times)
    flops_base = mul(2.0, c["params_active"], out=t("flops_base"))
    four_Ld = mul(4.0, L, out=t("four_Ld"))
    four_Ld *= d
    decode_flops = mul(four_Ld, ctx, out=t("decode_flops"))
    np.add(flops_base, decode_flops, out=decode_flops)
    t_mem = div(read_micro, nS, out=t("t_mem"))
    kv_read = mul(micro, kv_seq, out=t("kv_read"))
    kv_read *= kv_fraction
    t_mem += kv_read
    bw_eff = mul(c["bandwidth_bytes_per_s"], p["memory_efficiency"], out=t("bw_eff"))
    t_mem /= bw_eff
    peak = c["peak_flops_per_s"]
    t_comp = mul(micro, decode_flops, out=t("t_comp"))
    comp_rate = mul(nS, peak, out=t("comp_rate"))
    comp_rate *= p["compute_efficiency"]
    t_comp /= comp_rate
    t_comm = comm(micro, "t_comm")
    t_comm /= pp
    stage = np.maximum(t_mem, t_comp, out=t("stage"))
    stage += t_comm
    tpot = mul(pp, stage, out=out["tpot_s"])
    tpot += hop(micro)
    tpot += p["step_overhead_s"]
    mul(pp, t_mem, out=out["t_mem_s"])
    mul(pp, t_comp, out=out["t_comp_s"])
    mul(pp, t_comm, out=out["t_comm_s"])
    _BOUND_LABELS.take(np.greater_equal(t_mem, t_comp).view(np.uint8), out=out["bound"], mode="clip")
    # prefill (roofline.prefill_time_s)
    p_comp = mul(two_L, d, out=t("p_comp"))
    p_comp *= pt
    p_comp += flops_base
    p_comp *= pt
    p_rate = mul(tp, peak, out=t("p_rate"))
    p_rate *= p["compute_efficiency"]
    p_comp /= scaled(p_rate, p["prefill_compute_factor"])
    p_bw = mul(tp, c["bandwidth_bytes_per_s"], out=t("p_bw"))
    p_bw *= p["memory_efficiency"]
    p_mem = div(read_prompt, p_bw, out=p_bw)
    prefill = np.maximum(p_comp, p_mem, out=out["prefill_s"])
    prefill += comm(pt, "p_comm")
    prefill += hop(pt)
    # intensities, queue, latencies, economics
    intensity = mul(b, decode_flops, out=out["arithmetic_intensity"])
    read_all = np.add(read_batch, b_kv, out=t("read_all"))
    intensity /= read_all
    div(four_Ld, kv_token, out=out["kv_arithmetic_intensity"])
    div(peak, c["bandwidth_bytes_per_s"], out=out["ridge_point"])
    throughput = div(b, tpot, out=out["throughput_tokens_per_s"])
    wait = out["queue_wait_s"]
    if users is None:       # U = b: ceil(U/b - 1) <= 0, no wait (zero-filled)
        ttft = np.add(prefill, tpot, out=out["ttft_s"])
    else:
        rounds = np.maximum(np.ceil(users / b - 1.0 - 1e-12), 0.0)
        wait[...] = np.where(rounds > 0, rounds * (prefill + c["output_tokens"] * tpot), 0.0)
        ttft = np.add(wait, prefill, out=out["ttft_s"])
        ttft += tpot
    ttft += p["request_overhead_s"]
    div(1.0, tpot, out=out["per_user_tokens_per_s"])
    div(weights, kv_seq, out=out["b_knee"])
    if usd is not None:
        cost = mul(nS, usd, out=out["usd_per_million_tokens"])
        hours = mul(throughput, SECONDS_PER_HOUR, out=t("hours"))
        cost /= hours
        cost *= TOKENS_PER_MILLION


def _broadcast(value, n: int) -> np.ndarray:
    """``value`` as a writable array of ``n`` elements (a fresh array unless it is one)."""
    value = np.asarray(value, dtype=float)
    return value if value.shape == (n,) else np.full(n, value)


def _link_latency(kind, p: dict, out: np.ndarray):
    """roofline.allreduce_latency_s into ``out``: NVLink-class links vs PCIe/Ethernet (a
    table lookup when both latencies are scalars)."""
    fast, slow = p["allreduce_latency_nvlink_s"], p["allreduce_latency_pcie_s"]
    if np.ndim(fast) or np.ndim(slow) or not np.ndim(kind):
        out[...] = np.where(kind == LINK_FAST, fast, slow)
        return out
    return np.array([slow, fast]).take((kind == LINK_FAST).view(np.uint8), mode="clip", out=out)
