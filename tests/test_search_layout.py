"""Expert parallelism and attention DP as searched dimensions (issue 14 items 1 and 3):
``search: ep`` / ``search: attention_dp``, their rules (planner/layout_rules.py), the serving
terms of planner/serving/moe.py in the candidate table, and the plan's ``ep`` /
``attention_dp`` fields, text, report and launch settings.

Hand values: docs/serving-model.md section 13 (as tests/test_moe.py).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from hardening_helpers import assert_input_error, write
from hardening_helpers import cli as run
from planner.configs import config_arrays
from planner.problem import load_problem
from planner.search import REASONS, enumerate_candidates
from planner.serving.evaluate import evaluate
from planner.serving.params import ServingParams

DSV3_ROUTED = 653_908_770_816
DSV3_DENSE = 671e9 - DSV3_ROUTED   # non-expert parameters (attention, dense layers, shared expert)


def workload(name="chat", model="deepseek-v3", rate=8.0, prompt=1000, output=300, ttft=5.0, tpot=0.1):
    return {"name": name, "model": model, "rate_per_s": rate, "prompt_tokens": prompt,
            "output_tokens": output, "slo": {"ttft_p95_s": ttft, "tpot_p95_s": tpot}}


#: DeepSeek-V3 FP8 on H200 (8 per NVLink domain, 50 GB/s InfiniBand per GPU), searching ep and
#: attention DP, with tp 16 (two nodes) allowed only for the wide-EP layout.
FRONTIER = {
    "name": "dsv3-ep",
    "workloads": [workload()],
    "search": {"gpus": ["h200-sxm"], "quantization": ["fp8"], "kv_cache_dtype": ["fp8"], "tp": [8, 16],
               "pp": [1], "ep": [1, 8, 16], "attention_dp": [False, True], "max_batch": [32, 64, 128]},
    "serving": {"calibration": "none"},
    "optimize": {"top_k": 1},
}


@pytest.fixture(scope="module")
def frontier(tmp_path_factory):
    """The frontier problem's candidates and ``solve --out`` (JSON document, output folder)."""
    tmp = tmp_path_factory.mktemp("dsv3-ep")
    path = write(tmp, FRONTIER)
    candidates = enumerate_candidates(load_problem(path))
    code, out, err = run("solve", path, "--json", "--no-pareto", "--out", tmp / "out")
    assert code == 0, err
    return candidates, json.loads(out), tmp / "out"


def _row(candidates, **key) -> pd.Series:
    mask = np.logical_and.reduce([candidates[k] == v for k, v in key.items()])
    (row,) = [r for _, r in candidates[mask].iterrows()]
    return row


def test_frontier_problem_solves_to_a_proven_optimum(frontier):
    candidates, doc, _ = frontier
    assert doc["solver"]["status"] == "optimal"
    assert len(candidates) == 2 * 3 * 2 * 3
    # ep 16 inside tp 8: 2 x 3 batches; tp 16 is 2 nodes: only attention DP with ep = tp spans them
    assert doc["candidates"]["rejected"]["ep_does_not_divide_tp"] == 2 * 3
    assert doc["candidates"]["rejected"]["tp_exceeds_scale_up_domain"] == (2 * 3 - 1) * 3
    wide = _row(candidates, tp=16, ep=16, attention_dp=True, max_batch=128)
    assert wide["infeasible_reason"] != "tp_exceeds_scale_up_domain"
    assert wide["gpus"] == 16
    for dep in doc["plans"][0]["deployments"]:
        assert isinstance(dep["ep"], int) and isinstance(dep["attention_dp"], bool)


