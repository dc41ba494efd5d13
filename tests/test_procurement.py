"""Budget proposals: validation, option costing, break-even, and the example's outputs."""

import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from planner import procurement as pr
from planner.schema import PlanningInputError
from planner.units import HOURS_PER_MONTH

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "problems" / "procurement-example.yaml"

SMALL = """\
name: budget-small
workloads:
  - name: chat
    model: llama-3.1-8b
    requests_per_day: 600000
    prompt_tokens: {mean: 600, p95: 1800}
    output_tokens: {mean: 200, p95: 600}
    slo: {ttft_p95_s: 1.0, tpot_p95_s: 0.05}
search: {gpus: [l40s, h100-sxm], quantization: [fp8], kv_cache_dtype: [fp8], tp: [1, 2], pp: [1],
         max_batch: [64, 128]}
"""


def _problem(tmp_path, procurement: str | None, body: str = SMALL):
    from planner.problem import load_problem

    path = tmp_path / "p.yaml"
    path.write_text(body + (f"procurement:\n{procurement}" if procurement is not None else ""))
    return load_problem(path)


@pytest.mark.parametrize("section,expected", [
    ("  horizon_months: 0\n", "procurement.horizon_months: Input should be greater than 0"),
    ("  horizon: 12\n", "procurement.horizon: unknown key"),
    ("  buy: {power_usage_effectiveness: 0.9}\n", "procurement.buy.power_usage_effectiveness:"),
    ("  rent: [{offering: monthly}]\n", "procurement.rent[0].offering:"),
    ("  rent: [{offering: on-demand, usd_per_gpu_hour: {h100-sxn: 2.0}}]\n",
     "procurement.rent[0].usd_per_gpu_hour.h100-sxn: unknown GPU 'h100-sxn' (did you mean 'h100-sxm'?)"),
    ("  rent: [{offering: on-demand}, {offering: on-demand}]\n", "option names must be unique"),
    ("  rent: []\n  buy: null\n", "give at least one option"),
])
def test_invalid_sections_name_the_yaml_path(tmp_path, section, expected):
    problem = _problem(tmp_path, section)
    with pytest.raises(PlanningInputError) as err:
        pr.parse_procurement(problem)
    assert any(expected in line and line.startswith(str(problem.path)) for line in err.value.problems), \
        err.value.problems


def test_missing_section_and_defaults(tmp_path):
    with pytest.raises(PlanningInputError, match="procurement: required"):
        pr.parse_procurement(_problem(tmp_path, None))
    spec = pr.parse_procurement(_problem(tmp_path, "  {}\n"))
    assert spec.horizon_months == 24 and spec.period_months == 3
    assert [r.offering for r in spec.rent] == ["on-demand", "reserved-1y", "reserved-3y"]
    assert spec.buy.amortization_years == 3.0
    assert pr.periods(spec)[-1] == (21, 24)


def test_scaled_problem_scales_every_rate(tmp_path):
    problem = _problem(tmp_path, "  {}\n")
    scaled = pr.scaled_problem(problem, 1.5)
    assert scaled.workloads[0].rate_per_s == pytest.approx(1.5 * problem.workloads[0].rate_per_s)
    assert pr.traffic_scale(0.1, 3, 6) == pytest.approx(1.1 ** 6)
    assert pr.traffic_scale(-0.1, 3, 6) == pytest.approx(0.9 ** 3)


def test_rent_costs():
    need = pd.DataFrame({"h100-sxm": [2] * 6 + [3] * 6})
    od = pr.cost_rent(need, {"h100-sxm": 2.0}, "on-demand", "od")
    assert od.cost_usd == pytest.approx((2 * 6 + 3 * 6) * HOURS_PER_MONTH * 2.0)
    assert od.actions == [(0, "h100-sxm", 2), (6, "h100-sxm", 1)]
    res = pr.cost_rent(need, {"h100-sxm": 1.5}, "reserved-1y", "r1")
    # 2 reserved at month 0 (12 months inside), 1 at month 6 (6 inside, 6 after the horizon).
    assert res.cost_usd == pytest.approx((2 * 12 + 6) * HOURS_PER_MONTH * 1.5)
    assert res.committed_after_horizon_usd == pytest.approx(6 * HOURS_PER_MONTH * 1.5)
    missing = pr.cost_rent(need, {"h100-sxm": None}, "reserved-3y", "r3")
    assert missing.missing == ["h100-sxm"]


def test_buy_costs_whole_servers_and_depreciation():
    buy = pr.BuyOption(purchase_unit="server", amortization_years=2.0, usd_per_rack_month=0.0, usd_per_kwh=0.0)
    need = pd.DataFrame({"h100-sxm": [3] * 12 + [9] * 12})
    cost = pr.cost_buy(need, {"h100-sxm": 1000.0}, {"h100-sxm": 8}, {"h100-sxm": 700.0}, buy)
    assert cost.actions == [(0, "h100-sxm", 8), (12, "h100-sxm", 8)]
    assert cost.capex_usd == 16 * 1000.0
    # Bought at month 0: fully depreciated in 24 months; at month 12: half.
    assert cost.cost_usd == pytest.approx(8000 + 4000)
    assert cost.residual_value_usd == pytest.approx(4000)


