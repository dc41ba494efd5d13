"""Pick one canonical plan among equal-cost optima, so parallel search gives identical output."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from planner.optimize.instance import SolverOptions
from planner.optimize.model import BuiltModel

_LOG = logging.getLogger(__name__)

TIE_BREAK_RULE = ("among cost-optimal plans: least sum of weight * replicas (distinct weights in "
                  "candidate_id-hash order); if a tie remains, replicas lexicographically smallest in "
                  "candidate_id order; then traffic units lexicographically smallest in "
                  "(candidate_id, workload) order")
# Largest |objective| for which cost and the rank tie-break share one weighted objective.
COMBINED_OBJECTIVE_LIMIT = 2**62


@dataclass
class _Incumbent:
    """Current full solution (values per variable group) of the tie-break model."""

    replicas: np.ndarray
    traffic: np.ndarray
    use: np.ndarray
    spare: np.ndarray

    @classmethod
    def read(cls, built: BuiltModel, solver: cp_model.CpSolver) -> _Incumbent:
        return cls(*(np.asarray(solver.values(s), dtype=np.int64) if len(s) else np.zeros(0, np.int64)
                     for s in (built.replicas, built.traffic, built.use, built.spare)))


def new_solver(options: SolverOptions, time_limit_s: float) -> cp_model.CpSolver:
    """A CpSolver configured from options (time limit given separately); it keeps the
    planner's signal handlers (:class:`planner.interrupt.InterruptibleSolver`)."""
    from planner.interrupt import InterruptibleSolver

    solver = InterruptibleSolver()
    params = solver.parameters
    params.max_time_in_seconds = max(time_limit_s, 1e-3)
    params.num_workers = options.num_workers
    params.random_seed = options.random_seed
    params.relative_gap_limit = options.relative_gap_limit
    params.log_search_progress = options.log_search_progress
    return solver


def tie_break_weight(built: BuiltModel) -> int | None:
    """Weight M of cost in ``M * cost + tie_break`` (M > max tie_break), or None if it could overflow."""
    upper = built.replica_upper.to_numpy(dtype=object)
    tie_max = int((built.tie_break_weights.to_numpy(dtype=object) * upper).sum())
    cost_max = int((built.price_units.to_numpy(dtype=object) * upper).sum())
    weight = tie_max + 1
    return weight if weight * cost_max + tie_max <= COMBINED_OBJECTIVE_LIMIT else None


@dataclass
class TieBreakReport:
    """What the tie-break did: solves, wall time per stage, and whether uniqueness was proven."""

    proven_unique: bool = False
    num_solves: int = 0
    wall_time_s: dict = field(default_factory=dict)


