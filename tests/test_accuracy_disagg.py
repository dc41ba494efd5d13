"""Disaggregated reference rows: layouts read from the notes, the P/D closed loop by hand."""

import numpy as np
import pandas as pd
import pytest

from planner.accuracy_disagg import (PREFILL_BATCH_TOKENS, disagg_layouts, measured_decode_scale,
                                     measured_prefill_load, measured_rate_per_s, pd_closed_loop, pool_arrays,
                                     prefill_pool_capacity, score_disagg_rows)
from planner.accuracy_loads import wave_prefill_s
from planner.accuracy_rows import MEASUREMENT_COLUMNS
from planner.serving.params import ServingParams
from planner.serving.roofline import StepModel

AIC_NOTES = ("AIC row id=x | DISAGG prefill/decode deployment: prefill workers=2 tp=1 pp=1 "
             "attention_dp=8 moe_tp=1 moe_ep=8 batch=1; decode workers=3 tp=4 pp=1 attention_dp=2 "
             "moe_tp=1 moe_ep=8 batch=16 | tp/pp/ep ...")
IX_NOTES = ("DeepSeek-R1-0528 (InferenceX 'dsr1'); raw engine 'dynamo-sglang'; attention data-parallel "
            "(dp-attention) || disagg P: 2x(tp4/ep4/dpa)=8gpu; is_multinode=True")


def frame(rows):
    df = pd.DataFrame(rows)
    for col in MEASUREMENT_COLUMNS:
        if col not in df:
            df[col] = np.nan
    return df


def test_layouts_from_the_notes():
    df = frame([{"notes": AIC_NOTES, "tp": 8, "num_gpus": 40},
                {"notes": IX_NOTES, "tp": 8, "num_gpus": 32},
                {"notes": IX_NOTES.replace("=8gpu", "=16gpu"), "tp": 8, "num_gpus": 32},
                {"notes": "Decode phase measured alone", "tp": np.nan, "num_gpus": 72}])
    out = disagg_layouts(df)
    # AIC: worker width tp x attention_dp; decode max batch = batch x attention_dp.
    cols = ["p_workers", "p_tp", "p_attention_dp", "p_ep", "d_workers", "d_tp", "d_attention_dp", "d_ep"]
    assert out.loc[0, cols + ["d_batch"]].tolist() == [2, 8, 8, 8, 3, 8, 2, 8, 32]
    assert out.loc[0, "p_batch"] == 8                       # prefill batch=1 per attention-DP rank
    assert np.isnan(out.loc[1, "p_batch"])                  # InferenceX: not recorded
    # InferenceX: decode workers (32 - 8) / 8 = 3, attention DP over the decode tp.
    assert out.loc[1, cols].tolist() == [2, 4, 4, 4, 3, 8, 8, 1]    # decode ep: the row's (empty: 1)
    assert np.isnan(out.loc[1, "d_batch"]) and out.loc[1, "layout_problem"] == ""
    assert out.loc[2, "layout_problem"].startswith("prefill GPUs != workers x tp")   # 16 GPUs != 2 x 4
    assert np.isnan(out.loc[3, "p_workers"])


def rows(catalog):
    base = {"id": "r", "source": "[AIC silicon_sample] x", "engine": "vllm", "model": "llama-3.1-70b",
            "gpu": "h100-sxm", "tp": 4, "pp": 1, "mode": "disagg", "isl": 1000, "osl": 200,
            "load_kind": "concurrency", "load_value": 1, "weight_dtype": "bf16", "kv_dtype": "bf16",
            "notes": AIC_NOTES.replace("tp=1 pp=1 attention_dp=8", "tp=4 pp=1 attention_dp=1")
                              .replace("tp=4 pp=1 attention_dp=2", "tp=4 pp=1 attention_dp=1")}
    return frame([{**base, "id": "a", "metric": "ttft_ms_mean", "value": 100.0},
                  {**base, "id": "b", "metric": "tpot_ms_mean", "value": 20.0},
                  {**base, "id": "c", "metric": "output_tok_s_total", "value": 50.0},
                  {**base, "id": "d", "mode": "agg", "metric": "ttft_ms_mean", "value": 100.0}])


