"""Lower bounds on the cost of every plan that deploys a given candidate (issue 19).

The ranking solves one model many times (:mod:`planner.optimize.alternatives`), and most of
its candidates can never appear in a plan as cheap as the ones asked for: a candidate whose
least possible plan costs more than a threshold C is 0 in every plan of cost <= C, so the
model restricted to the other candidates has the same plans up to C
(:mod:`planner.optimize.bounded`). This module gives those per-candidate bounds from one
linear program.

The LP is a relaxation of the CP-SAT model of :func:`planner.optimize.model.build_model`
(every integer plan satisfies it), with one family of rows the CP-SAT model implies but
does not state, which makes it strong: ``x_jk <= hi_jk use_j`` (a candidate that carries
traffic is deployed) with ``use_j <= y_j`` (a deployed candidate has a replica), so the LP
pays at least one whole replica for any traffic a candidate carries. Rows:

- ``serve[k]``: the prefill-side and aggregated traffic of workload k is its Q_k units;
- ``pd_balance[k, pool]``: a pool's decode traffic equals its prefill traffic;
- ``load[j]``: ``sum_k a_jk x_jk <= L_j y_j`` (the spare replica of N+1 dropped: a relaxation);
- ``use_floor[j]``: ``use_j <= y_j``; ``strong[j, k]``: ``x_jk <= hi_jk use_j`` where a_jk > 0;
- ``inventory_gpus[g]``, ``budget_usd_per_hour``, ``max_distinct_configs`` as in the model.

The bound is not read from the LP solver's objective: for any multipliers pi of the right
signs, the Lagrangian ``L(pi) = pi . b + sum_i min(d_i l_i, d_i u_i)`` with ``d = c - A^T pi``
is a lower bound of every point of the box that meets the rows (weak duality), so the
solver's duals (GLOP, OR-Tools' LP solver) serve as multipliers, sign-clipped, and the bound
stays valid whatever the solver's tolerances. Raising the box of ``y_j`` to ``[1, U_j]`` and
of ``use_j`` to ``[1, 1]`` changes two terms of that sum: the bound of every plan that
deploys j, for all j at once. A safety margin (:data:`BOUND_MARGIN`) absorbs float rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.optimize.model import BuiltModel
from planner.optimize.prune import candidate_pools, candidate_roles
from planner.optimize.scaling import limit_cost_units

#: Relative margin subtracted from every bound (of the sum of the magnitudes that make it up)
#: against float rounding, plus one cost unit: a lower bound only has to be low enough.
BOUND_MARGIN = 1e-9


class _Rows:
    """The LP's rows as coordinate lists, with their lower and upper sides."""

    def __init__(self):
        self.row: list[np.ndarray] = []
        self.col: list[np.ndarray] = []
        self.val: list[np.ndarray] = []
        self.lo: list[np.ndarray] = []
        self.hi: list[np.ndarray] = []
        self.count = 0

    def add(self, cols, vals, lo: float, hi: float) -> None:
        """One row: ``lo <= sum vals * x[cols] <= hi``."""
        cols = np.asarray(cols, dtype=np.int64)
        self.block(np.zeros(len(cols), dtype=np.int64), cols, vals, np.array([lo]), np.array([hi]))

    def block(self, rows: np.ndarray, cols: np.ndarray, vals, lo: np.ndarray, hi: np.ndarray) -> None:
        """``len(lo)`` rows at once; ``rows`` numbers each entry's row from 0 within the block."""
        self.row.append(rows + self.count)
        self.col.append(np.asarray(cols, dtype=np.int64))
        self.val.append(np.asarray(vals, dtype=float))
        self.lo.append(lo)
        self.hi.append(hi)
        self.count += len(lo)

    def arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(np.concatenate(parts) for parts in (self.row, self.col, self.val, self.lo, self.hi))


def candidate_lower_bounds(built: BuiltModel) -> np.ndarray | None:
    """The least cost [cost units / h] of any plan of ``built``'s model that deploys each candidate.

    Parameters
    ----------
    built : BuiltModel
        Emitted or not (the bounds read its data only).

    Returns
    -------
    numpy.ndarray or None
        One float per candidate of ``built.replicas``, lower than or equal to the cost of every
        integer plan of the model (with any further rows: cuts, minimum loads) with
        ``replicas_j >= 1``; ``inf`` where no plan can deploy it. None when the LP solver
        gives no multipliers (an infeasible or failed LP): no candidate is then ruled out.
    """
    from ortools.linear_solver import pywraplp

    n = len(built.replicas)
    if n == 0:
        return np.zeros(0)
    lp = _relaxation(built)
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:
        return None
    variables = [solver.NumVar(float(a), float(b), "") for a, b in zip(lp.lower_box, lp.upper_box)]
    constraints = [solver.Constraint(-solver.infinity() if a == -math.inf else a, b) for a, b in zip(lp.lo, lp.hi)]
    for row, col, val in zip(lp.row.tolist(), lp.col.tolist(), lp.val.tolist()):
        constraints[row].SetCoefficient(variables[col], val)
    objective = solver.Objective()
    for j in range(n):
        objective.SetCoefficient(variables[j], float(lp.cost[j]))
    objective.SetMinimization()
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    return _deploying_bounds(lp, np.array([con.dual_value() for con in constraints], dtype=float), n)


