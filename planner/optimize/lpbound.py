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

import numpy as np

from planner.optimize.model import BuiltModel
from planner.optimize.prune import candidate_pools, candidate_roles
from planner.optimize.scaling import limit_cost_units

#: Relative margin subtracted from every bound (of the sum of the magnitudes that make it up)
#: against float rounding, plus one cost unit: a lower bound only has to be low enough.
BOUND_MARGIN = 1e-9


class _Rows:
    """The LP's rows as coordinate lists, with their senses and right-hand sides."""

    def __init__(self):
        self.row: list[np.ndarray] = []
        self.col: list[np.ndarray] = []
        self.val: list[np.ndarray] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def add(self, cols, vals, lo: float, hi: float) -> None:
        cols = np.asarray(cols, dtype=np.int64)
        self.row.append(np.full(len(cols), len(self.lo), dtype=np.int64))
        self.col.append(cols)
        self.val.append(np.asarray(vals, dtype=float))
        self.lo.append(lo)
        self.hi.append(hi)

    def arrays(self) -> tuple[np.ndarray, ...]:
        cat = (lambda parts, dtype: np.concatenate(parts) if parts else np.zeros(0, dtype=dtype))
        return (cat(self.row, np.int64), cat(self.col, np.int64), cat(self.val, float),
                np.array(self.lo, dtype=float), np.array(self.hi, dtype=float))


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
    pairs = built.traffic.index
    m = len(pairs)
    if n == 0:
        return np.zeros(0)
    ids = built.replicas.index
    owner = ids.get_indexer(pairs.get_level_values("candidate_id"))
    workload = np.asarray(pairs.get_level_values("workload"), dtype=object)
    coef = built.load_coef.to_numpy(float)
    units = built.load_units_per_replica.reindex(ids).to_numpy(float)
    upper = built.replica_upper.reindex(ids).to_numpy(float)
    price = built.price_units.reindex(ids).to_numpy(float)
    q = {w: float(v) for w, v in built.traffic_units.items()}
    # the traffic variables' upper bounds, as the CP-SAT model sets them
    hi_x = np.array([min(q[w], float((int(units[j]) * int(upper[j])) // int(c)) if c > 0 else q[w])
                     for j, w, c in zip(owner, workload, coef)], dtype=float)
    # variables: replicas y (0..n-1), use (n..2n-1), traffic x (2n..2n+m-1)
    y_at, use_at, x_at = np.arange(n), n + np.arange(n), 2 * n + np.arange(m)
    lower_box = np.zeros(2 * n + m)
    upper_box = np.concatenate([upper, np.minimum(upper, 1.0), hi_x])
    cost = np.concatenate([price, np.zeros(n + m)])

    rows = _Rows()
    inf = math.inf
    cands = built.candidates.reindex(ids)
    role = candidate_roles(cands)[owner]
    pool = candidate_pools(cands)[owner]
    for name in built.workloads:
        mine = workload == name
        served = np.flatnonzero(mine & (role != "decode"))
        rows.add(x_at[served], np.ones(len(served)), q[name], q[name])
        for key in sorted(set(pool[mine & (role != "both")].tolist())):
            pre = np.flatnonzero(mine & (pool == key) & (role == "prefill"))
            dec = np.flatnonzero(mine & (pool == key) & (role == "decode"))
            rows.add(np.concatenate([x_at[pre], x_at[dec]]),
                     np.concatenate([np.ones(len(pre)), -np.ones(len(dec))]), 0.0, 0.0)
    by_owner = np.argsort(owner, kind="stable")
    starts = np.searchsorted(owner[by_owner], np.arange(n + 1))
    for j in range(n):
        mine = by_owner[starts[j]:starts[j + 1]]
        rows.add(np.concatenate([x_at[mine], [y_at[j]]]), np.concatenate([coef[mine], [-units[j]]]), -inf, 0.0)
        rows.add([use_at[j], y_at[j]], [1.0, -1.0], -inf, 0.0)
        for i in mine[coef[mine] > 0]:
            rows.add([x_at[i], use_at[j]], [1.0, -hi_x[i]], -inf, 0.0)
    gpr = cands["gpus_per_replica"].to_numpy(float)
    gpus = cands["gpu"].to_numpy(object)
    for gpu, count in sorted(built.instance.inventory_gpus.items()):
        at = np.flatnonzero(gpus == gpu)
        if len(at):
            rows.add(y_at[at], gpr[at], -inf, float(count))
    if built.instance.budget_usd_per_hour is not None:
        rows.add(y_at, price, -inf, float(limit_cost_units(built.instance.budget_usd_per_hour)))
    if built.instance.max_distinct_configs is not None:
        rows.add(use_at, np.ones(n), -inf, float(built.instance.max_distinct_configs))
    r, c, v, lo, hi = rows.arrays()

    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:
        return None
    variables = [solver.NumVar(float(a), float(b), "") for a, b in zip(lower_box, upper_box)]
    constraints = [solver.Constraint(-solver.infinity() if a == -inf else a, b) for a, b in zip(lo, hi)]
    for row, col, val in zip(r.tolist(), c.tolist(), v.tolist()):
        constraints[row].SetCoefficient(variables[col], val)
    objective = solver.Objective()
    for j in range(n):
        objective.SetCoefficient(variables[j], float(price[j]))
    objective.SetMinimization()
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    pi = np.array([con.dual_value() for con in constraints], dtype=float)
    return _deploying_bounds(pi, r, c, v, lo, hi, cost, lower_box, upper_box, n)


def _deploying_bounds(pi: np.ndarray, r: np.ndarray, c: np.ndarray, v: np.ndarray, lo: np.ndarray,
                      hi: np.ndarray, cost: np.ndarray, lower_box: np.ndarray, upper_box: np.ndarray,
                      n: int) -> np.ndarray:
    """The Lagrangian bound of the LP with the box of ``y_j`` raised to [1, U_j] and of
    ``use_j`` to [1, 1], for every candidate j (see the module docstring)."""
    equal = lo == hi
    pi = np.where(equal, pi, np.where(np.isinf(lo), np.minimum(pi, 0.0), np.maximum(pi, 0.0)))
    rhs = np.where(equal | np.isinf(lo), hi, lo)
    d = cost - np.bincount(c, weights=v * pi[r], minlength=len(cost))
    term = np.minimum(d * lower_box, d * upper_box)
    base = float(np.sum(pi * rhs) + np.sum(term))
    scale = float(np.sum(np.abs(pi * rhs)) + np.sum(np.abs(term)))
    y, use = np.arange(n), n + np.arange(n)
    raised_y = np.minimum(d[y] * 1.0, d[y] * upper_box[y])
    bounds = base - term[y] - term[use] + raised_y + d[use]
    bounds -= BOUND_MARGIN * (scale + np.abs(bounds)) + 1.0
    bounds[upper_box[y] < 1] = np.inf         # no replica can be deployed at all
    return bounds
