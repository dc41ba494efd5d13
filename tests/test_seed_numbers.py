"""Every number of the seeds (issue 2, "Done when" 1) through the CLI's JSON, within 2%."""

import pytest

from conftest import run_json as _run_json


def run_json(command, *args):
    """The seeds' numbers hold with the seeds' constants: ``--calibration none``."""
    extra = ("--calibration", "none") if command in ("eval", "sweep") else ()
    return _run_json(command, *args, *extra)

REL = 0.02


def approx(x):
    return pytest.approx(x, rel=REL)


@pytest.mark.parametrize("model, kv_per_token, per_8k_gb", [
    ("llama-3.1-8b", 131_072, 1.07),
    ("llama-3.1-70b", 327_680, 2.68),
    ("llama-3.1-405b", 516_096, 4.23),
    ("mixtral-8x7b", 131_072, 1.07),
])
def test_kv_per_token_and_per_8k_request(model, kv_per_token, per_8k_gb):
    r = run_json("eval", "--model", model, "--gpu", "h200-sxm", "--context", 8192)
    assert r["kv_bytes_per_token"] == kv_per_token  # exact: integer arithmetic
    assert r["kv_bytes_per_seq"] / 1e9 == approx(per_8k_gb)


@pytest.mark.parametrize("quant, gb", [("bf16", 141), ("fp8", 71), ("int4-awq", 36)])
def test_llama_70b_weights(quant, gb):
    r = run_json("eval", "--model", "llama-3.1-70b", "--gpu", "h200-sxm", "--quant", quant)
    assert r["weights_bytes"] / 1e9 == approx(gb)