@dataclass(frozen=True, eq=False)
class _Relaxation:
    """The LP ``min cost . x`` s.t. ``lo <= A x <= hi``, ``lower_box <= x <= upper_box``, A in
    coordinates (``row``, ``col``, ``val``); variables y (0..n-1), use (n..2n-1), x (2n..)."""

    row: np.ndarray
    col: np.ndarray
    val: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    cost: np.ndarray
    lower_box: np.ndarray
    upper_box: np.ndarray


def _relaxation(built: BuiltModel) -> _Relaxation:
    """The LP relaxation of ``built``'s model with the rows of the module docstring."""
    ids, pairs = built.replicas.index, built.traffic.index
    n, m = len(ids), len(pairs)
    owner = ids.get_indexer(pairs.get_level_values("candidate_id"))
    workload = np.asarray(pairs.get_level_values("workload"), dtype=object)
    coef = built.load_coef.to_numpy(np.int64)
    units = built.load_units_per_replica.reindex(ids).to_numpy(np.int64)
    upper = built.replica_upper.reindex(ids).to_numpy(np.int64)
    price = built.price_units.reindex(ids).to_numpy(float)
    q = {w: float(v) for w, v in built.traffic_units.items()}
    # the traffic variables' upper bounds, as the CP-SAT model sets them (coefficients are > 0)
    hi_x = np.minimum(np.array([q[w] for w in workload], dtype=float),
                      ((units[owner] * upper[owner]) // coef).astype(float))
    y_at, use_at, x_at = np.arange(n), n + np.arange(n), 2 * n + np.arange(m)

    rows, inf = _Rows(), math.inf
    cands = built.candidates.reindex(ids)
    role, pool = candidate_roles(cands)[owner], candidate_pools(cands)[owner]
    for name in built.workloads:
        mine = workload == name
        served = np.flatnonzero(mine & (role != "decode"))
        rows.add(x_at[served], np.ones(len(served)), q[name], q[name])                     # serve[k]
        for key in sorted(set(pool[mine & (role != "both")].tolist())):                  # pd_balance
            pre = np.flatnonzero(mine & (pool == key) & (role == "prefill"))
            dec = np.flatnonzero(mine & (pool == key) & (role == "decode"))
            rows.add(np.concatenate([x_at[pre], x_at[dec]]),
                     np.concatenate([np.ones(len(pre)), -np.ones(len(dec))]), 0.0, 0.0)
    each, at_most_0 = np.arange(n), (np.full(n, -inf), np.zeros(n))
    rows.block(np.concatenate([owner, each]), np.concatenate([x_at, y_at]),            # load[j]
               np.concatenate([coef.astype(float), -units.astype(float)]), *at_most_0)
    rows.block(np.tile(each, 2), np.concatenate([use_at, y_at]),                       # use_floor[j]
               np.concatenate([np.ones(n), -np.ones(n)]), *at_most_0)
    rows.block(np.tile(np.arange(m), 2), np.concatenate([x_at, use_at[owner]]),        # strong[j, k]
               np.concatenate([np.ones(m), -hi_x]), np.full(m, -inf), np.zeros(m))
    gpr, gpus = cands["gpus_per_replica"].to_numpy(float), cands["gpu"].to_numpy(object)
    for gpu, count in sorted(built.instance.inventory_gpus.items()):
        at = np.flatnonzero(gpus == gpu)
        if len(at):
            rows.add(y_at[at], gpr[at], -inf, float(count))
    if built.instance.budget_usd_per_hour is not None:
        rows.add(y_at, price, -inf, float(limit_cost_units(built.instance.budget_usd_per_hour)))
    if built.instance.max_distinct_configs is not None:
        rows.add(use_at, np.ones(n), -inf, float(built.instance.max_distinct_configs))
    upper_f = upper.astype(float)
    return _Relaxation(*rows.arrays(), cost=np.concatenate([price, np.zeros(n + m)]),
                       lower_box=np.zeros(2 * n + m),
                       upper_box=np.concatenate([upper_f, np.minimum(upper_f, 1.0), hi_x]))


def _deploying_bounds(lp: _Relaxation, pi: np.ndarray, n: int) -> np.ndarray:
    """The Lagrangian bound of ``lp`` with multipliers ``pi`` (sign-clipped) and the box of
    ``y_j`` raised to [1, U_j] and of ``use_j`` to [1, 1], for every candidate j (see the
    module docstring)."""
    equal = lp.lo == lp.hi
    pi = np.where(equal, pi, np.where(np.isinf(lp.lo), np.minimum(pi, 0.0), np.maximum(pi, 0.0)))
    rhs = np.where(equal | np.isinf(lp.lo), lp.hi, lp.lo)
    d = lp.cost - np.bincount(lp.col, weights=lp.val * pi[lp.row], minlength=len(lp.cost))
    term = np.minimum(d * lp.lower_box, d * lp.upper_box)
    base = float(np.sum(pi * rhs) + np.sum(term))
    # the magnitudes the float sums above and d's cancellations can lose precision on
    spread = np.abs(lp.cost) + np.bincount(lp.col, weights=np.abs(lp.val * pi[lp.row]), minlength=len(lp.cost))
    scale = float(np.sum(np.abs(pi * rhs)) + np.sum(spread * np.maximum(np.abs(lp.lower_box), np.abs(lp.upper_box))))
    y, use = np.arange(n), n + np.arange(n)
    raised_y = np.minimum(d[y], d[y] * lp.upper_box[y])
    bounds = base - term[y] - term[use] + raised_y + d[use]
    bounds -= BOUND_MARGIN * (scale + np.abs(bounds)) + 1.0
    bounds[lp.upper_box[y] < 1] = np.inf         # no replica can be deployed at all
    return bounds