def test_buying_beats_renting_above_the_breakeven_utilization():
    """Own N GPUs over the whole amortization period vs renting them only for the hours used."""
    buy = pr.BuyOption(amortization_years=3.0)
    price, watts, rent = 30000.0, 700.0, 3.2
    own = pr.own_costs_per_gpu_hour(price, watts, buy)["own_usd_per_gpu_hour"]
    breakeven = own / rent
    months, n = 36, 4
    need = pd.DataFrame({"h100-sxm": [n] * months})
    bought = pr.cost_buy(need, {"h100-sxm": price}, {"h100-sxm": 1}, {"h100-sxm": watts}, buy)
    hours = n * months * HOURS_PER_MONTH
    assert bought.cost_usd == pytest.approx(own * hours)  # the totals and the break-even agree
    for u in (breakeven - 0.02, breakeven + 0.02):
        rented_used_hours = pr.cost_rent(pd.DataFrame({"h100-sxm": [n] * months}), {"h100-sxm": rent * u},
                                         "on-demand", "od").cost_usd  # rent paid for u of the hours
        assert (bought.cost_usd < rented_used_hours) == (u > breakeven)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """``planner budget problems/procurement-example.yaml --out DIR --json`` (in process)."""
    from planner import cli

    import contextlib

    out = tmp_path_factory.mktemp("budget") / "out"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli.main(["budget", str(EXAMPLE), "--out", str(out), "--json"])
    assert code == 0, stderr.getvalue()
    return code, json.loads(stdout.getvalue()), out


def _markdown_totals(md: str) -> dict[str, int]:
    lines = md.split("## Total cost of each option over the horizon (USD)")[1].split("\n## ")[0].splitlines()
    rows = [line.split("|")[1:-1] for line in lines if line.startswith("| ") and not line.startswith("| rank")]
    return {r[1].strip(): int(r[3].strip().replace(",", "")) for r in rows}


def test_example_files_and_totals_agree(example):
    from openpyxl import load_workbook

    code, doc, out = example
    assert code == 0 and doc["status"] == "ok"
    names = {p.name for p in out.iterdir()}
    assert {"budget.md", "budget.xlsx", "run.json", "budget_options.csv", "budget_periods.csv",
            "budget_actions.csv", "budget_breakeven.csv", "budget_sensitivity.csv"} <= names
    md_totals = _markdown_totals((out / "budget.md").read_text())
    ws = load_workbook(out / "budget.xlsx", read_only=True)["Options"]
    rows = list(ws.iter_rows(values_only=True))
    header = rows[0]
    xlsx_totals = {r[header.index("option")]: r[header.index("cost_usd")] for r in rows[1:]}
    csv = pd.read_csv(out / "budget_options.csv")
    assert md_totals == xlsx_totals == dict(zip(csv["option"], csv["cost_usd"]))
    assert md_totals == {o["option"]: o["cost_usd"] for o in doc["options"]}
    assert len(md_totals) == 4 and all(v > 0 for v in md_totals.values())
    assert doc["best_option"] == min(md_totals, key=md_totals.get)
    sens = load_workbook(out / "budget.xlsx", read_only=True)["Sensitivity"]
    assert len(list(sens.iter_rows(values_only=True))) == 1 + 7


def test_example_plans_follow_the_growth(example):
    _, doc, _ = example
    periods = pd.DataFrame(doc["periods"])
    assert len(periods) == 8 and (periods["status"] == "optimal").all()
    assert np.all(np.diff(periods["traffic_scale"]) > 0)
    gpus = periods[[c for c in periods.columns if c.startswith("gpus[")]].sum(axis=1)
    assert gpus.iloc[-1] > gpus.iloc[0]
    bought = pd.DataFrame(doc["actions"]).query("option == 'buy'")
    assert (bought["change_gpus"] > 0).all()


def test_example_breakeven_is_reported_and_consistent(example):
    _, doc, out = example
    md = (out / "budget.md").read_text()
    for row in doc["breakeven"]:
        own, rent = row["own_usd_per_gpu_hour"], row["rent on-demand usd_per_gpu_hour"]
        u = row["rent on-demand breakeven_utilization"]
        assert u == pytest.approx(own / rent)
        assert own / (u + 0.01) < rent < own / (u - 0.01)  # buying wins above u*, loses below
        assert f"{u:.4g}" in md
    assert re.search(r"Cheapest option: \*\*.+\*\*", md)


def test_infeasible_period_exits_3_and_workbook_is_deterministic(tmp_path, capsys):
    from planner import cli, cli_budget

    problem = _problem(tmp_path, "  horizon_months: 6\n  growth_per_month_fraction: 0.5\n"
                                 "  rent: [{offering: on-demand}]\n",
                       body=SMALL + "inventory: {l40s: 2, h100-sxm: 0}\n")
    result = pr.budget(problem)
    assert result.status == "infeasible" and result.best_option is None
    assert result.periods["status"].iloc[0] == "optimal" and (result.periods["status"] == "infeasible").any()
    assert result.options["missing"].str.startswith("no plan in period").all()
    assert cli_budget.budget_xlsx(result) == cli_budget.budget_xlsx(result)
    assert cli.main(["budget", problem.path]) == 3
    assert "Status: **infeasible**" in capsys.readouterr().out
