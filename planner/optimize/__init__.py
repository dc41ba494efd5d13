"""CP-SAT deployment optimizer: pure-data planning instances in, verified plans out."""

from planner.optimize.brute import BruteOptimum, brute_force_optimum
from planner.optimize.check import check_plan
from planner.optimize.diagnose import Finding, diagnose_infeasible
from planner.optimize.instance import DEFAULT_TRAFFIC_UNITS, PlanningInstance, SolverOptions, SolveStatus
from planner.optimize.kbest import deployed_sets, k_best
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
