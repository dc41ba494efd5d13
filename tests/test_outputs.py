"""``planner solve --out DIR``: every file, numbers equal to the JSON result, atomic writes."""

import hashlib
import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest

from planner.outputs import writer
from planner.outputs.result_json import result_to_dict
from planner.schema import PlanningInputError

SMALL = """\
name: small-out
workloads:
  - name: chat
    model: llama-3.1-8b
    rate_per_s: 8
    prompt_tokens: {mean: 600, p95: 1800}
    output_tokens: {mean: 200, p95: 600}
    slo: {ttft_p95_s: 1.0, tpot_p95_s: 0.05}
search:
  gpus: [l40s, h100-sxm]
  quantization: [bf16, fp8]
  kv_cache_dtype: [fp8]
  tp: [1, 2]
  pp: [1]
  max_batch: [32, 128]
optimize: {pareto_points: 3, top_k: 2}
"""

MEASURED = """\
name: measured-out
workloads:
  - {name: a, rate_per_s: 6}
capacity_table:
  - {name: l4-row, gpu: l4, gpus: 1, usd_per_hour: 0.8, capacity_per_s: {a: 2}}
"""

# CSV floats have 15 significant digits (planner/outputs/tables.py): equal to the JSON to 1e-14.
CSV_REL = 1e-14
TOP_FILES = {"report.md", "report.html", "plans.csv", "pareto.csv", "candidates.csv", "run.json",
             "pareto_tpot.png", "pareto_tpot.svg", "pareto_ttft.png", "pareto_ttft.svg",
             "plan_costs.png", "plan_costs.svg", "launch"}
LAUNCH_FILES = {"vllm.sh", "sglang.sh", "trtllm.sh", "trtllm-extra.yaml", "deployment.yaml"}


def _solve(path):
    from planner.pipeline import plan
    from planner.problem import load_problem

    return plan(load_problem(path))


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    """(result, output dir) of the small problem, written once."""
    root = tmp_path_factory.mktemp("outputs")
    problem = root / "small.yaml"
    problem.write_text(SMALL)
    result = _solve(problem)
    out = writer.write_outputs(result, root / "out")
    return result, out


def _digests(path):
    return {p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_every_file_is_written(solved):
    result, out = solved
    assert {p.name for p in out.iterdir()} == TOP_FILES
    subdirs = [p for p in (out / "launch").iterdir() if p.is_dir()]
    assert len(subdirs) == len(result.best.deployments)
    for sub in subdirs:
        assert {p.name for p in sub.iterdir()} == LAUNCH_FILES
        assert os.access(sub / "vllm.sh", os.X_OK)
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".out.")]  # no temporary left


def test_plans_csv_equals_json(solved):
    result, out = solved
    doc = result_to_dict(result)
    csv = pd.read_csv(out / "plans.csv")
    expected = [(p, d) for p in doc["plans"] for d in p["deployments"]]
    assert len(csv) == len(expected)
    for (_, row), (p, d) in zip(csv.iterrows(), expected):
        assert row["rank"] == p["rank"]
        assert row["plan_usd_per_hour"] == pytest.approx(p["usd_per_hour"], rel=CSV_REL)
        for basis in ("", "input_", "total_"):
            key = f"usd_per_million_{basis}tokens"
            assert row[f"plan_{key}"] == pytest.approx(p[key], rel=CSV_REL)
        for key in ("candidate_id", "gpu", "replicas", "gpus", "tp", "max_batch"):
            assert row[key] == d[key], key
        for key in ("usd_per_hour", "load_fraction"):
            assert row[key] == pytest.approx(d[key], rel=CSV_REL), key
        for name, w in d["workloads"].items():
            assert row[f"rate_per_s[{name}]"] == pytest.approx(w["rate_per_s"], rel=CSV_REL)
            assert row[f"tpot_p95_s[{name}]"] == pytest.approx(w["tpot_p95_s"], rel=CSV_REL)


