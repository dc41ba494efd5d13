"""planner accuracy: row preparation, the load models, the report and the CLI."""

import json

import numpy as np
import pandas as pd
import pytest

from conftest import DATA, run_cli
from planner import accuracy as A
from planner import accuracy_loads as L
from planner.serving import memory
from planner.serving.params import ServingParams
from planner.serving.roofline import mixed_step_time_s

SAMPLE = DATA / "measurements-sample.csv"


def run_planner(*args, expect=0):
    """``planner ARGS`` in this process (:func:`conftest.run_cli`): (stdout, stderr), the exit code asserted."""
    return run_cli(*args, expect=expect)


@pytest.fixture(scope="module")
def sample():
    return A.load_measurements(SAMPLE)


@pytest.fixture(scope="module")
def prepared(sample, catalog):
    return A.prepare_rows(sample, catalog)


def _row(**overrides):
    base = {"id": "X1", "source": "[test] hand-made", "engine": "vllm", "engine_version": "0.12.0",
            "model": "llama-3.1-8b", "gpu": "h100-sxm", "num_gpus": 1, "tp": 1, "pp": 1, "ep": np.nan,
            "weight_dtype": "bf16", "kv_dtype": "bf16", "mode": "agg", "isl": 1024, "osl": 256,
            "load_kind": "single", "load_value": 1, "metric": "output_tok_s_per_user", "value": 100.0,
            "unit": "tok/s", "notes": ""}
    base.update(overrides)
    return base


def test_skip_reasons_and_dtype_mapping(catalog):
    frame = pd.DataFrame([
        _row(id="a", weight_dtype="fp4"), _row(id="b", weight_dtype="int4"),
        _row(id="c", weight_dtype=np.nan),
        _row(id="d", mode="disagg"), _row(id="e", model="no-such-model"), _row(id="f", gpu="tpu-v9"),
        _row(id="g", notes="MTP speculative decoding ON"), _row(id="h", tp=np.nan),
        _row(id="i", metric="bogus"),
        _row(id="j", load_kind="concurrency", load_value=8, osl=np.nan, metric="tpot_ms_mean", unit="ms"),
    ])
    rows, skipped = A.prepare_rows(frame, catalog)
    assert dict(zip(rows["id"], rows["quantization"])) == {"a": "nvfp4", "b": "int4-awq", "c": "bf16"}
    assert "weight dtype not stated" in rows.set_index("id").loc["c", "assumptions"]
    reasons = dict(zip(skipped["id"], skipped["reason"]))
    assert reasons == {"d": "disaggregated serving (mode != agg)", "e": "model not in catalog",
                       "f": "GPU not in catalog", "g": "speculative decoding (MTP)",
                       "h": "tensor-parallel size not stated", "i": "unsupported metric", "j": "missing osl"}


def test_release_and_attention_dp_columns(prepared):
    rows, skipped = prepared
    assert (skipped["reason"] == "disaggregated serving (mode != agg)").sum() == 20
    trt = rows[rows["engine_version"].astype(str).str.startswith("1.2")]
    assert set(trt["release"]) <= {"trtllm@1.2"}
    assert (rows["attention_dp"] >= 1).all()
    assert set(rows["family"] if "family" in rows else A.add_families(rows)["family"]) <= {
        "ttft", "tpot_itl", "e2e", "throughput"}


def test_batch1_decode_speed_is_one_over_the_decode_step(catalog):
    rows, _ = A.prepare_rows(pd.DataFrame([_row()]), catalog)
    p = ServingParams()
    pred = A.predict_rows(catalog, rows, p)
    c = A.row_arrays(catalog, rows)
    step = mixed_step_time_s(c, p, 1.0, 0.0)
    assert pred[0] == pytest.approx(1.0 / step[0])
    # 16 GB of BF16 weights at 3.35 TB/s * 0.8: about 6 ms per token
    assert 1.0 / pred[0] == pytest.approx(16.06e9 / (3.35e12 * 0.8), rel=0.05)


def test_static_batch_throughput_per_gpu_matches_hand_formula(catalog):
    rows, _ = A.prepare_rows(pd.DataFrame([_row(load_kind="static_batch", load_value=64, tp=2, num_gpus=2,
                                                metric="output_tok_s_per_gpu")]), catalog)
    p = ServingParams()
    c = A.row_arrays(catalog, rows)
    s_d = mixed_step_time_s(c, p, 64.0, 0.0)[0]
    t_pf = mixed_step_time_s(c, p, 0.0, 64.0 * 1024, prompt_tokens=1024.0)[0]
    expected = 64 * 256 / (t_pf + 255 * s_d) / 2
    assert A.predict_rows(catalog, rows, p)[0] == pytest.approx(expected)


def test_closed_loop_limits_and_monotonicity(catalog):
    users = np.array([1.0, 4.0, 16.0, 64.0])
    rows, _ = A.prepare_rows(pd.DataFrame([_row(load_kind="concurrency", load_value=u, metric="ttft_ms_mean")
                                           for u in users]), catalog)
    c, p = A.row_arrays(catalog, rows), ServingParams()
    prompt, output = np.full(4, 1024.0), np.full(4, 256.0)
    r = A.closed_loop(c, p, users, np.full(4, 1e6), prompt, output, first_wave_weight=0.0)
    # one user, nothing else running: TTFT is its own prefill
    single = L.step_mix(c, p, r["occupancy"], prompt, output)
    assert r["ttft_s"][0] == pytest.approx(single["prefill_service_s"][0])
    assert np.all(np.diff(r["ttft_s"]) > 0) and np.all(np.diff(r["tpot_s"]) > 0)
    assert np.all(np.diff(r["rate_per_s"]) > 0)
    wave = A.closed_loop(c, p, users, np.full(4, 1e6), prompt, output, first_wave_weight=1.0)
    assert np.all(wave["ttft_s"][1:] > r["ttft_s"][1:])  # the synchronized wave queues prefills
    # beyond the KV slots the extra users wait: TTFT grows by (U - slots) / rate
    capped = A.closed_loop(c, p, users, np.full(4, 16.0), prompt, output, first_wave_weight=0.0)
    assert capped["ttft_s"][3] == pytest.approx(r["ttft_s"][2] + 48.0 / capped["rate_per_s"][3], rel=1e-6)


