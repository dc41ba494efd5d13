"""Budget proposals: the plan of each period under traffic growth, and rent vs buy over a horizon.

For each period (a quarter by default) every workload rate is scaled by the period's
growth factor and the plan is solved again; its GPUs per type are the fleet that period
needs. Each option then pays for that fleet month by month:

- rent, pay per use (``on-demand``, ``spot``): needed GPUs x hours x price;
- rent, reserved (``reserved-1y``, ``reserved-3y``): reservations of 12 / 36 months are
  added when the need exceeds the active ones and are paid for their whole term
  (hours inside the horizon count as cost, the rest as ``committed_after_horizon_usd``);
- buy: GPUs (or whole servers) are bought when the need first exceeds the owned fleet and
  kept; cost = straight-line depreciation inside the horizon + power (watts x PUE x
  USD/kWh, every owned GPU powered) + hosting (USD per rack-month / GPUs per rack).

Break-even utilization of buying vs a pay-per-use rent price p: an owned GPU costs
``own_usd_per_gpu_hour`` = price / amortization hours + power + hosting per hour whether
used or not, so per hour used at utilization u it costs own / u; buying beats renting for
u > u* = own / p.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, ValidationError, field_validator, model_validator

from planner.schema import PlanningInputError, Strict
from planner.units import HOURS_PER_MONTH, KILO

MONTHS_PER_YEAR = 12
TERM_MONTHS = {"on-demand": None, "spot": None, "reserved-1y": 12, "reserved-3y": 36}
Offering = Literal["on-demand", "spot", "reserved-1y", "reserved-3y"]


def _positive_values(v: dict) -> dict:
    bad = [k for k, x in v.items() if not x > 0]
    if bad:
        raise ValueError(f"must be > 0 ({', '.join(map(str, bad))})")
    return v


class RentOption(Strict):
    """Renting at one offering; prices per GPU type default to the price catalog."""

    offering: Offering
    name: str | None = None
    usd_per_gpu_hour: dict[str, float] = Field(default_factory=dict)

    _positive = field_validator("usd_per_gpu_hour")(_positive_values)

    @property
    def label(self) -> str:
        return self.name or f"rent {self.offering}"


class BuyOption(Strict):
    """Buying GPUs (or whole servers) and hosting them."""

    name: str = "buy"
    purchase_unit: Literal["gpu", "server"] = "gpu"
    usd_per_gpu: dict[str, float] = Field(default_factory=dict)
    usd_per_server: dict[str, float] = Field(default_factory=dict)
    gpus_per_server: dict[str, int] = Field(default_factory=dict)
    power_watts_per_gpu: dict[str, float] = Field(default_factory=dict)
    power_usage_effectiveness: float = Field(default=1.3, ge=1.0)
    usd_per_kwh: float = Field(default=0.10, ge=0.0)
    usd_per_rack_month: float = Field(default=6000.0, ge=0.0)
    gpus_per_rack: int = Field(default=32, ge=1)
    amortization_years: float = Field(default=3.0, gt=0.0)

    _positive = field_validator("usd_per_gpu", "usd_per_server", "gpus_per_server",
                                "power_watts_per_gpu")(_positive_values)


class Sensitivity(Strict):
    price_change_fraction: float = Field(default=0.2, ge=0.0, lt=1.0)
    growth_change_fraction: float = Field(default=0.5, ge=0.0)


def _default_rent() -> tuple[RentOption, ...]:
    return tuple(RentOption(offering=o) for o in ("on-demand", "reserved-1y", "reserved-3y"))


class ProcurementSpec(Strict):
    """The problem's ``procurement:`` section (units in the key names)."""

    horizon_months: int = Field(default=24, gt=0, le=120)
    growth_per_month_fraction: float = Field(default=0.0, gt=-1.0, le=1.0)
    period_months: int = Field(default=3, ge=1, le=12)
    rent: tuple[RentOption, ...] = Field(default_factory=_default_rent)
    buy: BuyOption | None = Field(default_factory=BuyOption)
    sensitivity: Sensitivity = Sensitivity()

    @model_validator(mode="after")
    def _unique_labels(self):
        labels = [r.label for r in self.rent] + ([self.buy.name] if self.buy else [])
        if not labels:
            raise ValueError("give at least one option (rent or buy)")
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ValueError(f"option names must be unique (give rent[].name): {', '.join(dup)}")
        return self