def test_pareto_and_candidates_csv_equal_result(solved):
    result, out = solved
    doc = result_to_dict(result)
    pareto = pd.read_csv(out / "pareto.csv", keep_default_na=False, na_values=[""])
    assert len(pareto) == len(doc["pareto"]) > 0
    for (_, row), point in zip(pareto.iterrows(), doc["pareto"]):
        assert (row["front"], row["metric"]) == (point["front"], point["metric"])
        assert row["target_s"] == pytest.approx(point["target_s"], rel=CSV_REL)
        cost = point["usd_per_hour"]
        assert (math.isnan(row["usd_per_hour"]) if cost is None
                else row["usd_per_hour"] == pytest.approx(cost, rel=CSV_REL))
    cands = pd.read_csv(out / "candidates.csv", index_col="candidate_id", keep_default_na=False, na_values=[""])
    assert list(cands.index) == list(result.candidates.index)
    assert (cands["feasible"] == result.candidates["feasible"]).all()
    reasons = pd.read_csv(out / "candidates.csv", index_col="candidate_id", dtype={"infeasible_reason": str},
                          keep_default_na=False)["infeasible_reason"]
    assert (reasons == result.candidates["infeasible_reason"]).all()
    rejected = cands[~cands["feasible"]]["infeasible_reason"].value_counts().to_dict()
    assert rejected == doc["candidates"]["rejected"]


def test_reports_show_the_json_numbers(solved):
    result, out = solved
    doc = result_to_dict(result)
    md = (out / "report.md").read_text()
    page = (out / "report.html").read_text()
    for text in (md, page):
        for p in doc["plans"]:
            assert f"Plan #{p['rank']}: {p['usd_per_hour']:.2f} USD/h" in text
            for d in p["deployments"]:
                assert f"{d['usd_per_hour']:.2f}" in text
        for reason in doc["candidates"]["rejected"]:
            assert reason in text
        assert "as of" in text and "memory_efficiency" in text and "Calibration" in text
    for p in doc["plans"]:
        for d in p["deployments"]:
            config = f"tp{d['tp']} pp{d['pp']} {d['quantization']}/kv-{d['kv_cache_dtype']} b{d['max_batch']}"
            row = (f"| {d['gpu']} | {d['model']} | {config} | {d['replicas']} | {d['gpus_per_replica']} | "
                   f"{d['gpus']} | {d['usd_per_hour']:.2f} |")
            assert row in md


def test_html_is_self_contained(solved):
    _, out = solved
    page = (out / "report.html").read_text()
    for bad in ("http://", "https://", 'src="//', "<link", "<script"):
        assert bad not in page, bad
    assert page.count('src="data:image/png;base64,') == 3
    assert "http://" not in (out / "report.md").read_text()


def test_run_record(solved):
    result, out = solved
    record = json.loads((out / "run.json").read_text())
    assert record["generator"] == writer.GENERATOR
    assert record["input"]["sha256"] == hashlib.sha256(Path(result.problem.path).read_bytes()).hexdigest()
    assert record["catalog_versions"] == result.problem.catalog.versions
    assert {"numpy", "pandas", "ortools", "pydantic", "llm-deployment-planner"} <= set(record["packages"])
    assert record["python"] and record["created_utc"]
    assert record["solver"]["scales"] and record["solver"]["params"]
    assert record["files"] == {k: v for k, v in _digests(out).items() if k != "run.json"}


def test_same_input_same_files(solved, tmp_path):
    result, out = solved
    again = writer.write_outputs(_solve(result.problem.path), tmp_path / "again")
    a, b = _digests(out), _digests(again)
    a.pop("run.json"), b.pop("run.json")
    assert a == b


