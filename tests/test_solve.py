"""End to end: every shipped problem solves; plans pass the independent checker; fronts,
infeasibility diagnosis, determinism and malformed problems through the CLI."""

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import ROOT, run_cli
from planner.optimize.check import check_plan
from planner import jsonio
from planner.outputs.result_json import result_to_dict, strip_timings
from planner.pipeline import plan
from planner.planning import planning_instance
from planner.problem import load_problem

PROBLEMS = sorted((ROOT / "problems").glob("*.yaml"))
BAD = sorted((ROOT / "tests" / "data" / "bad-problems").glob("*.yaml"))


@pytest.fixture(scope="module")
def solved():
    out = {}
    for path in PROBLEMS:
        problem = load_problem(path)
        if problem.spec.procurement is not None and not problem.spec.workloads:
            continue
        out[path.stem] = plan(problem, pareto=False)
    return out


@pytest.mark.parametrize("name", [p.stem for p in PROBLEMS])
def test_every_shipped_problem_is_optimal_and_checked(solved, name):
    result = solved[name]
    assert result.status == "optimal"
    assert result.solver["gap"] == 0
    costs = [p.usd_per_hour for p in result.plans]
    # ranked by cost (equal within 1e-9 USD/h, the ranking's rounding), then latency
    assert all(a <= b + 1e-9 for a, b in zip(costs, costs[1:])) and len(costs) >= 1
    instance = planning_instance(result.problem, result.candidates)
    for p in result.plans:
        assert check_plan(instance, p) == []
        # cost arithmetic from the candidates' prices
        prices = result.candidates.loc[p.deployments["candidate_id"], "usd_per_replica_hour"].to_numpy()
        assert p.usd_per_hour == pytest.approx(float(np.dot(prices, p.deployments["replicas"])))


@pytest.mark.parametrize("name", [p.stem for p in PROBLEMS])
def test_default_margins_keep_plan_1_within_90_percent_load(solved, name):
    """Issue 13: with the default margins no deployment of plan 1 runs above 90% of its
    central capacity at SLO (load_fraction is relative to the central prediction)."""
    best = solved[name].plans[0]
    assert (best.deployments["load_fraction"] <= 0.9 + 1e-9).all()
    assert (best.deployments["load_fraction"] > 0).all()
    if name == "melange-example":  # measured capacities: only the load cap applies
        assert best.usd_per_hour == pytest.approx(7.34)
        assert dict(zip(best.deployments["gpu"], best.deployments["replicas"])) == {"a100-sxm-80gb": 2}
        assert best.deployments["load_fraction"].iat[0] == pytest.approx(1.125 / 2)


@pytest.mark.parametrize("name", ["moe-mixtral", "tight-budget"])
def test_verified_plan_1_meets_its_slos_in_the_simulator(solved, name):
    """Issue 13: every routed workload of plan 1, simulated with its routed mix (solve --verify),
    has p95 TTFT and TPOT within 1.05x its SLO."""
    from planner.verify import verify_plans

    result = solved[name]
    routing = verify_plans(result.problem, result.candidates, result.params, result.plans[:1])[0].routing
    slo = {w.name: w.slo for w in result.problem.workloads}
    assert len(routing) >= 1
    for r in routing.itertuples():
        assert 0 < r.simulated_ttft_p95_s <= 1.05 * slo[r.workload].ttft_p95_s, r
        assert 0 < r.simulated_tpot_p95_s <= 1.05 * slo[r.workload].tpot_p95_s, r


def test_equal_cost_plans_rank_by_latency(solved):
    """docs/problem-format.md 1.8 (top_k): rank by cost, then latency (traffic-weighted p95 TPOT), then ids."""
    ties = 0
    for result in solved.values():
        for a, b in zip(result.plans, result.plans[1:]):
            assert a.usd_per_hour <= b.usd_per_hour + 1e-9
            if abs(a.usd_per_hour - b.usd_per_hour) < 1e-9:
                ties += 1
                # over the routed rows with a TPOT (a pool's prefill rows have none: its decode rows do)
                has = [p.routing[np.isfinite(p.routing["tpot_p95_s"])] for p in (a, b)]
                tpot = [np.average(r["tpot_p95_s"], weights=r["rate_per_s"]) for r in has]
                assert tpot[0] <= tpot[1] + 1e-9
    assert ties > 0  # the shipped problems do have equal-cost alternatives


