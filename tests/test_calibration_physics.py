"""The shipped calibration cannot break physics, treats vendors alike and carries its errors:
hardware bounds on every composed efficiency, faster memory predicts faster decode,
same-vendor priors for unmeasured GPUs (marked uncalibrated), prediction intervals."""

import numpy as np
import pandas as pd
import pytest
import test_outputs

from planner import accuracy as A
from planner import calibration as C
from planner.calibration_fit import gpu_priors
from planner import calibration_intervals as I
from planner import parameters
from planner.calculators import eval_config
from planner.problem_checks import check_engine_runs
from planner.schema import PlanningInputError
from planner.serving.params import ServingParams


@pytest.fixture(scope="module")
def shipped():
    return C.load_calibration("default")


def _engines(cal, releases: bool = True):
    """None (no engine), every engine of the calibration and the planner's engines, and (with
    ``releases``) every engine release."""
    return [None, *sorted(set(cal.engines) | {"vllm", "sglang", "trtllm"} | (set(cal.releases) if releases else set()))]


def test_every_composed_efficiency_is_within_the_hardware_bounds(shipped, catalog):
    """Done-when 1: every catalog GPU x engine (x model x math): memory <= 0.92, compute and
    prefill <= 0.85 of the datasheet figures."""
    gpus = sorted(catalog.gpus.entries)
    models = [None, *sorted(shipped.models)]
    maths = [None, *sorted(shipped.maths)]
    grid = pd.MultiIndex.from_product([gpus, models, maths], names=["gpu", "model", "math"]).to_frame(index=False)
    for engine in _engines(shipped):
        p = shipped.params_for(ServingParams(), grid["gpu"].to_numpy(), engine=engine,
                               model_ids=grid["model"].to_numpy(), math_modes=grid["math"].to_numpy())
        memory = np.asarray(p.memory_efficiency)
        compute = np.asarray(p.compute_efficiency)
        prefill = compute * np.asarray(p.prefill_compute_factor)
        assert memory.max() <= C.MAX_MEMORY_EFFICIENCY + 1e-12, engine
        assert compute.max() <= C.MAX_COMPUTE_EFFICIENCY + 1e-12, engine
        assert prefill.max() <= C.MAX_COMPUTE_EFFICIENCY + 1e-9, engine
        assert memory.min() > 0 and compute.min() > 0
        assert np.asarray(p.step_overhead_s).min() >= 0 and np.asarray(p.request_overhead_s).min() >= 0


def test_effective_decode_bandwidth_is_at_most_92_percent_of_the_datasheet(catalog):
    """The issue's check: (weights + KV bytes) / t_mem at batch 1, every catalog GPU x engine."""
    for gpu in ("a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200", "mi300x", "mi355x", "l40s"):
        beta = catalog.gpu(gpu).memory_bandwidth_bytes_per_s
        for engine in (None, "vllm", "sglang", "trtllm"):
            if check_engine_runs(engine, catalog, gpu, "bf16", "bf16"):     # TensorRT-LLM on AMD
                with pytest.raises(PlanningInputError, match="--engine"):
                    eval_config(catalog, model="llama-3.1-8b", gpu=gpu, batch=1, engine=engine)
                continue
            r = eval_config(catalog, model="llama-3.1-8b", gpu=gpu, batch=1, context=1024, calibration="default",
                            engine=engine)
            achieved = (r["weights_bytes"] + r["kv_bytes_per_seq"]) / r["t_mem_s"]
            assert achieved <= C.MAX_MEMORY_EFFICIENCY * beta * (1 + 1e-9), (gpu, engine, achieved / beta)


