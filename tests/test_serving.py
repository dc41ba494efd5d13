"""Serving-model formulas: hand-computed values, array cases and monotonicity."""

import numpy as np
import pandas as pd
import pytest

from planner.configs import config_arrays
from planner.serving import memory, roofline
from planner.serving.params import ServingParams

P = ServingParams()


def arrays(catalog, model, gpu="h100-sxm", quant="bf16", kv="bf16", tp=1, pp=1, batch=1,
           prompt=1024, output=256, context=np.nan):
    n = max(np.size(batch), np.size(tp), np.size(pp), np.size(context))
    frame = pd.DataFrame({"model": [model] * n, "gpu": [gpu] * n, "quantization": [quant] * n,
                          "kv_cache_dtype": [kv] * n, "tp": np.broadcast_to(tp, n),
                          "pp": np.broadcast_to(pp, n), "batch": np.broadcast_to(batch, n),
                          "prompt_tokens": prompt, "output_tokens": output,
                          "context_tokens": np.broadcast_to(context, n)})
    return config_arrays(catalog, frame)[0]


def test_deepseek_v3_mla_kv_per_token(catalog):
    c = arrays(catalog, "deepseek-v3")
    assert memory.kv_bytes_per_token(c)[0] == 61 * 576 * 2 == 70_272


def test_mla_latent_is_replicated_across_tp(catalog):
    c = arrays(catalog, "deepseek-v3", tp=np.array([1, 8]))
    assert np.allclose(memory.kv_fraction_per_gpu(c), [1.0, 1.0])


def test_gqa_kv_heads_split_then_replicated(catalog):
    # llama-3.1-8b has 8 KV heads: TP 2 -> 1/2 per GPU; TP 16 -> one head each (1/8), not 1/16.
    c = arrays(catalog, "llama-3.1-8b", tp=np.array([1, 2, 8, 16]))
    assert np.allclose(memory.kv_fraction_per_gpu(c), [1, 1 / 2, 1 / 8, 1 / 8])


def test_gpt_oss_sliding_layers_hold_only_the_window(catalog):
    m = catalog.model("gpt-oss-120b")
    c = arrays(catalog, "gpt-oss-120b", context=np.array([64.0, 8192.0]))
    per_layer = 2 * 8 * 64 * 2  # K and V, 8 KV heads x 64 dims x 2 bytes
    full, window = m.full_attention_layers, m.sliding_window_layers
    assert (full, window, m.sliding_window_tokens) == (18, 18, 128)
    expected = per_layer * np.array([36 * 64, full * 8192 + window * 128])
    assert np.allclose(memory.kv_bytes_per_seq(c), expected)


def test_mixtral_expert_read_grows_with_batch(catalog):
    m = catalog.model("mixtral-8x7b")
    b = np.array([1, 2, 4, 8, 32])
    c = arrays(catalog, "mixtral-8x7b", batch=b)
    dense = (m.params_total - m.routed_expert_params) * 2
    expected = dense + m.routed_expert_params * 2 * (1 - (1 - 2 / 8) ** b)
    assert np.allclose(roofline.weight_read_bytes(c, b), expected)
    assert np.all(np.diff(roofline.weight_read_bytes(c, b)) > 0)


def test_tp_comm_formula_by_hand(catalog):
    c = arrays(catalog, "llama-3.1-70b", gpu="h100-sxm", tp=4, batch=16)
    # 2L (2(N-1)/N * 2bd / beta_link + tau), beta_link 450 GB/s per direction, tau 5 us
    expected = 2 * 80 * (2 * 3 / 4 * 2 * 16 * 8192 / 450e9 + 5e-6)
    assert roofline.tp_comm_time_s(c, P, 16)[0] == pytest.approx(expected)


def test_pcie_gpu_pays_pcie_latency(catalog):
    c = arrays(catalog, "llama-3.1-8b", gpu="l40s", tp=2)
    assert roofline.allreduce_latency_s(c, P)[0] == P.allreduce_latency_pcie_s


def test_prefill_seed_formula(catalog):
    c = arrays(catalog, "llama-3.1-8b", gpu="h100-sxm", prompt=2000)
    m = catalog.model("llama-3.1-8b")
    flops = 2000 * (2 * m.params_active + 2 * 32 * 4096 * 2000)
    expected = max(flops / (989e12 * 0.6), m.params_total * 2 / (3.35e12 * 0.8))
    assert roofline.prefill_time_s(c, P)[0] == pytest.approx(expected)