def test_the_checker_can_fail(solved):
    result = solved["chat-70b"]
    instance = planning_instance(result.problem, result.candidates)
    best = result.plans[0]
    broken = type(best)(rank=1, usd_per_hour=best.usd_per_hour, usd_per_million_tokens=None,
                        deployments=best.deployments.assign(replicas=best.deployments["replicas"] - 1),
                        routing=best.routing, gpus_by_type=best.gpus_by_type)
    assert check_plan(instance, broken)


def test_melange_example_both_ways(tmp_path):
    """The paper's worked example with its capacities used in full (max_load_fraction 1), both
    ways; with the default 90% load cap every deployment keeps 10% headroom."""
    path = ROOT / "problems" / "melange-example.yaml"
    doc = json.loads(run_cli("solve", path, "--json", "--max-load-fraction", 1)[0])
    assert doc["status"] == "optimal"
    best = doc["plans"][0]
    assert best["usd_per_hour"] == pytest.approx(6.70)
    assert {d["gpu"]: d["replicas"] for d in best["deployments"]} == {"a10g": 3, "a100-sxm-80gb": 1}
    spec = yaml.safe_load(path.read_text())
    del spec["optimize"]
    split = tmp_path / "split.yaml"
    split.write_text(yaml.safe_dump(spec))
    doc = json.loads(run_cli("solve", split, "--json", "--max-load-fraction", 1)[0])
    best = doc["plans"][0]
    assert best["usd_per_hour"] == pytest.approx(4.68)
    assert {d["gpu"]: d["replicas"] for d in best["deployments"]} == {"a10g": 1, "a100-sxm-80gb": 1}
    # The default 90% load cap: see test_default_margins_keep_plan_1_within_90_percent_load.


