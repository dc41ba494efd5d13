"""Pareto fronts agree with proven solves of the tightened problem (issue 19, issue 16 item 9)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import yaml

from planner.cli import main
from planner.pipeline import plan
from planner.problem import load_problem

SPEC = {
    "name": "fronts",
    "workloads": [
        {"name": "chat", "model": "llama-3.1-8b", "rate_per_s": 12,
         "prompt_tokens": {"mean": 800, "p95": 2000}, "output_tokens": {"mean": 200, "p95": 500},
         "slo": {"ttft_p95_s": 1.0, "tpot_p95_s": 0.05}},
        {"name": "batch", "model": "llama-3.1-8b", "rate_per_s": 3, "prompt_tokens": 3000, "output_tokens": 300,
         "slo": {"ttft_p95_s": 4.0, "tpot_p95_s": 0.08}},
    ],
    "search": {"gpus": ["l40s", "h100-sxm"], "quantization": ["bf16", "fp8"],
               "kv_cache_dtype": ["bf16"], "tp": [1, 2], "pp": [1], "max_batch": [16, 256]},
    "optimize": {"pareto_points": 3, "top_k": 1, "fronts": "mixed"},
}


def _write(tmp_path, spec, name="fronts.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    path = _write(tmp_path_factory.mktemp("fronts"), SPEC)
    return plan(load_problem(path))


def test_front_points_equal_proven_solves_of_the_tightened_problem(solved, tmp_path):
    fronts = solved.pareto
    assert set(fronts["front"]) == {"mixed"}
    for metric in ("tpot_p95_s", "ttft_p95_s"):
        points = fronts[fronts["metric"] == metric].sort_values("target_s")
        assert len(points) == 3
        # At the problem's own SLOs the front is the plan's optimum.
        assert points["target_s"].iloc[-1] == max(w["slo"][metric] for w in SPEC["workloads"])
        assert points["usd_per_hour"].iloc[-1] == pytest.approx(solved.best.usd_per_hour, rel=1e-12)
        for row in points.iloc[:-1].itertuples():
            spec = json.loads(json.dumps(SPEC))
            for w in spec["workloads"]:
                w["slo"][metric] = min(w["slo"][metric], row.target_s)
            proven = plan(load_problem(_write(tmp_path, spec, "tight.yaml")), pareto=False, top_k=1)
            assert proven.solver["status"] == "optimal"
            assert row.usd_per_hour == pytest.approx(proven.best.usd_per_hour, rel=1e-9), (metric, row.target_s)


def _proven_cost(tmp_path, spec):
    """The proven optimum of ``spec`` (None when infeasible)."""
    proven = plan(load_problem(_write(tmp_path, spec, "proven.yaml")), pareto=False, top_k=1)
    assert proven.solver["status"] in ("optimal", "infeasible")
    return proven.best.usd_per_hour if proven.best is not None else None


def test_gpu_front_points_equal_proven_solves_on_that_gpu_alone(tmp_path):
    """Every per-GPU-type point (batched exact capacities, dominance on bounds) costs what
    an independent proven solve of the problem on that GPU type alone, its SLO tightened
    to the point's target, costs; and the mixed front is never dearer."""
    spec = json.loads(json.dumps(SPEC))
    spec["workloads"] = spec["workloads"][:1]
    spec["optimize"] = {"pareto_points": 3, "top_k": 1, "fronts": "all"}
    fronts = plan(load_problem(_write(tmp_path, spec))).pareto
    assert set(fronts["front"]) == {"mixed", "l40s", "h100-sxm"}
    metric = "tpot_p95_s"
    points = fronts[fronts["metric"] == metric]
    mixed = points[points["front"] == "mixed"].set_index("target_s")["usd_per_hour"]
    for row in points[points["front"] != "mixed"].itertuples():
        one = json.loads(json.dumps(spec))
        one["search"]["gpus"] = [row.front]
        one["workloads"][0]["slo"][metric] = min(one["workloads"][0]["slo"][metric], row.target_s)
        cost = _proven_cost(tmp_path, one)
        if cost is None:
            assert row.status == "infeasible" and row.binding.startswith("latency target"), row
        else:
            assert row.status == "optimal" and row.usd_per_hour == pytest.approx(cost, rel=1e-9), row
            assert mixed[row.target_s] <= row.usd_per_hour + 1e-9