def parse_procurement(problem) -> ProcurementSpec:
    """Validate the problem's ``procurement:`` section, GPU ids included.

    Raises
    ------
    PlanningInputError
        One line per problem, each naming the YAML path (``procurement.horizon_months: ...``).
    """
    from planner.yamlio import validation_problems

    raw = problem.spec.procurement
    if raw is None:
        raise PlanningInputError(f"{problem.path}: procurement: required key is missing "
                                 "(`planner budget` reads it; see docs/reports.md)")
    try:
        spec = ProcurementSpec.model_validate(raw)
    except ValidationError as exc:
        raise PlanningInputError([f"{problem.path}: {p}" for p in
                                  validation_problems(exc, root="procurement")]) from None
    problems = []
    tables = [(f"procurement.rent[{i}].usd_per_gpu_hour", r.usd_per_gpu_hour) for i, r in enumerate(spec.rent)]
    if spec.buy:
        tables += [(f"procurement.buy.{k}", getattr(spec.buy, k)) for k in
                   ("usd_per_gpu", "usd_per_server", "gpus_per_server", "power_watts_per_gpu")]
    for where, table in tables:
        for gpu in table:
            try:
                problem.catalog.gpu(gpu, f"{where}.{gpu}")
            except PlanningInputError as exc:
                problems += [f"{problem.path}: {p}" for p in exc.problems]
    if problems:
        raise PlanningInputError(problems)
    return spec


# ---------------------------------------------------------------- periods and plans

def periods(spec: ProcurementSpec) -> list[tuple[int, int]]:
    """(start_month, end_month) of each period; the last one may be shorter."""
    return [(m, min(m + spec.period_months, spec.horizon_months))
            for m in range(0, spec.horizon_months, spec.period_months)]


def traffic_scale(growth_per_month: float, start_month: int, end_month: int) -> float:
    """Traffic factor a period is sized for: its peak, (1+g)^end (or ^start when shrinking)."""
    return max((1 + growth_per_month) ** start_month, (1 + growth_per_month) ** end_month)


def scaled_problem(problem, scale: float):
    """The problem with every workload rate multiplied by ``scale`` (one ranked plan, no fronts)."""
    from planner.problem import ProblemSpec, resolve_problem

    data = problem.spec.model_dump(exclude_none=True)
    for w in data["workloads"]:
        for key in ("rate_per_s", "requests_per_day", "tokens_per_day"):
            if key in w:
                w[key] = w[key] * scale
    data.setdefault("optimize", {})["top_k"] = 1
    return resolve_problem(ProblemSpec.model_validate(data), problem.path, problem.catalog)