def test_open_loop_below_and_above_capacity(catalog):
    rates = np.array([0.5, 2.0, 8.0, 1e4])
    rows, _ = A.prepare_rows(pd.DataFrame([_row(load_kind="request_rate", load_value=x, metric="ttft_ms_mean")
                                           for x in rates]), catalog)
    c = A.row_arrays(catalog, rows).replace(batch=np.full(4, 256.0))
    p = ServingParams()
    prompt, output = np.full(4, 1024.0), np.full(4, 256.0)
    r = A.open_loop(c, p, rates, prompt, output, requests=np.full(4, 500.0))
    assert r["rate_per_s"][:3] == pytest.approx(rates[:3])
    assert r["rate_per_s"][3] < rates[3]  # overloaded: the capacity
    assert np.all(np.diff(r["ttft_s"]) > 0) and np.all(np.diff(r["tpot_s"]) >= 0)
    n, tau = r["occupancy"][:3], r["tpot_s"][:3]
    assert rates[:3] == pytest.approx(n / (255.0 * tau), rel=1e-4)  # Little's law
    median = A.open_loop(c, p, rates, prompt, output, quantile=np.full(4, 0.5))["ttft_s"]
    p99 = A.open_loop(c, p, rates, prompt, output, quantile=np.full(4, 0.99))["ttft_s"]
    assert np.all(p99[:3] >= median[:3])
    unknown = A.open_loop(c, p, rates, prompt, output)  # overloaded run of unknown length
    assert np.isinf(unknown["ttft_s"][3])


def test_trtllm_memory_budget_is_a_fraction_of_free_memory(catalog):
    rows, _ = A.prepare_rows(pd.DataFrame([_row(engine="trtllm"), _row(engine="vllm")]), catalog)
    c, p = A.row_arrays(catalog, rows), ServingParams()
    q = memory.engine_memory_params(c, p, rows["engine"].to_numpy())
    util = np.asarray(q.gpu_memory_utilization)
    free = c.memory_bytes[0] - 16.06e9 - p.workspace_bytes
    assert util[0] * c.memory_bytes[0] - 16.06e9 - p.workspace_bytes == pytest.approx(0.9 * free, rel=1e-3)
    assert util[1] == p.gpu_memory_utilization


def test_report_structure_and_seed_accuracy(sample, catalog):
    report = A.accuracy_report(catalog, sample, None, worst=20)
    assert report["rows"] == len(sample)
    assert report["predicted"] + sum(report["skipped"].values()) == len(sample)
    assert set(report["by_metric"]) <= set(A.METRICS)
    for stats in report["by_metric"].values():
        assert set(stats) == {"n", "median_ape_pct", "mean_ape_pct"} and stats["n"] > 0
    assert len(report["worst"]) == 20
    apes = [w["ape_pct"] for w in report["worst"]]
    assert apes == sorted(apes, reverse=True)
    assert {"id", "metric", "value", "prediction", "ape_pct"} <= set(report["worst"][0])
    assert report["calibration"]["calibration"] == "none"


def test_cli_accuracy_rows_out_has_every_row(tmp_path, sample):
    rows_csv = tmp_path / "rows.csv"
    out, _ = run_planner("accuracy", SAMPLE, "--json", "--rows-out", rows_csv)
    report = json.loads(out)
    table = pd.read_csv(rows_csv, keep_default_na=False, na_values=[""])
    assert len(table) == report["rows"] == len(sample)
    predicted = table[table["skipped"].isna()]
    assert len(predicted) == report["predicted"]
    assert sorted(table["id"] + "|" + table["metric"]) == sorted(sample["id"] + "|" + sample["metric"])
    ape = (predicted["prediction"] - predicted["value"]).abs() / predicted["value"] * 100
    np.testing.assert_allclose(ape, predicted["ape_pct"], rtol=1e-9)
    for metric, stats in report["by_metric"].items():
        assert predicted.loc[predicted["metric"] == metric, "ape_pct"].median() == pytest.approx(
            stats["median_ape_pct"], abs=0.006)


def test_cli_accuracy_json_and_errors(tmp_path):
    out, _ = run_planner("accuracy", SAMPLE, "--json", "--calibration", "none", "--top", "5")
    report = json.loads(out)
    assert {"rows", "predicted", "skipped", "by_metric", "worst", "calibration"} <= set(report)
    assert len(report["worst"]) == 5
    _, err = run_planner("accuracy", tmp_path / "missing.csv", expect=2)
    assert "no such measurement file" in err
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    _, err = run_planner("accuracy", bad, expect=2)
    assert "missing column" in err
    _, err = run_planner("accuracy", SAMPLE, "--calibration", tmp_path / "nope.yaml", expect=2)
    assert "--calibration" in err