def test_ep_candidate_memory_and_tpot_are_moe_py_values(frontier, catalog):
    candidates, _, _ = frontier
    row = _row(candidates, tp=8, ep=8, attention_dp=True, max_batch=64)
    # non-expert weights on each of the 8 attention-DP ranks, the routed experts once: 98.8 GB/GPU
    assert row["weights_bytes_per_gpu"] == pytest.approx((8 * DSV3_DENSE + DSV3_ROUTED) / 8)
    dense = _row(candidates, tp=8, ep=1, attention_dp=False, max_batch=64)
    assert dense["weights_bytes_per_gpu"] == pytest.approx(671e9 / 8)
    assert row["kv_budget_bytes_per_gpu"] == pytest.approx(0.9 * 141e9 - (8 * DSV3_DENSE + DSV3_ROUTED) / 8 - 2e9)
    # TPOT: moe.py's composition at the workload's mean lengths (batch 64, context 1000 + 150)
    frame = pd.DataFrame({"model": ["deepseek-v3"], "gpu": ["h200-sxm"], "quantization": ["fp8"],
                          "kv_cache_dtype": ["fp8"], "tp": [8.0], "pp": [1.0], "batch": [64.0],
                          "prompt_tokens": [1000.0], "output_tokens": [300.0], "context_tokens": [np.nan]})
    c, _ = config_arrays(catalog, frame)
    ep_dpa = evaluate(c.replace(ep=8.0, attention_dp=True), ServingParams())
    assert row["tpot_s"] == pytest.approx(ep_dpa["tpot_s"][0], rel=1e-12)
    assert dense["tpot_s"] == pytest.approx(evaluate(c, ServingParams())["tpot_s"][0], rel=1e-12)
    assert row["tpot_s"] != pytest.approx(dense["tpot_s"], rel=1e-3)
    # the two-node wide-EP stage: half of each all-to-all leaves the NVLink domain over
    # InfiniBand (50 GB/s per GPU), slower than the same 16 GPUs on one domain would be
    wide = _row(candidates, tp=16, ep=16, attention_dp=True, max_batch=64)
    c16 = c.replace(tp=16.0, ep=16.0, attention_dp=16.0)
    assert wide["tpot_s"] == pytest.approx(evaluate(c16, ServingParams())["tpot_s"][0], rel=1e-12)
    one_domain = evaluate(c16.replace(domain_gpus=16.0), ServingParams())["tpot_s"][0]
    assert wide["tpot_s"] > one_domain
    assert wide["weights_bytes_per_gpu"] == pytest.approx((16 * DSV3_DENSE + DSV3_ROUTED) / 16)


def test_attention_dp_splits_the_mla_cache_in_the_kv_capacity_check(tmp_path):
    """1,024 slots of 1,300 tokens (35,136 B per token of FP8 latent): with attention TP every
    GPU holds every latent, floor(41.0 GB / 45.7 MB) = 898 sequences; with attention DP 1/8
    of them, floor(26.1 GB / 5.71 MB) = 4,566 (the replicated attention weights cost 14.9 GB)."""
    doc = {**FRONTIER, "search": {**FRONTIER["search"], "tp": [8], "ep": [8], "max_batch": [1024]}}
    c = enumerate_candidates(load_problem(write(tmp_path, doc))).set_index("attention_dp")
    kv_seq = 61 * 576 * 1 * (1000 + 300)
    assert np.floor((0.9 * 141e9 - 671e9 / 8 - 2e9) / kv_seq) == 898
    assert np.floor((0.9 * 141e9 - (8 * DSV3_DENSE + DSV3_ROUTED) / 8 - 2e9) / (kv_seq / 8)) == 4566
    assert c.loc[False, "infeasible_reason"] == "max_batch_exceeds_kv_capacity"
    assert c.loc[True, "infeasible_reason"] != "max_batch_exceeds_kv_capacity"


def _layout_label(dep: dict, dpa: str) -> str:
    return (f" ep{dep['ep']}" if dep["ep"] > 1 else "") + (f" {dpa}" if dep["attention_dp"] else "")


def test_plan_text_report_and_launch_show_the_layout(frontier):
    _, doc, out = frontier
    deps = doc["plans"][0]["deployments"]
    plans = pd.read_csv(out / "plans.csv")
    assert plans[["ep", "attention_dp"]].values.tolist() == [[d["ep"], d["attention_dp"]] for d in deps]
    layouts = [d for d in deps if d["ep"] > 1 or d["attention_dp"]]
    assert layouts, "the optimum uses expert parallelism or attention DP on this problem"
    dep = layouts[0]
    code, text, _ = run("solve", out.parent / "p.yaml", "--no-pareto")
    assert code == 0
    b = dep["max_batch"]
    assert f"tp{dep['tp']} pp1 fp8/kv-fp8 max_batch {b}{_layout_label(dep, 'attention-dp')}  (" in text
    report = (out / "report.md").read_text()
    assert f"| tp{dep['tp']} pp1 fp8/kv-fp8 b{b}{_layout_label(dep, 'dpa')} |" in report
    sglang = next((out / "launch").glob("*/sglang.sh")).read_text()
    if dep["ep"] > 1:
        assert f"--ep-size {dep['ep']}" in sglang and "--moe-a2a-backend deepep" in sglang
    if dep["attention_dp"]:
        assert f"--enable-dp-attention --dp-size {dep['tp']}" in " ".join(sglang.replace("\\\n", " ").split())


