"""Planning margins (issue 13): error factors, capacities at confidence, the load cap, outputs."""

import json
import math

import numpy as np
import pytest
import yaml

from planner.margins import DEFAULT_OUT_OF_FOLD_MEDIAN_APE, Margins, error_factor, log_error_sigma


def test_error_factor_by_hand():
    # sigma = ln(1.341) / 0.67449 = 0.43503; z_0.8 = 0.84162 -> exp(0.36613) = 1.4422
    assert error_factor("ttft", 0.8) == pytest.approx(1.4422, abs=1e-4)
    # sigma = ln(1.174) / 0.67449 = 0.23784 -> exp(0.20017) = 1.2216
    assert error_factor("tpot", 0.8) == pytest.approx(1.2216, abs=1e-4)
    assert error_factor("ttft", 0.5) == error_factor("tpot", 0.5) == 1.0
    # The default spread is the documented out-of-fold median APE: median |ln error| = ln(1 + APE).
    for family, ape in DEFAULT_OUT_OF_FOLD_MEDIAN_APE.items():
        z = np.random.default_rng(0).standard_normal(200_000) * log_error_sigma(ape)
        assert np.median(np.abs(z)) == pytest.approx(math.log1p(ape), rel=0.01)


def test_error_factor_grows_with_confidence_and_rejects_bad_input():
    qs = [0.5, 0.6, 0.8, 0.9, 0.95, 0.99]
    for family in ("ttft", "tpot"):
        f = [error_factor(family, q) for q in qs]
        assert f == sorted(f) and len(set(f)) == len(f)
    assert error_factor("ttft", 0.9) > error_factor("tpot", 0.9)  # TTFT is the less accurate family
    with pytest.raises(ValueError, match="family"):
        error_factor("throughput", 0.8)
    with pytest.raises(ValueError, match="quantile"):
        error_factor("ttft", 0.4)


def test_planned_capacity_is_the_smaller_of_the_two_margins():
    calls = []

    def capacity(ttft_slo, tpot_slo):  # a toy capacity model: linear in the tighter SLO
        calls.append((ttft_slo, tpot_slo))
        return np.array([10.0, 100.0]) * min(ttft_slo, 2.0 * tpot_slo)

    m = Margins(confidence=0.8, max_load_fraction=0.9)
    got = m.planned_capacity(capacity, 1.0, 0.4)
    ttft_slo, tpot_slo = 1.0 / error_factor("ttft", 0.8), 0.4 / error_factor("tpot", 0.8)
    assert calls == [(1.0, 0.4), (ttft_slo, tpot_slo)]
    held = np.array([10.0, 100.0]) * min(ttft_slo, 2 * tpot_slo)
    np.testing.assert_allclose(got, np.minimum(held, 0.9 * np.array([8.0, 80.0])))
    # Central confidence: only the load cap, and one capacity evaluation.
    calls.clear()
    np.testing.assert_allclose(Margins(0.5, 0.7).planned_capacity(capacity, 1.0, 0.4), [5.6, 56.0])
    assert len(calls) == 1
    # Measured capacities carry no model error.
    assert Margins(0.9, 0.8, model_error=False).factor("ttft") == 1.0


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    from planner.problem import load_problem

    spec = {"name": "margins",
            "workloads": [{"name": "chat", "model": "llama-3.1-8b", "rate_per_s": 30,
                           "prompt_tokens": {"mean": 800, "p95": 2000}, "output_tokens": {"mean": 200, "p95": 500},
                           "slo": {"ttft_p95_s": 1.0, "tpot_p95_s": 0.04}}],
            "search": {"gpus": ["l40s", "h100-sxm"], "quantization": ["fp8"], "kv_cache_dtype": ["fp8"],
                       "tp": [1, 2], "pp": [1], "max_batch": [64, 256]},
            "optimize": {"top_k": 2}}
    path = tmp_path_factory.mktemp("margins") / "small.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path, load_problem(path)


def _with(problem, **changes):
    spec = problem.spec.model_copy(update={"optimize": problem.spec.optimize.model_copy(update=changes)})
    return problem.model_copy(update={"spec": spec})