def test_mixed_step_reduces_to_decode_and_prefill(catalog):
    c = arrays(catalog, "llama-3.1-70b", gpu="h200-sxm", tp=4, batch=32, prompt=1500)
    decode = roofline.decode_times(c, P)["tpot_s"][0]
    assert roofline.mixed_step_time_s(c, P, 32, 0)[0] == pytest.approx(decode)
    assert roofline.mixed_step_time_s(c, P, 0, 1500)[0] == pytest.approx(roofline.prefill_time_s(c, P)[0])


def test_tpot_increases_with_batch_and_context(catalog):
    b = np.array([1, 8, 64, 256])
    c = arrays(catalog, "llama-3.1-8b", batch=b, context=2048.0)
    assert np.all(np.diff(roofline.decode_times(c, P)["tpot_s"]) > 0)
    ctx = np.array([512.0, 2048.0, 8192.0])
    c = arrays(catalog, "llama-3.1-8b", batch=32, context=ctx)
    assert np.all(np.diff(roofline.decode_times(c, P)["tpot_s"]) > 0)


def test_pp_splits_memory_not_latency(catalog):
    c = arrays(catalog, "llama-3.1-70b", gpu="h100-sxm", pp=np.array([1, 2, 4]), batch=1, context=0.0)
    per_gpu = memory.weights_bytes_per_gpu(c)
    assert np.allclose(per_gpu * np.array([1, 2, 4]), per_gpu[0])
    t = roofline.decode_times(c, P)["t_mem_s"]
    assert np.allclose(t, t[0])  # batch 1: the weights are read once per token whatever S


def test_fp8_on_ampere_falls_back_to_bf16_math(catalog):
    frame = pd.DataFrame({"model": ["llama-3.1-8b"] * 2, "gpu": ["a100-sxm-80gb", "h100-sxm"],
                          "quantization": ["fp8", "fp8"], "kv_cache_dtype": ["bf16"] * 2, "tp": 1, "pp": 1,
                          "batch": 1, "prompt_tokens": 100, "output_tokens": 10, "context_tokens": np.nan})
    c, fallback = config_arrays(catalog, frame)
    assert list(fallback) == [True, False]
    assert list(c.peak_flops_per_s) == [312e12, 1979e12]
    assert list(c.weight_bytes_per_param) == [1.0, 1.0]


def test_max_concurrency_monotone_in_memory(catalog):
    c = arrays(catalog, "llama-3.1-8b", context=8192.0)
    bigger = c.replace(memory_bytes=c.memory_bytes * 2)
    assert memory.max_concurrency(bigger, P)[0] > memory.max_concurrency(c, P)[0]


def test_recommended_max_num_seqs_rounding():
    from planner.serving.economics import recommended_max_num_seqs

    assert list(recommended_max_num_seqs([59.8, 15.0, 239.0, 210.0, 100.0, 130.0])) == [64, 16, 256, 256, 128, 136]


def test_fused_blocked_evaluate_equals_the_modular_equations_bit_for_bit(catalog):
    """evaluate() (blocks of BLOCK_ROWS, fused pass) = the composition of roofline/memory/economics,
    bit for bit (signed zeros and NaNs included), on every kind of row the pass treats apart:
    MoE (the power skipped where it saturates), sliding windows, MLA, a GPU without link."""
    from planner.serving import evaluate as ev

    rng = np.random.default_rng(1)
    n = 2 * ev.BLOCK_ROWS + 77            # several blocks and a ragged last one
    gpus = [g for g, spec in catalog.gpus.entries.items() if spec.bf16_tflops]
    assert "m2-ultra" in gpus and catalog.gpu("m2-ultra").link_bytes_per_s == 0
    models = ["llama-3.1-8b", "mixtral-8x7b", "deepseek-v3", "gpt-oss-120b", "gemma-3-27b", "qwen3-30b-a3b"]
    frame = pd.DataFrame({
        "model": rng.choice(models, n),
        "gpu": rng.choice(gpus, n), "quantization": rng.choice(["bf16", "fp8"], n),
        "kv_cache_dtype": rng.choice(["bf16", "fp8"], n), "tp": rng.choice([1, 2, 8], n),
        "pp": rng.choice([1, 2, 4], n), "batch": rng.integers(0, 300, n),
        "prompt_tokens": rng.integers(16, 9000, n), "output_tokens": rng.integers(2, 900, n),
        "context_tokens": np.nan})
    arrays, _ = config_arrays(catalog, frame)
    params = ServingParams().with_overrides(memory_efficiency=rng.uniform(0.5, 0.9, n), step_overhead_s=1e-4)
    users = rng.integers(1, 600, n).astype(float)
    usd = rng.uniform(1, 5, n)
    for args in ((params, users, usd), (ServingParams(), None, None), (ServingParams(), None, 2.5)):
        with np.errstate(divide="ignore", invalid="ignore"):   # batch 0 rows
            ref = ev.evaluate_reference(arrays, *args)
        for threads in (1, 3):                                 # the blocks shared by threads
            got = ev.evaluate_rows(arrays, *args, rows=n, block_rows=ev.BLOCK_ROWS, threads=threads)
            assert list(got) == list(ref)
            for key in ref:
                a, b = np.asarray(got[key]), np.asarray(ref[key])
                assert a.dtype == b.dtype and a.shape == b.shape, key
                assert a.tobytes() == b.tobytes(), key
        assert ev.evaluate(arrays, *args)["tpot_s"].tobytes() == ref["tpot_s"].tobytes()
    assert (got["expert_read_fraction"][frame["model"].to_numpy() == "llama-3.1-8b"] == 0).all()
    moe = frame["model"].isin(["mixtral-8x7b", "qwen3-30b-a3b"]).to_numpy()
    assert (got["expert_read_fraction"][moe] == 1.0).any()        # saturated rows exist
    assert ((got["expert_read_fraction"][moe] > 0) & (got["expert_read_fraction"][moe] < 1)).any()


