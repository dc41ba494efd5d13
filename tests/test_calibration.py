"""Calibration: loading and applying the shipped file, fitting, cross-validation folds, and the
serving-model refinements it relies on (which must leave the seeds' numbers unchanged)."""

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import DATA, ROOT
from planner import accuracy as A
from planner import calibration as C
from planner import calibration_cv as CV
from planner import calibration_fit as F
from planner.schema import PlanningInputError
from planner.serving.params import ServingParams
from planner.serving.roofline import decode_times, mixed_step_time_s, prefill_time_s
from test_accuracy import run_planner

SAMPLE = DATA / "measurements-sample.csv"
FAST = F.FitOptions(iterations=3, rounds=1, min_rows=8)


@pytest.fixture(scope="module")
def shipped():
    return C.load_calibration("default")


@pytest.fixture(scope="module")
def sample_rows(catalog):
    rows, _ = A.prepare_rows(A.load_measurements(SAMPLE), catalog)
    return A.add_families(rows)


def test_load_none_default_and_describe(shipped):
    assert C.load_calibration("none") is None
    assert C.load_calibration(None).default == shipped.default
    info = shipped.describe()
    assert info["calibration"] == "catalogs/calibration.yaml"
    assert set(info["parameters"]) == {"memory_efficiency", "compute_efficiency",
                                       "allreduce_latency_nvlink_s", "step_overhead_s",
                                       "request_overhead_s", "prefill_compute_factor"}
    files = {f["file"]: f for f in info["source"]["files"]}
    assert set(files) == {"measurements.csv", "inferencex-deepseek-r1.csv"}
    assert all(len(f["sha256"]) == 64 for f in files.values())
    assert {"h100-sxm", "h200-sxm", "b200"} <= set(info["gpus"])
    assert {"vllm", "sglang", "trtllm"} <= set(info["engines"])
    with pytest.raises(PlanningInputError, match="no such file"):
        C.load_calibration("/nonexistent/calibration.yaml")


def test_params_for_is_aligned_and_falls_back(shipped):
    base = ServingParams()
    gpus = ["h100-sxm", "mi300x", "h100-sxm", "b200"]
    p_none = shipped.params_for(base, ["gaudi3"])  # no measured Intel GPU: the seed values, not the global fit
    assert np.asarray(p_none.memory_efficiency)[0] == base.memory_efficiency
    p = shipped.params_for(base, gpus)
    for name in shipped.parameters:
        assert np.shape(getattr(p, name)) == (4,)
    me = np.asarray(p.memory_efficiency)
    assert me[0] == pytest.approx(shipped.gpus["h100-sxm"]["memory_efficiency"])
    assert me[1] == pytest.approx(shipped.gpus["mi300x"]["memory_efficiency"])
    assert me[0] == me[2]
    base_fallback = shipped.params_for(base, ["l4", "h100-sxm"], fallback="base")  # l4: no values of its own
    assert np.asarray(base_fallback.memory_efficiency)[0] == base.memory_efficiency
    # software values per engine (and per release); None uses the global fit
    vllm = shipped.params_for(base, gpus, engine="vllm")
    assert np.asarray(vllm.step_overhead_s)[0] == pytest.approx(shipped.engines["vllm"]["step_overhead_s"])
    assert np.asarray(p.step_overhead_s)[0] == pytest.approx(shipped.default["step_overhead_s"])
    per_row = shipped.params_for(base, gpus, engine=["vllm", "vllm", "trtllm", "sglang"])
    assert np.asarray(per_row.request_overhead_s)[2] == pytest.approx(
        shipped.engines["trtllm"]["request_overhead_s"])
    # fields a calibration does not set keep the base values
    assert p.gpu_memory_utilization == base.gpu_memory_utilization
    assert p.prefill_chunk_tokens == base.prefill_chunk_tokens


def test_model_and_math_adjustments_apply_only_when_asked(shipped):
    base = ServingParams()
    model = next(iter(shipped.models))
    plain = shipped.params_for(base, ["h100-sxm"], engine="vllm")
    adjusted = shipped.params_for(base, ["h100-sxm"], engine="vllm", model_ids=[model])
    factor = shipped.models[model].get("efficiency_factor", 1.0)
    assert np.asarray(adjusted.memory_efficiency)[0] == pytest.approx(
        min(np.asarray(plain.memory_efficiency)[0] * factor, 1.0))
    if shipped.maths:
        math = next(iter(shipped.maths))
        m = shipped.params_for(base, ["h100-sxm"], engine="vllm", math_modes=[math])
        assert np.asarray(m.compute_efficiency)[0] == pytest.approx(
            min(np.asarray(plain.compute_efficiency)[0] * shipped.maths[math]["compute_factor"], 1.0))


def test_model_prefill_factor_multiplies_the_engine_prefill_factor(shipped):
    base = ServingParams()
    model = next(m for m, v in shipped.models.items() if v.get("prefill_factor", 1.0) != 1.0)
    plain = shipped.params_for(base, ["h100-sxm"], engine="vllm")
    adjusted = shipped.params_for(base, ["h100-sxm"], engine="vllm", model_ids=[model])
    assert np.asarray(adjusted.prefill_compute_factor)[0] == pytest.approx(
        np.asarray(plain.prefill_compute_factor)[0] * shipped.models[model]["prefill_factor"])
    assert np.asarray(adjusted.request_overhead_s)[0] == pytest.approx(np.asarray(plain.request_overhead_s)[0])


