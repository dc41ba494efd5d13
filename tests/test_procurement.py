"""Budget proposals: validation, option costing, break-even, and the example's outputs."""

import contextlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from planner import procurement as pr
from planner.problem import load_problem
from planner.procurement import budget_setup, parse_procurement, solve_options
from planner.schema import PlanningInputError
from planner.units import HOURS_PER_MONTH

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "problems" / "procurement-example.yaml"
DAILY = ROOT / "problems" / "daily-profile-example.yaml"

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


FLEET_SECTION = """\
  horizon_months: 12
  growth_per_month_fraction: 0.05
  rent:
    - offering: on-demand
    - offering: reserved-1y
      usd_per_gpu_hour: {l40s: 0.85}
  buy: {purchase_unit: gpu, lead_time_months: 3}
"""
RISK_SECTION = """\
  horizon_months: 6
  growth_per_month_fraction: 0.05
  rent: [{offering: on-demand}]
  buy: {purchase_unit: gpu}
"""


def _problem(tmp_path, procurement: str | None, body: str = SMALL):
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


def test_depreciation_and_own_costs_by_hand():
    # Bought at month 0 of a 24-month horizon, 2-year amortization: fully depreciated; at 12: half.
    assert pr.depreciation_usd(1000.0, 24, 0, 24) == pytest.approx(1000.0)
    assert pr.depreciation_usd(1000.0, 24, 12, 24) == pytest.approx(500.0)
    assert pr.depreciation_usd(1000.0, 36, 0, 24, 0.0) == pytest.approx(1000.0 * 24 / 36)
    assert pr.depreciation_usd(1000.0, 36, 0, 24, 0.1) < pr.depreciation_usd(1000.0, 36, 0, 24)
    buy = pr.BuyOption(amortization_years=3.0)
    own = pr.own_costs_per_gpu_hour(30000.0, 700.0, buy)
    assert own["capex_usd_per_gpu_hour"] == pytest.approx(30000 / (3 * 8760))
    assert own["power_usd_per_gpu_hour"] == pytest.approx(0.7 * 1.3 * 0.10)
    assert own["hosting_usd_per_gpu_hour"] == pytest.approx(6000 / 32 / HOURS_PER_MONTH)


def _inputs(rates, periods, **kw):
    """One workload served by an 'a' candidate (2 req/s, 1 GPU) and a 'b' one (3 req/s, 1 GPU)."""
    base = dict(candidate_ids=("a", "b"), candidate_gpu=("ga", "gb"), gpus_per_replica=(1, 1),
                usd_per_replica_hour=(1.0, 1.0), capacity_per_s=((2.0,), (3.0,)), workloads=("w",),
                rate_per_s=(1.0,), gpus=("ga", "gb"), periods=periods, horizon_months=periods[-1][1],
                rate_factors=tuple((r,) for r in rates))
    return pr.FleetInputs(**(base | kw))


