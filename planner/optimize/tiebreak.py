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
#: CP-SAT presolve rounds and probing level of every solve (CP-SAT's defaults: 3 and 2). On
#: the planner's models the later rounds and the probing find little and cost up to half of
#: a solve. Issue 19, CPU time of the ranking's solves replayed with the planner's settings
#: (gap 0, seed 0), defaults vs these: the large benchmark problem 1.02 vs 0.50 s, the
#: disaggregated vs-aiconfigurator models 1.59 vs 0.77 s and 1.78 vs 1.07 s, two default ones
#: 0.23 vs 0.14 s and 0.45 vs 0.25 s (one round alone: 0.68, 1.14, 1.71, 0.19, 0.49 s).
#: Proven results do not depend on them.
PRESOLVE_ITERATIONS = 1
PROBING_LEVEL = 0
#: CP-SAT cut level of every solve (CP-SAT's default: 1, which adds MIR, Chvatal-Gomory and
#: zero-half cuts to the LP relaxation). The planner's models are small (about 100-1000
#: variables) and their LP bound is tight enough that the cuts' separation costs more than
#: the branches it saves. Issue 19, CPU time of the 61 vs-aiconfigurator and large benchmark
#: problems' ranking solves replayed with the planner's settings, level 1 vs 0: 9.8 vs 5.2 s
#: in all (disaggregated llama-3.1-70b 0.18 vs 0.13 s, qwen3-32b 0.24 vs 0.15 s; the large
#: problem 0.65 vs 0.36 s), with the same statuses and optima. Proven results do not depend on it.
CUT_LEVEL = 0


@dataclass
class _Incumbent:
    """Current full solution (values per variable group) of the tie-break model."""

    replicas: np.ndarray
    traffic: np.ndarray
    use: np.ndarray
    spare: np.ndarray

    @classmethod
    def read(cls, built: BuiltModel, solver: cp_model.CpSolver) -> _Incumbent:
        return cls(*(solution_values(solver, s) for s in (built.replicas, built.traffic, built.use, built.spare)))


def solution_values(solver: cp_model.CpSolver, variables) -> np.ndarray:
    """The solver's values of ``variables`` (a Series or list of the model's variables) as int64,
    without the Series ``solver.values`` builds (about 2x faster)."""
    value = solver.value
    return np.array([value(var) for var in variables], dtype=np.int64)


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
    params.max_presolve_iterations = PRESOLVE_ITERATIONS
    params.cp_model_probing_level = PROBING_LEVEL
    params.cut_level = CUT_LEVEL
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
                       solver: cp_model.CpSolver, *, one_support: bool = False
                       ) -> tuple[np.ndarray, np.ndarray, TieBreakReport]:
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
    one_support : bool, default False
        Every plan on the face is known to deploy the incumbent's candidates
        (:mod:`planner.optimize.cutseq`): the proof fixes ``use`` to them, a far smaller search.

    Returns
    -------
    replicas, traffic : numpy.ndarray
        Values aligned with ``built.replicas`` and ``built.traffic``.
    report : TieBreakReport

    Notes
    -----
    Stages: (1) minimize the weighted replica sum T (skipped when given); (2) if
    ``prove_unique_plan``, one solve proves that no other replica vector lies on the face
    {cost, T at their optima} (:func:`_no_other_replicas`); when another does (or that
    solve times out), minimize y_j in candidate order on the face -- a y_j that is 0 in
    the incumbent is fixed at 0 without a solve -- which picks the lexicographic minimum;
    if a stage times out, the replicas of stage 1 are kept; (3) with replicas fixed,
    the traffic units lexicographically smallest in (candidate_id, workload) order: one
    solve of exact lexicographic integer weights (:func:`_lexicographic_weights`) when
    they fit the objective limit, else one minimize per variable the same way. Every
    value fixed is a proven optimum, so the result does not depend on which solution a
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

    def lexicographic(face, group: str, variables, stage: str, forced=None, start=None) -> bool:
        start = time.perf_counter() if start is None else start
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
        start = time.perf_counter()
        if one_support:
            for var, value in zip(built.use, inc.replicas):
                face.add(var == int(value > 0))
        report.num_solves += 1
        if _no_other_replicas(face, built, inc.replicas, new_solver(options, options.time_limit_s)):
            report.proven_unique = True
            report.wall_time_s["unique_replicas"] = time.perf_counter() - start
        else:
            report.proven_unique = lexicographic(face, "replicas", list(built.replicas), "unique_replicas",
                                                 start=start)
        if not report.proven_unique:
            inc = kept
    if not options.canonical_routing:
        return inc.replicas, inc.traffic, report
    routing = _optimal_face(built, cost_units)
    fix_values(routing, built.replicas.tolist(), inc.replicas)
    pair_rows = _pair_rows(built)
    forced = _forced_traffic(built, inc, pair_rows)
    start = time.perf_counter()
    weights = _lexicographic_weights(built, inc, forced, pair_rows)
    if weights is not None:         # the lexicographic minimum in one solve
        live, coef = weights
        _fix_traffic(routing, built, inc, live)
        if len(live) and not minimize(routing, cp_model.LinearExpr.weighted_sum([built.traffic.iloc[i] for i in live], coef),
                        start + options.time_limit_s):
            report.proven_unique = False
        report.wall_time_s["routing"] = time.perf_counter() - start
    elif not lexicographic(routing, "traffic", list(built.traffic), "routing", forced):
        report.proven_unique = False
    return inc.replicas, inc.traffic, report