def test_search_applies_the_per_math_compute_factor(shipped):
    """Planned candidates get the calibration's math factor: an NVFP4 row on B200 (FP4 math)
    and a BF16 row differ in compute efficiency by exactly the ratio of the two factors."""
    import pandas as pd

    from planner.problem import load_problem
    from planner.search import serving_params

    problem = load_problem(ROOT / "problems" / "chat-70b.yaml")
    rows = pd.DataFrame({"gpu": ["b200", "b200", "h100-sxm"], "model": ["llama-3.1-70b"] * 3,
                         "quantization": ["nvfp4", "bf16", "nvfp4"]})
    eff = np.asarray(serving_params(problem, rows).compute_efficiency)
    assert problem.catalog.math_modes(rows["gpu"], rows["quantization"]).tolist() == ["fp4", "bf16", "weight-only"]
    fp4, bf16 = shipped.maths["fp4"]["compute_factor"], shipped.maths["bf16"]["compute_factor"]
    assert eff[0] / eff[1] == pytest.approx(fp4 / bf16, rel=1e-9)


def test_yaml_round_trip_and_validation(shipped, tmp_path):
    path = tmp_path / "cal.yaml"
    C.write_calibration(shipped, path)
    again = C.load_calibration(path)
    assert again.default == pytest.approx(shipped.default, rel=1e-3)
    assert set(again.gpus) == set(shipped.gpus) and set(again.releases) == set(shipped.releases)
    doc = yaml.safe_load(path.read_text())
    doc["gpus"]["h100-sxm"]["values"]["warp_speed"] = 9
    doc["default"]["values"]["memory_efficiency"] = 1.7
    with pytest.raises(PlanningInputError) as err:
        C.calibration_from_dict(doc, "bad.yaml")
    text = "\n".join(err.value.problems)
    assert "gpus.h100-sxm.values.warp_speed: unknown parameter" in text
    assert "default.values.memory_efficiency: 1.7 is outside [0.2, 0.92]" in text


def test_shipped_calibration_beats_the_seeds_on_the_sample(shipped, catalog, sample_rows):
    measured = sample_rows["value"].to_numpy()
    seed = np.abs(A.predict_calibrated(catalog, sample_rows, None) / measured - 1)
    cal = np.abs(A.predict_calibrated(catalog, sample_rows, shipped) / measured - 1)
    fam = sample_rows["family"].to_numpy()
    for f in ("tpot_itl", "ttft", "throughput"):
        assert np.nanmedian(cal[fam == f]) < np.nanmedian(seed[fam == f])


def test_fit_improves_the_objective_and_is_deterministic(catalog, sample_rows):
    cal = F.fit_calibration(catalog, sample_rows, options=FAST)
    again = F.fit_calibration(catalog, sample_rows, options=FAST)
    assert cal.default == again.default and cal.gpus == again.gpus
    measured = sample_rows["value"].to_numpy()
    err_seed = np.abs(np.log(A.predict_calibrated(catalog, sample_rows, None) / measured))
    err_fit = np.abs(np.log(A.predict_calibrated(catalog, sample_rows, cal) / measured))
    assert np.nanmedian(err_fit) < np.nanmedian(err_seed)
    for name, spec in C.DEFAULT_PARAMETERS.items():
        assert spec.lower <= cal.default[name] <= spec.upper
    assert cal.stats["default"]["rows"] == len(sample_rows)


def test_prefill_factor_groups_need_one_gpu_efficiency_factor_two(catalog, sample_rows, tmp_path):
    """A model measured on one GPU gets a prefill factor but no efficiency factor (that one
    needs two GPUs to separate from the GPU's efficiencies); both batches are searched."""
    gpus_of = sample_rows.groupby("model")["gpu"].nunique()
    one, many = gpus_of[gpus_of == 1].index, gpus_of[gpus_of >= 2].index
    rows = sample_rows[sample_rows["model"].isin([one[0], many[0]])]
    options = F.FitOptions(iterations=2, rounds=1, min_rows=1, levels=("model",))
    batches = F.parameter_batches("model", rows, options)
    assert [(keys, sorted(specs)) for keys, specs in batches] == [
        ([many[0]], ["efficiency_factor", "layer_overhead_s"]),
        (sorted([one[0], many[0]]), ["prefill_factor"])]
    assert F.eligible_groups(rows, "model", options) == [many[0]]  # the fit's own rule: 2 GPUs
    cal = F.fit_calibration(catalog, rows, options=options)
    assert set(cal.models[one[0]]) == {"prefill_factor"}
    assert set(cal.models[many[0]]) == {"efficiency_factor", "layer_overhead_s", "prefill_factor"}
    # the missing factor is neutral where the calibration is applied
    p = cal.params_for(ServingParams(), ["h100-sxm"], engine="vllm", model_ids=[one[0]])
    plain = cal.params_for(ServingParams(), ["h100-sxm"], engine="vllm")
    assert np.asarray(p.memory_efficiency)[0] == pytest.approx(np.asarray(plain.memory_efficiency)[0])
    path = tmp_path / "partial.yaml"  # a model entry with one of the two factors loads back
    C.write_calibration(cal, path)
    assert C.load_calibration(path).models[one[0]] == pytest.approx(cal.models[one[0]], rel=1e-3)


