"""CP-SAT deployment optimizer: pure-data planning instances in, verified plans out."""

import importlib

from planner.optimize.instance import DEFAULT_TRAFFIC_UNITS, PlanningInstance, SolverOptions, SolveStatus
from planner.optimize.model import BuiltModel, build_model
from planner.optimize.prune import prune_dominated
from planner.optimize.scaling import COST_UNITS_PER_USD, LOAD_UNITS_PER_REPLICA
from planner.optimize.solve import Plan, SolveResult, read_plan, run_solver, solve

__all__ = [
    "BruteOptimum", "BuiltModel", "COST_UNITS_PER_USD", "DEFAULT_TRAFFIC_UNITS", "Finding",
    "LOAD_UNITS_PER_REPLICA", "Plan", "PlanningInstance", "SolveResult", "SolveStatus", "SolverOptions",
    "brute_force_optimum", "build_model", "check_plan", "deployed_sets", "diagnose_infeasible", "k_best",
    "prune_dominated", "read_plan", "run_solver", "solve",
]

#: Names exported from the modules a solve with a plan never runs (the brute-force reference,
#: the plan checker, the infeasibility diagnosis, k-best): each module is imported on first
#: use of one of its names (process start).
_LAZY = {"BruteOptimum": "brute", "brute_force_optimum": "brute", "check_plan": "check",
         "Finding": "diagnose", "diagnose_infeasible": "diagnose", "deployed_sets": "kbest", "k_best": "kbest"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
