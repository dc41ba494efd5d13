"""Disaggregated serving in the search and the optimizer (issue 14, Done-when 1 and 2): the
role dimension, the safe-side role capacities, pools in the plan, launch settings per role."""

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from conftest import run_cli, run_json
from planner.problem import load_problem
from planner.search import enumerate_candidates, serving_params, workload_arrays
from planner.serving import disagg
from planner.serving.queueing import TrafficArrays

WORKLOAD = {"name": "chat", "model": "deepseek-v3", "rate_per_s": 20,
            "prompt_tokens": {"mean": 2000, "p95": 6000}, "output_tokens": {"mean": 400, "p95": 1000},
            "slo": {"ttft_p95_s": 2.0, "tpot_p95_s": 0.05}}


def _problem(tmp_path: Path, name: str, **search) -> Path:
    spec = {"name": name, "workloads": [WORKLOAD],
            "search": {"quantization": ["fp8"], "kv_cache_dtype": ["bf16"], "tp": [8], "max_batch": [128],
                       **search}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _check_pools(plan: dict, rate: float) -> None:
    """Conservation: aggregated + prefilled rate = the workload's; per pool, decoded = prefilled."""
    by_role = {"both": 0.0, "prefill": 0.0, "decode": 0.0}
    for d in plan["deployments"]:
        assert d["role"] in by_role and (d["pool"] is None) == (d["role"] == "both")
        by_role[d["role"]] += d["workloads"]["chat"]["rate_per_s"]
    assert np.isclose(by_role["both"] + by_role["prefill"], rate)
    assert np.isclose(by_role["prefill"], by_role["decode"])


def test_deepseek_with_disaggregation_solves_to_a_proven_optimum(tmp_path):
    doc = run_json("solve", _problem(tmp_path, "ds-mixed", gpus=["h200-sxm", "b200"], pp=[1],
                                     disaggregation=[False, True]), "--no-pareto", "--top", "3")
    assert doc["status"] == "optimal" and doc["solver"]["gap"] == 0.0
    assert doc["solver"]["objective_usd_per_hour"] == doc["solver"]["best_bound_usd_per_hour"]
    for plan in doc["plans"]:
        _check_pools(plan, 20.0)
    # the text output of plans that mix aggregated replicas and a pool: one line per pool
    text, _ = run_cli("solve", tmp_path / "ds-mixed.yaml", "--no-pareto", "--top", "3")
    pooled = [p for p in doc["plans"] if any(d["pool"] for d in p["deployments"])]
    assert pooled and text.count("    pool deepseek-v3: ") == len(pooled)


def test_deepseek_with_ep_attention_dp_and_disaggregation_solves_to_a_proven_optimum(tmp_path):
    """Issue 14, Done-when 1: all three frontier-MoE dimensions searched together."""
    path = _problem(tmp_path, "ds-all", gpus=["h200-sxm", "b200"], pp=[1], ep=[1, 8],
                    attention_dp=[False, True], disaggregation=[False, True])
    doc = run_json("solve", path, "--no-pareto", "--top", "5")
    assert doc["status"] == "optimal" and doc["solver"]["gap"] == 0.0
    assert doc["solver"]["objective_usd_per_hour"] == doc["solver"]["best_bound_usd_per_hour"]
    for plan in doc["plans"]:
        _check_pools(plan, 20.0)
        for d in plan["deployments"]:  # every deployment states its layout and role
            assert d["ep"] in (1, 8) and isinstance(d["attention_dp"], bool)
            assert d["role"] in ("both", "prefill", "decode")
    layouts = {(d["ep"], d["attention_dp"], d["role"]) for p in doc["plans"] for d in p["deployments"]}
    assert any(ep == 8 for ep, _, _ in layouts) and any(dpa for _, dpa, _ in layouts)
    # the grid is the product of the searched values: 2 GPUs x 2 ep x 2 attention DP x 3 roles
    assert doc["candidates"]["enumerated"] == 2 * 2 * 2 * 3


def test_disaggregation_only_gives_prefill_and_decode_pools_with_launch_settings(tmp_path):
    # DeepSeek-V3 FP8 does not fit 8 x H100 80 GB: a replica is tp8 pp2 = 16 GPUs, 2 nodes
    out = tmp_path / "out"
    path = _problem(tmp_path, "ds-pd", gpus=["h100-sxm"], pp=[1, 2], disaggregation=[True])
    stdout, _ = run_cli("solve", path, "--no-pareto", "--top", "1", "--out", out)
    assert "prefill (pool deepseek-v3)" in stdout and "decode (pool deepseek-v3)" in stdout
    assert "    pool deepseek-v3: " in stdout and "req/s" in stdout.split("    pool deepseek-v3: ")[1]
    doc = run_json("solve", tmp_path / "ds-pd.yaml", "--no-pareto", "--top", "1")
    plan = doc["plans"][0]
    assert {d["role"] for d in plan["deployments"]} == {"prefill", "decode"}
    _check_pools(plan, 20.0)
    folders = sorted(p for p in (out / "launch").iterdir() if p.is_dir() and p.name[:2].isdigit())
    assert len(folders) == len(plan["deployments"])
    for folder, dep in zip(folders, plan["deployments"]):
        assert f"--disaggregation-mode {dep['role']}" in (folder / "sglang.sh").read_text()
        assert dep["gpus_per_replica"] == 16  # spans two 8-GPU nodes
        assert "kind: LeaderWorkerSet" in (folder / "deployment.yaml").read_text()
    assert (out / "launch" / "pool-deepseek-v3" / "router.sh").exists()


def test_role_capacities_are_safe_for_the_pair(tmp_path):
    """A prefill replica and a decode replica at the smaller of their capacities meet both SLOs
    in the two-stage model (serving/disagg.py), whatever the pairing's KV links."""
    path = _problem(tmp_path, "ds-cap", gpus=["h200-sxm"], pp=[1], disaggregation=[False, True])
    problem = load_problem(path)
    cands = enumerate_candidates(problem)
    rows = {r: cands[cands["role"] == r].iloc[:1] for r in ("both", "prefill", "decode")}
    cap = {r: float(rows[r]["central_capacity_per_s[chat]"].iloc[0]) for r in rows}
    assert cap["prefill"] > 0 and cap["decode"] > 0
    assert np.isnan(rows["prefill"]["tpot_p95_s[chat]"].iloc[0])
    assert np.isnan(rows["decode"]["ttft_p95_s[chat]"].iloc[0])
    w = problem.workloads[0]
    arrays = workload_arrays(problem, rows["prefill"], w)
    params = serving_params(problem, rows["prefill"])
    traffic = TrafficArrays.from_distributions(w.prompt, w.output, w.prefix_cache_hit_fraction)
    link = disagg.scale_out_bytes_per_s(problem.catalog.gpu("h200-sxm"))
    pair = disagg.DisaggArrays(arrays, arrays, params, params, scale_out_bytes_per_s=link)
    state = disagg.state_at_rate(pair, traffic, min(cap["prefill"], cap["decode"]))
    assert float(state["ttft_p95_s"][0]) <= w.slo.ttft_p95_s
    assert float(state["tpot_p95_s"][0]) <= w.slo.tpot_p95_s * (1 + 1e-6)
    # no decode interference: a decode replica carries more at the TPOT SLO than an aggregated one
    assert cap["decode"] > cap["both"]


def test_dense_problem_has_no_roles(tmp_path):
    spec = {"name": "dense", "workloads": [{**WORKLOAD, "model": "llama-3.1-8b"}],
            "search": {"gpus": ["h100-sxm"], "quantization": ["bf16"], "tp": [1], "max_batch": [64]}}
    path = tmp_path / "dense.yaml"
    path.write_text(yaml.safe_dump(spec))
    doc = run_json("solve", path, "--no-pareto", "--top", "1")
    assert all("role" not in d and "pool" not in d for d in doc["plans"][0]["deployments"])


def test_a_pool_shares_one_weight_format_and_kv_dtype(tmp_path):
    """The decode replica continues from the prefill replica's KV with the same weights: the
    optimizer balances prefill and decode traffic per (model, format, KV dtype) pool."""
    spec = {"name": "mixed-formats", "workloads": [{**WORKLOAD, "model": "llama-3.1-70b", "rate_per_s": 12}],
            "search": {"gpus": ["a100-sxm-80gb", "l40s", "h200-sxm", "b200", "mi300x"],
                       "quantization": ["bf16", "fp8", "int8"], "kv_cache_dtype": ["bf16", "fp8"],
                       "tp": [1, 2, 4, 8], "max_batch": [64, 256], "disaggregation": [True]}}
    # (balanced per model only, plan #1 here decoded int8 weights after an fp8 prefill)
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump(spec))
    doc = run_json("solve", path, "--no-pareto", "--top", "5")
    assert doc["status"] == "optimal"
    for plan in doc["plans"]:
        sides = {}
        for d in plan["deployments"]:
            sides.setdefault(d["pool"], {}).setdefault(d["role"], set()).add((d["quantization"], d["kv_cache_dtype"]))
            assert d["role"] in ("prefill", "decode")
        for pool, roles in sides.items():
            assert set(roles) == {"prefill", "decode"}, (pool, roles)
            assert len(roles["prefill"] | roles["decode"]) == 1, (pool, roles)  # one format, one KV dtype