def test_wide_ep_replica_spans_two_nodes(tmp_path):
    """Only the two-node wide-EP layout searched: tp 16 = 16 attention-DP ranks, ep 16, its
    all-to-all half over InfiniBand; launched with SGLang --nnodes 2 and a LeaderWorkerSet."""
    doc = {**FRONTIER, "search": {**FRONTIER["search"], "tp": [16], "ep": [16], "attention_dp": [True],
                                   "max_batch": [128]}}
    path = write(tmp_path, doc)
    code, out, err = run("solve", path, "--json", "--no-pareto", "--out", tmp_path / "out")
    assert code == 0, err
    (dep,) = json.loads(out)["plans"][0]["deployments"]
    assert (dep["tp"], dep["ep"], dep["attention_dp"], dep["gpus_per_replica"]) == (16, 16, True, 16)
    folder = next((tmp_path / "out" / "launch").glob("01-*"))
    sglang = " ".join((folder / "sglang.sh").read_text().replace("\\\n", " ").split())
    assert "--enable-dp-attention --dp-size 16 --ep-size 16" in sglang and "--nnodes 2" in sglang
    assert "kind: LeaderWorkerSet" in (folder / "deployment.yaml").read_text()
    vllm = " ".join((folder / "vllm.sh").read_text().replace("\\\n", " ").split())
    assert "--tensor-parallel-size 1" in vllm and "--data-parallel-size 16" in vllm
    assert "--enable-expert-parallel" in vllm and "--data-parallel-backend ray" in vllm
    trtllm = yaml.safe_load((folder / "trtllm-extra.yaml").read_text())
    assert trtllm["moe_expert_parallel_size"] == 16 and trtllm["enable_attention_dp"] is True


def test_layout_rules_name_their_reasons(tmp_path):
    doc = {"name": "rules",
           "workloads": [workload("moe", "mixtral-8x7b", tpot=1.0, ttft=30.0),
                         workload("dense", "llama-3.1-8b", tpot=1.0, ttft=30.0)],
           "search": {"gpus": ["h200-sxm"], "quantization": ["bf16"], "kv_cache_dtype": ["bf16"],
                      "tp": [1, 2, 8], "pp": [1], "ep": [1, 2, 16], "attention_dp": [False, True],
                      "max_batch": [16]},
           "serving": {"calibration": "none"}}
    c = enumerate_candidates(load_problem(write(tmp_path, doc)))
    reason = c.set_index(["model", "tp", "ep", "attention_dp"])["infeasible_reason"]
    assert reason["llama-3.1-8b", 2, 2, False] == "ep_needs_moe_model"
    assert reason["llama-3.1-8b", 2, 1, True] == "attention_dp_needs_moe_model"
    assert reason["mixtral-8x7b", 8, 16, False] == "ep_does_not_divide_experts"   # 8 experts
    assert reason["mixtral-8x7b", 1, 2, False] == "ep_does_not_divide_tp"
    assert reason["mixtral-8x7b", 1, 1, True] == "attention_dp_needs_tp"
    assert reason["mixtral-8x7b", 8, 2, True] == ""
    assert reason["llama-3.1-8b", 1, 1, False] == ""
    layout = [r for r in REASONS if r.startswith(("ep_", "attention_dp_"))]
    assert REASONS.index(layout[0]) > REASONS.index("tp_does_not_divide_attention_heads")
    assert REASONS.index(layout[-1]) < REASONS.index("tp_exceeds_scale_up_domain")


def test_default_layout_keys_leave_the_grid_unchanged(tmp_path):
    base = {"name": "d", "workloads": [workload("chat", "llama-3.1-8b", tpot=0.1, ttft=2.0, rate=2.0)],
            "search": {"gpus": ["l40s"], "quantization": ["fp8"], "kv_cache_dtype": ["fp8"], "tp": [1, 2],
                       "pp": [1], "max_batch": [32]},
            "serving": {"calibration": "none"}}
    plain = enumerate_candidates(load_problem(write(tmp_path, base, "a.yaml")))
    explicit = {**base, "search": {**base["search"], "ep": [1], "attention_dp": [False]}}
    same = enumerate_candidates(load_problem(write(tmp_path, explicit, "b.yaml")))
    assert "ep" not in plain.columns and "attention_dp" not in plain.columns
    pd.testing.assert_frame_equal(plain, same)


