"""The fleet plan over the horizon: monotone in growth, server purchases priced, daily profile."""

import json
from pathlib import Path

import pytest

from planner.problem import load_problem
from planner.procurement import budget_setup, parse_procurement, solve_options

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "problems" / "procurement-example.yaml"
DAILY = ROOT / "problems" / "daily-profile-example.yaml"

SMALL = """\
name: fleet-small
workloads:
  - name: chat
    model: llama-3.1-8b
    requests_per_day: 900000
    prompt_tokens: {mean: 600, p95: 1800}
    output_tokens: {mean: 200, p95: 600}
    slo: {ttft_p95_s: 1.0, tpot_p95_s: 0.05}
search: {gpus: [l40s, h100-sxm], quantization: [fp8], kv_cache_dtype: [fp8], tp: [1, 2], pp: [1],
         max_batch: [64, 128]}
procurement:
  horizon_months: 12
  growth_per_month_fraction: 0.05
  rent:
    - offering: on-demand
    - offering: reserved-1y
      usd_per_gpu_hour: {l40s: 0.85}
  buy: {purchase_unit: gpu, lead_time_months: 3}
"""


def test_cost_never_falls_as_growth_rises(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    problem = load_problem(path)
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