def test_cross_validation_predicts_each_pair_with_the_fit_that_did_not_see_it(catalog, sample_rows):
    options = F.FitOptions(iterations=2, rounds=1, min_rows=8, levels=("gpu", "model"))
    cv = CV.cross_validate(catalog, sample_rows, 2, options, keep_fits=True)
    rows = sample_rows.reset_index(drop=True)
    assert len(cv["fits"]) == 2 and (cv["fold_of"] == CV.group_folds(rows, 2)).all()
    oof = rows["id"].map(cv["predictions"]).to_numpy()
    for k, fit in enumerate(cv["fits"]):
        test = cv["fold_of"] == k
        assert not set(rows.loc[test, "gpu"] + rows.loc[test, "model"]) & set(
            rows.loc[~test, "gpu"] + rows.loc[~test, "model"])
        again = A.predict_calibrated(catalog, rows[test].reset_index(drop=True), fit)
        np.testing.assert_allclose(oof[test], again)
    for fam, s in cv["by_family"].items():
        assert s["gap_pct"] == pytest.approx(s["out_of_fold_median_ape_pct"] - s["in_fold_median_ape_pct"], abs=0.11)


def test_group_folds_keep_model_gpu_pairs_together(sample_rows):
    folds = CV.group_folds(sample_rows, 5)
    pairs = sample_rows["model"] + "|" + sample_rows["gpu"]
    assert (pd.Series(folds).groupby(pairs.to_numpy()).nunique() == 1).all()
    assert set(folds) == set(range(5))
    assert (CV.group_folds(sample_rows, 5) == folds).all()


def test_prefill_compute_factor_refinement():
    """prefill_compute_factor (default 1) scales prefill math only; 1 changes nothing."""
    import planner.configs as cfg
    from planner.catalog import load_catalog

    catalog = load_catalog()
    frame = pd.DataFrame({"model": ["llama-3.1-70b"], "gpu": ["h100-sxm"], "quantization": ["fp8"],
                          "kv_cache_dtype": ["fp8"], "tp": [4], "pp": [1], "batch": [32],
                          "prompt_tokens": [4096], "output_tokens": [256], "context_tokens": [np.nan]})
    c, _ = cfg.config_arrays(catalog, frame)
    seed = ServingParams()
    same = seed.with_overrides(prefill_compute_factor=1.0)
    assert prefill_time_s(c, same)[0] == prefill_time_s(c, seed)[0]
    assert mixed_step_time_s(c, same, 32, 2048)[0] == mixed_step_time_s(c, seed, 32, 2048)[0]
    fast = seed.with_overrides(prefill_compute_factor=2.0)
    assert prefill_time_s(c, fast)[0] < prefill_time_s(c, seed)[0]
    assert mixed_step_time_s(c, fast, 32, 0.0)[0] == decode_times(c, seed)["tpot_s"][0]  # decode untouched
    # compute-bound 4096-token prefill: twice the efficiency, about half the time
    ratio = mixed_step_time_s(c, fast, 0.0, 4096.0)[0] / mixed_step_time_s(c, seed, 0.0, 4096.0)[0]
    assert 0.45 < ratio < 0.65  # the all-reduces do not speed up


def test_request_overhead_adds_to_every_online_ttft(catalog, sample_rows):
    """The overhead (server, tokenizer, streaming) adds to online runs' TTFT; the engines'
    offline C++ benchmarks (batch-1 latency, static batches) have none."""
    ttft = sample_rows[sample_rows["family"] == "ttft"].reset_index(drop=True)
    base = A.predict_rows(catalog, ttft, ServingParams())
    shifted = A.predict_rows(catalog, ttft, ServingParams(request_overhead_s=0.05))
    offline = ttft["load_kind"].isin(A.OFFLINE_LOAD_KINDS).to_numpy()
    assert 0 < offline.sum() < len(ttft)
    assert shifted - base == pytest.approx(np.where(offline, 0.0, 50.0))


def test_cli_calibrate_writes_a_loadable_file(tmp_path):
    sub = tmp_path / "few.csv"
    rows = pd.read_csv(SAMPLE)
    rows[rows["id"].str.startswith("AM")].to_csv(sub, index=False)
    out = tmp_path / "cal.yaml"
    stdout, _ = run_planner("calibrate", sub, "--out", out, "--min-rows", "1000")  # global fit only
    assert "wrote" in stdout
    cal = C.load_calibration(out)
    assert cal.gpus == {} and cal.provenance["source"]["rows"] == len(rows[rows["id"].str.startswith("AM")])
    report, _ = run_planner("accuracy", sub, "--calibration", out, "--json")
    assert '"calibration"' in report