@pytest.mark.parametrize("search, message", [
    ({"ep": [0]}, "search.ep: must be a non-empty list of integers >= 1"),
    ({"ep": [8.5]}, "search.ep"),
    ({"attention_dp": []}, "search.attention_dp: must be a non-empty list of true/false"),
    ({"attention_dp": [1]}, "search.attention_dp"),
    ({"ep": [2048]}, "search.ep"),
])
def test_bad_layout_keys_are_input_errors(tmp_path, search, message):
    path = write(tmp_path, {"name": "bad", "workloads": [workload()], "search": search})
    code, _, err = run("validate", path)
    assert_input_error(code, err, message)


@pytest.mark.parametrize("search, relaxation", [
    ({"ep": [8]}, {"search.ep": [1]}),
    ({"attention_dp": [True]}, {"search.attention_dp": [False]}),
])
def test_a_layout_only_a_moe_model_runs_is_diagnosed(tmp_path, search, relaxation):
    dense = {"name": "dense", "workloads": [workload("chat", "llama-3.1-8b", tpot=0.1, ttft=2.0, rate=2.0)],
             "search": {"gpus": ["l40s"], "quantization": ["fp8"], "kv_cache_dtype": ["fp8"], "tp": [1, 2],
                        "pp": [1], "max_batch": [32], **search},
             "serving": {"calibration": "none"}}
    code, out, err = run("solve", write(tmp_path, dense), "--json", "--no-pareto")
    assert code == 3, err
    doc = json.loads(out)
    assert set(doc["candidates"]["rejected"]) <= {"ep_needs_moe_model", "attention_dp_needs_moe_model",
                                                  "attention_dp_needs_tp"}
    fix = doc["diagnosis"][-1]   # after the finding that no candidate serves the workload
    assert fix["relaxation"] == relaxation and fix["verified"] is True
    assert fix["constraint"] == next(iter(relaxation)) and "llama-3.1-8b" in fix["message"]


def test_layouts_no_candidate_can_run_are_warned(tmp_path):
    doc = {"name": "w", "workloads": [workload("chat", "llama-3.1-8b")],
           "search": {"gpus": ["l40s"], "tp": [1, 2], "ep": [1, 8], "attention_dp": [False, True]}}
    code, _, err = run("validate", write(tmp_path, doc))
    assert code == 0, err
    assert "search.ep / search.attention_dp: no workload model has routed experts (llama-3.1-8b)" in err
    assert "search.ep: 8 divide(s) no search.tp value (1, 2)" in err
    code, _, err = run("validate", write(tmp_path, FRONTIER, "f.yaml"))
    assert code == 0 and "warning" not in err, err


def test_only_the_all_reduce_free_layout_spans_scale_up_domains():
    from planner.layout_rules import exceeds_scale_up_domain

    frame = pd.DataFrame({"tp": [8, 16, 16, 16, 16, 16], "ep": [1, 1, 16, 16, 8, 16],
                          "attention_dp": [False, False, False, True, True, True]})
    domain, ib = np.full(6, 8), np.full(6, 50e9)
    assert exceeds_scale_up_domain(frame, domain, ib).tolist() == [False, True, True, False, True, False]
    # no scale-out network in the catalog: nothing leaves the domain
    assert exceeds_scale_up_domain(frame, domain, np.zeros(6)).tolist() == [False, True, True, True, True, True]
    # without the layout columns: the seed's rule, tp > domain
    assert exceeds_scale_up_domain(frame[["tp"]], domain, ib).tolist() == [False] + [True] * 5


def test_expert_load_imbalance_override_slows_only_expert_parallel_candidates(tmp_path):
    """k = E = 8: the all-to-all moves the all-reduce's bytes, so balanced EP decodes as fast
    as TP; with lambda = 1.5 the most loaded rank reads and computes more (moe.py 13.3)."""
    search = {**FRONTIER["search"], "tp": [8], "ep": [1, 8], "attention_dp": [False], "max_batch": [64]}
    tpot = {}
    for lam in (None, 1.5):
        serving = {"calibration": "none", **({} if lam is None else {"expert_load_imbalance": lam})}
        doc = {**FRONTIER, "search": search, "serving": serving}
        c = enumerate_candidates(load_problem(write(tmp_path, doc, f"l{lam}.yaml"))).set_index("ep")["tpot_s"]
        tpot[lam] = c
    assert tpot[None][8] == pytest.approx(tpot[None][1], rel=1e-12)
    assert tpot[1.5][1] == tpot[None][1] and tpot[1.5][8] > tpot[None][8]


def test_an_imbalance_below_one_is_an_input_error(tmp_path):
    path = write(tmp_path, {**FRONTIER, "serving": {"expert_load_imbalance": 0.5}})
    code, _, err = run("validate", path)
    assert_input_error(code, err, "serving.expert_load_imbalance")