@pytest.mark.parametrize("slow,fast", [("h100-sxm", "h200-sxm"), ("h200-sxm", "b200")])
def test_faster_memory_decodes_faster_at_batch_1(catalog, shipped, slow, fast):
    """Done-when 2: memory-bound decode at batch 1 is >= 1.2x faster on H200 than H100 and on
    B200 than H200, with no engine and under every engine's calibration; faster memory is
    never slower under any release either (docs/accuracy.md lists the release ratios)."""
    for engine in _engines(shipped):
        tpot = {g: eval_config(catalog, model="llama-3.1-8b", gpu=g, batch=1, context=1024,
                               calibration="default", engine=engine)["tpot_s"] for g in (slow, fast)}
        assert tpot[slow] / tpot[fast] > 1.0, (engine, tpot)
    for engine in _engines(shipped, releases=False):
        tpot = {g: eval_config(catalog, model="llama-3.1-8b", gpu=g, batch=1, context=1024,
                               calibration="default", engine=engine)["tpot_s"] for g in (slow, fast)}
        assert tpot[slow] / tpot[fast] >= 1.2, (engine, tpot)


def test_unmeasured_gpus_borrow_from_their_vendor_and_are_marked(catalog, shipped):
    measured = set(shipped.gpus)
    assert {"mi300x", "mi325x", "mi355x", "h100-sxm", "h200-sxm", "b200"} <= measured
    for gid, prior in shipped.gpu_priors.items():
        assert gid not in measured
        src = prior["borrowed_from"]
        if src is not None:
            assert catalog.gpu(src).vendor == catalog.gpu(gid).vendor, gid
        else:
            assert not any(catalog.gpu(g).vendor == catalog.gpu(gid).vendor for g in measured)
    # every unmeasured catalog GPU has a documented prior; same vendor wins over bandwidth
    assert set(shipped.gpu_priors) == set(catalog.gpus.entries) - measured
    priors = gpu_priors(catalog, ["h100-sxm", "h200-sxm", "mi300x"])
    assert priors["mi325x"]["borrowed_from"] == "mi300x"  # AMD, not the nearer-bandwidth H200
    assert priors["gh200"]["borrowed_from"] == "h100-sxm"  # NVIDIA HBM3
    assert priors["gaudi3"]["borrowed_from"] is None  # no measured Intel GPU: seed defaults
    # the same die (architecture) wins over the same memory: H200 from H100 (sm_90), not the
    # HBM3e B200; MI325X from MI300X (gfx942), not the HBM3e MI355X; MI355X (gfx950, no
    # measured sibling) from the nearest AMD HBM3e GPU
    priors = gpu_priors(catalog, ["h100-sxm", "b200", "mi300x", "mi355x"])
    assert priors["h200-sxm"]["borrowed_from"] == "h100-sxm" and "sm_90" in priors["h200-sxm"]["reason"]
    assert priors["mi325x"]["borrowed_from"] == "mi300x"
    assert gpu_priors(catalog, ["mi300x", "mi325x"])["mi355x"]["borrowed_from"] == "mi325x"
    assert gpu_priors(catalog, ["b200", "b300"])["gb300"]["borrowed_from"] == "b300"   # sm_103
    # the values follow the prior; never the global fit of other vendors
    cal = C.Calibration(default={**shipped.default, "memory_efficiency": 0.3}, gpus={
        "mi300x": {"memory_efficiency": 0.7, "compute_efficiency": 0.5, "allreduce_latency_nvlink_s": 2e-5}},
        gpu_priors=gpu_priors(catalog, ["mi300x"]))
    p = cal.params_for(ServingParams(), ["mi325x", "gaudi3", "h100-sxm"])
    assert list(np.asarray(p.memory_efficiency)) == pytest.approx([0.7, 0.8, 0.8])
    assert cal.gpu_status("mi300x") == {"calibrated": True, "calibration_status": "calibrated"}
    status = cal.gpu_status("mi325x")
    assert status["calibrated"] is False and status["calibration_status"] == "uncalibrated"
    assert "mi300x" in status["calibration_prior"]
    assert "seed defaults" in cal.gpu_status("gaudi3")["calibration_prior"]