def solve_periods(problem, spec: ProcurementSpec, growth: float, *, time_limit_s: float | None = None,
                  cache: dict | None = None, progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """One row per period: months, traffic scale, plan status, USD/h and ``gpus[<type>]``."""
    from planner.pipeline import plan

    cache = {} if cache is None else cache
    rows = []
    grid = periods(spec)
    for i, (start, end) in enumerate(grid, start=1):
        scale = traffic_scale(growth, start, end)
        key = round(scale, 9)
        if key not in cache:
            if progress:
                progress(f"period {i}/{len(grid)}: traffic x{scale:.3f}")
            cache[key] = plan(scaled_problem(problem, scale), top_k=1, time_limit_s=time_limit_s, pareto=False)
        result = cache[key]
        best = result.best
        rows.append({"period": i, "start_month": start, "end_month": end, "traffic_scale": scale,
                     "status": result.status, "plan_usd_per_hour": best.usd_per_hour if best else np.nan,
                     **{f"gpus[{g}]": n for g, n in sorted((best.gpus_by_type if best else {}).items())}})
    frame = pd.DataFrame(rows)
    gpu_cols = sorted(c for c in frame.columns if c.startswith("gpus["))
    frame[gpu_cols] = frame[gpu_cols].fillna(0).astype(int)
    return frame[[c for c in frame.columns if not c.startswith("gpus[")] + gpu_cols]


def monthly_need(period_frame: pd.DataFrame, horizon_months: int) -> pd.DataFrame:
    """GPUs needed per GPU type for each month of the horizon (index 0..horizon-1)."""
    cols = [c for c in period_frame.columns if c.startswith("gpus[")]
    need = pd.DataFrame(0, index=pd.RangeIndex(horizon_months, name="month"),
                        columns=[c[5:-1] for c in cols])
    for _, row in period_frame.iterrows():
        for c in cols:
            need.loc[row["start_month"]:row["end_month"] - 1, c[5:-1]] = int(row[c])
    return need


# ---------------------------------------------------------------- prices

@dataclass(frozen=True)
class PriceQuote:
    value: float | None
    provider: str
    as_of: str
    source: str


def rent_quote(problem, option: RentOption, gpu: str) -> PriceQuote:
    """USD/GPU-h of a rent option: option override, else the problem's override for its
    own offering, else the catalog row (default row, else the cheapest) of the offering."""
    overrides = {problem.catalog.gpu(k).id: v for k, v in option.usd_per_gpu_hour.items()}
    if gpu in overrides:
        return PriceQuote(overrides[gpu], "procurement override", "-", f"{problem.path}: procurement.rent")
    if option.offering == problem.spec.price_offering:
        spec_over = {problem.catalog.gpu(k).id: v for k, v in problem.spec.prices.items()}
        if gpu in spec_over:
            return PriceQuote(spec_over[gpu], "problem override", "-", f"{problem.path}: prices")
    rows = [r for r in problem.catalog.rental_prices(gpu) if r.offering == option.offering]
    row = ([r for r in rows if r.default] or rows or [None])[0]
    if row is None:
        return PriceQuote(None, "-", "-", f"no {option.offering} price in the catalog")
    return PriceQuote(row.usd_per_gpu_hour, row.provider, row.as_of.isoformat(), row.source)


def purchase_quote(problem, buy: BuyOption, gpu: str) -> tuple[PriceQuote, int]:
    """USD per GPU bought and the purchase unit in GPUs (1, or GPUs per server)."""
    row = problem.catalog.purchase_price(gpu)
    ids = {k: problem.catalog.gpu(k).id for k in (*buy.usd_per_gpu, *buy.usd_per_server, *buy.gpus_per_server)}
    per_gpu = {ids[k]: v for k, v in buy.usd_per_gpu.items()}
    per_server = {ids[k]: v for k, v in buy.usd_per_server.items()}
    server_gpus = {ids[k]: v for k, v in buy.gpus_per_server.items()}
    src = ("catalog", row.as_of.isoformat(), row.source) if row else ("-", "-", "no purchase price in the catalog")
    if buy.purchase_unit == "server":
        n = server_gpus.get(gpu) or (row.gpus_per_server if row else None)
        price = per_server.get(gpu) or (row.usd_per_server if row else None)
        if n is None or price is None:
            return PriceQuote(None, *src[:2], f"no server price or size for {gpu}"), 1
        origin = ("procurement override", "-", f"{problem.path}: procurement.buy") if gpu in per_server else src
        return PriceQuote(price / n, *origin), int(n)
    if gpu in per_gpu:
        return PriceQuote(per_gpu[gpu], "procurement override", "-", f"{problem.path}: procurement.buy"), 1
    return PriceQuote(row.usd_per_gpu if row else None, *src), 1


def power_watts(problem, buy: BuyOption, gpu: str) -> float | None:
    """Power per GPU [W]: the override, else the catalog TDP (None when unknown)."""
    over = {problem.catalog.gpu(k).id: v for k, v in buy.power_watts_per_gpu.items()}
    return over.get(gpu, problem.catalog.gpu(gpu).tdp_watts)


def own_costs_per_gpu_hour(usd_per_gpu: float, watts: float, buy: BuyOption) -> dict[str, float]:
    """Hourly cost of owning one GPU, used or not: depreciation, power, hosting [USD/h].

    Notes
    -----
    own = usd_per_gpu / (amortization_years * 8760 h) + watts / 1000 * PUE * usd_per_kwh
    + usd_per_rack_month / gpus_per_rack / 730 h.
    """
    capex = usd_per_gpu / (buy.amortization_years * MONTHS_PER_YEAR * HOURS_PER_MONTH)
    power = watts / KILO * buy.power_usage_effectiveness * buy.usd_per_kwh
    hosting = buy.usd_per_rack_month / buy.gpus_per_rack / HOURS_PER_MONTH
    return {"capex_usd_per_gpu_hour": capex, "power_usd_per_gpu_hour": power,
            "hosting_usd_per_gpu_hour": hosting, "own_usd_per_gpu_hour": capex + power + hosting}


# ---------------------------------------------------------------- costing of one option

@dataclass
class OptionCost:
    """What one option pays for a monthly need (USD; ``actions``: month, gpu, change)."""

    option: str
    kind: str
    term_months: int | None = None
    missing: list[str] = field(default_factory=list)
    cost_usd: float = 0.0
    cash_usd: float = 0.0
    capex_usd: float = 0.0
    power_usd: float = 0.0
    hosting_usd: float = 0.0
    committed_after_horizon_usd: float = 0.0
    residual_value_usd: float = 0.0
    gpu_hours_paid: float = 0.0
    actions: list[tuple[int, str, int]] = field(default_factory=list)


def cost_rent(need: pd.DataFrame, prices: dict[str, float | None], offering: str, label: str) -> OptionCost:
    """Pay-per-use or reserved renting of a monthly need.

    Parameters
    ----------
    need : DataFrame
        GPUs needed, one row per month, one column per GPU type (:func:`monthly_need`).
    prices : dict
        USD per GPU-hour by GPU type (None: not priced; reported in ``missing``).
    offering : str
        ``on-demand``/``spot`` (pay per use) or ``reserved-1y``/``reserved-3y``.
    label : str
        The option's name.

    Returns
    -------
    OptionCost
    """
    term = TERM_MONTHS[offering]
    out = OptionCost(option=label, kind="rent", term_months=term)
    horizon = len(need)
    for gpu in need.columns:
        price = prices.get(gpu)
        n = need[gpu].to_numpy()
        if price is None:
            if n.any():
                out.missing.append(gpu)
            continue
        if term is None:
            hours = float(n.sum()) * HOURS_PER_MONTH
            out.cost_usd += hours * price
            out.gpu_hours_paid += hours
            prev = 0
            for m, k in enumerate(n):
                if k != prev:
                    out.actions.append((m, gpu, int(k - prev)))
                prev = k
            continue
        starts: list[tuple[int, int]] = []
        for m in range(horizon):
            active = sum(c for s, c in starts if s <= m < s + term)
            if n[m] > active:
                starts.append((m, int(n[m] - active)))
                out.actions.append((m, gpu, int(n[m] - active)))
        for s, c in starts:
            inside = min(term, horizon - s)
            out.gpu_hours_paid += c * inside * HOURS_PER_MONTH
            out.cost_usd += c * inside * HOURS_PER_MONTH * price
            out.committed_after_horizon_usd += c * (term - inside) * HOURS_PER_MONTH * price
    out.cash_usd = out.cost_usd
    return out


def cost_buy(need: pd.DataFrame, unit_price: dict[str, float | None], unit_gpus: dict[str, int],
             watts: dict[str, float | None], buy: BuyOption) -> OptionCost:
    """Buying (whole units of ``unit_gpus``) when the need first exceeds the owned fleet.

    Parameters
    ----------
    need : DataFrame
        GPUs needed per month and GPU type.
    unit_price : dict
        USD per GPU bought (a server's price / its GPUs), by GPU type.
    unit_gpus : dict
        GPUs per purchase unit (1, or GPUs per server), by GPU type.
    watts : dict
        Power drawn per GPU [W], by GPU type.
    buy : BuyOption

    Returns
    -------
    OptionCost
        ``cost_usd`` = depreciation inside the horizon + power + hosting.
    """
    out = OptionCost(option=buy.name, kind="buy")
    horizon = len(need)
    amort_months = buy.amortization_years * MONTHS_PER_YEAR
    for gpu in need.columns:
        n = need[gpu].to_numpy()
        if not n.any():
            continue
        if unit_price.get(gpu) is None or watts.get(gpu) is None:
            out.missing.append(gpu)
            continue
        rates = own_costs_per_gpu_hour(unit_price[gpu], watts[gpu], buy)
        owned = 0
        for m in range(horizon):
            if n[m] > owned:
                add = int(math.ceil((n[m] - owned) / unit_gpus[gpu]) * unit_gpus[gpu])
                owned += add
                out.actions.append((m, gpu, add))
                capex = add * unit_price[gpu]
                depreciated = capex * min(1.0, (horizon - m) / amort_months)
                out.capex_usd += capex
                out.cost_usd += depreciated
                out.residual_value_usd += capex - depreciated
            out.power_usd += owned * HOURS_PER_MONTH * rates["power_usd_per_gpu_hour"]
            out.hosting_usd += owned * HOURS_PER_MONTH * rates["hosting_usd_per_gpu_hour"]
            out.gpu_hours_paid += owned * HOURS_PER_MONTH
    out.cost_usd += out.power_usd + out.hosting_usd
    out.cash_usd = out.capex_usd + out.power_usd + out.hosting_usd
    return out


# ---------------------------------------------------------------- the proposal

@dataclass(frozen=True, eq=False)
class BudgetResult:
    """A budget proposal: per-period plans, actions, option totals, break-even, sensitivity.

    USD totals in ``options`` and ``sensitivity`` are rounded to whole dollars once, here;
    every rendering (Markdown, CSV, XLSX, JSON) shows these same numbers.
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

    @property
    def best_option(self) -> str | None:
        priced = self.options[self.options["priced"]]
        return None if priced.empty else str(priced.sort_values(["cost_usd", "option"]).iloc[0]["option"])


def option_costs(problem, spec: ProcurementSpec, need: pd.DataFrame, *, rent_factor: float = 1.0,
                 buy_factor: float = 1.0) -> list[OptionCost]:
    """Cost of every option for a monthly need; prices scaled by the factors (sensitivity)."""
    out = []
    for opt in spec.rent:
        prices = {g: (q.value * rent_factor if (q := rent_quote(problem, opt, g)).value is not None else None)
                  for g in need.columns}
        out.append(cost_rent(need, prices, opt.offering, opt.label))
    if spec.buy is not None:
        quotes = {g: purchase_quote(problem, spec.buy, g) for g in need.columns}
        unit = {g: (q.value * buy_factor if q.value is not None else None) for g, (q, _) in quotes.items()}
        out.append(cost_buy(need, unit, {g: n for g, (_, n) in quotes.items()},
                            {g: power_watts(problem, spec.buy, g) for g in need.columns}, spec.buy))
    return out


USD_COLUMNS = ("cost_usd", "cash_usd", "capex_usd", "power_usd", "hosting_usd",
               "committed_after_horizon_usd", "residual_value_usd")


def _options_frame(costs: list[OptionCost], infeasible: str | None) -> pd.DataFrame:
    rows = []
    for c in costs:
        missing = infeasible or (f"no price for {', '.join(c.missing)}" if c.missing else "")
        row = {"option": c.option, "kind": c.kind, "priced": not missing, "missing": missing}
        row.update({k: (round(getattr(c, k)) if not missing else None) for k in USD_COLUMNS})
        row["gpu_hours_paid"] = round(c.gpu_hours_paid) if not missing else None
        row["usd_per_gpu_hour_paid"] = (round(c.cost_usd / c.gpu_hours_paid, 4)
                                        if not missing and c.gpu_hours_paid else None)
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame["rank"] = frame["cost_usd"].rank(method="first").astype("Int64")
    return frame


def _actions_frame(costs: list[OptionCost], spec: ProcurementSpec) -> pd.DataFrame:
    def verb(c: OptionCost, k: int) -> str:
        if k < 0:
            return "release"
        return "buy" if c.kind == "buy" else (f"reserve {c.term_months} months" if c.term_months else "rent")

    rows = [{"period": m // spec.period_months + 1, "start_month": m, "option": c.option, "gpu": gpu,
             "change_gpus": k, "action": verb(c, k)} for c in costs if not c.missing for m, gpu, k in c.actions]
    cols = ["period", "start_month", "option", "gpu", "change_gpus", "action"]
    return pd.DataFrame(rows, columns=cols).sort_values(["start_month", "option", "gpu"], ignore_index=True)


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


def budget(problem, spec: ProcurementSpec | None = None, *, time_limit_s: float | None = None,
           progress: Callable[[str], None] | None = None) -> BudgetResult:
    """Solve every period and cost every option (see the module docstring).

    Parameters
    ----------
    problem : planner.problem.Problem
    spec : ProcurementSpec, optional
        Default: :func:`parse_procurement` of the problem.
    time_limit_s : float, optional
        CP-SAT time limit per solve.
    progress : callable, optional
        Called with one line per solve (the CLI prints it on stderr).
    """
    spec = spec or parse_procurement(problem)
    cache: dict = {}
    g = spec.growth_per_month_fraction

    def evaluate(growth: float, rent_factor: float = 1.0, buy_factor: float = 1.0):
        frame = solve_periods(problem, spec, growth, time_limit_s=time_limit_s, cache=cache, progress=progress)
        bad = frame[~frame["status"].isin(["optimal", "feasible"])]
        why = (f"no plan in period {int(bad['period'].iat[0])} (traffic x{bad['traffic_scale'].iat[0]:.3f})"
               if not bad.empty else None)
        need = monthly_need(frame, spec.horizon_months)
        return frame, option_costs(problem, spec, need, rent_factor=rent_factor, buy_factor=buy_factor), why

    base, costs, infeasible = evaluate(g)
    gpus = sorted(c[5:-1] for c in base.columns if c.startswith("gpus["))
    x, y = spec.sensitivity.price_change_fraction, spec.sensitivity.growth_change_fraction
    scenarios = [("base", g, 1, 1), (f"purchase price -{x:.0%}", g, 1, 1 - x), (f"purchase price +{x:.0%}", g, 1, 1 + x),
                 (f"rental price -{x:.0%}", g, 1 - x, 1), (f"rental price +{x:.0%}", g, 1 + x, 1),
                 (f"growth -{y:.0%}", g * (1 - y), 1, 1), (f"growth +{y:.0%}", g * (1 + y), 1, 1)]
    sens = []
    for name, growth, rf, bf in scenarios:
        _, scosts, why = evaluate(growth, rf, bf) if name != "base" else (base, costs, infeasible)
        frame = _options_frame(scosts, why)
        row = {"scenario": name, "growth_per_month_fraction": growth, "rental_price_factor": rf,
               "purchase_price_factor": bf, **dict(zip(frame["option"], frame["cost_usd"]))}
        priced = frame[frame["priced"]].sort_values(["cost_usd", "option"])
        row["best_option"] = priced["option"].iat[0] if not priced.empty else None
        sens.append(row)
    return BudgetResult(problem=problem, spec=spec, status="infeasible" if infeasible else "ok",
                        periods=base, actions=_actions_frame(costs, spec),
                        options=_options_frame(costs, infeasible), breakeven=_breakeven_frame(problem, spec, gpus),
                        sensitivity=pd.DataFrame(sens), assumptions=_assumptions_frame(problem, spec, gpus))