def test_fleet_rent_reserve_and_buy_by_hand():
    from planner.procurement.fleet import OWN, PAY_PER_USE, RESERVED

    # Need 1 then 3 req/s in two 6-month periods; only 'ga' (2 req/s per GPU) is priced.
    inputs = _inputs([1.0, 3.0], ((0, 6), (6, 12)))
    od = pr.Tier("od", PAY_PER_USE, usd_per_gpu_hour={"ga": 2.0})
    plan = pr.solve_fleet(inputs, [od], "od", growth_per_month=0.0)
    assert plan.status == "optimal" and plan.gpus == [{"ga": 1}, {"ga": 2}]
    assert plan.cost_usd == pytest.approx((1 + 2) * 6 * HOURS_PER_MONTH * 2.0)
    assert [a[3:] for a in plan.actions] == [(1, "rent"), (1, "rent")]
    res = pr.Tier("r1", RESERVED, term_months=12, usd_per_gpu_hour={"ga": 1.5})
    plan = pr.solve_fleet(inputs, [res], "r1", growth_per_month=0.0)
    # 1 GPU reserved at month 0 for 12 months, 1 at month 6: 6 months inside, 6 after the horizon.
    assert plan.cost_usd == pytest.approx((12 + 6) * HOURS_PER_MONTH * 1.5)
    assert plan.committed_after_horizon_usd == pytest.approx(6 * HOURS_PER_MONTH * 1.5)
    own = pr.Tier("buy", OWN, usd_per_gpu={"ga": 1000.0}, unit_gpus={"ga": 4}, run_usd_per_gpu_hour={"ga": 0.0},
                  power_usd_per_gpu_hour={"ga": 0.0}, amortization_months=24)
    plan = pr.solve_fleet(inputs, [own], "buy", growth_per_month=0.0)
    # Whole servers of 4: one server at month 0 covers both periods; half depreciated in 12 of 24 months.
    assert plan.actions == [(0, "buy", "ga", 4, "buy (arrives month 0)")]
    assert plan.capex_usd == 4000 and plan.cost_usd == pytest.approx(2000)
    assert plan.residual_value_usd == pytest.approx(2000)
    late = pr.Tier("buy", OWN, usd_per_gpu={"ga": 1000.0}, unit_gpus={"ga": 1}, run_usd_per_gpu_hour={"ga": 0.0},
                   power_usd_per_gpu_hour={"ga": 0.0}, amortization_months=24, lead_time_months=6)
    assert not pr.solve_fleet(inputs, [late], "buy", growth_per_month=0.0).ok  # nothing before month 6
    bridged = pr.solve_fleet(inputs, [late], "buy", growth_per_month=0.0, bridge=od)
    assert bridged.held[0] == {(PAY_PER_USE, "od", "ga"): 1} and bridged.held[1] == {(OWN, "buy", "ga"): 2}


def test_churn_rule_switches_only_when_it_saves_more_than_the_threshold():
    """'gb' is cheaper per request from period 2 on; switching pays only above the threshold."""
    from planner.procurement.fleet import PAY_PER_USE

    periods = ((0, 3), (3, 6), (6, 9), (9, 12))
    tier = pr.Tier("od", PAY_PER_USE, usd_per_gpu_hour={"ga": 1.0, "gb": 1.2})
    costs = {}
    for threshold in (0.0, 1e3, 1e5, 1e9):
        inputs = _inputs([1.9, 5.9, 5.9, 5.9], periods, switch_min_saving_usd=threshold)
        plan = pr.solve_fleet(inputs, [tier], "od", growth_per_month=0.0)
        costs[threshold] = (plan.cost_usd, plan.switches, plan.gpus)
    stable = costs[1e9]
    assert stable[1] == 0 and all(set(g) == set(stable[2][0]) for g in stable[2])
    # By hand: all 'gb' (1 GPU, then 2) costs (1.2 + 3 x 2.4) x 3 months x 730 h; 'ga' then 'gb'
    # saves (1.2 - 1.0) x 3 x 730 = 438 USD with one switch.
    assert stable[0] == pytest.approx((1.2 + 3 * 2.4) * 3 * HOURS_PER_MONTH)
    assert costs[0.0][0] == pytest.approx(stable[0] - 0.2 * 3 * HOURS_PER_MONTH)
    for threshold, (cost, switches, gpus) in costs.items():
        # Each switch made saves more than the threshold against the stable fleet.
        assert stable[0] - cost >= threshold * switches - 1e-6
        if switches == 0:
            assert cost == pytest.approx(stable[0])
    assert costs[0.0][1] == 1 and costs[0.0][0] < stable[0]
    saving = stable[0] - costs[0.0][0]
    assert costs[1e3][1] == (1 if saving > 1e3 else 0) and costs[1e5][1] == (1 if saving > 1e5 else 0)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """``planner budget problems/procurement-example.yaml --out DIR --json`` (in process)."""
    from planner import cli

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
    assert len(md_totals) == 5 and all(v > 0 for v in md_totals.values())
    # The mix may use every tier: never above the cheapest single-tier option.
    assert md_totals["mix"] <= min(v for k, v in md_totals.items() if k != "mix")
    assert doc["best_option"] == min(md_totals, key=md_totals.get)
    sens = load_workbook(out / "budget.xlsx", read_only=True)["Sensitivity"]
    assert len(list(sens.iter_rows(values_only=True))) == 1 + 7