def test_one_user_is_prefill_transfer_then_decode_alone(catalog):
    """One user: no queue, no wave spread; rate = 1 / (S + X + (o - 1) tau)."""
    p = ServingParams()
    scored, skipped, recorded = score_disagg_rows(catalog, rows(catalog), calibration=None)
    assert recorded == 3 and len(scored) == 3 and skipped.empty       # the agg row is not one of them
    r = scored.iloc[:1]
    pre, dec = pool_arrays(catalog, r, "p"), pool_arrays(catalog, r, "d")
    service = float(StepModel(pre, p).time(0.0, 1000.0, 1000.0)[0])   # 1000 < C: one iteration
    transfer = 327_680 * 1000 / (4 * 50e9)
    out = pd_closed_loop(pre, dec, p, 1.0, 2.0, 3.0, 16.0, transfer, 1000.0, 200.0, 0.0, np.nan)
    n = float(out["rate_per_s"][0]) * 199 * float(out["tpot_s"][0]) / 3
    tau = float(StepModel(dec, p).time(n)[0])
    assert float(out["tpot_s"][0]) == pytest.approx(tau, rel=1e-3)
    assert float(out["ttft_s"][0]) == pytest.approx(service + transfer, rel=1e-9)
    assert float(out["rate_per_s"][0]) == pytest.approx(1 / (service + transfer + 199 * tau), rel=1e-3)
    # The scored rows use the same closed loop with the harness's first wave (one user: the
    # wave is the same single prefill), in the rows' units.
    by = dict(zip(scored["id"], scored["prediction"]))
    assert by["a"] == pytest.approx(1000 * (service + transfer), rel=1e-6)
    assert by["b"] == pytest.approx(1000 * tau, rel=2e-3)
    assert by["c"] == pytest.approx(200 / (service + transfer + 199 * tau), rel=2e-3)


def test_more_users_wait_longer_and_serve_more(catalog):
    p = ServingParams()
    r = score_disagg_rows(catalog, rows(catalog), calibration=None)[0].iloc[:1]
    pre, dec = pool_arrays(catalog, r, "p"), pool_arrays(catalog, r, "d")
    users = np.array([1.0, 8.0, 32.0, 200.0])
    out = pd_closed_loop(pre, dec, p, users, 2.0, 3.0, 16.0, 1e-3, 1000.0, 200.0, 0.1, np.nan)
    assert np.all(np.diff(out["ttft_s"]) > 0) and np.all(np.diff(out["tpot_s"]) >= 0)
    assert np.all(np.diff(out["rate_per_s"]) >= 0)
    # 200 users exceed the 3 x 16 decode slots: the rate stops growing, the excess waits.
    assert float(out["rate_per_s"][3]) == pytest.approx(float(pd_closed_loop(
        pre, dec, p, 48.0, 2.0, 3.0, 16.0, 1e-3, 1000.0, 200.0, 0.1, np.nan)["rate_per_s"][0]), rel=1e-9)


