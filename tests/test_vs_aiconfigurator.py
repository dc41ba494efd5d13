"""The disaggregated scenarios of benchmarks/vs_aiconfigurator (issue 14 item 6): generated
problems, both tools' pools, and the merge of an ``--only`` run into the stored results."""

from pathlib import Path

import pytest
import yaml

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "vs_aiconfigurator"


MODULES = ("aic_parse", "common", "disagg", "merge", "ours_plan", "render", "run", "verdict")


@pytest.fixture
def bench(monkeypatch):
    import sys

    monkeypatch.syspath_prepend(str(BENCH))  # the benchmark's modules import each other by name
    import aic_parse
    import disagg
    import merge
    import ours_plan
    import run

    yield {"aic": aic_parse, "disagg": disagg, "merge": merge, "ours": ours_plan, "run": run}
    for name in MODULES:  # generic names: leave no trace for other tests
        sys.modules.pop(name, None)


def test_disagg_scenarios_search_pools_in_every_variant(bench):
    scen = bench["run"].scenarios()
    pooled = [s for s in scen if s.get("disagg")]
    assert len(pooled) == 3 and len({s["id"] for s in scen}) == len(scen)
    for s in scen:
        for v in bench["run"].VARIANTS:
            doc = yaml.safe_load(bench["ours"].problem_yaml(s, v, 2.0, ["b200", "h200-sxm"]))
            assert doc["search"].get("disaggregation") == ([False, True] if s.get("disagg") else None)


# aiconfigurator 0.12's disagg best_config_topn.csv row for DeepSeek-V3 on 16 H200 (columns used)
DEEPSEEK_DISAGG_ROW = {
    "(p)workers": "1", "(p)tp": "1", "(p)pp": "1", "(p)dp": "8", "(p)bs": "1",
    "(p)parallel": "tp1pp1dp8etp1ep8", "(d)workers": "1", "(d)tp": "8", "(d)pp": "1", "(d)dp": "1",
    "(d)bs": "56", "(d)parallel": "tp8pp1dp1etp2ep4", "(d)gemm": "fp8_block", "(d)kvcache": "fp8",
    "num_total_gpus": "16", "tokens/s/gpu_cluster": "108.991", "ttft": "1692.292", "tpot": "29.606",
    "request_rate": "3.488", "concurrency": "56",
}


def test_aic_pools_count_attention_dp_gpus(bench):
    s = {"gpus": 16}
    pick = bench["aic"].summarize_aic_row(DEEPSEEK_DISAGG_ROW, "disagg", s)
    pools = bench["disagg"].aic_pools(pick, 16)
    # prefill: 1 worker of TP1 x attention DP 8 = 8 GPUs; decode: 1 worker of TP8 = 8 GPUs
    assert pools["prefill"]["gpus"] == 8 and pools["decode"]["gpus"] == 8
    assert pools["prefill"]["configs"] == ["1x tp1pp1dp8etp1ep8"]
    assert pools["decode"]["configs"] == ["1x TP8 batch 56"]
    usd_h, usd_m = bench["disagg"].aic_usd({"prices_usd_per_gpu_hour": {"h200-sxm": 4.0}},
                                           {"scenario": {"gpu": "h200-sxm", "gpus": 16}}, pick)
    assert usd_h == 64.0
    assert usd_m == pytest.approx(64.0 / (108.991 * 16 * 3600) * 1e6)


def test_plan_pools_sum_replicas_and_gpus_per_role(bench):
    deps = [
        {"gpu": "h200-sxm", "tp": 8, "pp": 1, "max_batch": 64, "replicas": 2, "gpus": 16, "role": "prefill",
         "quantization": "fp8", "kv_cache_dtype": "fp8"},
        {"gpu": "b200", "tp": 8, "pp": 1, "max_batch": 128, "replicas": 3, "gpus": 24, "role": "decode",
         "quantization": "fp8", "kv_cache_dtype": "bf16"},
        {"gpu": "b200", "tp": 4, "pp": 2, "max_batch": 32, "replicas": 1, "gpus": 8, "role": "both",
         "quantization": "fp8", "kv_cache_dtype": "fp8"},
    ]
    pools = bench["disagg"].plan_pools({"deployments": deps}, "fp8")
    assert {r: (p["replicas"], p["gpus"]) for r, p in pools.items()} == {
        "prefill": (2, 16), "decode": (3, 24), "both": (1, 8)}
    assert pools["decode"]["configs"] == ["3x b200 TP8 batch 128 (fp8/kv-bf16)"]
    assert pools["both"]["configs"] == ["1x b200 TP4 PP2 batch 32"]


def _rec(sid, tag):
    return {"scenario": {"id": sid}, "tag": tag}


def test_merge_keeps_the_other_scenarios(bench):
    stored = {"scenarios": [_rec("a", "old"), _rec("b", "old")], "accuracy_rows": [{"id": 1}],
              "prices_usd_per_gpu_hour": {"h100-sxm": 3.2}, "environment": {"date": "then"},
              "aic_unavailable": None}
    new = {"scenarios": [_rec("c", "new"), _rec("b", "new")], "accuracy_rows": [],
           "prices_usd_per_gpu_hour": {"b200": 6.0}, "environment": {"date": "now"}}
    out = bench["merge"].merge(stored, new, ["a", "b", "c"])
    assert [(r["scenario"]["id"], r["tag"]) for r in out["scenarios"]] == [("a", "old"), ("b", "new"), ("c", "new")]
    assert out["accuracy_rows"] == [{"id": 1}] and out["environment"] == {"date": "then"}
    assert out["prices_usd_per_gpu_hour"] == {"h100-sxm": 3.2, "b200": 6.0}
    assert out["merged_runs"] == [{"date": "now", "scenarios": ["c", "b"]}]
    assert out["partial"] is False
    assert bench["merge"].merge(stored, new, ["a", "b", "c", "d"])["partial"] is True