def test_example_plans_follow_the_growth(example):
    _, doc, _ = example
    periods = pd.DataFrame(doc["periods"])
    assert len(periods) == 8 * 5 and (periods["status"] == "optimal").all()
    for _, part in periods.groupby("option"):
        assert np.all(np.diff(part["traffic_scale"]) > 0)
        gpus = part[[c for c in part.columns if c.startswith("gpus[")]].sum(axis=1)
        assert gpus.iloc[-1] > gpus.iloc[0]
    bought = pd.DataFrame(doc["actions"]).query("option == 'buy'")
    assert (bought["change_gpus"] > 0).all() and bought["action"].str.startswith("buy").all()


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
    from planner import cli
    from planner.cli import budget as cli_budget

    problem = _problem(tmp_path, "  horizon_months: 6\n  growth_per_month_fraction: 0.5\n"
                                 "  rent: [{offering: on-demand}]\n",
                       body=SMALL + "inventory: {l40s: 2, h100-sxm: 0}\n")
    result = pr.budget(problem)
    assert result.status == "infeasible" and result.best_option is None
    assert result.periods.empty and (result.options["status"] == "infeasible").all()
    assert (result.options["missing"] == "no fleet fits the inventory").all()
    assert cli_budget.budget_xlsx(result) == cli_budget.budget_xlsx(result)
    assert cli.main(["budget", problem.path]) == 3
    assert "Status: **infeasible**" in capsys.readouterr().out


def test_validate_checks_the_procurement_section(tmp_path, capsys):
    from planner import cli

    bad = tmp_path / "bad.yaml"
    bad.write_text(SMALL + "procurement:\n  horizon_months: -6\n")
    assert cli.main(["validate", str(bad)]) == 2
    assert "procurement.horizon_months: Input should be greater than 0" in capsys.readouterr().err
    good = tmp_path / "good.yaml"
    good.write_text(SMALL + "procurement:\n  horizon_months: 6\n")
    assert cli.main(["validate", str(good)]) == 0


# ---------------------------------------------------------------- the fleet over the horizon

def test_cost_never_falls_as_growth_rises(tmp_path):
    problem = _problem(tmp_path, FLEET_SECTION)
    spec = parse_procurement(problem)
    setup = budget_setup(problem, spec)
    costs = {g: {p.option: p.cost_usd for p in solve_options(setup, g)} for g in (0.0, 0.04, 0.08, 0.12)}
    options = [o.label for o in setup.options]
    assert options == ["rent on-demand", "rent reserved-1y", "buy", "mix"]
    for option in options:
        series = [costs[g][option] for g in sorted(costs)]
        assert all(b >= a - 1e-6 for a, b in zip(series, series[1:])), (option, series)
        assert series[-1] > series[0]
    for g in costs:  # the mix may combine every tier, so it is never dearer than one tier alone
        assert costs[g]["mix"] <= min(costs[g][o] for o in options if o != "mix") + 1e-6


@pytest.mark.parametrize("months_to_triple", [None, 24])
def test_server_purchase_is_priced_for_the_example(months_to_triple):
    """Whole 8-GPU servers: only H100 has a server price; the fleet uses what can be bought."""
    problem = load_problem(EXAMPLE)
    raw = dict(problem.spec.procurement, buy=dict(problem.spec.procurement["buy"], purchase_unit="server"))
    if months_to_triple:
        raw["growth_per_month_fraction"] = 3 ** (1 / months_to_triple) - 1
    problem = problem.model_copy(update={"spec": problem.spec.model_copy(update={"procurement": raw})})
    spec = parse_procurement(problem)
    setup = budget_setup(problem, spec)
    buy = next(o for o in setup.options if o.label == "buy")
    assert buy.tiers[0].unit_gpus == {"h100-sxm": 8}
    import dataclasses

    (plan,) = solve_options(dataclasses.replace(setup, options=(buy,)), spec.growth_per_month_fraction)
    assert plan.ok and plan.cost_usd > 0
    bought = [a for a in plan.actions if a[4].startswith("buy")]
    assert bought and all(a[2] == "h100-sxm" and a[3] % 8 == 0 for a in bought)
    assert all(set(g) <= {"h100-sxm"} for g in plan.gpus)