def test_eval_marks_uncalibrated_gpus_and_reports_intervals(catalog, shipped):
    unmeasured = next(g for g in sorted(shipped.gpu_priors) if catalog.gpu(g).bf16_tflops)
    r = eval_config(catalog, model="llama-3.1-8b", gpu=unmeasured, calibration="default")
    assert r["calibrated"] is False and r["calibration_status"] == "uncalibrated"
    r = eval_config(catalog, model="llama-3.1-8b", gpu="h100-sxm", calibration="default", engine="vllm",
                    batch=32, rate_per_s=1.0)
    assert r["calibrated"] is True
    for name in ("tpot_s", "ttft_s", "ttft_p95_s", "tpot_p95_s"):
        (lo80, hi80), (lo95, hi95) = r["intervals"][name]["p80"], r["intervals"][name]["p95"]
        assert lo95 <= lo80 < hi80 <= hi95, name
        assert lo95 <= r[name] * 1.5 and hi95 >= r[name] / 1.5
    none = eval_config(catalog, model="llama-3.1-8b", gpu="h100-sxm", calibration="none")
    assert none["intervals"] == {} and none["calibrated"] is False


def test_error_quantile_reads_the_most_specific_scope():
    intervals = {"levels": [0.1, 0.5, 0.9], "gpu_vendors": {"mi300x": "amd", "h100-sxm": "nvidia"},
                 "families": {"ttft": {"all": {"n": 100, "log_quantiles": [-0.2, 0.0, 0.2]},
                                       "vendor:amd": {"n": 40, "log_quantiles": [-0.1, 0.1, 0.5]},
                                       "vendor:amd|engine:sglang": {"n": 30, "log_quantiles": [0.0, 0.3, 0.7]}}}}
    cal = C.Calibration(default={}, intervals=intervals)
    assert parameters.error_quantile("ttft_p95_s", 0.9, "mi300x", "sglang@0.5", cal) == pytest.approx(np.exp(0.7))
    assert parameters.error_quantile("ttft", 0.9, "mi300x", "vllm", cal) == pytest.approx(np.exp(0.5))
    assert parameters.error_quantile("ttft", 0.7, "h100-sxm", None, cal) == pytest.approx(np.exp(0.1))
    assert parameters.error_quantile("tpot_s", 0.9, "h100-sxm", None, cal) == 1.0  # no data for the family
    assert parameters.error_quantile("ttft", 0.9, calibration="none") == 1.0
    with pytest.raises(ValueError):
        parameters.error_quantile("ttft", 1.5, calibration=cal)
    with pytest.raises(ValueError, match="unknown metric family"):
        parameters.error_quantile("latency", 0.9, calibration=cal)
    assert parameters.error_quantile("ttft", 0.95, "h100-sxm", "trtllm") >= 1.0  # the shipped file has them


def test_fit_intervals_quantiles_and_scopes():
    rng = np.random.default_rng(0)
    n = 200
    rows = pd.DataFrame({"family": ["ttft"] * n, "engine": ["vllm"] * 150 + ["sglang"] * 50,
                         "gpu": ["h100-sxm"] * 100 + ["mi300x"] * 100, "value": np.ones(n)})
    errors = rng.normal(0.0, 0.3, n)
    out = I.fit_intervals(rows, np.exp(-errors), {"h100-sxm": "nvidia", "mi300x": "amd"}, "test")
    fam = out["families"]["ttft"]
    assert fam["all"]["n"] == n
    assert fam["all"]["log_quantiles"][out["levels"].index(0.5)] == pytest.approx(np.median(errors), abs=1e-4)
    assert "vendor:amd|engine:sglang" in fam and "engine:sglang" in fam
    q = fam["all"]["log_quantiles"]
    assert q == sorted(q)


