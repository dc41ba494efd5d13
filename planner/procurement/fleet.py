"""One fleet plan over the horizon: a single CP-SAT model over every period and tier.

Per period p and GPU type g the model decides the deployments (replicas y_pj of each
candidate j, the traffic routed to them) and the GPUs that carry them, in three tiers:

- own: units bought at the start of period p (``buy_pg``, in purchase units of
  ``unit_gpus`` GPUs) arrive ``lead_time_months`` later and are kept to the horizon;
- reserved: GPUs reserved at the start of period p for the term (12 or 36 months); they
  count in every period the term covers whole and are paid for the whole term;
- pay per use (on-demand, spot): GPUs rented for one period (per hour level of the daily
  profile, see :mod:`planner.procurement.profile`).

Constraints: every workload's traffic (rate x the period's growth factor x the profile's
hour multiplier) is routed in ``TRAFFIC_UNITS`` pieces to candidates whose load, in units
of ``LOAD_UNITS_PER_REPLICA`` per replica (piece loads rounded up, so capacity is never
overstated), fits their replicas; GPUs of type g in use <= owned arrived + reservations
active + rented, at every hour level; optional inventory per type. Objective: the present
value of the cost over the horizon (``discount_rate_per_year_fraction``, monthly) plus
``churn.min_saving_usd`` for every GPU type that enters the fleet after the first period
(the churn rule: a switch happens only when it saves more than that).

Costs attributable to the horizon: rent hours; reserved hours inside the horizon (the rest
is ``committed_after_horizon_usd``); straight-line depreciation of owned GPUs from arrival
to the horizon (the rest is ``residual_value_usd``), plus power and hosting of every owned
GPU from arrival. The solve uses one CP-SAT worker with a fixed seed and a deterministic
time limit, so the same inputs give the same plan on every machine and executor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from planner.procurement.spec import traffic_scale
from planner.units import HOURS_PER_MONTH

#: Pieces each workload's traffic is routed in per period (60 = halves .. sixths exact).
TRAFFIC_UNITS = 60
#: Rate resolution of the cover rows (workloads served by their own candidates): 1/1000 req/s;
#: demand rounded up, capacity rounded down.
RATE_UNITS_PER_S = 1000
#: Load resolution: one replica carries this many load units; piece loads are rounded up.
LOAD_UNITS_PER_REPLICA = 1000
#: Objective resolution: cost coefficients in cents.
COST_UNITS_PER_USD = 100
#: CP-SAT deterministic time limit per fleet solve (deterministic seconds, machine independent).
DETERMINISTIC_TIME_LIMIT = 20.0
#: Relative gap at which a fleet solve stops (1e-4 of the cost: a few dollars on a 100 kUSD plan).
RELATIVE_GAP_LIMIT = 1e-4
#: Denominator of the hour-level fractions (an hour needs ceil(fraction x peak fleet) GPUs).
LEVEL_DENOMINATOR = 1000

#: CP-SAT parameters of the fleet solves, chosen on the procurement example: the full LP
#: relaxation (level 2) with cuts, and no probing (costly on these small models, little gain).
SOLVER_PARAMETERS = {"linearization_level": 2, "cp_model_probing_level": 0}

PAY_PER_USE, RESERVED, OWN = "pay-per-use", "reserved", "own"


@dataclass(frozen=True)
class Tier:
    """One way of holding GPUs: its option label, kind and prices by GPU type."""

    option: str
    kind: str
    term_months: int | None = None
    usd_per_gpu_hour: dict = field(default_factory=dict)     # rent price (pay per use, reserved)
    usd_per_gpu: dict = field(default_factory=dict)          # own: purchase price per GPU
    unit_gpus: dict = field(default_factory=dict)            # own: GPUs per purchase unit
    run_usd_per_gpu_hour: dict = field(default_factory=dict)  # own: power + hosting
    power_usd_per_gpu_hour: dict = field(default_factory=dict)
    lead_time_months: int = 0
    amortization_months: float = 36.0
    first_period_only: bool = False     # reserved: held from the first period only (a daily base)

    def priced(self, gpu: str) -> bool:
        if self.kind == OWN:
            return self.usd_per_gpu.get(gpu) is not None and self.run_usd_per_gpu_hour.get(gpu) is not None
        return self.usd_per_gpu_hour.get(gpu) is not None


@dataclass(frozen=True)
class FleetInputs:
    """Everything a fleet solve needs, computed once per problem (picklable, no pandas).

    ``capacity_per_s[j][k]``: requests/s one replica of candidate j carries of workload k
    within its SLOs (the serving model's prediction, 0 = cannot serve).
    """

    candidate_ids: tuple
    candidate_gpu: tuple
    gpus_per_replica: tuple
    usd_per_replica_hour: tuple
    capacity_per_s: tuple
    workloads: tuple
    rate_per_s: tuple
    gpus: tuple
    periods: tuple
    horizon_months: int
    levels: tuple = ((1.0, 1.0),)            # (fraction of the peak fleet, share of hours)
    inventory_gpus: dict = field(default_factory=dict)
    discount_rate_per_year: float = 0.0
    switch_min_saving_usd: float = 0.0
    time_limit_s: float | None = None
    rate_factors: tuple | None = None        # per period, per workload: replaces the growth factor
    relative_gap_limit: float = RELATIVE_GAP_LIMIT
    deterministic_time_limit: float = DETERMINISTIC_TIME_LIMIT


@dataclass
class FleetPlan:
    """The solved fleet of one option: per period GPUs by type and tier, costs, actions."""

    option: str
    status: str
    why: str = ""
    # what the option costs over the horizon (USD), and its serving plan's $/h per period
    cost_usd: float = 0.0
    present_value_usd: float = 0.0
    plan_usd_per_hour: list = field(default_factory=list)
    # what the money inside the horizon pays for (their sum: cash_usd)
    rent_usd: float = 0.0
    capex_usd: float = 0.0
    power_usd: float = 0.0
    hosting_usd: float = 0.0
    # GPUs held per tier, and what the owned and reserved ones leave after the horizon
    held: list = field(default_factory=list)          # per period {(tier kind, option, gpu): GPUs}
    committed_after_horizon_usd: float = 0.0
    residual_value_usd: float = 0.0
    # use
    gpu_hours_paid: float = 0.0
    switches: int = 0
    gpus: list = field(default_factory=list)          # per period {gpu: GPUs in use at the peak}
    replicas: list = field(default_factory=list)      # per period {candidate_id: replicas}
    actions: list = field(default_factory=list)       # (month, option, gpu, change, action)

    @property
    def cash_usd(self) -> float:
        """Money paid inside the horizon: rent, purchases, power and hosting [USD]."""
        return self.rent_usd + self.capex_usd + self.power_usd + self.hosting_usd

    @property
    def ok(self) -> bool:
        return self.status in ("optimal", "feasible")


def _discount(rate_per_year: float, months: range) -> float:
    return sum((1 + rate_per_year) ** (-m / 12) for m in months)


def depreciation_usd(price_usd: float, amortization_months: float, arrive: int, horizon: int,
                     rate_per_year: float = 0.0) -> float:
    """Straight-line depreciation of one GPU inside the horizon, discounted monthly.

    price / amortization per month from the arrival month, the last month pro rata, up to
    the horizon; with ``rate_per_year`` 0 this is price x min(H - arrival, A) / A.
    """
    per_month = price_usd / amortization_months
    return sum(per_month * min(1.0, arrive + amortization_months - m) * (1 + rate_per_year) ** (-m / 12)
               for m in range(arrive, horizon) if m < arrive + amortization_months)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _frontier(inputs: FleetInputs, cap, keep, rates):
    """The period's minimal GPU vectors with replicas keyed by candidate index (None: too large)."""
    from planner.procurement.frontier import cached_frontier

    types = sorted({inputs.candidate_gpu[j] for j in keep})
    units = np.floor(cap[keep] * RATE_UNITS_PER_S + 1e-9).astype(np.int64)
    inventory = (np.array([inputs.inventory_gpus.get(g, 10**9) for g in types], dtype=np.int64)
                 if inputs.inventory_gpus else None)
    front = cached_frontier([math.ceil(r * RATE_UNITS_PER_S - 1e-9) for r in rates], units,
                            [inputs.gpus_per_replica[j] for j in keep],
                            [types.index(inputs.candidate_gpu[j]) for j in keep], len(types), inventory)
    if front is None:
        return None
    return [(v, {keep[i]: r for i, r in reps.items()}) for v, reps in front]


def _routing(model, inputs: FleetInputs, cap, keep, p: int, rates: list, y: dict, y_ub: dict) -> None:
    """Replicas of period p when some candidate serves several workloads: traffic routed in pieces."""
    load = {}
    for k in range(len(inputs.workloads)):
        routes = []
        rate = rates[k]
        for j in keep:
            if cap[j, k] <= 0:
                continue
            coef = math.ceil(LOAD_UNITS_PER_REPLICA * rate / (TRAFFIC_UNITS * cap[j, k]) - 1e-9)
            x = model.new_int_var(0, TRAFFIC_UNITS, f"x[{p},{j},{k}]")
            routes.append(x)
            load.setdefault(j, []).append((x, coef))
        model.add(sum(routes) == TRAFFIC_UNITS)
    for j, terms in load.items():
        full = sum(c * TRAFFIC_UNITS for _, c in terms)
        y_ub[p, j] = _ceil_div(full, LOAD_UNITS_PER_REPLICA)
        y[p, j] = model.new_int_var(0, y_ub[p, j], f"y[{p},{j}]")
        model.add(sum(c * x for x, c in terms) <= LOAD_UNITS_PER_REPLICA * y[p, j])


def solve_fleet(inputs: FleetInputs, tiers: list[Tier], option: str, *, growth_per_month: float,
                rent_factor: float = 1.0, buy_factor: float = 1.0,
                capacity_factor: dict | None = None, bridge: Tier | None = None) -> FleetPlan:
    """Solve the fleet of one option (the tiers it may use) over the horizon.

    Parameters
    ----------
    inputs : FleetInputs
    tiers : list of Tier
        The option's tiers (one for a plain option; all of them for the mix).
    option : str
        The option's label.
    growth_per_month : float
        Traffic growth; each period is sized for its peak (see :func:`traffic_scale`).
    rent_factor, buy_factor : float
        Multipliers of rent prices and of purchase prices (sensitivity, scenarios).
    capacity_factor : dict, optional
        Multiplier of every candidate's capacity by GPU type (the serving model's error).
    bridge : Tier, optional
        A pay-per-use tier allowed before the first purchase can arrive (buy option).
    """
    capacity_factor = capacity_factor or {}
    per, H, r = inputs.periods, inputs.horizon_months, inputs.discount_rate_per_year
    n, m = len(inputs.candidate_ids), len(inputs.workloads)
    gpus = inputs.gpus
    cap = np.array(inputs.capacity_per_s, dtype=float).reshape(n, m)
    cap = cap * np.array([capacity_factor.get(g, 1.0) for g in inputs.candidate_gpu])[:, None]
    usable = {g for g in gpus if any(t.priced(g) for t in tiers) or (bridge is not None and bridge.priced(g))}
    keep = [j for j in range(n) if inputs.candidate_gpu[j] in usable and (cap[j] > 0).any()]
    out = FleetPlan(option=option, status="infeasible")
    served = {k for j in keep for k in range(m) if cap[j, k] > 0}
    if len(served) < m:
        lost = [inputs.workloads[k] for k in range(m) if k not in served]
        out.why = f"no priced GPU type can serve {', '.join(lost)}"
        return out

    model = cp_model.CpModel()
    cost_terms: list = []   # (var, present-value USD per unit)
    y, y_ub = {}, {}        # (p, j) -> replicas, its upper bound
    use_expr = {}           # (p, g) -> 1 when the period's chosen GPU vector has type g (frontier)
    n_pg = {}               # (p, g) -> GPUs in use (expression)
    for p, (a, b) in enumerate(per):
        scale = traffic_scale(growth_per_month, a, b)
        rates = [inputs.rate_per_s[k] * (inputs.rate_factors[p][k] if inputs.rate_factors else scale)
                 for k in range(m)]
        shared = [j for j in keep if (cap[j] > 0).sum() > 1]
        front = None if shared else _frontier(inputs, cap, keep, rates)
        if front is not None:  # one Boolean per minimal GPU vector (planner.procurement.frontier)
            if not front:
                out.why = "no fleet fits the inventory"
                return out
            z = [model.new_bool_var(f"z[{p},{i}]") for i in range(len(front))]
            model.add_exactly_one(z)
            for gi, g in enumerate(sorted({inputs.candidate_gpu[j] for j in keep})):
                on = [zi for zi, (v, _) in zip(z, front) if v[gi] > 0]
                if on:
                    use_expr[p, g] = sum(on)
            for j in sorted({j for _, reps in front for j in reps}):
                coefs = [(zi, reps.get(j, 0)) for zi, (_, reps) in zip(z, front) if reps.get(j, 0)]
                y[p, j] = sum(c * zi for zi, c in coefs)
                y_ub[p, j] = max(c for _, c in coefs)
        elif not shared:  # every candidate serves one workload: a cover row per workload, exact
            for k in range(m):
                need = math.ceil(rates[k] * RATE_UNITS_PER_S - 1e-9)
                terms = []
                for j in keep:
                    c = math.floor(cap[j, k] * RATE_UNITS_PER_S + 1e-9)
                    if c > 0:
                        y_ub[p, j] = _ceil_div(need, c)
                        y[p, j] = model.new_int_var(0, y_ub[p, j], f"y[{p},{j}]")
                        terms.append((y[p, j], c))
                model.add(sum(c * v for v, c in terms) >= need)
        else:
            _routing(model, inputs, cap, keep, p, rates, y, y_ub)
        for g in gpus:
            mine = [(y[p, j], inputs.gpus_per_replica[j]) for j in keep if (p, j) in y and inputs.candidate_gpu[j] == g]
            if mine:
                n_pg[p, g] = sum(c * v for v, c in mine)
                if g in inputs.inventory_gpus:
                    model.add(n_pg[p, g] <= int(inputs.inventory_gpus[g]))

    max_gpus = {}
    for (p, g), expr in n_pg.items():
        ub = sum(inputs.gpus_per_replica[j] * y_ub[p, j] for j in keep
                 if (p, j) in y and inputs.candidate_gpu[j] == g)
        max_gpus[g] = max(max_gpus.get(g, 0), ub)

    # Tier variables: buy[t, p, g] units, res[t, p, g] GPUs, rent[t, p, g, level] GPUs.
    buys, res, rents = {}, {}, {}
    for ti, t in enumerate(tiers + ([bridge] if bridge is not None else [])):
        is_bridge = bridge is not None and ti == len(tiers)
        for g in gpus:
            if g not in max_gpus or not t.priced(g):
                continue
            ub = max_gpus[g]
            for p, (a, b) in enumerate(per):
                if t.kind == OWN:
                    arrive = a + t.lead_time_months
                    if arrive >= H:
                        continue
                    unit = int(t.unit_gpus.get(g, 1))
                    v = model.new_int_var(0, _ceil_div(ub, unit), f"buy[{ti},{p},{g}]")
                    buys[ti, p, g] = (v, unit, arrive)
                    price = t.usd_per_gpu[g] * buy_factor
                    dep = depreciation_usd(price, t.amortization_months, arrive, H, r)
                    run = t.run_usd_per_gpu_hour[g] * HOURS_PER_MONTH * _discount(r, range(arrive, H))
                    cost_terms.append((v, unit * (dep + run)))
                elif t.kind == RESERVED:
                    if is_bridge or (t.first_period_only and p > 0):
                        continue
                    v = model.new_int_var(0, ub, f"res[{ti},{p},{g}]")
                    res[ti, p, g] = (v, a, a + t.term_months)
                    price = t.usd_per_gpu_hour[g] * rent_factor
                    cost_terms.append((v, price * HOURS_PER_MONTH * _discount(r, range(a, min(H, a + t.term_months)))))
                else:
                    if is_bridge and a >= min(tt.lead_time_months for tt in tiers if tt.kind == OWN):
                        continue
                    price = t.usd_per_gpu_hour[g] * rent_factor
                    months = _discount(r, range(a, b))
                    for li, (_, share) in enumerate(inputs.levels):
                        v = model.new_int_var(0, ub, f"rent[{ti},{p},{g},{li}]")
                        rents[ti, p, g, li] = v
                        cost_terms.append((v, price * HOURS_PER_MONTH * share * months))

    for (p, g), expr in n_pg.items():
        a, b = per[p]
        held = [v * unit for (ti, q, gg), (v, unit, arrive) in buys.items() if gg == g and arrive <= a]
        held += [v for (ti, q, gg), (v, s, e) in res.items() if gg == g and s <= a and b <= e]
        for li, (frac, _) in enumerate(inputs.levels):
            rented = [v for (ti, q, gg, ll), v in rents.items() if q == p and gg == g and ll == li]
            num = math.ceil(frac * LEVEL_DENOMINATOR - 1e-9)
            model.add(LEVEL_DENOMINATOR * (sum(held) + sum(rented)) >= num * expr)

    # Solve for cost alone first: when that fleet keeps its GPU types, the churn rule is met.
    cost = sum(round(c * COST_UNITS_PER_USD) * v for v, c in cost_terms)
    model.minimize(cost)
    solver = _solver(inputs)
    code = solver.solve(model)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        out.status = "infeasible" if code == cp_model.INFEASIBLE else "unknown"
        out.why = ("no fleet fits the inventory" if code == cp_model.INFEASIBLE
                   else "no fleet found within the solver limit")
        return out
    used = {key: solver.value(expr) > 0 for key, expr in n_pg.items()}
    entries = _entries(used)
    threshold = round(inputs.switch_min_saving_usd * COST_UNITS_PER_USD)
    if entries and threshold > 0:
        solver, code = _solve_with_churn(model, solver, inputs, cost, threshold, n_pg, y, y_ub, keep, used,
                                         use_expr)
        used = {key: solver.value(expr) > 0 for key, expr in n_pg.items()}
        entries = _entries(used)
        out.status = "optimal" if code == cp_model.OPTIMAL else "feasible"
    else:
        out.status = "optimal" if code == cp_model.OPTIMAL else "feasible"
    out.switches = len(entries)
    _read_solution(out, solver, inputs, tiers, bridge, y, n_pg, buys, res, rents, keep,
                   rent_factor=rent_factor, buy_factor=buy_factor)
    return out


def _solver(inputs: FleetInputs) -> cp_model.CpSolver:
    """One deterministic CP-SAT worker (see the module docstring)."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_deterministic_time = inputs.deterministic_time_limit
    solver.parameters.relative_gap_limit = inputs.relative_gap_limit
    for key, value in SOLVER_PARAMETERS.items():
        setattr(solver.parameters, key, value)
    if inputs.time_limit_s:
        solver.parameters.max_time_in_seconds = inputs.time_limit_s
    return solver


def _entries(used: dict) -> list:
    """(period, gpu) where a GPU type enters the fleet: in use, and not in the period before."""
    return sorted((p, g) for (p, g), on in used.items() if on and p > 0 and not used.get((p - 1, g), False))


def _solve_with_churn(model, first, inputs, cost, threshold: int, n_pg, y, y_ub, keep, used, use_expr):
    """Re-solve with the churn penalty, starting from the cost-only fleet (a hint).

    use[p,g] marks a GPU type in use: the sum of the period's frontier vectors holding g, or
    a Boolean with y <= U use and GPUs >= use; enter[p,g] >= use[p,g] - use[p-1,g]; the
    objective adds ``threshold`` per entry.
    """
    for i in range(len(model.proto.variables)):
        var = model.get_int_var_from_proto_index(i)
        model.add_hint(var, first.value(var))
    use, enters = {}, []
    for (p, g), expr in n_pg.items():
        if (p, g) in use_expr:
            use[p, g] = use_expr[p, g]
            continue
        u = model.new_bool_var(f"use[{p},{g}]")
        use[p, g] = u
        model.add_hint(u, used[p, g])
        for j in keep:
            if (p, j) in y and inputs.candidate_gpu[j] == g:
                model.add(y[p, j] <= y_ub[p, j] * u)
        model.add(expr >= u)
    for (p, g), u in use.items():
        if p == 0:
            continue
        e = model.new_bool_var(f"enter[{p},{g}]")
        prev = use.get((p - 1, g))
        model.add(e >= u - prev) if prev is not None else model.add(e >= u)
        model.add_hint(e, used[p, g] and not used.get((p - 1, g), False))
        enters.append(e)
    model.minimize(cost + threshold * sum(enters))
    solver = _solver(inputs)
    return solver, solver.solve(model)


def _read_solution(out: FleetPlan, solver, inputs: FleetInputs, tiers, bridge, y, n_pg, buys, res, rents,
                   keep, *, rent_factor: float, buy_factor: float) -> None:
    """Costs (undiscounted and present value), per-period fleets and the actions table."""
    per, H, r = inputs.periods, inputs.horizon_months, inputs.discount_rate_per_year
    all_tiers = tiers + ([bridge] if bridge is not None else [])
    for p, (a, b) in enumerate(per):
        out.replicas.append({inputs.candidate_ids[j]: int(solver.value(y[p, j])) for j in keep
                             if (p, j) in y and solver.value(y[p, j]) > 0})
        out.gpus.append({g: int(solver.value(e)) for (q, g), e in sorted(n_pg.items()) if q == p
                         and solver.value(e) > 0})
        out.plan_usd_per_hour.append(sum(inputs.usd_per_replica_hour[j] * solver.value(y[p, j])
                                         for j in keep if (p, j) in y))
        out.held.append({})
    for (ti, p, g), (v, unit, arrive) in sorted(buys.items()):
        k = int(solver.value(v)) * unit
        if not k:
            continue
        t = all_tiers[ti]
        price = t.usd_per_gpu[g] * buy_factor
        dep = k * depreciation_usd(price, t.amortization_months, arrive, H)
        out.capex_usd += k * price
        out.residual_value_usd += k * price - dep
        out.power_usd += k * t.power_usd_per_gpu_hour[g] * HOURS_PER_MONTH * (H - arrive)
        out.hosting_usd += k * (t.run_usd_per_gpu_hour[g] - t.power_usd_per_gpu_hour[g]) * HOURS_PER_MONTH * (H - arrive)
        out.gpu_hours_paid += k * HOURS_PER_MONTH * (H - arrive)
        out.cost_usd += dep
        out.present_value_usd += k * (depreciation_usd(price, t.amortization_months, arrive, H, r)
                                      + t.run_usd_per_gpu_hour[g] * HOURS_PER_MONTH * _discount(r, range(arrive, H)))
        out.actions.append((per[p][0], t.option, g, k, f"buy (arrives month {arrive})"))
        for q, (s, e) in enumerate(per):
            if s >= arrive:
                key = (OWN, t.option, g)
                out.held[q][key] = out.held[q].get(key, 0) + k
    for (ti, p, g), (v, s, e) in sorted(res.items()):
        k = int(solver.value(v))
        if not k:
            continue
        t = all_tiers[ti]
        price = t.usd_per_gpu_hour[g] * rent_factor
        inside = min(e, H) - s
        out.rent_usd += k * price * HOURS_PER_MONTH * inside
        out.present_value_usd += k * price * HOURS_PER_MONTH * _discount(r, range(s, min(e, H)))
        out.committed_after_horizon_usd += k * price * HOURS_PER_MONTH * (e - min(e, H))
        out.gpu_hours_paid += k * HOURS_PER_MONTH * inside
        out.actions.append((s, t.option, g, k, f"reserve {t.term_months} months"))
        if e < H:
            out.actions.append((e, t.option, g, -k, "release (reservation ends)"))
        for q, (ps, pe) in enumerate(per):
            if s <= ps and pe <= e:
                key = (RESERVED, t.option, g)
                out.held[q][key] = out.held[q].get(key, 0) + k
    peak = max(range(len(inputs.levels)), key=lambda li: inputs.levels[li][0])
    for ti, g in sorted({(ti, g) for ti, _, g, _ in rents}):
        t, before = all_tiers[ti], 0
        price = t.usd_per_gpu_hour[g] * rent_factor
        for p, (a, b) in enumerate(per):
            for li, (_, share) in enumerate(inputs.levels):
                v = rents.get((ti, p, g, li))
                k = int(solver.value(v)) if v is not None else 0
                out.rent_usd += k * price * HOURS_PER_MONTH * share * (b - a)
                out.present_value_usd += k * price * HOURS_PER_MONTH * share * _discount(r, range(a, b))
                out.gpu_hours_paid += k * HOURS_PER_MONTH * share * (b - a)
                if li != peak:
                    continue
                if k:
                    out.held[p][PAY_PER_USE, t.option, g] = k
                if k != before:
                    out.actions.append((a, t.option, g, k - before, "rent" if k > before else "release"))
                before = k
    out.cost_usd += out.rent_usd + out.power_usd + out.hosting_usd
    out.actions.sort(key=lambda x: (x[0], x[1], x[2], x[4]))