def test_candidate_capacities_follow_the_definition(small):
    from planner.search import enumerate_candidates, serving_params, workload_arrays
    from planner.serving.queueing import TrafficArrays, capacity_at_slo

    _, problem = small
    central = enumerate_candidates(_with(problem, confidence=0.5, max_load_fraction=1.0))
    held = enumerate_candidates(problem)  # defaults: confidence 0.8, load cap 0.9
    assert (central["capacity_per_s[chat]"] == central["central_capacity_per_s[chat]"]).all()
    np.testing.assert_allclose(held["central_capacity_per_s[chat]"], central["capacity_per_s[chat]"])
    live = held[held["central_capacity_per_s[chat]"] > 0]
    w = problem.workloads[0]
    direct = capacity_at_slo(workload_arrays(problem, live, w), serving_params(problem, live),
                             TrafficArrays.from_distributions(w.prompt, w.output),
                             1.0 / error_factor("ttft", 0.8), 0.04 / error_factor("tpot", 0.8))["max_rate_per_s"]
    np.testing.assert_allclose(live["capacity_per_s[chat]"],
                               np.minimum(direct, 0.9 * live["central_capacity_per_s[chat]"]))
    assert (live["capacity_per_s[chat]"] < live["central_capacity_per_s[chat]"]).all()
    # A candidate is rejected when even a trickle misses the SLO at the confidence.
    gone = held["feasible"].to_numpy() < central["feasible"].to_numpy()
    assert set(held.loc[gone, "infeasible_reason"]) <= {"slo_ttft_unreachable", "slo_tpot_unreachable"}


def test_load_fraction_is_central_and_capped(small):
    from planner.outputs.result_json import result_to_dict
    from planner.pipeline import plan

    _, problem = small
    for mlf in (0.9, 0.6):
        result = plan(_with(problem, max_load_fraction=mlf), pareto=False)
        doc = result_to_dict(result)
        assert doc["margins"]["max_load_fraction"] == mlf and doc["margins"]["confidence"] == 0.8
        f = doc["margins"]["error_factors"]
        for p, d in ((p, d) for p in doc["plans"] for d in p["deployments"]):
            cap = result.candidates.loc[d["candidate_id"], "central_capacity_per_s[chat]"]
            w = d["workloads"]["chat"]
            assert d["load_fraction"] == pytest.approx(w["rate_per_s"] / d["replicas"] / cap)
            assert d["load_fraction"] <= mlf + 1e-9
            assert w["ttft_p95_at_confidence_s"] == pytest.approx(w["ttft_p95_s"] * f["ttft_p95"])
            assert w["tpot_p95_at_confidence_s"] == pytest.approx(w["tpot_p95_s"] * f["tpot_p95"])
            # At the confidence the plan still meets the SLOs (2% for the bisection's resolution).
            assert w["ttft_p95_at_confidence_s"] <= 1.0 * 1.02 and w["tpot_p95_at_confidence_s"] <= 0.04 * 1.02


def test_confidence_flags_and_yaml_errors(small, capsys, tmp_path):
    from planner import cli

    path, _ = small
    out = tmp_path / "out"
    assert cli.main(["solve", str(path), "--json", "--no-pareto", "--top", "1", "--confidence", "0.9",
                     "--max-load-fraction", "0.5", "--verify", "--out", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["margins"]["confidence"] == 0.9 and doc["margins"]["max_load_fraction"] == 0.5
    assert doc["margins"]["error_factors"]["ttft_p95"] == pytest.approx(error_factor("ttft", 0.9))
    assert max(d["load_fraction"] for d in doc["plans"][0]["deployments"]) <= 0.5 + 1e-9
    assert doc["verification"]["seed"] == 0 and "verify" in doc["timings_s"]
    entries = [w for d in doc["plans"][0]["deployments"] for w in d["workloads"].values()]
    assert entries and all(w["simulated_ttft_p95_s"] > 0 and w["simulated_tpot_p95_s"] > 0 for w in entries)
    report = (out / "report.md").read_text()
    assert "## Margins" in report and "Confidence 0.9" in report and "simulated p95 TTFT [ms]" in report
    assert "p95 TTFT at 0.9 [ms]" in report and "TTFT margin" in report
    w = entries[0]
    assert f"{w['simulated_ttft_p95_s'] * 1e3:.1f}" in report and f"{1.0 / w['ttft_p95_at_confidence_s'] - 1:+.0%}" in report
    assert cli.main(["solve", str(path), "--confidence", "0.3"]) == 2
    assert "--confidence" in capsys.readouterr().err
    assert cli.main(["solve", str(path), "--max-load-fraction", "1.5"]) == 2
    assert "--max-load-fraction" in capsys.readouterr().err
    spec = yaml.safe_load(path.read_text())
    spec["optimize"] = {"confidence": 1.0, "max_load_fraction": 0}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(spec))
    assert cli.main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "optimize.confidence" in err and "optimize.max_load_fraction" in err