def test_pool_ids_name_the_format_when_a_model_has_several_pools():
    from planner.planning import pool_ids

    deployments = pd.DataFrame({"model": ["m"] * 5, "role": ["prefill", "decode", "prefill", "decode", "both"],
                                "quantization": ["fp8", "fp8", "bf16", "bf16", "fp8"],
                                "kv_cache_dtype": ["fp8", "fp8", "bf16", "bf16", "fp8"]})
    def ids(frame):
        return [p if isinstance(p, str) else None for p in pool_ids(frame)]  # None: no pool

    assert ids(deployments) == ["m-fp8-kv-fp8", "m-fp8-kv-fp8", "m-bf16-kv-bf16",
                                                        "m-bf16-kv-bf16", None]
    assert ids(deployments.iloc[[0, 1, 4]]) == ["m", "m", None]
    # the pool keys of a larger table, taken to the rows (rank_plans: once for all plans)
    from planner.optimize.prune import candidate_pools

    keys = candidate_pools(deployments)
    for rows in ([0, 1, 2, 3, 4], [0, 1, 4], [2, 3], [4]):
        assert list(pool_ids(deployments.iloc[rows], keys[rows])) == list(pool_ids(deployments.iloc[rows]))


def test_verify_simulates_each_pool_within_its_slos(tmp_path):
    """Issue 13 item 6 for a disaggregated plan: `solve --verify` runs the pool through the P/D
    simulator; a prefill entry carries the simulated p95 TTFT, a decode entry the p95 TPOT,
    each finite and at most 1.05x its SLO; the report and the text output show them."""
    path = _problem(tmp_path, "ds-verify", gpus=["h200-sxm"], pp=[1], disaggregation=[True])
    out = tmp_path / "out"
    doc = run_json("solve", path, "--no-pareto", "--top", "1", "--verify", "--out", out)
    slo = WORKLOAD["slo"]
    deployments = doc["plans"][0]["deployments"]
    assert {d["role"] for d in deployments} == {"prefill", "decode"}
    report = (out / "report.md").read_text()
    for d in deployments:
        w = d["workloads"]["chat"]
        metric, other = ("ttft", "tpot") if d["role"] == "prefill" else ("tpot", "ttft")
        assert 0 < w[f"simulated_{metric}_p95_s"] <= 1.05 * slo[f"{metric}_p95_s"], (d["role"], w)
        assert w[f"simulated_{other}_p95_s"] is None
        shown = f"{w[f'simulated_{metric}_p95_s'] * 1e3:.1f}"
        assert any(line.endswith(f"| {shown} | - |" if metric == "ttft" else f"| - | {shown} |")
                   for line in report.splitlines()), shown
    assert "prefill/decode pool" in report
    text, _ = run_cli("solve", path, "--no-pareto", "--top", "1", "--verify")
    assert text.count("; simulated ") == 2