def test_daily_profile_costs_less_than_the_peak_all_day(tmp_path, capsys):
    from planner import cli

    out = tmp_path / "daily"
    assert cli.main(["solve", str(DAILY), "--out", str(out), "--json", "--no-pareto"]) == 0
    doc = json.loads(capsys.readouterr().out)
    daily = doc["daily"]
    assert doc["usd_per_day"] == daily["usd_per_day"] < daily["peak_all_day_usd_per_day"]
    assert daily["peak_all_day_usd_per_day"] == pytest.approx(24 * doc["plans"][0]["usd_per_hour"])
    hours = daily["hours"]
    assert len(hours) == 24
    # The day's cost is the sum of its hours; every hour holds at least the GPUs it uses.
    assert sum(h["usd"] for h in hours) == pytest.approx(daily["usd_per_day"])
    for h in hours:
        for g, n in h["gpus"].items():
            assert h["base_gpus"].get(g, 0) + h["on_demand_gpus"].get(g, 0) >= n
    peak = max(sum(h["gpus"].values()) for h in hours)
    night = min(sum(h["gpus"].values()) for h in hours)
    assert peak > night
    report = (out / "report.md").read_text()
    assert "## Daily load profile: per-hour plan" in report and "daily_profile.png" in report
    assert (out / "daily_profile.png").stat().st_size > 0 and (out / "daily_profile.svg").exists()


# ---------------------------------------------------------------- scenario risk

def _budget(path, *extra):
    from planner import cli

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli.main(["budget", str(path), "--json", "--scenarios", "32", "--seed", "7", *extra])
    assert code == 0, stderr.getvalue()
    return json.loads(stdout.getvalue())


@pytest.fixture(scope="module")
def risk_problem(tmp_path_factory):
    path = tmp_path_factory.mktemp("risk") / "small.yaml"
    path.write_text(SMALL + "procurement:\n" + RISK_SECTION)
    return path


@pytest.fixture(scope="module")
def local_doc(risk_problem):
    return _budget(risk_problem, "--executor", "local", "--workers", "2", "--out", str(risk_problem.parent / "out"))


def test_risk_is_in_every_rendering(risk_problem, local_doc):
    from openpyxl import load_workbook

    out = risk_problem.parent / "out"
    options = local_doc["risk"]["options"]
    rows = list(load_workbook(out / "budget.xlsx", read_only=True)["Risk"].iter_rows(values_only=True))
    sheet = [dict(zip(rows[0], r)) for r in rows[1:]]
    assert [(r["option"], r["p50_usd"], r["probability_cheapest"]) for r in sheet] == \
        [(o["option"], o["p50_usd"], o["probability_cheapest"]) for o in options]
    csv = pd.read_csv(out / "budget_risk.csv")
    assert list(csv["p90_usd"]) == [o["p90_usd"] for o in options]
    scenarios = pd.read_csv(out / "budget_scenarios.csv")
    assert len(scenarios) == 32 and list(scenarios["scenario"]) == list(range(32))
    for o in options:  # the summary is the percentiles of the per-scenario costs
        assert o["p50_usd"] == round(float(np.percentile(scenarios[o["option"]], 50)))
    md = (out / "budget.md").read_text()
    assert "## Risk over 32 scenarios (seed 7)" in md and f"{options[0]['p50_usd']:,.0f}" in md
    assert (out / "budget_risk.png").stat().st_size > 0 and (out / "budget_risk.svg").exists()


