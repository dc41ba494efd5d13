"""Issue 14's Done-when 3 score over the aggregated EP / attention-DP and disaggregated rows."""

import pandas as pd
import pytest

from planner.accuracy_frontier import SETS, FrontierScore, frontier_score, score_line
from tests.test_accuracy_disagg import frame, rows as disagg_rows


def test_coverage_and_medians_by_hand():
    scored = pd.DataFrame({"family": ["ttft", "ttft", "ttft", "tpot_itl", "throughput"],
                           "statistic": ["mean", "p99", "median", "mean", "total"],
                           "ape_pct": [10.0, 50.0, 40.0, 5.0, 30.0], "id": list("abcde")})
    s = FrontierScore(scored=scored, recorded={SETS[0]: 10, SETS[1]: 10}, derived={SETS[0]: 4, SETS[1]: 0},
                      predicted={SETS[0]: 5, SETS[1]: 10})
    assert s.coverage() == pytest.approx(15 / 16)             # the 4 rescaled totals leave both sides
    assert s.coverage(distinct=False) == pytest.approx(15 / 20)
    assert s.medians()["ttft"] == 40.0 and s.medians(central_only=True)["ttft"] == 25.0
    assert s.holds() == {"coverage": True, "tpot_itl": True, "ttft": False, "throughput": False}
    assert "MISS" in score_line(s) and "93.8%" in score_line(s)


def test_rescaled_total_is_left_out_and_disaggregated_rows_count(catalog):
    ep = {"id": "x", "source": "[InferenceX dashboard] x", "engine": "sglang", "model": "deepseek-v3",
          "gpu": "b200", "tp": 8, "pp": 1, "ep": 8, "num_gpus": 64, "mode": "agg", "isl": 1024, "osl": 1024,
          "load_kind": "concurrency", "load_value": 64, "weight_dtype": "fp8", "kv_dtype": "",
          "notes": "attention tensor-parallel"}
    agg = frame([{**ep, "id": "p", "metric": "output_tok_s_per_gpu", "value": 500.0},
                 {**ep, "id": "t", "metric": "output_tok_s_total", "value": 500.0 * 64},
                 {**ep, "id": "n", "ep": 1, "num_gpus": 8, "metric": "output_tok_s_per_gpu", "value": 500.0}])
    s = frontier_score(catalog, pd.concat([agg, disagg_rows(catalog)], ignore_index=True))
    # ep 1 without attention DP is not a layout row; the agg "d" row of the disagg frame neither.
    assert s.recorded == {SETS[0]: 2, SETS[1]: 3}
    assert s.derived == {SETS[0]: 1, SETS[1]: 0}
    assert s.predicted == {SETS[0]: 1, SETS[1]: 3}
    assert s.coverage() == 1.0 and s.coverage(distinct=False) == pytest.approx(4 / 5)
    assert sorted(s.scored["id"]) == ["a", "b", "c", "p"] and (s.scored["ape_pct"] >= 0).all()