def _pool_inputs(tmp_path):
    from planner.pipeline import plan

    path = _problem(tmp_path, "ds-pools", gpus=["h200-sxm", "b200"], pp=[1], disaggregation=[True])
    result = plan(load_problem(path), pareto=False, top_k=1)
    ids = {(r.gpu, r.role): cid for cid, r in result.candidates.iterrows()}
    return result, ids


def _pool(result, ids, sides):
    """A pool's deployments and routing from {(gpu, role): (replicas, rate_per_s)}."""
    deps = pd.DataFrame([{"candidate_id": ids[k], "gpu": k[0], "role": k[1], "replicas": n}
                         for k, (n, _) in sides.items()])
    routing = pd.DataFrame([{"candidate_id": ids[k], "workload": "chat", "rate_per_s": r}
                            for k, (_, r) in sides.items()])
    return deps, routing


def test_a_one_pair_pool_is_simulated_as_the_pd_simulator_does(tmp_path):
    """One prefill and one decode deployment: simulate_pool gives the p95s of
    simulate_pd.run_pd_requests on the same requests (batch-1 prefill replicas, the pair's
    scale-out link, the replica counts)."""
    from planner.serving.disagg import DisaggArrays, transfer_bytes_per_s
    from planner.simulate_pd import run_pd_requests
    from planner.verify import SEED, _draw_mix, simulate_pool

    result, ids = _pool_inputs(tmp_path)
    problem, cands = result.problem, result.candidates
    deps, routing = _pool(result, ids, {("h200-sxm", "prefill"): (2, 12.0), ("b200", "decode"): (2, 12.0)})
    got = simulate_pool(problem, cands, result.params, deps, routing)
    mix = _draw_mix(problem, {"chat": 12.0}, np.random.default_rng(SEED))
    side = {}
    for key in (("h200-sxm", "prefill"), ("b200", "decode")):
        rows = cands.loc[[ids[key]]]
        side[key[1]] = (workload_arrays(problem, rows, problem.workloads[0]), result.params.of(rows))
    prefill = side["prefill"][0].replace(batch=np.ones(1))
    link = transfer_bytes_per_s(problem.catalog.gpu("h200-sxm"), problem.catalog.gpu("b200"))
    d = DisaggArrays(prefill, side["decode"][0], side["prefill"][1], side["decode"][1], 2.0, 2.0,
                     scale_out_bytes_per_s=link)
    chunk = int(np.asarray(side["prefill"][1].prefill_chunk_tokens).reshape(-1)[0])
    ref = run_pd_requests(d, mix.arrival_s, mix.prompt, mix.output, rate_per_s=12.0, seed=SEED,
                          prefill_chunk_tokens=chunk, prefix_hit_fraction=mix.hit)
    assert len(mix.arrival_s) == 2000 and ref.rejected_requests == 0
    ttft, none = got[ids["h200-sxm", "prefill"], "chat"]
    assert ttft == ref.ttft_p95_s and np.isnan(none)
    none, tpot = got[ids["b200", "decode"], "chat"]
    assert tpot == ref.tpot_p95_s and np.isnan(none)


