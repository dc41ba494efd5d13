"""``budget(problem)``: the fleet plan of every option over the horizon, and its tables.

Every option (each rent offering, buy, and the mix of all tiers) gets its own fleet plan
from one CP-SAT model over all periods (:mod:`planner.procurement.fleet`); the serving
model runs once (:mod:`planner.procurement.inputs`). The sensitivity rows re-solve the
fleet models with prices or growth changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from planner.procurement.fleet import FleetPlan, solve_fleet
from planner.procurement.inputs import candidate_table, fleet_inputs, procurement_options
from planner.procurement.prices import own_costs_per_gpu_hour, power_watts, purchase_quote, rent_quote
from planner.procurement.spec import TERM_MONTHS, ProcurementSpec, parse_procurement, traffic_scale

USD_COLUMNS = ("cost_usd", "present_value_usd", "cash_usd", "capex_usd", "power_usd", "hosting_usd",
               "committed_after_horizon_usd", "residual_value_usd")


@dataclass(frozen=True, eq=False)
class BudgetResult:
    """A budget proposal: per-period fleets, actions, option totals, break-even, sensitivity.

    USD totals in ``options`` and ``sensitivity`` are rounded to whole dollars once, here;
    every rendering (Markdown, CSV, XLSX, JSON) shows these same numbers. ``risk`` holds the
    scenario summary of ``--scenarios N`` (None without it).
    """

    problem: object
    spec: ProcurementSpec
    status: str
    periods: pd.DataFrame
    actions: pd.DataFrame
    options: pd.DataFrame
    breakeven: pd.DataFrame
    sensitivity: pd.DataFrame
    assumptions: pd.DataFrame
    plans: tuple = ()
    risk: object = None
    setup: object = None

    @property
    def best_option(self) -> str | None:
        priced = self.options[self.options["priced"]]
        return None if priced.empty else str(priced.sort_values(["cost_usd", "option"]).iloc[0]["option"])


@dataclass(frozen=True)
class BudgetSetup:
    """What every fleet solve of a problem shares: the fleet inputs and the options."""

    inputs: object
    options: tuple
    why_not: str | None = None


def budget_setup(problem, spec: ProcurementSpec, *, time_limit_s: float | None = None) -> BudgetSetup:
    """Run the serving model once and build the options (``why_not``: no candidate at all)."""
    from planner.procurement.profile import budget_levels

    instance, _ = candidate_table(problem)
    if instance is None:
        return BudgetSetup(None, (), "no feasible deployment candidate (see `planner solve`)")
    inputs = fleet_inputs(problem, spec, instance, levels=budget_levels(problem), time_limit_s=time_limit_s)
    return BudgetSetup(inputs, tuple(procurement_options(problem, spec, inputs.gpus)))


def solve_options(setup: BudgetSetup, growth: float, rent_factor: float = 1.0, buy_factor: float = 1.0,
                  capacity_factor: dict | None = None, cache: dict | None = None) -> list[FleetPlan]:
    """The fleet plan of every option at one growth and price level.

    ``cache`` reuses the plans of options the changed factors do not touch (a rent-only
    option does not see the purchase factor, a buy option without rent tiers the rental one).
    """
    if setup.inputs is None:
        return []
    out = []
    for o in setup.options:
        rents = any(t.kind != "own" for t in o.tiers) or o.bridge is not None
        buys = any(t.kind == "own" for t in o.tiers)
        key = (o.label, growth, rent_factor if rents else None, buy_factor if buys else None,
               tuple(sorted((capacity_factor or {}).items())))
        if cache is None or key not in cache:
            plan = solve_fleet(setup.inputs, list(o.tiers), o.label, growth_per_month=growth,
                               rent_factor=rent_factor, buy_factor=buy_factor, capacity_factor=capacity_factor,
                               bridge=o.bridge)
            if cache is None:
                out.append(plan)
                continue
            cache[key] = plan
        out.append(cache[key])
    return out


def _options_frame(setup: BudgetSetup, plans: list[FleetPlan], spec: ProcurementSpec) -> pd.DataFrame:
    kinds = {o.label: o.kind for o in setup.options}
    rows = []
    for label in spec.labels:
        plan = next((p for p in plans if p.option == label), None)
        missing = setup.why_not or ("" if plan is not None and plan.ok else (plan.why if plan else "not solved"))
        row = {"option": label, "kind": kinds.get(label, "-"), "status": plan.status if plan else "infeasible",
               "priced": not missing, "missing": missing}
        row.update({k: (round(getattr(plan, k)) if not missing else None) for k in USD_COLUMNS})
        row["gpu_hours_paid"] = round(plan.gpu_hours_paid) if not missing else None
        row["usd_per_gpu_hour_paid"] = (round(plan.cost_usd / plan.gpu_hours_paid, 4)
                                        if not missing and plan.gpu_hours_paid else None)
        row["gpu_type_switches"] = plan.switches if not missing else None
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame["rank"] = frame["cost_usd"].rank(method="first").astype("Int64")
    return frame


def _periods_frame(plans: list[FleetPlan], spec: ProcurementSpec, gpus) -> pd.DataFrame:
    from planner.procurement.spec import periods

    rows = []
    for plan in plans:
        if not plan.ok:
            continue
        for i, (a, b) in enumerate(periods(spec)):
            held = plan.held[i]
            rows.append({"option": plan.option, "period": i + 1, "start_month": a, "end_month": b,
                         "traffic_scale": traffic_scale(spec.growth_per_month_fraction, a, b),
                         "status": plan.status, "plan_usd_per_hour": round(plan.plan_usd_per_hour[i], 4),
                         **{f"gpus[{g}]": plan.gpus[i].get(g, 0) for g in gpus},
                         "held": "; ".join(f"{opt} {g} x{n}" for (_, opt, g), n in sorted(held.items()))})
    cols = ["option", "period", "start_month", "end_month", "traffic_scale", "status", "plan_usd_per_hour",
            *[f"gpus[{g}]" for g in gpus], "held"]
    return pd.DataFrame(rows, columns=cols)


def _actions_frame(plans: list[FleetPlan], spec: ProcurementSpec) -> pd.DataFrame:
    rows = [{"period": month // spec.period_months + 1, "start_month": month, "option": option, "gpu": gpu,
             "change_gpus": change, "action": action}
            for plan in plans if plan.ok for month, option_tier, gpu, change, action in plan.actions
            for option in [plan.option if option_tier == plan.option else f"{plan.option}: {option_tier}"]]
    cols = ["period", "start_month", "option", "gpu", "change_gpus", "action"]
    return pd.DataFrame(rows, columns=cols).sort_values(["start_month", "option", "gpu", "action"],
                                                        ignore_index=True)
def _breakeven_frame(problem, spec: ProcurementSpec, gpus: list[str]) -> pd.DataFrame:
    rows = []
    for gpu in gpus:
        row: dict = {"gpu": gpu}
        if spec.buy is not None:
            quote, unit = purchase_quote(problem, spec.buy, gpu)
            watts = power_watts(problem, spec.buy, gpu)
            row.update(usd_per_gpu=quote.value, purchase_unit_gpus=unit, power_watts=watts)
            if quote.value is not None and watts is not None:
                row.update(own_costs_per_gpu_hour(quote.value, watts, spec.buy))
        own = row.get("own_usd_per_gpu_hour")
        for opt in spec.rent:
            price = rent_quote(problem, opt, gpu).value
            row[f"{opt.label} usd_per_gpu_hour"] = price
            if TERM_MONTHS[opt.offering] is None:
                row[f"{opt.label} breakeven_utilization"] = (own / price if own is not None and price else None)
            else:  # reserved hours are paid whether used or not: compare the hourly costs
                row[f"{opt.label} buy_is_cheaper"] = (own < price if own is not None and price else None)
        rows.append(row)
    return pd.DataFrame(rows)


def _assumptions_frame(problem, spec: ProcurementSpec, gpus: list[str]) -> pd.DataFrame:
    rows = []
    for gpu in gpus:
        for opt in spec.rent:
            q = rent_quote(problem, opt, gpu)
            rows.append({"gpu": gpu, "item": f"{opt.label} USD/GPU-h", "value": q.value,
                         "provider": q.provider, "as_of": q.as_of, "source": q.source})
        if spec.buy is not None:
            q, unit = purchase_quote(problem, spec.buy, gpu)
            rows.append({"gpu": gpu, "item": f"purchase USD/GPU ({spec.buy.purchase_unit}, {unit} GPU unit)",
                         "value": q.value, "provider": q.provider, "as_of": q.as_of, "source": q.source})
            rows.append({"gpu": gpu, "item": "power W/GPU", "value": power_watts(problem, spec.buy, gpu),
                         "provider": "catalog TDP", "as_of": "-", "source": "gpus.yaml tdp_watts or override"})
    if spec.buy is not None:
        for key in ("power_usage_effectiveness", "usd_per_kwh", "usd_per_rack_month", "gpus_per_rack",
                    "amortization_years"):
            rows.append({"gpu": "-", "item": key, "value": getattr(spec.buy, key), "provider": "procurement.buy",
                         "as_of": "-", "source": "problem or default"})
    return pd.DataFrame(rows)




def sensitivity_rows(spec: ProcurementSpec) -> list[tuple[str, float, float, float]]:
    """(name, growth, rental price factor, purchase price factor) of the sensitivity table."""
    g = spec.growth_per_month_fraction
    x, y = spec.sensitivity.price_change_fraction, spec.sensitivity.growth_change_fraction
    return [("base", g, 1, 1), (f"purchase price -{x:.0%}", g, 1, 1 - x), (f"purchase price +{x:.0%}", g, 1, 1 + x),
            (f"rental price -{x:.0%}", g, 1 - x, 1), (f"rental price +{x:.0%}", g, 1 + x, 1),
            (f"growth -{y:.0%}", g * (1 - y), 1, 1), (f"growth +{y:.0%}", g * (1 + y), 1, 1)]


def budget(problem, spec: ProcurementSpec | None = None, *, time_limit_s: float | None = None,
           progress: Callable[[str], None] | None = None) -> BudgetResult:
    """Solve the fleet of every option, its sensitivity rows, and build the proposal's tables.

    Parameters
    ----------
    problem : planner.problem.Problem
    spec : ProcurementSpec, optional
        Default: :func:`parse_procurement` of the problem.
    time_limit_s : float, optional
        Wall-clock limit per fleet solve (default: the deterministic limit only).
    progress : callable, optional
        Called with one line per stage (the CLI prints it on stderr).
    """
    spec = spec or parse_procurement(problem)
    setup = budget_setup(problem, spec, time_limit_s=time_limit_s)
    gpus = list(setup.inputs.gpus) if setup.inputs is not None else []
    sens, base_plans, cache = [], [], {}
    for name, growth, rf, bf in sensitivity_rows(spec):
        if progress:
            progress(f"fleet plans: {name}")
        plans = solve_options(setup, growth, rf, bf, cache=cache)
        base_plans = plans if name == "base" else base_plans
        frame = _options_frame(setup, plans, spec)
        row = {"scenario": name, "growth_per_month_fraction": growth, "rental_price_factor": rf,
               "purchase_price_factor": bf, **dict(zip(frame["option"], frame["cost_usd"]))}
        priced = frame[frame["priced"]].sort_values(["cost_usd", "option"])
        row["best_option"] = priced["option"].iat[0] if not priced.empty else None
        sens.append(row)
    options = _options_frame(setup, base_plans, spec)
    used = sorted({g for p in base_plans if p.ok for fleet in p.gpus for g in fleet}) or gpus
    return BudgetResult(problem=problem, spec=spec, status="ok" if options["priced"].any() else "infeasible",
                        periods=_periods_frame(base_plans, spec, used), actions=_actions_frame(base_plans, spec),
                        options=options, breakeven=_breakeven_frame(problem, spec, gpus),
                        sensitivity=pd.DataFrame(sens), assumptions=_assumptions_frame(problem, spec, gpus),
                        plans=tuple(base_plans), setup=setup)
