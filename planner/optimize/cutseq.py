"""Canonical optima of one model under a growing list of no-good cuts, with the uniqueness
proof of each taken from the next solve (issue 19).

The ranking solves a model again and again, each time without the deployed sets found so
far (:mod:`planner.optimize.nextplan`). Each solve's canonical plan needs a proof that no
other replica vector reaches its optimum (cost, T) (:func:`planner.optimize.tiebreak.canonical_solution`),
a CP-SAT search about as costly as the solve itself. Split by deployed set S of the cost
solve's plan, another optimal plan either deploys a different set, or S with other counts:

- A different set is a plan of the model with the cut of S, the very model the next
  solve of the sequence solves. So the cost solve of that model is run at once (looked
  ahead): when its optimum of ``weight * cost + T`` is above this one's (or it is
  infeasible), every optimal plan deploys S.
- Then the proof only compares replica counts on S (``one_support``), a far smaller search;
  the canonical plan is the same.

The look-ahead pays only when another solve follows: the caller may pass ``last``, which
tells from the cost solve's plan cost whether that plan is (predicted to be) the last one
asked for; then nothing is looked ahead and the proof is the full one (the same canonical
plan either way, so a wrong prediction costs time only).

When the next call asks for the plan of the model with exactly that cut (the caller
forbade S, the canonical plan's set), the looked-ahead cost solve is its cost solve (the
same model and hint, proven optimal or infeasible, so the same canonical plan follows);
otherwise it is dropped. A looked-ahead solve is counted (``num_solves``) by the plan that
uses it. Without a combined objective or the uniqueness proof, nothing is looked ahead.

With a second CPU, the looked-ahead cost solve runs in a worker thread while the main
thread proves the plan on one deployed set (its usual outcome); when the looked-ahead
solve says otherwise, the full proof follows. The plan is the canonical one either way.

Every cost solve after the first also carries the floor ``weight * cost + T >= key`` of the
sequence's last proven optimum: the model only gains cuts, so no later optimum is below
it (a valid row, the same plans; CP-SAT need not prove the bound again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ortools.sat.python import cp_model

from planner.interrupt import Beside
from planner.optimize.instance import SolverOptions, SolveStatus
from planner.optimize.model import BuiltModel
from planner.optimize.solve import CostPhase, SolveResult, cost_phase, finish_solve, greedy_hint, plan_cost_usd
from planner.serving.parallel import usable_cpus


def _copy(phase: CostPhase) -> CostPhase:
    """``phase`` with its own ``params`` (:func:`finish_solve` writes into them)."""
    return replace(phase, params={**phase.params, "wall_time_s": dict(phase.params["wall_time_s"])})


def no_good_cut(built: BuiltModel, used) -> list:
    """The no-good cut of one deployed set over the model's ``use`` variables."""
    return [~var if cid in used else var for cid, var in built.use.items()]


class CutSequence:
    """Solves of ``model`` (of ``built``'s variables), each followed by the cut of a deployed set."""

    def __init__(self, built: BuiltModel, model: cp_model.CpModel, greedy: tuple | None = None):
        self.built, self.model = built, model
        self.pending: tuple[frozenset, CostPhase] | None = None
        self._greedy = greedy       # :func:`greedy_hint` of ``built`` when the caller has it
        self.floor: tuple[int, int] | None = None    # (weight, least key any later solve can reach)

    def solve(self, options: SolverOptions, look_ahead: bool = True,
              ahead_options: SolverOptions | None = None,
              last: Callable[[float], bool] | None = None,
              beside: Callable[[frozenset], None] | None = None) -> SolveResult:
        """The canonical optimum of the model with the cuts so far (:func:`run_solver`);
        ``ahead_options``: those of the next solve (default ``options``), which the
        looked-ahead cost solve uses; ``last(usd_per_hour)``: whether a plan of that cost
        would be the last one asked for (then nothing is looked ahead, nor run beside);
        ``beside(support)``: without a look-ahead, work on the next solve that assumes this
        plan deploys ``support`` (its cost solve's set), run beside the proof (second CPU)."""
        current = replace(self.built, model=self.model)
        phase = self.pending[1] if self.pending is not None else self._cost_phase(self.model, options)
        self.pending = None
        if phase.key is not None:
            self.floor = (phase.weight, phase.key)
        ends = phase.y is not None and last is not None and last(plan_cost_usd(self.built, phase.y))
        if not (look_ahead and options.prove_unique_plan and phase.key is not None) or ends:
            if beside is None or ends or phase.status != SolveStatus.OPTIMAL or usable_cpus() < 2:
                return finish_solve(current, phase, options)
            support = frozenset(self.built.replicas.index[phase.y > 0])
            with Beside(lambda: beside(support)) as job:
                result = finish_solve(current, phase, options)
                job.result()
            return result
        support = frozenset(self.built.replicas.index[phase.y > 0])
        ahead_model = self.model.clone()
        ahead_model.add_bool_or(no_good_cut(self.built, support))
        ahead_options = ahead_options or options
        guess = None
        if usable_cpus() > 1:   # the look-ahead beside the proof that assumes its usual outcome
            with Beside(lambda: self._cost_phase(ahead_model, ahead_options)) as job:
                guess = finish_solve(current, _copy(phase), options, one_support=True)
                ahead = job.result()
        else:
            ahead = self._cost_phase(ahead_model, ahead_options)
        decided = ahead.status == SolveStatus.INFEASIBLE or ahead.key is not None
        one_support = ahead.status == SolveStatus.INFEASIBLE or (ahead.key is not None and ahead.key > phase.key)
        result = (guess if guess is not None and one_support else
                  finish_solve(current, phase, options, one_support=one_support))
        if decided and result.replicas is not None and frozenset(
                self.built.replicas.index[result.replicas.to_numpy() > 0]) == support:
            self.pending = (support, ahead)
        return result

    def _cost_phase(self, model: cp_model.CpModel, options: SolverOptions) -> CostPhase:
        """The cost solve of ``model``, with the sequence's floor: the models only gain cuts, so
        no later optimum of ``weight * cost + T`` is below an earlier one (a valid bound that
        spares CP-SAT the proof up to it)."""
        if self.floor is not None:
            model = model.clone()
            weight, floor = self.floor
            model.add(weight * self.built.cost_expr + self.built.tie_break_expr >= floor).with_name("floor")
        return cost_phase(replace(self.built, model=model), options, greedy=self.greedy())

    def greedy(self) -> tuple:
        """The greedy hint of the sequence's data (the same for every solve), computed once."""
        if self._greedy is None:
            self._greedy = greedy_hint(self.built)
        return self._greedy

    def forbid(self, used) -> None:
        """Add the cut of a deployed set (keeping the looked-ahead solve when it is that set's)."""
        used = frozenset(used)
        if self.pending is not None and self.pending[0] != used:
            self.pending = None
        self.model.add_bool_or(no_good_cut(self.built, used))