def test_failed_write_leaves_nothing(solved, tmp_path, monkeypatch):
    result, out = solved

    def boom(*args, **kwargs):
        raise RuntimeError("plot failed")

    target = tmp_path / "new"
    monkeypatch.setattr("planner.outputs.plots.render_plots", boom)
    with pytest.raises(RuntimeError):
        writer.write_outputs(result, target)
    assert not target.exists()
    monkeypatch.undo()

    # A failure in the middle of writing: the earlier output stays as it was, no temporary left.
    before = _digests(out)
    calls = []
    real = writer._write_file

    def flaky(root, rel, data):
        calls.append(rel)
        if len(calls) == 5:
            raise OSError("disk full")
        real(root, rel, data)

    monkeypatch.setattr(writer, "_write_file", flaky)
    with pytest.raises(OSError):
        writer.write_outputs(result, out)
    assert _digests(out) == before
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(".")) == []


def test_out_dir_rule(solved, tmp_path):
    _, out = solved
    writer.check_out_dir(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    writer.check_out_dir(tmp_path / "empty")
    writer.check_out_dir(out)  # written by the planner: replaced
    (tmp_path / "file").write_text("x")
    with pytest.raises(PlanningInputError, match="not a directory"):
        writer.check_out_dir(tmp_path / "file")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(PlanningInputError, match="not written by the planner"):
        writer.check_out_dir(tmp_path / "foreign")


def test_cli_solve_out_and_refusal(tmp_path, capsys):
    from planner import cli

    (tmp_path / "m.yaml").write_text(MEASURED)
    out = tmp_path / "measured"
    assert cli.main(["solve", str(tmp_path / "m.yaml"), "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {p.name for p in out.iterdir()} == TOP_FILES
    assert "measured capacity table" in (out / "launch" / "README.md").read_text()
    assert pd.read_csv(out / "plans.csv")["usd_per_hour"].tolist() == pytest.approx(
        [d["usd_per_hour"] for d in doc["plans"][0]["deployments"]] +
        [d["usd_per_hour"] for p in doc["plans"][1:] for d in p["deployments"]], rel=CSV_REL)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "keep.txt").write_text("x")
    assert cli.main(["solve", str(tmp_path / "m.yaml"), "--out", str(tmp_path / "foreign")]) == 2
    assert "not written by the planner" in capsys.readouterr().err


def test_infeasible_problem_still_reports(tmp_path):
    (tmp_path / "inf.yaml").write_text(SMALL.replace("tpot_p95_s: 0.05", "tpot_p95_s: 0.0005"))
    result = _solve(tmp_path / "inf.yaml")
    assert not result.plans
    out = writer.write_outputs(result, tmp_path / "out")
    assert {p.name for p in out.iterdir()} == TOP_FILES
    assert "No plan meets the SLOs" in (out / "report.md").read_text()
    assert len(pd.read_csv(out / "plans.csv")) == 0


def test_records_are_the_frames_to_dict_records_value_for_value():
    """result_json._records (the deployments and routing rows of the JSON) gives what
    ``DataFrame.to_dict(orient="records")`` gives: the same keys in order, values and types."""
    import numpy as np

    from planner.outputs.result_json import _records

    frame = pd.DataFrame({
        "candidate_id": ["a", "b", "c"], "replicas": np.array([1, 2, 3], dtype=np.int64),
        "usd_per_hour": [1.5, float("nan"), 3.0], "spare": [True, False, True],
        "ep": pd.Series([np.int64(2), None, 4], dtype=object), "pool": [None, "prefill", float("nan")],
        "ratio": pd.Series([np.float32(0.5), np.float64(0.25), np.bool_(True)], dtype=object),
        "name": pd.Series(["x", None, "z"], dtype="str"),
    })
    got, expected = _records(frame), frame.to_dict(orient="records")
    assert [list(r) for r in got] == [list(r) for r in expected]
    for row, want in zip(got, expected):
        for key, value in row.items():
            assert type(value) is type(want[key]), key
            assert value == want[key] or (value != value and want[key] != want[key]), key
    assert _records(frame.iloc[:0]) == []
