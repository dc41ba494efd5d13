"""The documentation says what the code does (issue 16 item 14): calibration in reports, the
--mem-eff default, candidate ids, one-token outputs, and price sources a user can open."""

import json
import re

import pytest

from conftest import ROOT
from planner import cli

ONE_TOKEN = """\
name: classify-8b
workloads:
  - name: classify
    model: llama-3.1-8b
    rate_per_s: 20
    prompt_tokens: {mean: 500, p95: 1500}
    output_tokens: 1
    slo: {ttft_p95_s: 0.5, tpot_p95_s: 0.05}
search: {gpus: [l40s], quantization: [fp8], kv_cache_dtype: [fp8], tp: [1], pp: [1], max_batch: [64]}
"""


def _json(capsys, *argv):
    code = cli.main([*map(str, argv), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_one_token_outputs_are_planned(tmp_path, capsys):
    path = tmp_path / "classify.yaml"
    path.write_text(ONE_TOKEN)
    code, doc = _json(capsys, "solve", path, "--no-pareto", "--top", "1")
    assert code == 0 and doc["status"] == "optimal"
    w = doc["plans"][0]["deployments"][0]["workloads"]["classify"]
    assert w["rate_per_s"] == pytest.approx(20.0)
    assert 0 < w["ttft_p95_s"] <= 0.5 and 0 < w["tpot_p95_s"] <= 0.05
    for doc_path in ("docs/problem-format.md", "docs/serving-model.md"):
        text = (ROOT / doc_path).read_text()
        assert not re.search(r"output_tokens: 1`[^.]*internal\s+error", text), doc_path


def test_mem_eff_default_is_the_calibrated_value(capsys):
    args = ["eval", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"]
    _, calibrated = _json(capsys, *args)
    _, seed = _json(capsys, *args, "--calibration", "none")
    assert seed["parameters"]["memory_efficiency"] == 0.8
    assert calibrated["parameters"]["memory_efficiency"] != pytest.approx(0.8)   # so "default 0.8" was wrong
    with pytest.raises(SystemExit):
        cli.main(["eval", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "(default: the GPU's calibrated value (--calibration), 0.8 with --calibration none)" in help_text
    assert "(default 0.8)" not in help_text


def test_reports_doc_and_report_describe_the_calibration(tmp_path):
    from planner.outputs import report
    from planner.outputs.result_json import result_to_dict
    from planner.pipeline import plan
    from planner.problem import load_problem

    path = tmp_path / "classify.yaml"
    for extra, expected in (("", r"Calibration: \S*calibration\.yaml sets memory_efficiency"),
                            ("serving: {calibration: none}\n", r"Calibration: none applied")):
        path.write_text(ONE_TOKEN + extra)
        result = plan(load_problem(path), top_k=1, pareto=False)
        text = report.render_markdown(report.build_blocks(result, result_to_dict(result), {}))
        assert re.search(expected, text)
    doc = (ROOT / "docs" / "reports.md").read_text()
    assert "none is applied today" not in doc and "catalogs/calibration.yaml" in doc


def test_candidate_ids_are_c_and_12_hex_digits_everywhere(tmp_path):
    from planner.problem import load_problem
    from planner.search import enumerate_candidates

    path = tmp_path / "classify.yaml"
    path.write_text(ONE_TOKEN)
    ids = enumerate_candidates(load_problem(path)).index
    assert len(ids) and all(re.fullmatch(r"c[0-9a-f]{12}", i) for i in ids)
    for doc_path in ("docs/reports.md", "docs/problem-format.md", "README.md"):
        text = " ".join((ROOT / doc_path).read_text().split())
        assert not re.search(r"\b(10|ten) hex digits", text), doc_path
    assert "`c` followed by 12 hex digits" in (ROOT / "docs" / "problem-format.md").read_text()


def test_price_sources_cite_public_documents(capsys):
    _, doc = _json(capsys, "catalog", "prices")
    sources = [row["source"] for row in doc["prices"]]
    assert len(sources) > 50
    for source in sources:
        assert "catalog-research" not in source and "shared/" not in source, source
    with_url = [s for s in sources if "https://" in s]
    assert len(with_url) / len(sources) > 0.8
    header = (ROOT / "catalogs" / "prices.yaml").read_text().split("catalog_version")[0]
    assert "shared" not in header
