"""Daily load profile: per-hour sizing for ``planner solve`` and hour levels for ``planner budget``.

A ``load_profile: {hourly: [24 multipliers]}`` (problem-wide or per workload) scales each
workload's rate hour by hour, normalized to its peak (the rate given is the peak-hour rate).

``planner solve``: one fleet model over the day's 24 hours (the multi-period model of
:mod:`planner.procurement.fleet`, hours as periods) decides an always-on base, held all
day at the ``base_offering`` price (reserved-1y by default), and on-demand GPUs per hour;
each hour's deployments carry that hour's traffic. Every on-demand GPU added at an hour is
then paid ``scale_up_lead_time_s`` earlier (provisioning + model load), counted on the
daily cycle (hour 23 -> hour 0); the lead time is charged after the solve, not optimized.

``planner budget``: each period's peak fleet is sized as before; at hour t a pay-per-use
tier needs ceil(r_t x the peak fleet) GPUs of each type, r_t = the largest of the workloads'
normalized multipliers at t (the fleet scaled with the load, never below it).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from planner.problem import HOURS_PER_DAY, LoadProfile
from planner.units import SECONDS_PER_HOUR


def profile_settings(problem) -> LoadProfile | None:
    """The profile whose settings (base offering, lead time) apply: problem-wide, else the first."""
    spec = problem.spec
    return spec.load_profile or next((w.load_profile for w in spec.workloads if w.load_profile), None)


def hourly_multipliers(problem) -> dict[str, np.ndarray] | None:
    """Per workload its 24 multipliers normalized to peak 1 (None: no profile anywhere)."""
    spec = problem.spec
    if profile_settings(problem) is None:
        return None
    out = {}
    for w in spec.workloads:
        prof = w.load_profile or spec.load_profile
        h = np.array(prof.hourly if prof else [1.0] * HOURS_PER_DAY, dtype=float)
        out[w.name] = h / h.max()
    return out


def budget_levels(problem) -> tuple[tuple[float, float], ...]:
    """(fraction of the peak fleet, share of the day's hours) per distinct hour level."""
    mult = hourly_multipliers(problem)
    if mult is None:
        return ((1.0, 1.0),)
    r = np.max(np.vstack(list(mult.values())), axis=0)
    levels: dict[float, int] = {}
    for v in np.round(r, 6):
        levels[float(v)] = levels.get(float(v), 0) + 1
    return tuple((v, n / HOURS_PER_DAY) for v, n in sorted(levels.items()))


def _base_price(problem, gpu: str, offering: str) -> float | None:
    """USD/GPU-h of an always-on GPU: the catalog's default row of the offering (None: none)."""
    if offering == problem.spec.price_offering:
        return problem.prices_usd_per_gpu_hour.get(gpu)
    rows = [r for r in problem.catalog.rental_prices(gpu) if r.offering == offering]
    row = ([r for r in rows if r.default] or rows or [None])[0]
    return row.usd_per_gpu_hour if row is not None else None


def daily_plan(problem, peak_plan, instance, *, time_limit_s: float | None = None) -> dict | None:
    """The per-hour plan of a problem with a load profile (None without one).

    One fleet model over the 24 hours (:func:`planner.procurement.fleet.solve_fleet`, hours
    as periods): an always-on base tier held all day at the ``base_offering`` price (GPU
    types without such a price have no base) and an on-demand tier per hour, every hour's
    deployments fitting that hour's traffic; then the scale-up lead time is charged.
    ``instance``: the solve's planning instance (:func:`planner.planning.planning_instance`).

    Returns
    -------
    dict
        ``usd_per_day``, ``peak_all_day_usd_per_day`` (plan #1, sized for the peak, held all
        day at its USD/h), ``status``, ``base_offering``, ``scale_up_lead_time_s``,
        ``base_gpus`` and ``usd_per_gpu_hour`` (``base``/``on_demand``) per GPU type, and
        ``hours``: per hour the workloads' multipliers, the replicas per candidate, GPUs by
        type, base and on-demand GPUs, ``scale_up_usd`` and the hour's cost ``usd``.
    """
    from planner.procurement.fleet import PAY_PER_USE, RESERVED, Tier, solve_fleet
    from planner.procurement.inputs import fleet_inputs
    from planner.procurement.spec import ProcurementSpec

    mult = hourly_multipliers(problem)
    if mult is None or peak_plan is None:
        return None
    settings = profile_settings(problem)
    names = [w.name for w in problem.workloads]
    spec = ProcurementSpec(horizon_months=HOURS_PER_DAY, period_months=1, mix=False, churn={"min_saving_usd": 0})
    factors = tuple(tuple(float(mult[n][t]) for n in names) for t in range(HOURS_PER_DAY))
    inputs = dataclasses.replace(fleet_inputs(problem, spec, instance, time_limit_s=time_limit_s),
                                 rate_factors=factors)
    od = {g: problem.prices_usd_per_gpu_hour[g] for g in inputs.gpus}
    base_usd = {g: v for g in inputs.gpus if (v := _base_price(problem, g, settings.base_offering)) is not None}
    tiers = [Tier("base", RESERVED, term_months=HOURS_PER_DAY, usd_per_gpu_hour=base_usd, first_period_only=True),
             Tier("on-demand", PAY_PER_USE, usd_per_gpu_hour=od)]
    fleet = solve_fleet(inputs, tiers, "daily", growth_per_month=0.0)
    out = {"status": fleet.status, "base_offering": settings.base_offering,
           "scale_up_lead_time_s": settings.scale_up_lead_time_s,
           "peak_all_day_usd_per_day": HOURS_PER_DAY * peak_plan.usd_per_hour}
    if not fleet.ok:
        return out | {"usd_per_day": None, "why": fleet.why, "hours": []}
    types = sorted({g for gpus in fleet.gpus for g in gpus})
    base = {g: fleet.held[0].get((RESERVED, "base", g), 0) for g in types}
    lead_h = settings.scale_up_lead_time_s / SECONDS_PER_HOUR
    rented = [{g: fleet.held[t].get((PAY_PER_USE, "on-demand", g), 0) for g in types} for t in range(HOURS_PER_DAY)]
    hours, total = [], 0.0
    for t in range(HOURS_PER_DAY):
        lead = sum(max(0, rented[t][g] - rented[t - 1][g]) * od[g] * lead_h for g in types)
        usd = sum(base[g] * base_usd.get(g, 0.0) + rented[t][g] * od[g] for g in types) + lead
        total += usd
        hours.append({"hour": t, "multiplier": {n: float(mult[n][t]) for n in names},
                      "replicas": fleet.replicas[t], "gpus": fleet.gpus[t], "base_gpus": base,
                      "on_demand_gpus": rented[t], "scale_up_usd": lead, "usd": usd})
    return out | {"usd_per_day": total, "base_gpus": base,
                  "usd_per_gpu_hour": {g: {"base": base_usd.get(g), "on_demand": od[g]} for g in types},
                  "hours": hours}
