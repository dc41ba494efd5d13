"""Benchmark-recipe launch settings in planner accuracy: SGLang's scheduler poll interval."""

import numpy as np
import pandas as pd
import pytest

from planner import accuracy as A
from planner import accuracy_loads as L
from planner.accuracy_recipes import attention_dp_balance, scheduler_poll_steps
from planner.serving.params import ServingParams

IX = "[InferenceX dashboard] SemiAnalysisAI/InferenceX-app@x benchmarks.json"


def test_poll_steps_follow_the_inferencex_sglang_recipe():
    """K = 10 below 16 users, 30 from 16 (the B200/B300 SGLang scripts); 1 for every other row."""
    rows = pd.DataFrame({
        "source": [IX, IX, IX, IX, IX, "[AIC silicon_sample] x", IX],
        "engine": ["sglang", "sglang", "sglang", "trtllm", "sglang", "sglang", "sglang"],
        "mode": ["agg", "agg", "agg", "agg", "disagg", "agg", "agg"],
        "load_kind": ["concurrency"] * 7,
        "load_value": [8, 16, 64, 64, 64, 64, 64]})
    family = pd.Series(["InferenceX dashboard"] * 5 + ["AIC silicon_sample", "InferenceX dashboard"])
    gpu = pd.Series(["b200", "b300", "b200", "b200", "b200", "b200", "h200-sxm"])
    k = scheduler_poll_steps(rows, family, gpu, pd.Series([1.0] * 7))
    assert k.tolist() == [10.0, 30.0, 30.0, 1.0, 1.0, 1.0, 1.0]
    # The skipper refuses attention DP: rows with attention DP keep K = 1.
    assert scheduler_poll_steps(rows, family, gpu, pd.Series([8.0] * 7)).tolist() == [1.0] * 7


def _closed_loop_arrays(catalog):
    row = {"id": "X1", "source": "[test] hand-made", "engine": "sglang", "engine_version": "0.5.6",
           "model": "llama-3.1-8b", "gpu": "h100-sxm", "num_gpus": 1, "tp": 1, "pp": 1, "ep": np.nan,
           "weight_dtype": "bf16", "kv_dtype": "bf16", "mode": "agg", "isl": 1024, "osl": 256,
           "load_kind": "concurrency", "load_value": 32, "metric": "ttft_ms_mean", "value": 100.0,
           "unit": "ms", "notes": ""}
    rows, _ = A.prepare_rows(pd.DataFrame([row]), catalog)
    return A.row_arrays(catalog, rows), ServingParams()


def test_poll_interval_adds_the_rest_of_a_poll_cycle(catalog):
    """Staggered closed loop, by hand: TTFT = S + (A-1)/A (W + K tau / 2); K = 1 is the plain loop."""
    c, p = _closed_loop_arrays(catalog)
    users, prompt, output = np.array([32.0]), np.array([1024.0]), np.array([256.0])
    plain = L.closed_loop(c, p, users, np.array([1e6]), prompt, output, first_wave_weight=0.0)
    same = L.closed_loop(c, p, users, np.array([1e6]), prompt, output, first_wave_weight=0.0, poll_steps=1.0)
    assert same["ttft_s"][0] == plain["ttft_s"][0] and same["rate_per_s"][0] == plain["rate_per_s"][0]
    k = 30.0
    polled = L.closed_loop(c, p, users, np.array([1e6]), prompt, output, first_wave_weight=0.0, poll_steps=k)
    mix = L.step_mix(c, p, polled["occupancy"], prompt, output)
    tau, service, rho = mix["tau_s"][0], mix["prefill_service_s"][0], mix["rho"][0]
    wait = rho * service / (2.0 * (1.0 - rho))
    others = 31.0 / 32.0
    assert polled["ttft_s"][0] == pytest.approx(service + others * (wait + k * tau / 2.0), rel=1e-9)
    # The poll wait lengthens every cycle: the rate falls, by Little's law on the loop.
    cycle = wait + others * (k - 1.0) / 2.0 * tau + service + 255.0 * tau
    assert polled["rate_per_s"][0] == pytest.approx(32.0 / cycle, rel=1e-9)
    assert polled["rate_per_s"][0] < plain["rate_per_s"][0]
    # Quantiles: the position in the poll cycle is uniform on [0, K tau].
    q99 = L.closed_loop(c, p, users, np.array([1e6]), prompt, output, first_wave_weight=0.0,
                        quantile=np.array([0.99]), poll_steps=k)
    tail = L.exponential_wait(wait, rho, np.array([0.99]))[0]
    assert q99["ttft_s"][0] == pytest.approx(service + others * (tail + 0.99 * k * tau), rel=1e-6)


def test_inferencex_trtllm_attention_dp_balances_prefills():
    """(D, T) = (attention-DP ranks, 60 steps) on InferenceX TensorRT-LLM aggregated rows with
    attention DP; (1, 0) elsewhere."""
    rows = pd.DataFrame({"source": [IX, IX, IX, "[AIC silicon_sample] x"],
                         "engine": ["trtllm", "trtllm", "sglang", "trtllm"], "mode": ["agg"] * 4,
                         "load_kind": ["concurrency"] * 4, "load_value": [64] * 4})
    family = pd.Series(["InferenceX dashboard"] * 3 + ["AIC silicon_sample"])
    ranks, timeout = attention_dp_balance(rows, family, pd.Series([8.0, 1.0, 8.0, 8.0]))
    assert ranks.tolist() == [8.0, 1.0, 1.0, 1.0] and timeout.tolist() == [60.0, 0.0, 0.0, 0.0]


def test_balance_window_by_hand(catalog):
    """W_b = min((D - 1)/lambda, T tau) where A >= D; TTFT_s = S + (A-1)/A (W + (tau + W_b)/2)."""
    c, p = _closed_loop_arrays(catalog)
    users, prompt, output = np.array([32.0, 4.0]), np.array([1024.0, 1024.0]), np.array([256.0, 256.0])
    for timeout in (2.0, 1e6):       # the timeout binds, then the D arrivals do
        r = L.closed_loop(c, p, users, np.array([1e6, 1e6]), prompt, output, first_wave_weight=0.0,
                          balance_ranks=8.0, balance_timeout_steps=timeout)
        mix = L.step_mix(c, p, r["occupancy"], prompt, output)
        tau, service, rho = mix["tau_s"], mix["prefill_service_s"], mix["rho"]
        wait = rho * service / (2.0 * (1.0 - rho))
        others = (users - 1.0) / users
        window = np.minimum(7.0 / r["rate_per_s"], timeout * tau)
        window[1] = 0.0                                   # 4 users < 8 ranks: no rank waits
        assert r["ttft_s"] == pytest.approx(service + others * (wait + (tau + window) / 2.0), rel=1e-6)
        assert r["rate_per_s"] == pytest.approx(users / (wait + others * window / 2.0 + service + 255.0 * tau),
                                                rel=1e-6)
    plain = L.closed_loop(c, p, users, np.array([1e6, 1e6]), prompt, output, first_wave_weight=0.0)
    assert r["ttft_s"][0] > plain["ttft_s"][0] and r["ttft_s"][1] == plain["ttft_s"][1]