def test_prefill_pool_batches_and_saturates(catalog):
    """The prefill worker is a batch server: up to B = C / p prompts per step (C the prefill
    batch budget), capacity mu = n_p B / T(B); past it the closed loop parks the other users
    in its queue, so TTFT + (o - 1) TPOT = A / mu (Little's law at lambda = mu)."""
    p = ServingParams()
    r = score_disagg_rows(catalog, rows(catalog), calibration=None)[0].iloc[:1]
    pre, dec = pool_arrays(catalog, r, "p"), pool_arrays(catalog, r, "d")
    per_step = PREFILL_BATCH_TOKENS / 1000.0                          # 8.192 prompts of 1000 tokens
    t_full = float(wave_prefill_s(pre, p, per_step, 1000.0, PREFILL_BATCH_TOKENS)[0])
    assert t_full == pytest.approx(float(StepModel(pre, p).time(0.0, PREFILL_BATCH_TOKENS, 1000.0)[0]))
    mu = 2.0 * per_step / t_full
    capacity, batch, budget = prefill_pool_capacity(pre, p, 1000.0, 2.0)
    assert (float(capacity[0]), float(batch), float(budget)) == pytest.approx((mu, per_step, PREFILL_BATCH_TOKENS))
    users = 20000.0                                   # far more than the pool can prefill
    out = pd_closed_loop(pre, dec, p, users, 2.0, 3.0, 1e5, 1e-3, 1000.0, 200.0, 0.0, np.nan)
    assert float(out["rate_per_s"][0]) == pytest.approx(mu, rel=1e-3)
    tau = float(out["tpot_s"][0])
    assert float(out["ttft_s"][0]) + 199.0 * tau == pytest.approx(users / mu, rel=2e-3)
    # A recorded prefill batch of one prompt per step: no batching, capacity n_p / T(1).
    one = pd_closed_loop(pre, dec, p, users, 2.0, 3.0, 1e5, 1e-3, 1000.0, 200.0, 0.0, np.nan, prefill_batch=1.0)
    t_one = float(wave_prefill_s(pre, p, 1.0, 1000.0, PREFILL_BATCH_TOKENS)[0])
    assert float(one["rate_per_s"][0]) == pytest.approx(2.0 / t_one, rel=1e-3)
    assert float(one["rate_per_s"][0]) < float(out["rate_per_s"][0])     # batching amortizes the weight reads


def test_decode_scale_is_a_factor_on_the_decode_steps(catalog):
    """The sensitivity factor multiplies every decode step: one user's TPOT doubles with 2, its
    TTFT (prefill + transfer) stays, the rate is 1 / (S + X + (o - 1) 2 tau); 1 is the model."""
    p = ServingParams()
    r = score_disagg_rows(catalog, rows(catalog), calibration=None)[0].iloc[:1]
    pre, dec = pool_arrays(catalog, r, "p"), pool_arrays(catalog, r, "d")
    args = (pre, dec, p, 1.0, 2.0, 3.0, 16.0, 1e-3, 1000.0, 200.0, 0.0, np.nan)
    plain, one, two = pd_closed_loop(*args), pd_closed_loop(*args, decode_scale=1.0), \
        pd_closed_loop(*args, decode_scale=2.0)
    assert all(np.array_equal(plain[k], one[k]) for k in plain)             # bit for bit
    service = float(StepModel(pre, p).time(0.0, 1000.0, 1000.0)[0])
    n = float(two["rate_per_s"][0]) * 199 * float(two["tpot_s"][0]) / 3
    tau2 = 2.0 * float(StepModel(dec, p).time(n)[0])
    assert float(two["tpot_s"][0]) == pytest.approx(tau2, rel=1e-3)
    assert float(two["ttft_s"][0]) == pytest.approx(service + 1e-3, rel=1e-9)
    assert float(two["rate_per_s"][0]) == pytest.approx(1 / (service + 1e-3 + 199 * tau2), rel=1e-3)


def test_measured_decode_scale_by_hand():
    """Measured / predicted TPOT of the point (median over its mean/median TPOT rows), on every
    row of the point; 1 for a point without one; p99 rows are not read."""
    point = {"source": "s", "model": "m", "gpu": "g", "engine": "e", "prompt_tokens": 1000.0,
             "output_tokens": 200.0, "load_kind": "concurrency", "p_workers": 1.0, "d_workers": 2.0}
    df = pd.DataFrame([{**point, "load_value": 8.0, "quantity": "tpot", "statistic": "mean", "value": 30.0},
                       {**point, "load_value": 8.0, "quantity": "tpot", "statistic": "median", "value": 40.0},
                       {**point, "load_value": 8.0, "quantity": "tpot", "statistic": "p99", "value": 99.0},
                       {**point, "load_value": 8.0, "quantity": "ttft", "statistic": "mean", "value": 5.0},
                       {**point, "load_value": 16.0, "quantity": "ttft", "statistic": "mean", "value": 5.0}])
    scale = measured_decode_scale(df, np.array([20.0, 20.0, 20.0, 1.0, 1.0]))
    assert scale.tolist() == [1.75, 1.75, 1.75, 1.75, 1.0]               # median(1.5, 2.0); no TPOT row