def test_fronts_start_at_the_knee(solved):
    from planner.front_capacity import Curves
    from planner.pareto import KNEE_GRID_START_MARGIN

    feasible = solved.candidates[solved.candidates["feasible"]]
    curves = Curves(solved.problem, feasible, solved.params)
    for metric in ("tpot_p95_s", "ttft_p95_s"):
        tightest = solved.pareto[solved.pareto["metric"] == metric]["target_s"].min()
        # Above the fastest reachable p95 (every point is feasible), below the loosest SLO.
        assert curves.fastest(metric) * KNEE_GRID_START_MARGIN <= tightest
        assert tightest < max(w["slo"][metric] for w in SPEC["workloads"])
    assert (solved.pareto["status"] == "optimal").all()


def test_budget_cap_says_what_binds_at_infeasible_points(solved, tmp_path):
    points = solved.pareto[solved.pareto["metric"] == "tpot_p95_s"].sort_values("target_s")
    # A budget between the optimum and the tightest point's cost: tight points become infeasible.
    budget = float((points["usd_per_hour"].iloc[0] + solved.best.usd_per_hour) / 2)
    spec = dict(SPEC, budget_usd_per_hour=budget)
    fronts = plan(load_problem(_write(tmp_path, spec))).pareto
    tpot = fronts[fronts["metric"] == "tpot_p95_s"].sort_values("target_s")
    infeasible = tpot[tpot["usd_per_hour"].isna()]
    assert len(infeasible) >= 1 and tpot["usd_per_hour"].iloc[-1] <= budget
    for row in infeasible.itertuples():
        assert row.status == "infeasible" and row.binding.startswith("budget_usd_per_hour"), row.binding
    assert (tpot.dropna(subset=["usd_per_hour"])["binding"] == "").all()


def _solve_json(path, *flags):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["solve", str(path), "--json", *flags]) == 0
    return json.loads(out.getvalue())


def test_fronts_flag_none_mixed_used(tmp_path):
    spec = dict(SPEC, optimize={"pareto_points": 2, "top_k": 1}, workloads=SPEC["workloads"][:1])
    path = _write(tmp_path, spec)
    none = _solve_json(path, "--fronts", "none")
    assert none["pareto"] == []
    mixed = _solve_json(path, "--fronts", "mixed")["pareto"]
    assert {p["front"] for p in mixed} == {"mixed"} and len(mixed) == 4
    assert _solve_json(path)["pareto"] == mixed      # default: optimize.fronts = mixed
    used = _solve_json(path, "--fronts", "used")["pareto"]
    plan_gpus = {d["gpu"] for d in none["plans"][0]["deployments"]}
    front_gpus = {d.split()[1] for p in mixed for d in p["deployments"].split("; ")}
    assert {p["front"] for p in used} == {"mixed"} | plan_gpus | front_gpus
    assert [p for p in used if p["front"] == "mixed"] == mixed


def test_knee_from_distinct_configurations_equals_the_knee_over_every_row(tmp_path):
    import numpy as np

    from planner.front_capacity import Curves
    from planner.pareto import knee_target

    # bf16 and fp16 weights / KV cache: twins (one configuration, one curve) in the pool
    spec = {**SPEC, "search": {**SPEC["search"], "quantization": ["bf16", "fp16"],
                               "kv_cache_dtype": ["bf16", "fp16"]}}
    solved = plan(load_problem(_write(tmp_path, spec)), pareto=False)
    feasible = solved.candidates[solved.candidates["feasible"]]
    curves = Curves(solved.problem, feasible, solved.params)
    twins = 0
    for name, (curve, inverse) in curves.distinct.items():
        for key, value in curve.items():
            np.testing.assert_array_equal(value[inverse], curves.curves[name][key])
        twins += len(inverse) - len(curve["rate_per_s"])
    assert twins > 0   # the twins' reduction is exercised
    per_row = Curves(solved.problem, feasible, solved.params)
    per_row.distinct = {name: (curve, np.arange(len(curve["rate_per_s"])))
                        for name, curve in per_row.curves.items()}
    # twins at different prices: the cheapest one counts
    price = curves.frame["usd_per_replica_hour"].to_numpy(float) * (1.0 + 0.25 * (np.arange(len(curves.frame)) % 3))
    for c in (curves, per_row):
        c.frame = c.frame.assign(usd_per_replica_hour=price)
    for metric in ("tpot_p95_s", "ttft_p95_s"):
        for elasticity in (0.5, 3.0):
            assert knee_target(solved.problem, curves, metric, elasticity) == \
                knee_target(solved.problem, per_row, metric, elasticity)
