"""From a problem and its ``procurement:`` section to the fleet model's inputs, computed once.

The serving model runs once, at today's traffic: a replica's capacity at SLO does not
depend on the traffic it is offered, so every period, scenario and option re-solves only
the fleet model over these capacities.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.procurement.fleet import OWN, PAY_PER_USE, RESERVED, FleetInputs, Tier
from planner.procurement.prices import own_costs_per_gpu_hour, power_watts, purchase_quote, rent_quote
from planner.procurement.spec import MIX_OPTION, MONTHS_PER_YEAR, ProcurementSpec, periods


@dataclass(frozen=True)
class Option:
    """A procurement option: its label and the tiers it may hold GPUs in."""

    label: str
    kind: str                   # rent, buy or mix
    tiers: tuple[Tier, ...]
    bridge: Tier | None = None  # pay-per-use tier before the first purchase arrives (buy)


def candidate_table(problem):
    """The serving model's candidates at today's traffic: (instance or None, candidates)."""
    from planner.planning import planning_instance, search_candidates

    candidates, _ = search_candidates(problem)
    return planning_instance(problem, candidates), candidates


def fleet_inputs(problem, spec: ProcurementSpec, instance, *, levels=((1.0, 1.0),),
                 time_limit_s: float | None = None) -> FleetInputs:
    """The fleet model's inputs from the planning instance (its pruned candidates)."""
    cands, cap = instance.candidates, instance.capacity_per_s
    workloads = tuple(w.name for w in problem.workloads)
    return FleetInputs(
        candidate_ids=tuple(cands.index), candidate_gpu=tuple(cands["gpu"]),
        gpus_per_replica=tuple(int(v) for v in cands["gpus_per_replica"]),
        usd_per_replica_hour=tuple(float(v) for v in cands["usd_per_replica_hour"]),
        capacity_per_s=tuple(tuple(float(v) for v in row) for row in cap[list(workloads)].to_numpy()),
        workloads=workloads, rate_per_s=tuple(float(w.rate_per_s) for w in problem.workloads),
        gpus=tuple(sorted(set(cands["gpu"]))), periods=tuple(periods(spec)),
        horizon_months=spec.horizon_months, levels=tuple(levels),
        inventory_gpus=dict(instance.inventory_gpus),
        discount_rate_per_year=spec.discount_rate_per_year_fraction,
        switch_min_saving_usd=spec.churn.min_saving_usd, time_limit_s=time_limit_s)


def rent_tier(problem, opt, gpus) -> Tier:
    prices = {g: rent_quote(problem, opt, g).value for g in gpus}
    return Tier(option=opt.label, kind=PAY_PER_USE if opt.term_months is None else RESERVED,
                term_months=opt.term_months, usd_per_gpu_hour={g: v for g, v in prices.items() if v is not None})


def buy_tier(problem, buy, gpus) -> Tier:
    price, unit, run, power = {}, {}, {}, {}
    for g in gpus:
        quote, n = purchase_quote(problem, buy, g)
        watts = power_watts(problem, buy, g)
        if quote.value is None or watts is None:
            continue
        costs = own_costs_per_gpu_hour(quote.value, watts, buy)
        price[g], unit[g] = quote.value, n
        power[g] = costs["power_usd_per_gpu_hour"]
        run[g] = costs["power_usd_per_gpu_hour"] + costs["hosting_usd_per_gpu_hour"]
    return Tier(option=buy.name, kind=OWN, usd_per_gpu=price, unit_gpus=unit, run_usd_per_gpu_hour=run,
                power_usd_per_gpu_hour=power, lead_time_months=buy.lead_time_months,
                amortization_months=buy.amortization_years * MONTHS_PER_YEAR)


def procurement_options(problem, spec: ProcurementSpec, gpus) -> list[Option]:
    """Every option of the section: one per rent offering, buy, and the mix of all tiers.

    The buy option rents on-demand (its first pay-per-use rent option) until the first
    purchase can arrive; without such an option it has no GPUs before the lead time.
    """
    rents = [rent_tier(problem, opt, gpus) for opt in spec.rent]
    out = [Option(t.option, "rent", (t,)) for t in rents]
    own = buy_tier(problem, spec.buy, gpus) if spec.buy is not None else None
    if own is not None:
        bridge = next((t for t in rents if t.kind == PAY_PER_USE), None) if own.lead_time_months else None
        out.append(Option(own.option, "buy", (own,), bridge))
    if MIX_OPTION in spec.labels:
        out.append(Option(MIX_OPTION, "mix", tuple(rents) + ((own,) if own is not None else ())))
    return out