def _small_problem(tmp_path, **changes) -> Path:
    spec = {
        "name": "small",
        "workloads": [{"name": "chat", "model": "llama-3.1-8b", "rate_per_s": 20,
                       "prompt_tokens": {"mean": 800, "p95": 2000}, "output_tokens": {"mean": 200, "p95": 500},
                       "slo": {"ttft_p95_s": 1.0, "tpot_p95_s": 0.05}}],
        "search": {"gpus": ["l40s", "a100-sxm-80gb", "h100-sxm"], "quantization": ["bf16", "fp8"],
                   "kv_cache_dtype": ["bf16"], "tp": [1, 2], "pp": [1], "max_batch": [16, 64, 256]},
        "optimize": {"pareto_points": 8, "top_k": 3},
    }
    spec.update(changes)
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The small problem solved once with its fronts, the per-GPU-type ones too: (path,
    PlanResult, its --json document)."""
    path = _small_problem(tmp_path_factory.mktemp("small"))
    result = plan(load_problem(path), fronts="used")
    return path, result, json.loads(jsonio.dumps(result_to_dict(result)))


def test_fronts(small):
    _, result, _ = small
    fronts = result.pareto
    for metric in ("tpot_p95_s", "ttft_p95_s"):
        mixed = fronts[(fronts["front"] == "mixed") & (fronts["metric"] == metric)].sort_values("target_s")
        assert len(mixed) >= 8
        cost = mixed["usd_per_hour"].to_numpy()
        ok = ~np.isnan(cost)
        assert np.all(np.diff(cost[ok]) <= 1e-9), "cost must not rise as the target loosens"
        for gpu, front in fronts[(fronts["front"] != "mixed") & (fronts["metric"] == metric)].groupby("front"):
            merged = mixed.merge(front, on="target_s", suffixes=("_mixed", "_gpu"))
            both = merged.dropna(subset=["usd_per_hour_gpu"])
            assert (both["usd_per_hour_mixed"] <= both["usd_per_hour_gpu"] + 1e-9).all(), gpu
    # The loosest point of the mixed front is the optimum itself.
    loosest = fronts[(fronts["front"] == "mixed") & (fronts["metric"] == "tpot_p95_s")].iloc[-1]
    assert loosest["usd_per_hour"] == pytest.approx(result.plans[0].usd_per_hour)
    # Front points skip the uniqueness proof; with it every cost is the same.
    from planner.pareto import pareto_fronts
    from planner.planning import solver_options

    proven = pareto_fronts(result.problem, result.candidates, result.params, solver_options(result.problem),
                           metrics=("tpot_p95_s",), per_gpu=False, prove_unique_plan=True)
    mixed = fronts[(fronts["front"] == "mixed") & (fronts["metric"] == "tpot_p95_s")]
    np.testing.assert_allclose(proven["usd_per_hour"].to_numpy(), mixed["usd_per_hour"].to_numpy())


def test_infeasible_budget_exits_3_with_verified_relaxation(tmp_path):
    path = _small_problem(tmp_path, budget_usd_per_hour=0.5)
    out, _ = run_cli("solve", path, "--json", "--no-pareto", expect=3)
    doc = json.loads(out)
    assert doc["status"] == "infeasible" and doc["plans"] == []
    budget = [f for f in doc["diagnosis"] if f["constraint"] == "budget_usd_per_hour"]
    assert budget and budget[0]["verified"]
    text, _ = run_cli("solve", path, "--no-pareto", expect=3)
    assert "budget" in text


def test_infeasible_slo_names_the_slo_and_a_verified_relaxation(tmp_path):
    wl = {"name": "chat", "model": "llama-3.1-8b", "rate_per_s": 5, "prompt_tokens": 1000, "output_tokens": 100,
          "slo": {"ttft_p95_s": 0.001, "tpot_p95_s": 0.05}}
    path = _small_problem(tmp_path, workloads=[wl])
    doc = json.loads(run_cli("solve", path, "--json", "--no-pareto", expect=3)[0])
    kinds = {f["constraint"] for f in doc["diagnosis"]}
    assert "candidates" in kinds and "slo" in kinds
    slo = [f for f in doc["diagnosis"] if f["constraint"] == "slo"][0]
    assert slo["verified"] and "ttft_p95_s >=" in slo["message"]


def test_infeasible_inventory(tmp_path):
    path = _small_problem(tmp_path, inventory={"l40s": 1, "a100-sxm-80gb": 0, "h100-sxm": 0})
    doc = json.loads(run_cli("solve", path, "--json", "--no-pareto", expect=3)[0])
    inv = [f for f in doc["diagnosis"] if f["constraint"] == "inventory_gpus"]
    assert inv and inv[0]["verified"] and ">=" in inv[0]["message"]


def test_same_input_same_output(small):
    """Two solves of one input, plan() (the module's) and ``planner solve --json``, give one document."""
    path, _, a = small
    b = json.loads(run_cli("solve", path, "--json", "--fronts", "used")[0])
    assert strip_timings(a) == strip_timings(b)


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_malformed_problem_exit_2(path, tmp_path):
    out_dir = tmp_path / "out"
    out, err = run_cli("solve", path, "--out", out_dir, expect=2)
    assert out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines and all(line.startswith(f"error: {path}") for line in lines)
    assert not out_dir.exists()


def test_malformed_lines_name_the_yaml_path():
    expected = {
        "03-wrong-type": "workloads[0].rate_per_s", "04-negative-rate": "workloads[0].rate_per_s",
        "06-unknown-model": "did you mean 'llama-3.1-8b'", "07-unknown-gpu": "search.gpus[1]",
        "08-unknown-key": "workloads[0].colour: unknown key", "09-nan": "workloads[0].rate_per_s",
        "10-negative-slo": "workloads[0].slo.tpot_p95_s", "15-negative-inventory": "budget_usd_per_hour",
        "18-duplicate-and-unknown-workload": "constraints.redundancy[0]",
    }
    for stem, needle in expected.items():
        _, err = run_cli("validate", ROOT / "tests" / "data" / "bad-problems" / f"{stem}.yaml", expect=2)
        assert needle in err, (stem, err)


def test_validate_ok():
    out, _ = run_cli("validate", ROOT / "problems" / "chat-70b.yaml")
    assert "valid" in out