def test_release_campaign_and_expert_parallel_gpu_count(catalog):
    versions = pd.Series(["lmsysorg/sglang:v0.5.12-rocm700-mi35x", "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6.post2",
                          "rocm/atom:rocm7.1.1-ubuntu24.04-pytorch2.9-atom0.1.1-MI350x", "1.0.0rc3", None,
                          "rocm/atom:rocm7.2.3_ubuntu24.04_atom20260511"])
    engines = pd.Series(["sglang", "trtllm", "atom", "trtllm", "vllm", "atom"])
    got = A.engine_release(engines, versions)
    assert got.iloc[:4].tolist() == ["0.5", "1.2", "0.1", "1.0"] and got.iloc[4:].isna().all()
    base = {"id": "X1", "source": "[InferenceX dashboard] x", "engine": "sglang",
            "engine_version": "lmsysorg/sglang:v0.5.9-cu130", "model": "deepseek-v3", "gpu": "b200",
            "num_gpus": 64, "tp": 8, "pp": np.nan, "ep": 8, "weight_dtype": "fp4", "kv_dtype": np.nan,
            "mode": "agg", "isl": 1024, "osl": 1024, "load_kind": "concurrency", "load_value": 64,
            "unit": "tok/s", "notes": ""}
    df = pd.DataFrame([{**base, "id": "X1", "metric": "output_tok_s_total", "value": 1e4},
                       {**base, "id": "X2", "metric": "output_tok_s_per_gpu", "value": 250.0},
                       {**base, "id": "X3", "metric": "output_tok_s_per_gpu", "value": 250.0, "gpu": "mi355x"}])
    rows, skipped = A.prepare_rows(df, catalog)
    assert skipped["id"].tolist() == ["X1"] and "tp x pp x ep" in skipped["reason"].iloc[0]
    assert rows["gpus_total"].tolist() == [8.0, 8.0] and rows["replicas"].tolist() == [1.0, 1.0]
    assert rows["release"].tolist() == ["sglang@0.5"] * 2
    assert rows["campaign"].tolist() == ["InferenceX dashboard x sglang@0.5 x nvidia",
                                         "InferenceX dashboard x sglang@0.5 x amd"]
    assert rows["quantization"].tolist() == ["nvfp4", "mxfp4"]  # fp4 on AMD is MXFP4


def test_measurement_files_load_together(tmp_path):
    a = tmp_path / "a.csv"
    cols = list(A.MEASUREMENT_COLUMNS)
    pd.DataFrame([dict.fromkeys(cols, "") | {"id": "R1", "value": 1}]).to_csv(a, index=False)
    b = tmp_path / "b.csv"
    pd.DataFrame([dict.fromkeys(cols, "") | {"id": "R2", "value": 1}]).to_csv(b, index=False)
    assert A.load_measurement_files([a, b])["id"].tolist() == ["R1", "R2"]
    with pytest.raises(PlanningInputError, match="appear twice"):
        A.load_measurement_files([a, a])


#: tests/test_outputs.py's small problem on an unmeasured (l4) and a measured GPU.
SMALL = test_outputs.SMALL.replace("gpus: [l40s, h100-sxm]", "gpus: [l4, h100-sxm]")


def test_solve_deployments_and_candidates_carry_status_and_intervals(tmp_path, shipped):
    from planner.outputs import writer
    from planner.outputs.result_json import result_to_dict
    from planner.pipeline import plan
    from planner.problem import load_problem

    path = tmp_path / "p.yaml"
    path.write_text(SMALL)
    result = plan(load_problem(path))
    doc = result_to_dict(result)
    deps = [d for p in doc["plans"] for d in p["deployments"]]
    assert deps
    for d in deps:
        assert d["calibration_status"] == ("calibrated" if d["gpu"] in shipped.gpus else "uncalibrated")
        for w in d["workloads"].values():
            lo, hi = w["intervals"]["ttft_p95_s"]["p95"]
            assert lo <= w["ttft_p95_s"] <= hi
    cands = writer._with_calibration_status(result)
    status = dict(zip(cands["gpu"], cands["calibration_status"]))
    assert status == {"l4": "uncalibrated", "h100-sxm": "calibrated"}
    assert "gpus: [l4, h100-sxm]" in SMALL
