"""Tables and cost bases (issue 16 items 12, 15): $/1M input and total tokens in the JSON, CSV and
report; CSV floats with 15 significant digits; plans_table() with per-workload rates and
latencies; the budget workbook's Options sheet in rank order."""

import io
import json
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from conftest import DATA
from planner import cli
from planner.outputs.tables import CSV_SIGNIFICANT_DIGITS, csv_text

TIES = DATA / "summarize-ties.yaml"
# tests/data/summarize-ties.yaml: 23.148 req/s, mean prompt 4000 and output 500 tokens
RATE, PROMPT, OUTPUT = 23.148, 4000, 500


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    import contextlib

    out = tmp_path_factory.mktemp("tables") / "out"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["solve", str(TIES), "--top", "3", "--no-pareto", "--out", str(out), "--json"]) == 0
    return json.loads(stdout.getvalue()), out


def test_cost_per_million_input_and_total_tokens(solved):
    doc, out = solved
    plans = doc["plans"]
    assert len(plans) == 3
    for p in plans:
        usd_per_s = p["usd_per_hour"] / 3600
        assert p["usd_per_million_tokens"] == pytest.approx(usd_per_s / (RATE * OUTPUT) * 1e6, rel=1e-12)
        assert p["usd_per_million_input_tokens"] == pytest.approx(usd_per_s / (RATE * PROMPT) * 1e6, rel=1e-12)
        assert p["usd_per_million_total_tokens"] == pytest.approx(
            usd_per_s / (RATE * (PROMPT + OUTPUT)) * 1e6, rel=1e-12)
    # $20.35/h: 0.0611 $/1M input tokens, 0.488 $/1M output tokens, 0.0543 $/1M total
    assert plans[0]["usd_per_hour"] == pytest.approx(20.35)
    assert plans[0]["usd_per_million_input_tokens"] == pytest.approx(0.06105, abs=5e-5)
    assert plans[0]["usd_per_million_total_tokens"] == pytest.approx(0.05427, abs=5e-5)
    csv = pd.read_csv(out / "plans.csv")
    first = csv[csv["rank"] == 1].iloc[0]
    for basis in ("input_", "total_"):
        assert first[f"plan_usd_per_million_{basis}tokens"] == pytest.approx(
            plans[0][f"usd_per_million_{basis}tokens"], rel=1e-14)
    md = (out / "report.md").read_text()
    assert "USD/1M input tokens" in md and "USD/1M total tokens" in md
    assert f"{plans[0]['usd_per_million_input_tokens']:.4f}" in md
    assert f"{plans[0]['usd_per_million_total_tokens']:.4f}" in md


def _significant_digits(cell: str) -> int:
    mantissa = re.sub(r"[eE].*$", "", cell.lstrip("-")).replace(".", "").lstrip("0")
    return len(mantissa)


def test_csv_floats_have_at_most_15_significant_digits(solved):
    doc, out = solved
    for name in ("plans.csv", "candidates.csv"):
        text = (out / name).read_text()
        cells = [c for line in text.splitlines()[1:] for c in line.split(",")
                 if re.fullmatch(r"-?\d+\.\d+(e[-+]\d+)?", c)]
        assert cells, name
        assert max(_significant_digits(c) for c in cells) <= CSV_SIGNIFICANT_DIGITS, name
    # the JSON keeps the exact double (17 digits here), the CSV its 15-digit form
    tok = doc["plans"][0]["usd_per_million_tokens"]
    assert len(repr(tok).replace("0.", "", 1)) > CSV_SIGNIFICANT_DIGITS
    assert f"{tok:.15g}" in (out / "plans.csv").read_text()


def test_csv_text_writes_the_short_decimal():
    cost = 14 * 1.85                       # the 25.900000000000002
    assert repr(cost) == "25.900000000000002"
    text = csv_text(pd.DataFrame({"usd_per_hour": [cost, 0.1 + 0.2, 1e-7 / 3], "replicas": [14, 1, 2]}))
    assert text.splitlines() == ["usd_per_hour,replicas", "25.9,14", "0.3,1", "3.33333333333333e-08,2"]
    assert pd.read_csv(io.StringIO(text))["usd_per_hour"].iloc[0] == pytest.approx(cost, rel=1e-15)


def test_plans_table_has_rates_and_latencies_per_workload(solved):
    from planner.pipeline import plan
    from planner.problem import load_problem

    doc, _ = solved
    result = plan(load_problem(TIES), top_k=3, pareto=False)
    table = result.plans_table()
    expected = [(p, d) for p in doc["plans"] for d in p["deployments"]]
    assert len(table) == len(expected)
    for (_, row), (p, d) in zip(table.iterrows(), expected):
        assert (row["rank"], row["candidate_id"]) == (p["rank"], d["candidate_id"])
        w = d["workloads"]["summarize"]
        assert row["rate_per_s[summarize]"] == pytest.approx(w["rate_per_s"], rel=1e-15)
        assert row["ttft_p95_s[summarize]"] == pytest.approx(w["ttft_p95_s"], rel=1e-15)
        assert row["tpot_p95_s[summarize]"] == pytest.approx(w["tpot_p95_s"], rel=1e-15)
        assert row["plan_usd_per_million_input_tokens"] == pytest.approx(p["usd_per_million_input_tokens"])
    # the rates of each plan add up to the offered traffic
    assert table.groupby("rank")["rate_per_s[summarize]"].sum().to_numpy() == pytest.approx([RATE] * 3)


def test_plans_table_of_a_workload_a_deployment_does_not_serve():
    from planner.pipeline import plan
    from planner.problem import load_problem

    result = plan(load_problem(DATA.parent.parent / "problems" / "melange-example.yaml"), top_k=1, pareto=False)
    table = result.plans_table()
    names = [w.name for w in result.problem.workloads]
    rates = table[[f"rate_per_s[{n}]" for n in names]].to_numpy()
    assert np.isfinite(rates).all() and rates.sum(axis=0) == pytest.approx(
        [w.rate_per_s for w in result.problem.workloads])
    unserved = rates == 0
    latency = table[[f"ttft_p95_s[{n}]" for n in names]].to_numpy()
    assert np.isnan(latency[unserved]).all()      # measured capacities: no latency model at all


def test_budget_workbook_options_sheet_in_rank_order():
    from openpyxl import load_workbook

    from planner.cli.budget import SHEETS, budget_xlsx

    options = pd.DataFrame({"option": ["buy", "rent on-demand", "rent reserved-1y", "rent spot"],
                            "kind": ["buy", "rent", "rent", "rent"],
                            "cost_usd": [300.0, 500.0, 250.0, np.nan], "rank": [2.0, 3.0, 1.0, np.nan]})
    empty = pd.DataFrame({"x": [1]})
    result = SimpleNamespace(risk=None,
                             **{attr: (options if attr == "options" else empty) for attr in SHEETS.values()})
    rows = list(load_workbook(io.BytesIO(budget_xlsx(result)), read_only=True)["Options"].iter_rows(values_only=True))
    assert [r[0] for r in rows[1:]] == ["rent reserved-1y", "buy", "rent on-demand", "rent spot"]
    assert [r[3] for r in rows[1:]] == [1, 2, 3, None]