def test_llama_8b_on_h100_memory_budget():
    r = run_json("eval", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", 8192)
    assert r["weights_bytes"] / 1e9 == approx(16)
    assert r["kv_budget_bytes_per_gpu"] / 1e9 == approx(54)  # 0.9 x 80 - 16 - 2
    assert r["max_concurrency"] == pytest.approx(50, abs=1)
    assert r["fits"] is True


def test_llama_70b_bf16_does_not_fit_one_h100_but_is_still_timed():
    r = run_json("eval", "--model", "llama-3.1-70b", "--gpu", "h100-sxm")
    assert r["fits"] is False
    assert r["kv_budget_bytes_per_gpu"] < 0
    assert r["tpot_s"] > 0 and r["ttft_s"] > 0  # timings reported even when it does not fit


@pytest.mark.parametrize("gpu, ridge", [("a100-sxm-80gb", 156), ("h100-sxm", 295), ("h200-sxm", 206),
                                        ("b200", 281), ("rtx-4090", 165), ("m2-ultra", 34)])
def test_ridge_points(gpu, ridge):
    r = run_json("eval", "--model", "llama-3.1-8b", "--gpu", gpu)
    assert r["ridge_point"] == approx(ridge)


def test_kv_read_intensity_llama_3_8b():
    r = run_json("eval", "--model", "llama-3-8b", "--gpu", "h100-sxm")
    assert r["kv_arithmetic_intensity"] == approx(4.0)


def test_batch_one_tpot_h100():
    r = run_json("eval", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--batch", 1, "--context", 0,
                 "--mem-eff", 1, "--compute-eff", 1)
    assert r["tpot_s"] * 1e3 == approx(4.8)
    assert r["throughput_tokens_per_s"] == approx(210)
    assert r["bound"] == "memory"
    assert r["arithmetic_intensity"] == approx(1.0)


def _sweep(context, batches):
    r = run_json("sweep", "--model", "llama-3-8b", "--gpu", "a100-sxm-80gb", "--context", context,
                 "--batches", ",".join(map(str, batches)), "--mem-eff", 1, "--compute-eff", 1)
    return {row["batch"]: row for row in r["rows"]}


def test_knee_table_context_2048():
    rows = _sweep(2048, [32, 64, 128])
    assert rows[32]["tpot_s"] * 1e3 == approx(12.3)
    assert rows[32]["throughput_tokens_per_s"] == approx(2602)
    assert rows[64]["tpot_s"] * 1e3 == approx(16.6)
    assert rows[64]["throughput_tokens_per_s"] == approx(3857)
    tpot_rise = rows[128]["tpot_s"] / rows[64]["tpot_s"] - 1
    tput_rise = rows[128]["throughput_tokens_per_s"] / rows[64]["throughput_tokens_per_s"] - 1
    assert tpot_rise == pytest.approx(0.51, abs=0.02)
    assert tput_rise == pytest.approx(0.32, abs=0.02)


def test_knee_table_context_8192():
    rows = _sweep(8192, [1, 8, 32, 256])
    assert rows[8]["tpot_s"] / rows[1]["tpot_s"] == approx(1.45)
    assert rows[32]["tpot_s"] / rows[1]["tpot_s"] == approx(2.95)
    assert rows[32]["throughput_tokens_per_s"] == approx(1270)
    assert rows[256]["throughput_tokens_per_s"] == approx(1759)


@pytest.mark.parametrize("model, context, knee, recommended", [
    ("llama-3-8b", 2048, 60, 64), ("llama-3-8b", 8192, 15, 16),
    ("llama-3-8b", 512, 238, 256), ("llama-3-70b", 2048, 208, 256),
])
def test_b_knee(model, context, knee, recommended):
    r = run_json("knee", "--model", model, "--context", context)
    assert r["b_knee"] == approx(knee)
    assert r["recommended_max_num_seqs"] == recommended


@pytest.mark.parametrize("tok_s, usd", [(200, 3.47), (2500, 0.28)])
def test_cost_per_million_tokens(tok_s, usd):
    from planner.serving.economics import usd_per_million_tokens

    assert float(usd_per_million_tokens(1, 2.5, tok_s)) == approx(usd)


def test_cost_through_cli_at_2_5_usd():
    r = run_json("eval", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--price", 2.5)
    expected = 2.5 / (r["throughput_tokens_per_s"] * 3600) * 1e6
    assert r["usd_per_million_tokens"] == approx(expected)


@pytest.mark.parametrize("params, tokens, flops", [(405e9, 15.6e12, 3.8e25), (70e9, 15e12, 6.3e24)])
def test_training_flops(params, tokens, flops):
    r = run_json("train", "--params", params, "--tokens", tokens, "--gpu", "h100-sxm", "--gpus", 16384)
    assert r["flops"] == approx(flops)


def test_adam_state_and_bubble():
    r = run_json("train", "--params", 405e9, "--tokens", 15.6e12, "--gpu", "h100-sxm", "--gpus", 16384,
                 "--pp", 4, "--micro-batches", 8)
    assert r["optimizer_state_bytes"] / 1e12 == approx(6.5)
    assert r["pipeline_bubble_fraction"] == pytest.approx(3 / 11, rel=1e-9)  # 27.3%


def test_eval_json_has_every_design_key():
    """The keys of ``planner eval --json`` (the seeds' contract, README "What you can ask it")."""
    r = run_json("eval", "--model", "llama-3.1-70b", "--gpu", "h200-sxm", "--tp", 4, "--batch", 32,
                 "--rate", 2, "--slo-ttft-p95", 1, "--slo-tpot-p95", 0.05)
    keys = ["weights_bytes", "weights_bytes_per_gpu", "kv_bytes_per_token", "kv_bytes_per_seq",
            "kv_budget_bytes_per_gpu", "max_concurrency", "fits", "arithmetic_intensity", "ridge_point",
            "bound", "tpot_s", "prefill_s", "ttft_s", "throughput_tokens_per_s", "per_user_tokens_per_s",
            "usd_per_million_tokens", "b_knee", "ttft_p95_s", "tpot_p95_s", "max_rate_per_s"]
    assert [k for k in keys if k not in r] == []
    assert r["bound"] in ("memory", "compute")
    assert 0 < r["max_rate_per_s"] and r["ttft_p95_s"] >= r["prefill_s"]
