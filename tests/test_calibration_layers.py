"""The per-layer step cost (software level) and the all-reduce latency bound (the link's
published small-message latency) of the calibration structure (issue 13, done-when 5)."""

from dataclasses import replace

import numpy as np
import pytest

from conftest import DATA
from planner import accuracy as A
from planner import calibration as C
from planner import calibration_fit as F
from planner import parameters
from planner.serving.params import ServingParams

SAMPLE = DATA / "measurements-sample.csv"
FAST = F.FitOptions(iterations=3, rounds=1, min_rows=8)


def _with_layer_costs(cal: C.Calibration, engine_s: float, model: str, model_s: float) -> C.Calibration:
    engines = {k: dict(v) for k, v in cal.engines.items()}
    engines["vllm"] = {**engines.get("vllm", {}), "layer_overhead_s": engine_s}
    models = {k: dict(v) for k, v in cal.models.items()}
    models[model] = {**models.get(model, {}), "layer_overhead_s": model_s}
    return C.Calibration(default=dict(cal.default), gpus=cal.gpus, engines=engines, releases={},
                         maths=cal.maths, models=models, gpu_priors=cal.gpu_priors)


def test_layer_cost_adds_layers_times_engine_plus_model_cost(catalog):
    shipped = C.load_calibration("default")
    model = "llama-3.1-70b"
    layers = catalog.model(model).num_layers
    zero = _with_layer_costs(shipped, 0.0, model, 0.0)
    cal = _with_layer_costs(shipped, 20e-6, model, 5e-6)
    base = ServingParams()
    without = zero.params_for(base, ["h100-sxm"], engine="vllm", model_ids=[model], layers=[layers])
    withc = cal.params_for(base, ["h100-sxm"], engine="vllm", model_ids=[model], layers=[layers])
    step = np.asarray(withc.step_overhead_s)[0] - np.asarray(without.step_overhead_s)[0]
    assert step == pytest.approx(layers * 25e-6, rel=1e-12)  # 80 layers x (20 + 5) us = 2.0 ms
    assert layers * 25e-6 == pytest.approx(2.0e-3)
    assert np.asarray(without.step_overhead_s)[0] == zero.engines["vllm"]["step_overhead_s"]
    # no layers given: no per-layer cost; another model: the engine's cost alone
    plain = cal.params_for(base, ["h100-sxm"], engine="vllm", model_ids=[model])
    assert np.asarray(plain.step_overhead_s)[0] == np.asarray(without.step_overhead_s)[0]
    other = "llama-3.1-8b"
    n8 = catalog.model(other).num_layers
    a = cal.params_for(base, ["h100-sxm"], engine="vllm", model_ids=[other], layers=[n8])
    b = zero.params_for(base, ["h100-sxm"], engine="vllm", model_ids=[other], layers=[n8])
    assert np.asarray(a.step_overhead_s)[0] - np.asarray(b.step_overhead_s)[0] == pytest.approx(n8 * 20e-6)
    # every command resolves it the same way: parameters.for_configs reads the layers from the catalog
    p = parameters.for_configs(catalog, cal, None, "vllm", ["h100-sxm"], ["bf16"], [model])
    assert np.asarray(p.step_overhead_s)[0] == pytest.approx(np.asarray(withc.step_overhead_s)[0])


def test_layer_cost_slows_decode_of_deeper_models_only_through_the_step(catalog):
    """More per-layer cost never speeds a step up; at zero it leaves every other value unchanged."""
    shipped = C.load_calibration("default")
    model = "llama-3.1-70b"
    layers = [catalog.model(model).num_layers]
    steps = [np.asarray(_with_layer_costs(shipped, c, model, 0.0).params_for(
        ServingParams(), ["h100-sxm"], engine="vllm", model_ids=[model], layers=layers).step_overhead_s)[0]
        for c in (0.0, 1e-5, 3e-5)]
    assert steps[0] < steps[1] < steps[2]
    zero = _with_layer_costs(shipped, 0.0, model, 0.0)
    a = zero.params_for(ServingParams(), ["h100-sxm"], engine="vllm", model_ids=[model], layers=layers)
    b = zero.params_for(ServingParams(), ["h100-sxm"], engine="vllm", model_ids=[model])
    for name in shipped.parameters:
        assert np.asarray(getattr(a, name))[0] == np.asarray(getattr(b, name))[0]


def test_a_file_without_the_layer_cost_loads_with_zero(tmp_path):
    shipped = C.load_calibration("default")
    doc = shipped.to_dict()
    doc["default"]["values"].pop("layer_overhead_s", None)
    path = tmp_path / "old.yaml"
    import yaml
    path.write_text(yaml.safe_dump(doc))
    assert C.load_calibration(path).default["layer_overhead_s"] == 0.0
    doc["default"]["values"]["layer_overhead_s"] = -1e-6  # >= 0: a bad value names its field
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(C.PlanningInputError, match="default.values.layer_overhead_s"):
        C.load_calibration(path)