def test_risk_summary_invariants(local_doc):
    risk = local_doc["risk"]
    assert risk["scenarios"] == 32 and risk["seed"] == 7
    options = risk["options"]
    assert [o["option"] for o in options] == [o["option"] for o in local_doc["options"]]
    assert sum(o["probability_cheapest"] for o in options) == pytest.approx(1.0)
    for o in options:
        assert o["scenarios_priced"] == 32
        assert o["p10_usd"] <= o["p50_usd"] <= o["p90_usd"]
    mix = next(o for o in options if o["option"] == "mix")
    assert all(mix["p10_usd"] <= o["p10_usd"] for o in options)


def test_sampling_is_seeded():
    from planner.procurement.risk import sample_scenarios
    from planner.procurement.spec import ProcurementSpec

    spec = ProcurementSpec(growth_per_month_fraction=0.05, horizon_months=12)
    a, b = sample_scenarios(spec, ["h100-sxm"], 200, 3), sample_scenarios(spec, ["h100-sxm"], 200, 3)
    assert a == b and a != sample_scenarios(spec, ["h100-sxm"], 200, 4)
    import numpy as np

    # The median horizon traffic is the stated one: ln((1+g_s)^H) is centred on ln((1+g)^H).
    logs = [12 * np.log1p(s.growth_per_month) for s in a]
    assert abs(np.median(logs) - 12 * np.log1p(0.05)) < 0.08
    flat = sample_scenarios(spec.model_copy(update={"scenarios": spec.scenarios.model_copy(
        update={"growth_log_sd": 0.0})}), ["h100-sxm"], 5, 3)
    assert all(s.growth_per_month == pytest.approx(0.05) for s in flat)


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_gives_the_same_risk_as_local(risk_problem, local_doc, ray_instance):
    ray_doc = _budget(risk_problem, "--executor", "ray")
    assert ray_doc["risk"] == local_doc["risk"]


def test_scenario_flags_are_checked_and_ray_is_optional(tmp_path, capsys, monkeypatch):
    import sys

    from planner import cli

    path = tmp_path / "p.yaml"
    path.write_text(SMALL + "procurement:\n" + RISK_SECTION)
    assert cli.main(["budget", str(path), "--scenarios", "-1"]) == 2
    assert "--scenarios: must be >= 0" in capsys.readouterr().err
    assert cli.main(["budget", str(path), "--ray-address", "auto"]) == 2
    assert "--ray-address: needs --executor ray" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    assert cli.main(["budget", str(path), "--scenarios", "2", "--executor", "ray"]) == 2
    assert "pip install 'llm-deployment-planner[distributed]'" in capsys.readouterr().err


def test_budget_rents_per_hour_level_of_the_load_profile():
    from planner.procurement.fleet import PAY_PER_USE, RESERVED
    from planner.procurement.profile import budget_levels

    levels = budget_levels(load_problem(DAILY))
    assert sum(share for _, share in levels) == pytest.approx(1.0) and levels[-1][0] == 1.0
    assert dict(levels)[0.1] == pytest.approx(5 / 24)  # five night hours at 10% of the peak
    # Peak 3 req/s needs 2 'ga' GPUs (2 req/s each); half the day at half load needs ceil(0.5 x 2) = 1.
    inputs = _inputs([3.0], ((0, 6),), levels=((0.5, 0.5), (1.0, 0.5)))
    od = pr.Tier("od", PAY_PER_USE, usd_per_gpu_hour={"ga": 2.0})
    plan = pr.solve_fleet(inputs, [od], "od", growth_per_month=0.0)
    assert plan.cost_usd == pytest.approx((1 * 0.5 + 2 * 0.5) * 6 * HOURS_PER_MONTH * 2.0)
    reserved = pr.Tier("r1", RESERVED, term_months=12, usd_per_gpu_hour={"ga": 1.0})
    plan = pr.solve_fleet(inputs, [reserved], "r1", growth_per_month=0.0)  # held all day at the peak
    assert plan.held[0] == {(RESERVED, "r1", "ga"): 2}