def canonical_solution(built: BuiltModel, options: SolverOptions, cost_units: int, tie_units: int | None,
                       solver: cp_model.CpSolver) -> tuple[np.ndarray, np.ndarray, TieBreakReport]:
    """Canonical optimal plan on the optimal face ``cost <= cost_units``.

    Parameters
    ----------
    built : BuiltModel
        The model solved to proven optimality.
    options : SolverOptions
        ``time_limit_s`` bounds each stage; ``prove_unique_plan`` enables the proof.
    cost_units : int
        The proven optimal scaled cost.
    tie_units : int or None
        The proven minimum of ``built.tie_break_expr`` on that face when the first phase
        minimized it already (combined objective); None to minimize it here.
    solver : cp_model.CpSolver
        The solver holding an optimal solution (the first hint).

    Returns
    -------
    replicas, traffic : numpy.ndarray
        Values aligned with ``built.replicas`` and ``built.traffic``.
    report : TieBreakReport

    Notes
    -----
    Stages: (1) minimize the weighted replica sum T (skipped when given); (2) if
    ``prove_unique_plan``, minimize y_j in candidate order on the face {cost, T at their
    optima} -- a y_j that is 0 in the incumbent is fixed at 0 without a solve -- which
    proves the replicas unique, or picks the lexicographic minimum when they are not; if
    a stage times out, the replicas of stage 1 are kept; (3) with replicas fixed,
    minimize traffic units in (candidate_id, workload) order the same way. Every value
    fixed is a proven optimum, so the result does not depend on which solution a
    parallel solve returned. Without the proof, the replicas are unique unless two
    optimal plans tie in both cost and T.
    """
    report = TieBreakReport()
    inc = _Incumbent.read(built, solver)

    def minimize(face, expr, deadline: float) -> bool:
        nonlocal inc
        _hint(face, built, inc)
        face.minimize(expr)
        sub = new_solver(options, deadline - time.perf_counter())
        status = sub.solve(face)
        report.num_solves += 1
        _LOG.debug("tie-break %s: %s in %.3f s", expr, sub.status_name(status), sub.wall_time)
        if status != cp_model.OPTIMAL:
            return False
        inc = _Incumbent.read(built, sub)
        face.add(expr <= round(sub.objective_value))
        return True

    def lexicographic(face, group: str, variables, stage: str, forced=None) -> bool:
        start = time.perf_counter()
        deadline = start + options.time_limit_s
        done = True
        for pos, var in enumerate(variables):
            if getattr(inc, group)[pos] == 0:
                face.add(var == 0)
            elif forced is not None and forced[pos]:
                face.add(var == int(getattr(inc, group)[pos]))
            elif not minimize(face, var, deadline):
                done = False
                break
        report.wall_time_s[stage] = time.perf_counter() - start
        return done

    face = _optimal_face(built, cost_units)
    if tie_units is None:
        start = time.perf_counter()
        if not minimize(face, built.tie_break_expr, start + options.time_limit_s):
            return inc.replicas, inc.traffic, report
        tie_units = int(built.tie_break_weights.to_numpy() @ inc.replicas)
        report.wall_time_s["weighted_replicas"] = time.perf_counter() - start
    face.add(built.tie_break_expr <= tie_units)
    kept = _Incumbent(*(v.copy() for v in (inc.replicas, inc.traffic, inc.use, inc.spare)))
    if options.prove_unique_plan:
        report.proven_unique = lexicographic(face, "replicas", list(built.replicas), "unique_replicas")
        if not report.proven_unique:
            inc = kept
    if not options.canonical_routing:
        return inc.replicas, inc.traffic, report
    routing = _optimal_face(built, cost_units)
    for var, value in zip(built.replicas, inc.replicas):
        routing.add(var == int(value))
    if not lexicographic(routing, "traffic", list(built.traffic), "routing", _forced_traffic(built, inc)):
        report.proven_unique = False
    return inc.replicas, inc.traffic, report


def _forced_traffic(built: BuiltModel, inc: _Incumbent) -> np.ndarray:
    """Traffic variables whose value the fixed replicas force (no solve needed).

    With replicas fixed, only pairs of deployed candidates can carry traffic; a workload
    with a single such pair routes all its units there.
    """
    pairs = built.traffic.index
    if not len(pairs):
        return np.zeros(0, dtype=bool)
    deployed = inc.replicas[built.replicas.index.get_indexer(pairs.get_level_values("candidate_id"))] > 0
    workloads = pairs.get_level_values("workload")
    live = np.unique(np.asarray(workloads)[deployed], return_counts=True)
    single = set(live[0][live[1] == 1])
    return deployed & np.isin(np.asarray(workloads), list(single))


def _optimal_face(built: BuiltModel, cost_units: int) -> cp_model.CpModel:
    face = built.model.clone()
    face.clear_objective()
    face.add(built.cost_expr <= cost_units)
    return face


def _hint(model: cp_model.CpModel, built: BuiltModel, inc: _Incumbent) -> None:
    model.clear_hints()
    for series, values in ((built.replicas, inc.replicas), (built.traffic, inc.traffic),
                           (built.use, inc.use), (built.spare, inc.spare)):
        for var, value in zip(series, values):
            model.add_hint(var, int(value))
