"""Scenario risk: sampling, summary invariants, and the same ``risk`` on the local and Ray executors."""

import contextlib
import io
import json

import pytest

RISK_SMALL = """\
name: risk-small
workloads:
  - name: chat
    model: llama-3.1-8b
    requests_per_day: 900000
    prompt_tokens: {mean: 600, p95: 1800}
    output_tokens: {mean: 200, p95: 600}
    slo: {ttft_p95_s: 1.0, tpot_p95_s: 0.05}
search: {gpus: [l40s, h100-sxm], quantization: [fp8], kv_cache_dtype: [fp8], tp: [1], pp: [1], max_batch: [128]}
procurement:
  horizon_months: 6
  growth_per_month_fraction: 0.05
  rent: [{offering: on-demand}]
  buy: {purchase_unit: gpu}
"""


def _budget(path, *extra):
    from planner import cli

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli.main(["budget", str(path), "--json", "--scenarios", "32", "--seed", "7", *extra])
    assert code == 0, stderr.getvalue()
    return json.loads(stdout.getvalue())


@pytest.fixture(scope="module")
def problem_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("risk") / "small.yaml"
    path.write_text(RISK_SMALL)
    return path


@pytest.fixture(scope="module")
def local_doc(problem_path):
    return _budget(problem_path, "--executor", "local", "--workers", "2")


def test_risk_summary_invariants(local_doc):
    risk = local_doc["risk"]
    assert risk["scenarios"] == 32 and risk["seed"] == 7
    options = risk["options"]
    assert [o["option"] for o in options] == [o["option"] for o in local_doc["options"]]
    assert sum(o["probability_cheapest"] for o in options) == pytest.approx(1.0)
    for o in options:
        assert o["scenarios_priced"] == 32
        assert o["p10_usd"] <= o["p50_usd"] <= o["p90_usd"]
    mix = next(o for o in options if o["option"] == "mix")
    assert all(mix["p10_usd"] <= o["p10_usd"] for o in options)


def test_sampling_is_seeded():
    from planner.procurement.risk import sample_scenarios
    from planner.procurement.spec import ProcurementSpec

    spec = ProcurementSpec(growth_per_month_fraction=0.05, horizon_months=12)
    a, b = sample_scenarios(spec, ["h100-sxm"], 200, 3), sample_scenarios(spec, ["h100-sxm"], 200, 3)
    assert a == b and a != sample_scenarios(spec, ["h100-sxm"], 200, 4)
    import numpy as np

    # The median horizon traffic is the stated one: ln((1+g_s)^H) is centred on ln((1+g)^H).
    logs = [12 * np.log1p(s.growth_per_month) for s in a]
    assert abs(np.median(logs) - 12 * np.log1p(0.05)) < 0.08
    flat = sample_scenarios(spec.model_copy(update={"scenarios": spec.scenarios.model_copy(
        update={"growth_log_sd": 0.0})}), ["h100-sxm"], 5, 3)
    assert all(s.growth_per_month == pytest.approx(0.05) for s in flat)


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_gives_the_same_risk_as_local(problem_path, local_doc, ray_instance):
    ray_doc = _budget(problem_path, "--executor", "ray")
    assert ray_doc["risk"] == local_doc["risk"]
