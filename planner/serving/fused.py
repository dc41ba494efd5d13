"""The serving playground's quantities in one fused pass over row blocks (speed; issue 19).

:func:`evaluate_rows` returns exactly what :func:`planner.serving.evaluate.evaluate_reference`
(the plain composition of :mod:`planner.serving.memory`, :mod:`planner.serving.roofline`
and :mod:`planner.serving.economics`) returns for one-dimensional dense-layout inputs, bit
for bit (``tests/test_serving.py``, ``tests/serving/``): every output is computed by the
same float64 operations in the same order, or by ones proven to give the same bits (a
factor of 2 moved, an expert power at a capped token count), and only the work around them
changes:

* every shared intermediate once per block (weights, KV per sequence and per GPU, decode
  FLOPs per token, the link terms' coefficients), the outputs written in place into
  preallocated arrays (no per-block copies);
* the terms that apply to few rows (MoE expert reads, MLA's replicated latent, GPUs
  without a scale-up link) computed on those rows only, the others taking the value the
  general expression gives them exactly (``1 - 1**x = 0``, ``x + 0 = x``);
* selections by a 0/1 factor or a 2-entry table picked 8 rows per index instead of
  ``where`` where the selected values are finite (``where`` on an unordered mask costs
  3-8 times a multiply);
* temporaries from the thread's LIFO pool (:class:`planner.serving.buffers.Scratch`),
  each given back once dead, so that the next one lands in a buffer still in cache.
"""

from __future__ import annotations

import functools

import numpy as np

from planner.serving.arrays import LINK_FAST, ConfigArrays, scaled
from planner.serving.buffers import Scratch, staggered
from planner.serving.parallel import run_in_threads
from planner.serving.params import ServingParams
from planner.serving.roofline import SATURATED_LOG_MISS
from planner.units import SECONDS_PER_HOUR, TOKENS_PER_MILLION