def _no_other_replicas(face: cp_model.CpModel, built: BuiltModel, replicas: np.ndarray,
                       solver: cp_model.CpSolver) -> bool:
    """Whether no other replica vector lies on ``face`` (proven infeasible with ``y != replicas``).

    Then ``replicas`` is the face's only one, hence its lexicographic minimum: one solve
    instead of one per deployed candidate. False when another exists or the solve timed out
    (the caller runs the lexicographic stage then, with the same result).
    """
    check = face.clone()
    check.clear_hints()
    differs = []
    use = dict(zip(built.use.index, built.use.tolist()))
    for cid, var, value, upper in zip(built.replicas.index, built.replicas.tolist(), replicas.tolist(),
                                      built.replica_upper.tolist()):
        if value == 0:
            differs.append(use[cid])                # y_j >= 1 exactly when use_j (use_link, use_floor)
            continue
        for bound, low in ((int(value) - 1, True), (int(value) + 1, False)):
            if (low and bound < 0) or (not low and bound > upper):
                continue
            lit = check.new_bool_var(f"{'below' if low else 'above'}[{cid}]")
            check.add(var <= bound if low else var >= bound).only_enforce_if(lit)
            differs.append(lit)
    check.add_bool_or(differs)
    return solver.solve(check) == cp_model.INFEASIBLE


def _pair_rows(built: BuiltModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per traffic pair of ``built``: the position of its candidate in ``built.replicas``, its
    workload (object array) and that workload's traffic units (int64), found once for
    :func:`_forced_traffic` and :func:`_lexicographic_weights` (speed: one index lookup, and
    the units by dict, not ``.loc``)."""
    pairs = built.traffic.index
    owner = built.replicas.index.get_indexer(pairs.get_level_values("candidate_id"))
    workloads = np.asarray(pairs.get_level_values("workload"), dtype=object)
    units_of = built.traffic_units.to_dict()
    return owner, workloads, np.array([units_of[w] for w in workloads.tolist()], dtype=np.int64)


def _lexicographic_weights(built: BuiltModel, inc: _Incumbent, forced: np.ndarray, pair_rows: tuple
                           ) -> tuple[np.ndarray, list[int]] | None:
    """Positions and exact integer weights W of the traffic variables that can still vary with
    the replicas fixed, such that minimizing sum W_i x_i gives their lexicographic minimum in
    (candidate_id, workload) order; None when the weights could exceed the objective limit.

    Live: pairs of deployed candidates whose value the replicas do not force. With U_i the
    bound of x_i (its workload's units, and the load row at the fixed replicas),
    W_i = prod_{l > i} (U_l + 1) > sum_{l > i} W_l U_l, so a smaller x_i outweighs every later one.
    ``pair_rows``: :func:`_pair_rows` of ``built``.
    """
    pos, _, q = pair_rows
    y = inc.replicas[pos]
    live = np.flatnonzero((y > 0) & ~forced)
    units = built.load_units_per_replica.to_numpy(np.int64)[pos]
    upper = np.minimum(q, (units * y) // np.maximum(built.load_coef.to_numpy(np.int64), 1))
    weights, product = [], 1
    for i in live[::-1]:
        weights.append(product)
        product *= int(upper[i]) + 1
        if product > COMBINED_OBJECTIVE_LIMIT:
            return None
    return live, weights[::-1]


def _fix_traffic(model: cp_model.CpModel, built: BuiltModel, inc: _Incumbent, live: np.ndarray) -> None:
    """Fix every traffic variable outside ``live`` at its incumbent value (0 for candidates not
    deployed, the forced value otherwise), as the lexicographic stage would."""
    fixed = np.ones(len(built.traffic), dtype=bool)
    fixed[live] = False
    traffic = built.traffic.tolist()
    fix_values(model, [traffic[i] for i in np.flatnonzero(fixed)], inc.traffic[fixed])


def fix_values(model: cp_model.CpModel, variables: list, values) -> None:
    """Fix each variable of ``model`` at its value (inside its domain): the domain of a
    one-interval variable becomes that value (the same feasible set as a ``var == value``
    row, about 20x faster to state); other variables get the row."""
    domains = model.proto.variables
    for var, value in zip(variables, np.asarray(values).tolist()):
        domain = domains[var.index].domain
        if len(domain) == 2:
            domain[0] = domain[1] = value
        else:
            model.add(var == value)


def _forced_traffic(built: BuiltModel, inc: _Incumbent, pair_rows: tuple) -> np.ndarray:
    """Traffic variables whose value the fixed replicas force (no solve needed).

    With replicas fixed, only pairs of deployed candidates can carry traffic; a workload
    with a single such pair routes all its units there. ``pair_rows``: :func:`_pair_rows`
    of ``built``.
    """
    if not len(built.traffic):
        return np.zeros(0, dtype=bool)
    owner, workloads, _ = pair_rows
    deployed = inc.replicas[owner] > 0
    live = np.unique(workloads[deployed], return_counts=True)
    single = set(live[0][live[1] == 1])
    return deployed & np.isin(workloads, list(single))


def _optimal_face(built: BuiltModel, cost_units: int) -> cp_model.CpModel:
    face = built.model.clone()
    face.clear_objective()
    face.add(built.cost_expr <= cost_units)
    return face


def _hint(model: cp_model.CpModel, built: BuiltModel, inc: _Incumbent) -> None:
    model.clear_hints()
    for series, values in ((built.replicas, inc.replicas), (built.traffic, inc.traffic),
                           (built.use, inc.use), (built.spare, inc.spare)):
        add_hints(model, series, values)


def add_hints(model: cp_model.CpModel, variables, values) -> None:
    """``model.add_hint(var, value)`` for each pair, in bulk on the proto's repeated fields
    (about 20x faster; the model's variables, never negated literals)."""
    hint = model.proto.solution_hint
    hint.vars.extend([var.index for var in variables])
    hint.values.extend([int(value) for value in values])
