"""planner import-bench: vLLM and SGLang serving-benchmark results into measurement rows."""

import json

import pandas as pd
import pytest

from conftest import DATA
from planner.accuracy import MEASUREMENT_COLUMNS, accuracy_report, load_measurements
from planner.import_bench import BenchContext, import_results, read_results, resolve_ids
from planner.schema import PlanningInputError
from test_accuracy import run_planner

BENCH = DATA / "bench"
VLLM = BENCH / "vllm_serve_result.json"
SGLANG = BENCH / "sglang_bench_serving.jsonl"


def _by_metric(frame):
    return frame.set_index("metric")["value"].to_dict()


def test_vllm_result_becomes_closed_loop_rows(catalog):
    frame = resolve_ids(import_results(VLLM, BenchContext(engine="vllm", gpu="h100", tp=1,
                                                          weight_dtype="bf16")), catalog)
    assert list(frame.columns) == list(MEASUREMENT_COLUMNS)
    assert set(frame["model"]) == {"llama-3.1-8b"}  # from model_id meta-llama/Llama-3.1-8B-Instruct
    assert set(frame["gpu"]) == {"h100-sxm"}  # alias resolved
    assert set(frame["load_kind"]) == {"concurrency"} and set(frame["load_value"]) == {16}
    assert set(frame["isl"]) == {1024.0} and set(frame["osl"]) == {128.0}  # token totals / completed
    values = _by_metric(frame)
    assert values["ttft_ms_mean"] == 61.3 and values["ttft_ms_median"] == 55.9
    assert values["ttft_ms_p99"] == 140.2
    assert values["tpot_ms_mean"] == 22.1 and values["tpot_ms_p99"] == 24.8
    assert values["itl_ms_median"] == 21.6 and values["e2e_ms_mean"] == 2868.0
    assert values["output_tok_s_total"] == 651.8 and values["request_per_s"] == 5.092
    assert values["total_tok_s_total"] == 5866.2
    assert "std_ttft_ms" not in " ".join(frame["notes"])  # no schema metric for std
    assert frame["id"].is_unique and set(frame["mode"]) == {"agg"}
    assert (frame["unit"] == frame["metric"].map(lambda m: "ms" if "_ms_" in m else
                                                 ("req/s" if m == "request_per_s" else "tok/s"))).all()
    assert "160 requests" in frame["notes"].iloc[0]


def test_sglang_jsonl_runs_open_and_closed_loop(catalog):
    frame = import_results(SGLANG, BenchContext(engine="sglang", model="llama-3.1-8b", gpu="h200-sxm", tp=2))
    assert len(read_results(SGLANG)) == 2
    runs = {kind: part for kind, part in frame.groupby("load_kind")}
    assert set(runs) == {"request_rate", "concurrency"}
    assert set(runs["request_rate"]["load_value"]) == {4.0}
    assert set(runs["concurrency"]["load_value"]) == {64.0}
    assert set(frame["isl"]) == {1024.0} and set(frame["osl"]) == {256.0}  # random_input/output_len
    open_loop = _by_metric(runs["request_rate"])
    assert open_loop["ttft_ms_mean"] == 48.2 and open_loop["e2e_ms_median"] == 2087.3
    assert open_loop["total_tok_s_total"] == pytest.approx(4071.6 + 1017.9)
    assert set(frame["num_gpus"]) == {2} and set(frame["tp"]) == {2}


def test_imported_rows_are_predicted(tmp_path, catalog):
    out = tmp_path / "mine.csv"
    run_planner("import-bench", VLLM, "--engine", "vllm", "--gpu", "h100-sxm", "--weight-dtype", "bf16",
                "--out", out)
    run_planner("import-bench", SGLANG, "--engine", "sglang", "--gpu", "h200-sxm", "--model", "llama-3.1-8b",
                "--tp", "2", "--out", out, "--append")
    frame = load_measurements(out)
    assert len(frame) == 14 + 2 * 14  # 11 latency statistics + 3 throughputs per run
    report = accuracy_report(catalog, frame, None)
    assert report["predicted"] == len(frame)  # every imported row is predictable
    assert {"ttft_ms_p99", "tpot_ms_median", "e2e_ms_mean"} <= set(report["by_metric"])


def test_import_errors(tmp_path):
    with pytest.raises(PlanningInputError, match="--engine"):
        import_results(VLLM, BenchContext(engine="trtllm", gpu="h100-sxm"))
    with pytest.raises(PlanningInputError, match="--gpu"):
        import_results(VLLM, BenchContext(engine="vllm"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json\n")
    with pytest.raises(PlanningInputError, match="not JSON"):
        read_results(bad)
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"date": "x"}))
    with pytest.raises(PlanningInputError, match="no metric"):
        import_results(empty, BenchContext(engine="vllm", model="llama-3.1-8b", gpu="h100-sxm"))
    _, err = run_planner("import-bench", tmp_path / "none.json", "--engine", "vllm", "--gpu", "h100-sxm",
                         "--out", tmp_path / "o.csv", expect=2)
    assert "no such benchmark result file" in err
    _, err = run_planner("import-bench", VLLM, "--engine", "tgi", "--gpu", "h100-sxm", "--out",
                         tmp_path / "o.csv", expect=2)
    assert "invalid choice" in err
    assert not (tmp_path / "o.csv").exists()
    assert isinstance(pd.read_json(VLLM, typ="series"), pd.Series)  # the fixture is plain JSON
