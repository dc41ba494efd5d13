"""Expert parallelism and attention data parallelism (planner/serving/moe.py; issue 14).

Hand values: docs/serving-model.md section 13.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from planner.configs import config_arrays
from planner.serving import memory, moe, roofline
from planner.serving.evaluate import evaluate, evaluate_reference
from planner.serving.params import ServingParams

P = ServingParams()
DSV3_ROUTED = 653_908_770_816


def _arrays(catalog, model="deepseek-v3", gpu="h200-sxm", tp=8, quant="fp8", kv="fp8", batch=64, **layout):
    frame = pd.DataFrame({"model": [model], "gpu": [gpu], "quantization": [quant], "kv_cache_dtype": [kv],
                          "tp": [float(tp)], "pp": [1.0], "batch": [float(batch)], "prompt_tokens": [1024.0],
                          "output_tokens": [1024.0], "context_tokens": [np.nan]})
    c, _ = config_arrays(catalog, frame)
    return c.replace(**layout) if layout else c


# ------------------------------------------------------------------ (a) all-to-all


def test_dispatch_and_combine_bytes_per_token(catalog):
    c = _arrays(catalog)
    # DeepSeek-V3: hidden 7168, top-8, BF16: 8 x 7168 x 2 = 114,688 B each way per MoE layer
    assert moe.dispatch_bytes_per_token(c, P)[0] == 114_688
    assert moe.combine_bytes_per_token(c, P)[0] == 114_688
    assert moe.dispatch_bytes_per_token(c, P.with_overrides(dispatch_bytes_per_element=1.0))[0] == 57_344


def test_all_to_all_inside_the_scale_up_domain(catalog):
    c = _arrays(catalog, ep=8.0)      # H200: 8 per NVLink domain, 450 GB/s per direction
    # 64 tokens / 8 ranks x 114,688 B = 917,504 B per rank, 7/8 of it to the other 7 GPUs
    t = moe.all_to_all_time_s(c, P, 64.0, 114_688.0, 5e-6)
    assert t[0] == pytest.approx(917_504 * 7 / 8 / 450e9 + 5e-6, rel=1e-12)


def test_all_to_all_over_the_scale_out_network(catalog):
    c = _arrays(catalog, tp=16, ep=16.0)   # two H200 nodes, 400 Gb/s ConnectX-7 = 50 GB/s per GPU
    volume = 64 / 16 * 114_688                       # 458,752 B per rank
    inside, outside = volume * 7 / 16 / 450e9, volume * 8 / 16 / 50e9
    assert outside > inside
    t = moe.all_to_all_time_s(c, P, 64.0, 114_688.0, 5e-6)
    assert t[0] == pytest.approx(outside + 5e-6 + 20e-6, rel=1e-12)
    # GB200 NVL72: the same 16-GPU group stays on NVLink (900 GB/s)
    g = _arrays(catalog, gpu="gb200", tp=16, ep=16.0)
    assert moe.all_to_all_time_s(g, P, 64.0, 114_688.0, 5e-6)[0] == pytest.approx(volume * 15 / 16 / 900e9 + 5e-6)
    # no scale-out figure in the catalog: a group beyond the domain cannot run
    assert np.isinf(moe.all_to_all_time_s(c.replace(scale_out_bytes_per_s=0.0), P, 64.0, 114_688.0, 5e-6)[0])


def test_layout_communication_of_one_round(catalog):
    plain = _arrays(catalog)
    ep = _arrays(catalog, ep=8.0, attention_dp=True)
    # attention DP over all 8 GPUs: no attention all-reduce; dispatch + combine per layer
    a2a = 2 * 917_504 * 7 / 8 / 450e9 + 5e-6       # dispatch + combine transfers, one latency
    assert roofline.tp_comm_time_s(ep, P, 64.0)[0] == pytest.approx(61 * a2a, rel=1e-12)
    # ep 8 with attention TP: one attention all-reduce of 64 rows over 8 GPUs per layer, plus the all-to-all
    ar = 2 * 7 / 8 * 2 * 64 * 7168 / 450e9 + 5e-6
    tp_ep = _arrays(catalog, ep=8.0)
    assert roofline.tp_comm_time_s(tp_ep, P, 64.0)[0] == pytest.approx(61 * (ar + a2a), rel=1e-12)
    # the dense layout: the seed's 2L all-reduces, unchanged
    assert roofline.tp_comm_time_s(plain, P, 64.0)[0] == pytest.approx(2 * 61 * ar, rel=1e-12)


# ------------------------------------------------------------------ (b) expert load imbalance


def test_expert_load_imbalance_scales_the_most_loaded_rank(catalog):
    c = _arrays(catalog, ep=8.0)
    lam = P.with_overrides(expert_load_imbalance=1.5)
    routed_active = DSV3_ROUTED * 8 / 256                       # 20,434,649,088
    assert moe.active_params(c, lam)[0] == pytest.approx(37e9 + 0.5 * routed_active)
    assert np.array_equal(moe.active_params(c, P), c.params_active)              # balanced: P_act
    assert np.array_equal(moe.active_params(_arrays(catalog), lam), [37e9])       # ep = 1: no imbalance
    phi = np.array([0.2, 0.9])
    assert moe.loaded_expert_fraction(c, lam, phi).tolist() == pytest.approx([0.3, 1.0])   # min(1, 1.5 phi)
    slow = roofline.decode_times(c, lam)["tpot_s"][0]
    fast = roofline.decode_times(c, P)["tpot_s"][0]
    assert slow > fast
    # the step model agrees with decode_times (one step implementation)
    assert roofline.StepModel(c, lam).time(64.0)[0] == pytest.approx(slow, rel=1e-12)


def test_imbalance_does_not_touch_tp_sliced_experts(catalog):
    c = _arrays(catalog)     # ep = 1
    lam = P.with_overrides(expert_load_imbalance=1.5)
    assert roofline.decode_times(c, lam)["tpot_s"][0] == roofline.decode_times(c, P)["tpot_s"][0]


# ------------------------------------------------------------------ (c) attention-DP memory, (d) MLA


def test_attention_dp_replicates_attention_weights_and_splits_the_kv(catalog):
    c = _arrays(catalog, attention_dp=True)       # DeepSeek-V3 FP8 (1 B/param) on 8 x H200, D = 8
    dense = 671e9 - DSV3_ROUTED                   # 17,091,229,184 non-expert parameters
    assert memory.weights_bytes(c)[0] == pytest.approx(8 * dense + DSV3_ROUTED)          # 790.6 GB
    assert memory.weights_bytes_per_gpu(c)[0] == pytest.approx((8 * dense + DSV3_ROUTED) / 8)
    # MLA: the latent is replicated on every attention-TP rank; with D = 8 each GPU holds
    # the KV of its own 1/8 of the sequences
    assert memory.kv_fraction_per_gpu(_arrays(catalog))[0] == 1.0
    assert memory.kv_fraction_per_gpu(c)[0] == pytest.approx(1 / 8)
    # 35,136 B per token (61 x 576 x 1 B), 1,536 tokens of context (1024 + 1024/2)
    kv_seq = 61 * 576 * 1 * 1536
    budget = 0.9 * 141e9 - (8 * dense + DSV3_ROUTED) / 8 - 2e9
    assert memory.max_concurrency(c, P)[0] == np.floor(budget / (kv_seq / 8))
    plain = _arrays(catalog)
    assert memory.max_concurrency(plain, P)[0] == np.floor((0.9 * 141e9 - 671e9 / 8 - 2e9) / kv_seq)


def test_attention_dp_kv_for_gqa(catalog):
    # Qwen3-235B-A22B: 4 KV heads; TP8 replicates them (1/4 per GPU), DP2 x TP4 holds 1/8
    tp8 = _arrays(catalog, model="qwen3-235b-a22b", gpu="h100-sxm", kv="bf16")
    assert memory.kv_fraction_per_gpu(tp8)[0] == pytest.approx(1 / 4)
    assert memory.kv_fraction_per_gpu(tp8.replace(attention_dp=2.0))[0] == pytest.approx(1 / 8)
    assert memory.kv_fraction_per_gpu(tp8.replace(attention_dp=8.0))[0] == pytest.approx(1 / 8)


def test_mla_attention_dp_reads_less_kv_per_step(catalog):
    tp = _arrays(catalog, batch=256)
    dp = tp.replace(attention_dp=True)
    a, b = roofline.decode_times(tp, P), roofline.decode_times(dp, P)
    kv_tp = 256 * 61 * 576 * 1536                 # every GPU reads every sequence's latent
    dense = 671e9 - DSV3_ROUTED
    experts = DSV3_ROUTED * roofline.expert_read_fraction(tp, 256.0)[0]
    assert a["bytes_read_per_gpu"][0] == pytest.approx((dense + experts) / 8 + kv_tp)
    assert b["bytes_read_per_gpu"][0] == pytest.approx((8 * dense + experts) / 8 + kv_tp / 8)
    assert b["tpot_s"][0] < a["tpot_s"][0]        # at batch 256 the KV saving wins


# ------------------------------------------------------------------ defaults unchanged


def test_default_layout_is_bit_identical(catalog):
    c = _arrays(catalog, model="mixtral-8x7b", gpu="a100-sxm-80gb", tp=2, quant="bf16", kv="bf16")
    explicit = c.replace(ep=np.ones(1), attention_dp=np.zeros(1))
    for name, value in evaluate(c, P).items():
        assert np.array_equal(evaluate(explicit, P)[name], value), name
    dense = _arrays(catalog, model="llama-3.1-70b", gpu="h100-sxm", quant="bf16", kv="bf16")
    assert not moe.has_layout(dense.replace(ep=8.0))          # ep means nothing for a dense model
    # mixed rows: the default-layout row keeps its value exactly
    two = pd.concat([pd.DataFrame({"ep": [1.0, 8.0]})])
    both = _arrays(catalog).replace(ep=two["ep"].to_numpy(), attention_dp=np.array([0.0, 8.0]))
    assert roofline.tp_comm_time_s(both, P, 64.0)[0] == roofline.tp_comm_time_s(_arrays(catalog), P, 64.0)[0]
    assert memory.kv_fraction_per_gpu(both)[0] == 1.0


def test_evaluate_with_a_layout_is_the_reference_composition(catalog):
    c = _arrays(catalog, ep=8.0, attention_dp=True)
    out, ref = evaluate(c, P), evaluate_reference(c, P)
    assert out["tpot_s"][0] == ref["tpot_s"][0] and out["max_concurrency"][0] == ref["max_concurrency"][0]


# ------------------------------------------------------------------ accuracy rows carry the layout


def _measurement(**overrides):
    base = {"id": "X1", "source": "[InferenceX dashboard] x", "engine": "sglang",
            "engine_version": "lmsysorg/sglang:v0.5.9-cu130", "model": "deepseek-v3", "gpu": "b200",
            "num_gpus": 8, "tp": 8, "pp": np.nan, "ep": 8, "weight_dtype": "fp4", "kv_dtype": np.nan,
            "mode": "agg", "isl": 1024, "osl": 1024, "load_kind": "concurrency", "load_value": 64,
            "metric": "tpot_ms_median", "value": 20.0, "unit": "ms",
            "notes": "DeepSeek-R1-0528; attention data-parallel (dp-attention) || agg tp8/ep8/dpa"}
    return {**base, **overrides}


def test_accuracy_rows_carry_ep_and_attention_dp(catalog):
    from planner import accuracy
    from planner.accuracy_layout import layout_rows

    df = pd.DataFrame([_measurement(),
                       _measurement(id="X2", notes="attention tensor-parallel || agg tp8/ep8/nodpa"),
                       _measurement(id="X3", ep=np.nan, notes="attention tensor-parallel || agg tp8/ep1/nodpa"),
                       _measurement(id="X4", mode="disagg")])
    assert layout_rows(df).tolist() == [True, True, False, False]     # disaggregated rows are wt-14b's
    rows, _ = accuracy.prepare_rows(df, catalog)
    assert rows["attention_dp"].tolist() == [8.0, 1.0, 1.0]
    c = accuracy.row_arrays(catalog, rows)
    assert c.ep.tolist() == [8.0, 8.0, 1.0] and c.attention_dp.tolist() == [8.0, 0.0, 0.0]
    plain = c.replace(ep=np.ones(3), attention_dp=np.zeros(3))
    # DP attention: the MLA latent of each sequence on one GPU of eight (section 13.5)
    assert memory.kv_fraction_per_gpu(c).tolist() == [pytest.approx(1 / 8), 1.0, 1.0]
    assert roofline.tp_comm_time_s(c, P, 64.0)[2] == roofline.tp_comm_time_s(plain, P, 64.0)[2]


def test_faster_links_never_predict_slower_steps(catalog):
    # physics: more scale-out or scale-up bandwidth never slows the all-to-all or the step
    c = _arrays(catalog, tp=16, ep=16.0, attention_dp=True)
    times = [roofline.StepModel(c.replace(scale_out_bytes_per_s=b), P).time(64.0)[0] for b in (25e9, 50e9, 100e9)]
    assert times[0] >= times[1] >= times[2]
    links = [roofline.tp_comm_time_s(c.replace(link_bytes_per_s=b), P, 64.0)[0] for b in (225e9, 450e9, 900e9)]
    assert links[0] >= links[1] >= links[2]
    # a group that stays on one scale-up domain never costs more than one that leaves it
    assert roofline.tp_comm_time_s(c.replace(domain_gpus=72.0), P, 64.0)[0] <= roofline.tp_comm_time_s(c, P, 64.0)[0]