def test_a_pool_with_two_prefill_deployments(tmp_path):
    """Requests split between the prefill deployments in proportion to their routed rates;
    every entry gets its own side's p95, within the SLOs at these loads (below capacity)."""
    from planner.verify import simulate_pool

    result, ids = _pool_inputs(tmp_path)
    cap = {k: float(result.candidates.loc[cid, "central_capacity_per_s[chat]"]) for k, cid in ids.items()}
    sides = {("h200-sxm", "prefill"): (1, 6.0), ("b200", "prefill"): (1, 14.0), ("b200", "decode"): (3, 20.0)}
    for key, (n, rate) in sides.items():
        assert rate / n < 0.8 * cap[key]  # every deployment below 80% of its central capacity
    got = simulate_pool(result.problem, result.candidates, result.params, *_pool(result, ids, sides))
    assert sorted(got) == sorted((ids[k], "chat") for k in sides)
    for key in sides:
        ttft, tpot = got[ids[key], "chat"]
        value, slo = (ttft, WORKLOAD["slo"]["ttft_p95_s"]) if key[1] == "prefill" else (tpot, WORKLOAD["slo"]["tpot_p95_s"])
        assert 0 < value <= 1.05 * slo and np.isnan(tpot if key[1] == "prefill" else ttft), (key, ttft, tpot)


def test_verified_pools_of_the_frontier_problem_meet_their_slos():
    """problems/deepseek-frontier.yaml: its ranked plans with a prefill/decode pool (one with
    H200 prefill and B200 decode replicas), simulated with --verify: every routed workload's
    own-side simulated p95 within 1.05x its SLO, the other side's value NaN."""
    from planner.pipeline import plan
    from planner.verify import verify_plans

    result = plan(load_problem(Path(__file__).resolve().parent.parent / "problems" / "deepseek-frontier.yaml"),
                  pareto=False, top_k=5)
    pooled = [p for p in result.plans if (p.deployments["role"] != "both").any()]
    assert pooled and any(p.deployments.groupby("role")["gpu"].first().nunique() > 1 for p in pooled)
    slo = {w.name: w.slo for w in result.problem.workloads}
    for p in verify_plans(result.problem, result.candidates, result.params, pooled):
        role = p.deployments.set_index("candidate_id")["role"]
        for r in p.routing.itertuples():
            ttft, tpot = r.simulated_ttft_p95_s, r.simulated_tpot_p95_s
            if role[r.candidate_id] != "decode":
                assert 0 < ttft <= 1.05 * slo[r.workload].ttft_p95_s, r
            if role[r.candidate_id] != "prefill":
                assert 0 < tpot <= 1.05 * slo[r.workload].tpot_p95_s, r
            assert not np.isnan(ttft) if role[r.candidate_id] != "decode" else np.isnan(ttft)
            assert not np.isnan(tpot) if role[r.candidate_id] != "prefill" else np.isnan(tpot)
