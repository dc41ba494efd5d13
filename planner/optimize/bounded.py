"""The ranking's search on the model restricted to the candidates that can be in a cheap plan (issue 19).

:class:`planner.optimize.nextplan.WholeModelSearch` solves the whole model for each plan of
the ranking, though the plans asked for cost little more than the optimum and most
candidates cannot appear in any plan that cheap. :class:`BoundedSearch` gives the same
plans from a smaller model:

- :func:`planner.optimize.lpbound.candidate_lower_bounds` bounds the cost of every plan
  that deploys candidate j by B_j (one LP for all candidates).
- For a threshold C, the model restricted to the candidates with B_j <= C has exactly the
  plans of cost <= C of the whole model, with the same cuts (each cut forbids a set of
  kept candidates: every plan found so far came from a restricted model with a threshold
  no larger, whose candidates are all kept). So when the restricted search's canonical
  optimum costs at most C, it is the whole model's canonical optimum: every plan tied with
  it in (cost, weighted replica sum), and every plan the tie-break compares, costs <= C too.
- When the restricted optimum costs more than C, that plan is still a plan of the whole
  model, so the whole model's optimum costs at most as much: the threshold rises to
  (1 + :data:`RESTRICTION_HEADROOM`) times its cost (to its cost alone when the caller's
  ``last`` says no plan follows one of that cost), and the same step is solved again on
  the larger restriction, whose optimum then costs at most the threshold (exact); when no
  candidate's bound lies between the two thresholds, the restriction is already the larger
  one and its plan is exact as it stands (nothing is solved again). A plan that will be
  solved again is, to the restricted search, the last one (its ``last``): it looks nothing
  ahead for it, nor runs anything beside its proof, which only the dropped restriction
  would use. When the restriction is infeasible or a solve is not proven optimal, the step
  is solved again with every candidate that some plan can deploy (the whole model's
  answer, time limit included).

The first threshold is (1 + :data:`RESTRICTION_HEADROOM`) times the LP's own lower bound of
the optimum, raised to keep at least :data:`RESTRICTION_LEAST_CANDIDATES` candidates; a
model that this would not halve is searched whole. The results carry the whole model's index and combined-objective weight, and
count the solves that ended above their threshold (``num_solves``).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import pandas as pd

from planner.optimize.blocks import restricted
from planner.optimize.instance import SolverOptions, SolveStatus
from planner.optimize.lpbound import candidate_lower_bounds
from planner.optimize.model import BuiltModel
from planner.optimize.nextplan import WholeModelSearch
from planner.optimize.scaling import COST_UNITS_PER_USD
from planner.optimize.solve import SolveResult, plan_cost_units
from planner.optimize.tiebreak import tie_break_weight

#: Relative headroom of each threshold above the cost that set it: the ranking's later plans
#: usually cost a little more than the optimum, and each plan above the threshold costs one
#: solve of the restricted model more (issue 19: on the disaggregated llama-3.1-70b
#: vs-aiconfigurator problem, 5 plans within 8 % of the optimum).
RESTRICTION_HEADROOM = 0.10
#: The first restriction keeps at least this many candidates (those of the least bounds): the
#: LP bound of the optimum is often 10-20 % below it on aggregated models, and a larger first
#: model costs less than growing it (issue 19: the vs-aiconfigurator problems keep 8-28
#: candidates at the optimum's cost and 18-40 at the fifth plan's).
RESTRICTION_LEAST_CANDIDATES = 40
#: Models with fewer candidates are searched whole (the LP and the restriction cost more
#: than they save).
RESTRICTION_MIN_CANDIDATES = 64
#: The model is searched whole when the first restriction would keep more than this share
#: of its candidates (issue 19: on the 77-88-candidate aggregated vs-aiconfigurator models a
#: restriction to 40 saved nothing within the noise; on the disaggregated ones, 326 and 139
#: candidates, it saved 3-5x of the ranking's CPU time).
RESTRICTION_MAX_SHARE = 0.5


def bounded_search(built: BuiltModel, options: SolverOptions, later: SolverOptions,
                   min_load_fraction: float) -> "BoundedSearch | None":
    """A :class:`BoundedSearch` of ``built`` (emitted or not), or None (then the whole model is
    searched) when the model is small, the LP gives no bounds or the first restriction would
    keep more than :data:`RESTRICTION_MAX_SHARE` of the candidates."""
    if len(built.replicas) < RESTRICTION_MIN_CANDIDATES:
        return None
    bounds = candidate_lower_bounds(built)
    if bounds is None or not np.isfinite(bounds).any():
        return None
    threshold = first_threshold(bounds)
    if np.count_nonzero(bounds <= threshold) > RESTRICTION_MAX_SHARE * len(bounds):
        return None
    return BoundedSearch(built, bounds, threshold, options, later, min_load_fraction)


def first_threshold(bounds: np.ndarray) -> float:
    """The first restriction's threshold: (1 + :data:`RESTRICTION_HEADROOM`) times the least
    bound (the LP's bound of the optimum), raised to keep :data:`RESTRICTION_LEAST_CANDIDATES`."""
    finite = np.sort(bounds[np.isfinite(bounds)])
    if not len(finite):
        return math.inf
    least = finite[min(RESTRICTION_LEAST_CANDIDATES, len(finite)) - 1]
    return max(float(finite[0]) * (1 + RESTRICTION_HEADROOM), float(least))


class BoundedSearch:
    """The plans of :class:`WholeModelSearch` of ``built``, from its restrictions (module docstring)."""

    def __init__(self, built: BuiltModel, bounds: np.ndarray, threshold: float, options: SolverOptions,
                 later: SolverOptions, min_load_fraction: float):
        self.built, self.bounds = built, bounds
        self.options, self.later, self.fraction = options, later, min_load_fraction
        self.weight = tie_break_weight(built)
        self.found: list[frozenset] = []
        self._positions: tuple | None = None     # (restriction, its rows in the whole model's)
        self._restrict(threshold)

    def _restrict(self, threshold: float) -> None:
        """Search the candidates whose bound is at most ``threshold``, with the cuts so far."""
        self.threshold = threshold
        finite = np.isfinite(self.bounds)
        keep = np.flatnonzero(finite & (self.bounds <= threshold))
        self.complete = len(keep) == int(finite.sum())
        self.sub = restricted(self.built, keep)
        self.search = WholeModelSearch(self.sub, self.options, self.later, self.fraction)
        for used in self.found:
            self.search.forbid(used)

    def next(self, kind: str, last=None) -> SolveResult:
        """The next plan of ``kind``, as :meth:`WholeModelSearch.next` of the whole model."""
        start = time.perf_counter()
        extra = 0

        def ends(usd_per_hour: float) -> bool:
            """The restricted search's ``last``: the caller's, and also when a plan of that cost
            would be solved again on a larger restriction (nothing of this one is then needed
            after it: no look-ahead, nothing beside). A prediction from the plan's cost in USD
            (the exact test is in cost units); a wrong one costs time only."""
            return ((last is not None and last(usd_per_hour))
                    or self._solved_again(usd_per_hour * COST_UNITS_PER_USD, usd_per_hour, last))

        while True:
            result = self.search.next(kind, last=ends)
            cost = None if result.replicas is None else plan_cost_units(self.sub, result.replicas.to_numpy())
            exact = result.status == SolveStatus.OPTIMAL and cost <= self.threshold
            if exact or self.complete:
                return self._lifted(result, extra, time.perf_counter() - start)
            optimal = result.status == SolveStatus.OPTIMAL
            threshold = self._raised(cost, result.objective_usd_per_hour, last) if optimal else math.inf
            if optimal and self._kept(threshold) == self._kept(self.threshold):
                # no bound lies between the thresholds: this restriction (and its search, cuts
                # included) is already that of the larger one, where its optimum is exact
                self.threshold = threshold
                return self._lifted(result, extra, time.perf_counter() - start)
            extra += int(result.solver_params.get("num_solves", 1))
            self._restrict(threshold)

    def _raised(self, cost_units: float, usd_per_hour: float, last) -> float:
        """The threshold after an optimal plan of that cost ended above this one: (1 +
        :data:`RESTRICTION_HEADROOM`) times its cost, its cost alone when ``last`` says no plan
        follows it (the least exact threshold)."""
        grown = cost_units if last is not None and last(usd_per_hour) else cost_units * (1 + RESTRICTION_HEADROOM)
        return max(grown, self.threshold)

    def _solved_again(self, cost_units: float, usd_per_hour: float, last) -> bool:
        """Whether an optimal plan of the restriction at that cost would be solved again on a
        larger one (:meth:`next`)."""
        if self.complete or cost_units <= self.threshold:
            return False
        return self._kept(self._raised(cost_units, usd_per_hour, last)) > self._kept(self.threshold)

    def _kept(self, threshold: float) -> int:
        """How many candidates a restriction to ``threshold`` keeps (finite bounds at most it)."""
        return int(np.count_nonzero(np.isfinite(self.bounds) & (self.bounds <= threshold)))

    def forbid(self, used: set) -> None:
        self.found.append(frozenset(used))
        self.search.forbid(used)

    def _lifted(self, result: SolveResult, extra: int, wall_time_s: float) -> SolveResult:
        """``result`` of the restricted model as a result of the whole one."""
        params = dict(result.solver_params)
        params["combined_objective_weight"] = self.weight
        params["num_solves"] = int(params.get("num_solves", 1)) + extra
        if result.replicas is None:
            return replace(result, solver_params=params, wall_time_s=wall_time_s)
        index, pairs = self.built.replicas.index, self.built.traffic.index
        if self._positions is None or self._positions[0] is not self.sub:
            self._positions = (self.sub, index.get_indexer(self.sub.replicas.index),
                               pairs.get_indexer(self.sub.traffic.index))
        _, at_replicas, at_pairs = self._positions
        # the reindexed Series (0 outside the restriction), without pandas' reindex (7x slower)
        y = np.zeros(len(index), dtype=np.int64)
        y[at_replicas] = result.replicas.to_numpy(np.int64)
        x = np.zeros(len(pairs), dtype=np.int64)
        x[at_pairs] = result.traffic_units.to_numpy(np.int64)
        return replace(result, solver_params=params, wall_time_s=wall_time_s,
                       replicas=pd.Series(y, index=index, name=result.replicas.name),
                       traffic_units=pd.Series(x, index=pairs, name=result.traffic_units.name))