def test_thread_count_from_the_environment(monkeypatch):
    from planner.errors import PlanningInputError
    from planner.serving.parallel import MAX_DEFAULT_THREADS, row_ranges, thread_count

    monkeypatch.delenv("PLANNER_THREADS", raising=False)
    assert 1 <= thread_count() <= MAX_DEFAULT_THREADS
    monkeypatch.setenv("PLANNER_THREADS", "3")
    assert thread_count() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("PLANNER_THREADS", bad)
        with pytest.raises(PlanningInputError, match="PLANNER_THREADS: must be an integer >= 1"):
            thread_count()
    assert row_ranges(10, 3, 4) == [slice(0, 5), slice(5, 10)]     # at least 4 rows each: 2 ranges
    assert row_ranges(3, 8, 4) == [slice(0, 3)]


def test_threads_keep_the_callers_error_handling_and_raise_its_errors():
    import threading
    import time

    from planner.serving.parallel import map_in_threads

    def probe(item):
        time.sleep(0.02)                    # one item per thread
        if item == "bad":
            raise ValueError("bad item")
        return np.geterr()["divide"], threading.get_ident()

    with np.errstate(divide="raise"):       # numpy's error state is per thread: carried over
        got = map_in_threads(probe, [0, 1, 2], 3)
    assert {g[0] for g in got} == {"raise"} and len({g[1] for g in got}) > 1
    with pytest.raises(ValueError, match="bad item"):
        map_in_threads(probe, [0, "bad", 2], 3)
    assert map_in_threads(lambda x: x * x, [1, 2, 3, 4, 5], 2) == [1, 4, 9, 16, 25]


def test_step_model_shared_terms_and_kept_prefill_terms_give_the_same_times(catalog):
    """StepModel.time with precomputed decode terms, and a second call that reuses the kept
    prefill term, return exactly the plain call's times."""
    c = arrays(catalog, "mixtral-8x7b", tp=np.array([1, 2, 8]), pp=np.array([1, 2, 1]), batch=np.array([8, 64, 256]))
    fresh = roofline.StepModel(c, P)
    n = np.array([3.0, 40.0, 200.0])
    plain = fresh.time(n, 512.0, 3000.0)
    model = roofline.StepModel(c, P)
    terms = model.decode_terms(n)
    assert model.time(n, 512.0, 3000.0, terms=terms).tobytes() == plain.tobytes()
    assert model.time(n, 512.0, 3000.0).tobytes() == plain.tobytes()       # kept prefill term
    assert model.time(n).tobytes() == fresh.time(n).tobytes()
    dense = roofline.StepModel(arrays(catalog, "llama-3.1-8b", batch=np.array([1, 32])), P)
    assert np.all(np.diff(dense.time(np.array([1.0, 32.0]))) > 0)          # more decoders, longer step


def test_take_indexes_per_row_columns_and_keeps_scalars(catalog):
    c = arrays(catalog, "llama-3.1-8b", tp=np.array([1, 2, 4]), batch=np.array([8, 16, 32]))
    picked = c.take(np.array([2, 0]))
    assert picked.tp.tolist() == [4.0, 1.0] and picked.batch.tolist() == [32.0, 8.0]
    assert picked.n_layers.tolist() == [32.0, 32.0]  # a per-row catalog column, indexed too
    p = ServingParams(memory_efficiency=np.array([0.5, 0.6, 0.7]), step_overhead_s=np.array([1e-3]))
    q = p.take(np.array([1]))
    assert q.memory_efficiency.tolist() == [0.6]
    assert q.step_overhead_s.tolist() == [1e-3] and q.compute_efficiency == 0.6  # broadcast values kept