def test_allreduce_latency_bound_is_the_links_published_figure(catalog):
    """NVLink 25 us, Infinity Fabric 30 us (catalogs/gpus.yaml, with sources); a GPU without an
    NVLink-class link keeps the loader range (its predictions do not use the latency)."""
    assert F.allreduce_latency_bound_s(catalog, "h100-sxm") == pytest.approx(25e-6)
    assert F.allreduce_latency_bound_s(catalog, "mi325x") == pytest.approx(30e-6)
    assert F.allreduce_latency_bound_s(catalog, "l40s") == C.MAX_ALLREDUCE_LATENCY_S
    for g in catalog.gpus.entries.values():
        if g.scale_up_link in ("nvlink", "infinity-fabric"):
            assert g.scale_up_allreduce_latency_us is not None and 1.0 <= g.scale_up_allreduce_latency_us <= 30.0


def test_fit_keeps_each_gpus_allreduce_latency_within_its_bound(catalog):
    rows, _ = A.prepare_rows(A.load_measurements(SAMPLE), catalog)
    cal = F.fit_calibration(catalog, A.add_families(rows), options=FAST)
    assert cal.gpus
    for gpu, values in cal.gpus.items():
        assert values["allreduce_latency_nvlink_s"] <= F.allreduce_latency_bound_s(catalog, gpu) * (1 + 1e-12)
    bound = max(catalog.gpu(g).scale_up_allreduce_latency_s or 0.0 for g in set(rows["gpu"]))
    assert cal.default["allreduce_latency_nvlink_s"] <= bound * (1 + 1e-12)
    assert cal.default["layer_overhead_s"] >= 0.0
    assert all(v.get("layer_overhead_s", 0.0) >= 0.0 for v in (*cal.engines.values(), *cal.models.values()))


def test_pattern_search_honours_per_group_upper_bounds():
    """Two groups whose data pull a parameter up: each stops at its own upper bound."""
    spec = C.ParamSpec(0.0, 10.0, step=1.0)
    value = np.array([8.0, 8.0, 8.0, 8.0])
    codes = np.array([0, 0, 1, 1])
    upper = np.array([[3.0], [np.nan]])

    def predict(u, index):
        return np.maximum(u[:, 0], 1e-9)

    u = F.pattern_search(predict, value, np.ones(4), codes, 2, np.array([[1.0], [1.0]]), [spec],
                         F.FitOptions(iterations=20, prior_weight=0.0), upper_u=upper)
    assert u[0, 0] == pytest.approx(3.0)
    assert u[1, 0] == pytest.approx(8.0, abs=0.01)


def test_platform_moe_layer_cost_applies_to_its_engine_and_architecture_only(catalog):
    """``sglang:gfx942`` (SGLang's build for CDNA 3) adds its per-MoE-layer cost to SGLang rows
    of an MoE model on MI300X and MI325X, releases included, and to nothing else (not MI355X,
    gfx950; not a dense model); every command passes the layers and architectures."""
    shipped = C.load_calibration("default")
    cal = C.Calibration(default=dict(shipped.default), gpus=shipped.gpus, engines=shipped.engines,
                        releases=shipped.releases, maths=shipped.maths, models=shipped.models,
                        gpu_priors=shipped.gpu_priors, platforms={"sglang:gfx942": {"moe_layer_overhead_s": 10e-6}})
    model, gpus = "deepseek-v3", ["mi300x", "h200-sxm", "mi325x", "mi300x", "mi355x"]
    engines = ["sglang", "sglang", "sglang@0.5", "trtllm", "sglang"]
    keys = parameters.catalog_keys(catalog, gpus, [model] * 5)
    a = np.asarray(cal.params_for(ServingParams(), gpus, engines, model_ids=[model] * 5, **keys).step_overhead_s)
    plain = replace(cal, platforms={})
    b = np.asarray(plain.params_for(ServingParams(), gpus, engines, model_ids=[model] * 5, **keys).step_overhead_s)
    layers = catalog.model(model).num_layers
    assert a - b == pytest.approx([layers * 10e-6, 0.0, layers * 10e-6, 0.0, 0.0], abs=1e-15)
    assert list(C.platform_keys(engines, keys["architectures"])) == [
        "sglang:gfx942", "sglang:sm_90", "sglang:gfx942", "trtllm:gfx942", "sglang:gfx950"]
    assert list(keys["moe_layers"]) == [layers] * 5 and layers == 61  # DeepSeek-V3: every layer counted
    p = parameters.for_configs(catalog, cal, None, "sglang", ["mi325x"], ["fp8"], [model])
    q = parameters.for_configs(catalog, plain, None, "sglang", ["mi325x"], ["fp8"], [model])
    assert np.asarray(p.step_overhead_s)[0] - np.asarray(q.step_overhead_s)[0] == pytest.approx(layers * 10e-6)
    dense = "llama-3.1-70b"  # no MoE layer: the platform cost never applies
    assert parameters.catalog_keys(catalog, ["mi325x"], [dense])["moe_layers"][0] == 0.0
    p = parameters.for_configs(catalog, cal, None, "sglang", ["mi325x"], ["fp8"], [dense])
    q = parameters.for_configs(catalog, plain, None, "sglang", ["mi325x"], ["fp8"], [dense])
    assert np.asarray(p.step_overhead_s)[0] == np.asarray(q.step_overhead_s)[0]


def test_fit_date_is_a_date_and_honours_source_date_epoch(monkeypatch):
    """The provenance date of `planner calibrate`: a same-day re-run writes the same bytes."""
    from planner.cli.calibrate import fit_date

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764547200")  # 2025-12-01T00:00:00Z
    assert fit_date() == "2025-12-01"
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    today = fit_date()
    assert len(today) == 10 and today.count("-") == 2