#: Labels of the decode bound, indexed by ``memory_bound`` (a take is 2-3x faster than where).
_BOUND_LABELS = np.array(["compute", "memory"])
#: Row ``v``: the 8 bits of the byte ``v``, most significant first (``np.packbits`` order).
_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1)

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
    columns = _sliced({name: getattr(c, name) for name in c.__dataclass_fields__})
    params = _sliced(p.as_dict())
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
                _block(columns(cut), params(cut), _cut(users, cut), _cut(usd_per_gpu_hour, cut),
                       {k: v[cut] for k, v in out.items()}, scratch)

    run_in_threads(work, min(threads, -(-rows // block_rows)))
    return {key: out[key] for key in _KEYS + tuple(k for k in out if k not in _KEYS)}


def _ndim(value) -> int:
    """``np.ndim`` of an array or a scalar, without its exception path for Python floats
    (1 us a call; the parameters are often Python floats)."""
    ndim = getattr(value, "ndim", None)
    if ndim is None:
        return 0 if isinstance(value, (float, int)) else np.ndim(value)
    return ndim


def _cut(value, cut: slice):
    return value[cut] if value is not None and _ndim(value) == 1 else value


def _sliced(values: dict):
    """A function of a row slice that gives ``values`` there (arrays cut, scalars as they
    are): which entries are arrays is decided once per call, not once per block."""
    arrays = [(k, v) for k, v in values.items() if v is not None and _ndim(v) == 1]

    def at(cut: slice) -> dict:
        got = dict(values)
        for k, v in arrays:
            got[k] = v[cut]
        return got
    return at


def _at(value, rows):
    """``value`` at positions ``rows`` (a scalar as it is)."""
    return value[rows] if _ndim(value) else value


def _few(mask, n: int) -> np.ndarray | None:
    """Positions among ``n`` rows where ``mask`` holds, or None where it holds nowhere."""
    if _ndim(mask) == 0:
        return np.arange(n) if mask else None
    rows = mask.nonzero()[0]
    return rows if rows.size else None


def _moe_reads(moe, c: dict, expert_bytes, dense_read, fraction, scratch: Scratch):
    """The weight reads at the micro-batch, the batch and the prompt (roofline.weight_read_bytes:
    ``dense + experts x (1 - miss^tokens)``), each ``dense_read`` but on the MoE rows ``moe``,
    computed on those rows only (three buffers lent by ``scratch``); the expert read fraction
    at b/S into ``fraction``.

    The three token counts of the MoE rows are the rows of one ``(3, m)`` buffer, so that
    each step is one numpy call for all three; the power is taken on every MoE row, at
    ``min(tokens, cap)`` (:func:`_token_cap`): the same fraction, without the subnormal
    powers (4-6x slower) of saturated rows."""
    m, n = moe.size, dense_read.shape[0]
    new = scratch.new

    def at(value, got):     # mode "clip": no bounds check (the positions are in range), 30 % faster
        if _ndim(value):
            return np.take(value, moe, out=got, mode="clip")
        got[...] = value
        return got

    miss = at(c["num_experts"], new(m))
    np.maximum(miss, 1, out=miss)
    k = at(c["experts_per_token"], new(m))
    np.divide(k, miss, out=miss)
    np.subtract(1.0, miss, out=miss)
    cap = _token_cap(miss, k)
    # tokens: b/S, b, the prompt (b/S from the rows' b and S: the same quotient as per_stage)
    tokens = scratch.stack("moe_tokens", 3, m)
    batch = at(c["batch"], tokens[1])
    stages = at(c["pp"], new(m))
    np.divide(batch, stages, out=tokens[0])
    at(c["prompt_tokens"], tokens[2])
    micro_moe = np.minimum(batch, 1.0, out=stages)     # micro_batch: max(b/S, min(b, 1))
    np.maximum(tokens[0], micro_moe, out=micro_moe)
    reads = _missed(miss, tokens, cap, scratch.stack("moe_reads", 3, m))
    fraction[moe] = reads[0]
    todo = _few(micro_moe != tokens[0], m)   # b < S: the micro-batch is not b/S
    if todo is not None:
        reads[0, todo] = 1.0 - miss[todo] ** np.minimum(micro_moe[todo], cap[todo])
    np.multiply(at(expert_bytes, miss), reads, out=reads)    # experts x fraction + dense
    reads += at(dense_read, cap)
    got = []
    for row in reads:
        read = _copy(dense_read, new(n))
        read[moe] = row
        got.append(read)
    scratch.free(miss, cap, stages)
    return tuple(got)


def _copy(value, out):
    out[...] = value
    return out


def _token_cap(miss, out):
    """Per row, a token count above which ``1 - miss^tokens`` is exactly 1.0, at least 1:
    ``max(SATURATED_LOG_MISS / ln miss, 1)`` (roofline.saturation_tokens; +inf where ``ln
    miss`` is 0, positive or NaN, so that the power is taken as it is there). At the cap,
    ``miss^cap`` is about 2^-60 (a cap of 1: ``miss`` below 2^-60), and ``1 - x`` for any
    ``0 <= x < 2^-54`` rounds to 1.0 in float64: powers at ``min(tokens, cap)`` give the
    reference's fractions bit for bit, none of them subnormal."""
    np.log(miss, out=out)
    np.fmin(out, -np.finfo(float).tiny, out=out)          # NaN (miss < 0): -tiny, a cap of +inf
    np.divide(SATURATED_LOG_MISS, out, out=out)            # -tiny: +inf (an overflow)
    return np.maximum(out, 1.0, out=out)


def _missed(miss, tokens, cap, out):
    """1 - miss^tokens into ``out`` (roofline.expert_read_fraction on MoE rows), the power at
    ``min(tokens, cap)`` (:func:`_token_cap`; the same numbers)."""
    np.minimum(tokens, cap, out=out)                       # NaN tokens stay NaN
    np.power(miss, out, out=out)
    return np.subtract(1.0, out, out=out)


def _block(c: dict, p: dict, users, usd, out: dict, scratch: Scratch) -> None:
    """One block of :func:`evaluate_rows`: results into the views ``out``, temporaries in
    ``scratch`` (the thread's buffers, :mod:`planner.serving.buffers`), each temporary given
    back to its pool once dead (the next one reuses it while it is in cache); the
    independent quantities are computed in an order that ends their temporaries early."""
    L, d, tp, pp, b, ctx = (c["n_layers"], c["hidden_size"], c["tp"], c["pp"], c["batch"],
                            c["context_tokens"])
    w, link = c["weight_bytes_per_param"], c["link_bytes_per_s"]
    n = out["tpot_s"].shape[0]
    scratch.reset()
    new, free = scratch.new, scratch.free

    def flags(name):
        return scratch(name, n).view(bool)[:n]

    mul, div = np.multiply, np.divide
    nS = mul(tp, pp, out=new(n))
    # memory.py: weights, KV per token / sequence / GPU, budget, concurrency
    weights = mul(c["params_total"], w, out=out["weights_bytes"])
    wpg = div(weights, nS, out=out["weights_bytes_per_gpu"])
    budget = mul(p["gpu_memory_utilization"], c["memory_bytes"], out=out["kv_budget_bytes_per_gpu"])
    budget -= wpg
    budget -= p["workspace_bytes"]
    per_layer = mul(c["kv_elems_per_token_layer"], c["kv_bytes_per_element"], out=new(n))
    L_kv = mul(L, c["kv_elems_per_token_layer"], out=new(n))
    kv_token = mul(L_kv, c["kv_bytes_per_element"], out=out["kv_bytes_per_token"])
    free(L_kv)
    # (L - L_w) ctx + L_w min(ctx, window) on every row: 5 passes cost less than finding the
    # windowed rows and gathering their columns
    span = np.subtract(L, c["window_layers"], out=new(n))
    span *= ctx
    in_window = np.minimum(ctx, c["window_tokens"], out=new(n))
    in_window *= c["window_layers"]
    span += in_window
    free(in_window)
    kv_seq = mul(per_layer, span, out=out["kv_bytes_per_seq"])
    free(span, per_layer)
    heads = div(c["n_kv_heads"], tp, out=new(n))
    np.ceil(heads, out=heads)
    div(heads, c["n_kv_heads"], out=heads)
    replicated = _few(~(c["kv_split_by_tp"] > 0), n)   # MLA's latent: whole on every TP rank
    if replicated is not None:
        heads[replicated] = 1.0
    kv_fraction = div(L, pp, out=new(n))
    np.ceil(kv_fraction, out=kv_fraction)
    div(kv_fraction, L, out=kv_fraction)
    kv_fraction *= heads
    free(heads)
    kv_per_gpu = mul(kv_seq, kv_fraction, out=new(n))
    concurrency = div(budget, kv_per_gpu, out=out["max_concurrency"])
    holds = np.greater(kv_per_gpu, 0.0, out=flags("holds"))
    free(kv_per_gpu)
    if not holds.all():     # no KV per sequence (rare): unbounded
        concurrency[~holds] = np.inf
    np.floor(concurrency, out=concurrency)
    np.maximum(concurrency, 0.0, out=concurrency)
    b_kv = mul(b, kv_seq, out=new(n))        # also the KV term of the arithmetic intensity
    kv_needed = mul(b_kv, kv_fraction, out=out["kv_bytes_needed_per_gpu"])
    np.logical_and(budget > 0, kv_needed <= budget, out=out["fits"])
    # roofline.py: MoE expert reads on MoE rows only (elsewhere the read is the dense part)
    expert_bytes = mul(c["routed_expert_params"], w, out=new(n))
    dense_read = np.subtract(weights, expert_bytes, out=new(n))
    moe = _few(c["num_experts"] > 0, n)
    micro = div(b, pp, out=new(n))           # micro_batch: max(b/S, min(b, 1))
    at_least_one = np.minimum(b, 1.0, out=new(n))
    np.maximum(micro, at_least_one, out=micro)
    free(at_least_one)
    pt = c["prompt_tokens"]
    if moe is None:         # the expert read fraction stays 0 (zero-filled)
        read_micro = read_prompt = read_batch = dense_read
    else:
        read_micro, read_batch, read_prompt = _moe_reads(
            moe, c, expert_bytes, dense_read, out["expert_read_fraction"], scratch)
    free(expert_bytes)

    def free_read(read):    # a read of MoE rows (dense_read itself is given back last)
        if read is not dense_read:
            free(read)

    # the TP all-reduce and PP hand-off terms (roofline.tp_comm_time_s, pp_hop_time_s)
    a = p["activation_bytes"]
    coeff = np.subtract(tp, 1.0, out=new(n))
    div(coeff, tp, out=coeff)
    coeff *= mul(2.0, a)      # (2 (N-1) / N) a = ((N-1) / N) (2a) bit for bit (2 is a power of 2)
    tau = _link_latency(c["link_kind"], p, new(n), flags("fast_rows"))
    two_L = mul(2.0, L, out=new(n))
    multi = np.greater(tp, 1, out=flags("multi"))
    two_L_on = mul(two_L, multi, out=new(n))   # (2L y) x 0/1 = (2L x 0/1) y for y >= 0, inf, NaN
    no_link = _few(~(link > 0), n)
    hop_lat = p["pipeline_hop_latency_s"]
    stages_m1 = np.subtract(pp, 1.0, out=new(n))

    def comm(tokens):
        transfer = mul(coeff, tokens, out=new(n))
        transfer *= d
        transfer /= link
        if no_link is not None:
            transfer[no_link] = np.inf
        transfer += tau
        got = mul(two_L_on, transfer, out=new(n))
        free(transfer)
        if no_link is not None:   # inf * 0 is NaN: the reference's where there
            got[no_link] = np.where(_at(multi, no_link), _at(got, no_link), 0.0)
        return got

    def hop(tokens):
        transfer = mul(a, tokens, out=new(n))
        transfer *= d
        transfer /= link
        if no_link is not None:
            transfer[no_link] = 0.0
        transfer += hop_lat
        transfer *= stages_m1
        return transfer

    # decode step (roofline.decode_times)
    two_Ld = mul(two_L, d, out=new(n))
    free(two_L)
    four_Ld = mul(two_Ld, 2.0, out=new(n))    # (4L) d = 2 ((2L) d) bit for bit (a power of 2)
    flops_base = mul(2.0, c["params_active"], out=new(n))
    decode_flops = mul(four_Ld, ctx, out=new(n))
    np.add(flops_base, decode_flops, out=decode_flops)
    div(four_Ld, kv_token, out=out["kv_arithmetic_intensity"])
    free(four_Ld)
    intensity = mul(b, decode_flops, out=out["arithmetic_intensity"])
    read_all = np.add(read_batch, b_kv, out=new(n))
    intensity /= read_all
    free(read_all, b_kv)
    free_read(read_batch)
    t_mem = div(read_micro, nS, out=new(n))
    free_read(read_micro)
    kv_read = mul(micro, kv_seq, out=new(n))
    kv_read *= kv_fraction
    t_mem += kv_read
    free(kv_read, kv_fraction)
    bw_eff = mul(c["bandwidth_bytes_per_s"], p["memory_efficiency"], out=new(n))
    t_mem /= bw_eff
    free(bw_eff)
    peak = c["peak_flops_per_s"]
    t_comp = mul(micro, decode_flops, out=new(n))
    free(decode_flops)
    comp_rate = mul(nS, peak, out=new(n))
    comp_rate *= p["compute_efficiency"]
    t_comp /= comp_rate
    free(comp_rate)
    t_comm = comm(micro)
    t_comm /= pp
    stage = np.maximum(t_mem, t_comp, out=new(n))
    stage += t_comm
    tpot = mul(pp, stage, out=out["tpot_s"])
    free(stage)
    hops = hop(micro)
    tpot += hops
    free(hops, micro)
    tpot += p["step_overhead_s"]
    mul(pp, t_mem, out=out["t_mem_s"])
    mul(pp, t_comp, out=out["t_comp_s"])
    mul(pp, t_comm, out=out["t_comm_s"])
    free(t_comm)
    memory_bound = np.greater_equal(t_mem, t_comp, out=flags("memory_bound"))
    _pick(_BOUND_LABELS, _BOUND_OCTETS, memory_bound, out["bound"])
    free(t_mem, t_comp)
    # prefill (roofline.prefill_time_s)
    p_comp = mul(two_Ld, pt, out=new(n))
    free(two_Ld)
    p_comp += flops_base
    free(flops_base)
    p_comp *= pt
    p_rate = mul(tp, peak, out=new(n))
    p_rate *= p["compute_efficiency"]
    p_comp /= scaled(p_rate, p["prefill_compute_factor"])
    free(p_rate)
    p_mem = mul(tp, c["bandwidth_bytes_per_s"], out=new(n))
    p_mem *= p["memory_efficiency"]
    div(read_prompt, p_mem, out=p_mem)
    free_read(read_prompt)
    prefill = np.maximum(p_comp, p_mem, out=out["prefill_s"])
    free(p_comp, p_mem)
    p_comm = comm(pt)
    prefill += p_comm
    free(p_comm, coeff, tau, two_L_on)
    hops = hop(pt)
    prefill += hops
    free(hops, stages_m1, dense_read)
    # latencies, economics
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
        hours = mul(throughput, SECONDS_PER_HOUR, out=new(n))
        cost /= hours
        cost *= TOKENS_PER_MILLION
        free(hours)
    free(nS)


def _link_latency(kind, p: dict, out: np.ndarray, fast_rows: np.ndarray):
    """roofline.allreduce_latency_s into ``out``: NVLink-class links vs PCIe/Ethernet (a
    table lookup when both latencies are scalars)."""
    fast, slow = p["allreduce_latency_nvlink_s"], p["allreduce_latency_pcie_s"]
    if _ndim(fast) or _ndim(slow) or not _ndim(kind):
        out[...] = np.where(kind == LINK_FAST, fast, slow)
        return out
    return _pick(*_latency_table(float(slow), float(fast)), np.equal(kind, LINK_FAST, out=fast_rows), out)


@functools.lru_cache(maxsize=16)
def _latency_table(slow: float, fast: float) -> tuple[np.ndarray, np.ndarray]:
    """The all-reduce latencies by ``link_kind == LINK_FAST`` and their octets (:func:`_pick`)."""
    table = np.array([slow, fast])
    return table, _octets(table)


def _pick(table: np.ndarray, octets: np.ndarray, mask: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``table[mask]`` (a table of 2 entries, a boolean mask) into ``out``, 8 rows at a time:
    the mask packed into bytes indexes ``octets`` (:func:`_octets` of ``table``), so that the
    take moves 8 entries per index (a take's cost is per index: 3-4x less this way)."""
    n = mask.shape[0]
    head = n - n % 8
    if head:
        octets.take(np.packbits(mask[:head]), out=out[:head].view(octets.dtype), mode="clip")
    if head < n:
        table.take(mask[head:].view(np.uint8), out=out[head:], mode="clip")
    return out


def _octets(table: np.ndarray) -> np.ndarray:
    """The 256 octets of a 2-entry table: octet ``v`` holds, for each bit of ``v`` (most
    significant first), entry 1 where it is set, else entry 0; one ``void`` element each."""
    table = table[_BYTE_BITS]
    return table.view(np.dtype((np.void, 8 * table.itemsize))).reshape(256)


#: :data:`_BOUND_LABELS` by octets of rows (:func:`_pick`).
_BOUND_OCTETS = _octets(_BOUND_LABELS)
