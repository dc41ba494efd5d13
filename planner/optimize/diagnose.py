"""Explain an infeasible instance: which limit binds and the nearest verified relaxation."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from planner.optimize.instance import PlanningInstance, SolverOptions, SolveStatus
from planner.optimize.model import build_model
from planner.optimize.scaling import COST_UNITS_PER_USD
from planner.optimize.tiebreak import new_solver


@dataclass(frozen=True)
class Finding:
    """One reason for infeasibility.

    Attributes
    ----------
    constraint : str
        The binding constraint family (``capacity``, ``inventory_gpus``,
        ``budget_usd_per_hour``, ``max_distinct_configs``, ``redundancy_workloads``,
        ``combination``, ``solver``).
    message : str
        Human-readable reason and proposal, e.g. ``inventory h100-sxm >= 24``.
    relaxation : dict or None
        PlanningInstance fields to replace (``dataclasses.replace(instance, **relaxation)``).
    verified : bool
        True only when the instance with the relaxation applied was re-solved feasible.
    """

    constraint: str
    message: str
    relaxation: dict | None
    verified: bool


def diagnose_infeasible(instance: PlanningInstance, options: SolverOptions = SolverOptions()
                        ) -> list[Finding]:
    """Find the binding limits of an infeasible instance and the nearest feasible relaxations.

    Parameters
    ----------
    instance : PlanningInstance
    options : SolverOptions

    Returns
    -------
    list of Finding
        Empty when the instance is feasible. Checks in order: workloads no candidate
        serves (the caller adds memory/SLO reasons); inventory (fewest extra GPUs per
        type); budget (cheapest plan without it); max_distinct_configs (fewest
        deployments without it); N+1 redundancy (fewest workloads to drop).

    Notes
    -----
    Each family is relaxed alone, keeping every other limit; a family is reported only
    when relaxing it alone restores feasibility. When none does, one ``combination``
    finding relaxes them all. Proposals are unique (lexicographic minimum over sorted
    GPU types and workloads), so the output is deterministic.
    """
    unserved = [w for w in instance.workloads if not (instance.capacity_per_s[w] > 0).any()]
    if unserved:
        return [Finding("capacity", f"no candidate serves workload {w}", None, False) for w in unserved]
    status = _status(instance, options)
    if status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
        return []
    if status != SolveStatus.INFEASIBLE:
        return [Finding("solver", f"feasibility undecided ({status}) within {options.time_limit_s} s",
                        None, False)]
    checks = (_inventory, _budget, _distinct_configs, _redundancy)
    findings = [f for check in checks if (f := check(instance, options)) is not None]
    if findings:
        return findings
    return [_combination(instance, checks, options)]


_REMOVED = {"inventory_gpus": {}, "budget_usd_per_hour": None, "max_distinct_configs": None,
            "redundancy_workloads": ()}


def _combination(instance: PlanningInstance, checks, options: SolverOptions) -> Finding:
    """Relax families in order, each minimally given the earlier ones settled and later ones removed."""
    if not _feasible(replace(instance, **_REMOVED), options):
        return Finding("combination", "infeasible even without inventory, budget, distinct-config and "
                       "redundancy limits", None, False)
    names = list(_REMOVED)
    settled: dict = {}
    messages = []
    for pos, check in enumerate(checks):
        later = {name: _REMOVED[name] for name in names[pos + 1:]}
        finding = check(replace(instance, **settled, **later), options)
        if finding is not None and finding.relaxation is not None:
            settled.update(finding.relaxation)
            messages.append(finding.message)
    ok = _feasible(replace(instance, **settled), options)
    return Finding("combination", "no single limit explains it; relax together: " + "; ".join(messages),
                   settled, ok)


def _status(instance: PlanningInstance, options: SolverOptions) -> SolveStatus:
    solver = new_solver(options, options.time_limit_s)
    code = solver.solve(build_model(instance).model)
    return {cp_model.OPTIMAL: SolveStatus.OPTIMAL, cp_model.FEASIBLE: SolveStatus.FEASIBLE,
            cp_model.INFEASIBLE: SolveStatus.INFEASIBLE}.get(code, SolveStatus.UNKNOWN)


def _feasible(instance: PlanningInstance, options: SolverOptions) -> bool:
    return _status(instance, options) in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)


def _lex_min(model: cp_model.CpModel, exprs, options: SolverOptions) -> list[int] | None:
    """Minimize each expression in turn, fixing it at its optimum; None if not proven."""
    values = []
    for expr in exprs:
        model.minimize(expr)
        solver = new_solver(options, options.time_limit_s)
        if solver.solve(model) != cp_model.OPTIMAL:
            return None
        values.append(round(solver.objective_value))
        model.add(expr == values[-1])
    return values


def _inventory(instance: PlanningInstance, options: SolverOptions) -> Finding | None:
    if not instance.inventory_gpus or not _feasible(replace(instance, inventory_gpus={}), options):
        return None
    built = build_model(replace(instance, inventory_gpus={}))
    model = built.model.clone()
    gpus = sorted(instance.inventory_gpus)
    gpr = built.candidates["gpus_per_replica"].astype(int)
    extra = {}
    for gpu in gpus:
        mask = (built.candidates["gpu"] == gpu).to_numpy()
        top = int((built.replica_upper[mask] * gpr[mask]).sum())
        extra[gpu] = model.new_int_var(0, max(top, 0), f"extra_gpus[{gpu}]")
        used = cp_model.LinearExpr.weighted_sum(list(built.replicas[mask]), list(gpr[mask]))
        model.add(used <= instance.inventory_gpus[gpu] + extra[gpu])
    values = _lex_min(model, [cp_model.LinearExpr.sum(list(extra.values()))]
                      + [extra[g] for g in gpus], options)
    if values is None:
        return None
    new = dict(instance.inventory_gpus)
    parts = []
    for gpu, more in zip(gpus, values[1:]):
        if more > 0:
            new[gpu] = instance.inventory_gpus[gpu] + more
            parts.append(f"inventory {gpu} >= {new[gpu]} (now {instance.inventory_gpus[gpu]})")
    relaxation = {"inventory_gpus": new}
    return Finding("inventory_gpus", "; ".join(parts), relaxation,
                   _feasible(replace(instance, **relaxation), options))


def _budget(instance: PlanningInstance, options: SolverOptions) -> Finding | None:
    if instance.budget_usd_per_hour is None:
        return None
    free = replace(instance, budget_usd_per_hour=None)
    built = build_model(free)
    solver = new_solver(options, options.time_limit_s)
    if solver.solve(built.model) != cp_model.OPTIMAL:
        return None
    cost_units = round(solver.objective_value)
    cents = -(-cost_units // (COST_UNITS_PER_USD // 100))
    for proposal in (cents / 100,
                     cost_units / COST_UNITS_PER_USD):
        relaxation = {"budget_usd_per_hour": proposal}
        if _feasible(replace(instance, **relaxation), options):
            return Finding("budget_usd_per_hour", f"budget_usd_per_hour >= {_money(proposal)} "
                           f"(now {_money(instance.budget_usd_per_hour)})", relaxation, True)
    return Finding("budget_usd_per_hour", f"budget_usd_per_hour >= {_money(proposal)}", relaxation, False)


def _distinct_configs(instance: PlanningInstance, options: SolverOptions) -> Finding | None:
    if instance.max_distinct_configs is None:
        return None
    free = replace(instance, max_distinct_configs=None)
    if not _feasible(free, options):
        return None
    built = build_model(free)
    model = built.model.clone()
    values = _lex_min(model, [cp_model.LinearExpr.sum(list(built.use))], options)
    if values is None:
        return None
    relaxation = {"max_distinct_configs": values[0]}
    return Finding("max_distinct_configs", f"max_distinct_configs >= {values[0]} "
                   f"(now {instance.max_distinct_configs})", relaxation,
                   _feasible(replace(instance, **relaxation), options))


def _redundancy(instance: PlanningInstance, options: SolverOptions) -> Finding | None:
    current = instance.redundancy_workloads
    if not current:
        return None
    for workload in sorted(current):
        kept = tuple(w for w in current if w != workload)
        if _feasible(replace(instance, redundancy_workloads=kept), options):
            return Finding("redundancy_workloads", f"drop N+1 redundancy for workload {workload}",
                           {"redundancy_workloads": kept}, True)
    if len(current) > 1 and _feasible(replace(instance, redundancy_workloads=()), options):
        return Finding("redundancy_workloads", "drop N+1 redundancy for all workloads",
                       {"redundancy_workloads": ()}, True)
    return None


def _money(usd: float) -> str:
    return f"{usd:.6f}".rstrip("0").rstrip(".")