def test_measured_tpot_check_matches_the_measured_decode(catalog):
    """``measured_tpot``: the TPOT row comes out at its measured value, throughput follows the
    slower decode, one user's TTFT does not depend on the decode."""
    model = score_disagg_rows(catalog, rows(catalog), calibration=None)[0].set_index("id")["prediction"]
    check = score_disagg_rows(catalog, rows(catalog), calibration=None, measured_tpot=True)[0]
    check = check.set_index("id")["prediction"]
    assert check["b"] == pytest.approx(20.0, rel=2e-3)                   # the measured 20 ms
    assert check["a"] == pytest.approx(model["a"], rel=1e-9)
    # One user: rate = 1 / (S + X + (o - 1) tau) with the measured tau = 20 ms (S + X: the TTFT).
    assert check["c"] == pytest.approx(200 / (model["a"] / 1000 + 199 * 0.020), rel=2e-3)
    assert model["b"] != pytest.approx(20.0, rel=0.05)                   # the check moved the decode


def test_measured_rate_by_hand():
    """A point's measured request rate: the median of its throughput rows in requests/s (output
    tokens / o, per GPU x GPUs / o, requests/s), else U / (TTFT + (o - 1) TPOT) of its central
    latency rows; NaN for a point with neither (p99 rows are not read)."""
    point = {"source": "s", "model": "m", "gpu": "g", "engine": "e", "prompt_tokens": 1000.0,
             "output_tokens": 200.0, "load_kind": "concurrency", "p_workers": 1.0, "d_workers": 2.0,
             "gpus_total": 10.0}
    a, b, c = ({**point, "load_value": 8.0}, {**point, "load_value": 16.0}, {**point, "load_value": 32.0})
    df = pd.DataFrame([{**a, "quantity": "out_total", "statistic": "mean", "value": 500.0},     # 2.5 /s
                       {**a, "quantity": "out_per_gpu", "statistic": "mean", "value": 100.0},   # 5.0 /s
                       {**a, "quantity": "req_rate", "statistic": "mean", "value": 3.0},
                       {**a, "quantity": "ttft", "statistic": "mean", "value": 1.0},             # not read
                       {**b, "quantity": "ttft", "statistic": "mean", "value": 1000.0},
                       {**b, "quantity": "tpot", "statistic": "median", "value": 20.0},
                       {**b, "quantity": "tpot", "statistic": "p99", "value": 90.0},
                       {**c, "quantity": "ttft", "statistic": "p99", "value": 1000.0}])
    rate = measured_rate_per_s(df)
    assert rate[:4].tolist() == [3.0] * 4                                  # median(2.5, 5.0, 3.0)
    assert rate[4:7] == pytest.approx([16.0 / (1.0 + 199 * 0.020)] * 3)    # 3.213 /s
    assert np.isnan(rate[7])


def test_measured_prefill_load_by_hand(catalog):
    """Measured rate / mu: the throughput row's 50 tok/s / o = 0.25 requests/s over the capacity
    of 2 prefill workers of one prompt per step (the recorded batch=1), mu = 2 / T(1)."""
    r = score_disagg_rows(catalog, rows(catalog), calibration=None)[0]
    p = ServingParams()
    t_one = float(StepModel(pool_arrays(catalog, r.iloc[:1], "p"), p).time(0.0, 1000.0, 1000.0)[0])
    assert measured_prefill_load(catalog, r) == pytest.approx([0.25 / (2.0 / t_one)] * len(r), rel=1e-9)
