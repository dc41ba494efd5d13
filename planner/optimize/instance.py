"""The optimizer's pure-data inputs (a planning instance and solver options), validated once."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

import numpy as np
import pandas as pd

from planner.schema import PlanningInputError

# Fine-grained routing splits each workload into this many equal traffic units; 2520 is the
# least common multiple of 1..10, so halves, thirds, ..., tenths of a workload are exact.
DEFAULT_TRAFFIC_UNITS = 2520

REQUIRED_CANDIDATE_COLUMNS = ("gpu", "gpus_per_replica", "usd_per_replica_hour")


class SolveStatus(StrEnum):
    """Outcome of a solve, independent of CP-SAT's own status codes."""

    OPTIMAL = "optimal"          # proven optimal, gap 0
    FEASIBLE = "feasible"        # a plan exists, optimality not proven (time or gap limit)
    INFEASIBLE = "infeasible"    # proven: no plan satisfies the constraints
    MODEL_INVALID = "model_invalid"
    UNKNOWN = "unknown"          # no plan found and infeasibility not proven


@dataclass(frozen=True)
class SolverOptions:
    """CP-SAT settings; deterministic output comes from a unique optimum, not one worker.

    ``time_limit_s`` bounds the cost phase and, separately, each tie-break stage of
    :func:`planner.optimize.run_solver`. ``prove_unique_plan`` adds the lexicographic
    proof that the optimal replicas are unique (the costliest stage on large instances);
    without it the plan is unique unless two optimal plans also tie in the weighted
    replica sum.
    """

    time_limit_s: float = 30.0
    num_workers: int = 8
    random_seed: int = 0
    relative_gap_limit: float = 0.0
    log_search_progress: bool = False
    prove_unique_plan: bool = True
    #: Canonical routing (lexicographic traffic stage); Pareto points skip it (cost and
    #: replicas only).
    canonical_routing: bool = True

    def __post_init__(self) -> None:
        problems = []
        if not (math.isfinite(self.time_limit_s) and self.time_limit_s > 0):
            problems.append(f"time_limit_s: must be a positive number, got {self.time_limit_s!r}")
        if not (isinstance(self.num_workers, int) and self.num_workers >= 1):
            problems.append(f"num_workers: must be an integer >= 1, got {self.num_workers!r}")
        if not isinstance(self.random_seed, int):
            problems.append(f"random_seed: must be an integer, got {self.random_seed!r}")
        if not (0.0 <= self.relative_gap_limit < 1.0):
            problems.append(f"relative_gap_limit: must be in [0, 1), got {self.relative_gap_limit!r}")
        if not isinstance(self.prove_unique_plan, bool):
            problems.append(f"prove_unique_plan: must be a bool, got {self.prove_unique_plan!r}")
        if problems:
            raise PlanningInputError(problems)


@dataclass(frozen=True, eq=False)
class PlanningInstance:
    """One deployment-planning problem: candidates, their capacities, and the traffic to serve.

    Attributes
    ----------
    candidates : pandas.DataFrame
        Indexed by unique string ``candidate_id``; columns ``gpu`` (GPU type id),
        ``gpus_per_replica`` (int >= 1) and ``usd_per_replica_hour`` (> 0); other columns
        are carried into the plan untouched.
    capacity_per_s : pandas.DataFrame
        Same index as ``candidates``, one column per workload: requests/s one replica
        carries for that workload at its SLO [1/s]; 0 means it cannot serve it.
    rate_per_s : pandas.Series
        Requests/s to serve per workload [1/s], all > 0.
    inventory_gpus : Mapping[str, int]
        Optional upper bound on GPUs per GPU type; types not listed are unbounded.
    budget_usd_per_hour : float or None
        Optional upper bound on the plan's cost [USD/h].
    max_distinct_configs : int or None
        At most this many candidates with replicas > 0.
    redundancy_workloads : tuple of str
        N+1: a deployment serving any of these keeps one spare replica beyond its load.
    slices_per_workload : int or None
        Split each workload into this many equal pieces, each routed wholly to one
        candidate (Melange's slice factor); None routes in ``DEFAULT_TRAFFIC_UNITS`` pieces.

    Raises
    ------
    PlanningInputError
        On construction, listing every problem found.
    """

    candidates: pd.DataFrame
    capacity_per_s: pd.DataFrame
    rate_per_s: pd.Series
    inventory_gpus: Mapping[str, int] = field(default_factory=dict)
    budget_usd_per_hour: float | None = None
    max_distinct_configs: int | None = None
    redundancy_workloads: tuple[str, ...] = ()
    slices_per_workload: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "inventory_gpus", MappingProxyType(dict(self.inventory_gpus)))
        object.__setattr__(self, "redundancy_workloads", tuple(self.redundancy_workloads))
        problems = _candidate_problems(self.candidates) + _traffic_problems(self)
        problems += _option_problems(self)
        if problems:
            raise PlanningInputError(problems)

    @property
    def workloads(self) -> tuple[str, ...]:
        """Workload names in canonical (sorted) order."""
        return tuple(sorted(self.rate_per_s.index))

    def traffic_units(self) -> pd.Series:
        """Traffic units (pieces) per workload, in canonical order."""
        units = self.slices_per_workload or DEFAULT_TRAFFIC_UNITS
        return pd.Series(units, index=pd.Index(self.workloads, name="workload"), dtype=np.int64)


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _candidate_problems(candidates) -> list[str]:
    if not isinstance(candidates, pd.DataFrame) or candidates.empty:
        return ["candidates: must be a non-empty DataFrame"]
    problems = []
    index = candidates.index
    if not _non_empty_strings(index):
        problems.append("candidates.index: candidate_id values must be non-empty strings")
    if index.has_duplicates:
        dups = sorted(map(str, index[index.duplicated()].unique()))
        problems.append(f"candidates.index: duplicate candidate_id {dups}")
    missing = [c for c in REQUIRED_CANDIDATE_COLUMNS if c not in candidates.columns]
    if missing:
        return problems + [f"candidates: missing columns {missing}"]
    gpr = candidates["gpus_per_replica"]
    integers = gpr.dtype.kind in "iu" or all(_is_int(v) or (isinstance(v, float) and v.is_integer()) for v in gpr)
    if not integers or (gpr < 1).any():
        problems.append("candidates.gpus_per_replica: must be integers >= 1")
    price = pd.to_numeric(candidates["usd_per_replica_hour"], errors="coerce").to_numpy(float)
    if not (np.isfinite(price) & (price > 0)).all():
        problems.append("candidates.usd_per_replica_hour: must be finite and > 0")
    if not _non_empty_strings(candidates["gpu"]):
        problems.append("candidates.gpu: must be non-empty strings")
    return problems


def _non_empty_strings(values: pd.Index | pd.Series) -> bool:
    """Every value is a non-empty ``str`` (a string dtype without missing values: only
    the empty strings to look for, vectorized; else value by value)."""
    if isinstance(values.dtype, pd.StringDtype):
        return not values.hasnans and not (values == "").any()
    return all(isinstance(v, str) and v for v in values)


def _traffic_problems(inst: PlanningInstance) -> list[str]:
    rate, cap = inst.rate_per_s, inst.capacity_per_s
    if not isinstance(rate, pd.Series) or rate.empty:
        return ["rate_per_s: must be a non-empty Series indexed by workload"]
    problems = []
    if rate.index.has_duplicates:
        problems.append("rate_per_s.index: duplicate workload names")
    values = pd.to_numeric(rate, errors="coerce").to_numpy(float)
    if not (np.isfinite(values) & (values > 0)).all():
        problems.append("rate_per_s: every workload rate must be finite and > 0")
    if not isinstance(cap, pd.DataFrame):
        return problems + ["capacity_per_s: must be a DataFrame"]
    if (isinstance(inst.candidates, pd.DataFrame) and not cap.index.equals(inst.candidates.index)
            and set(cap.index) != set(inst.candidates.index)):
        problems.append("capacity_per_s.index: must hold exactly the candidate ids of candidates")
    if cap.index.has_duplicates:
        problems.append("capacity_per_s.index: duplicate candidate_id")
    if set(cap.columns) != set(rate.index):
        problems.append(f"capacity_per_s.columns: must be the workloads {sorted(map(str, rate.index))}, "
                        f"got {sorted(map(str, cap.columns))}")
        return problems
    numeric = all(kind in "iuf" for kind in cap.dtypes.map(lambda d: d.kind))
    numbers = cap.to_numpy(float) if numeric else cap.apply(pd.to_numeric, errors="coerce").to_numpy(float)
    if not (np.isfinite(numbers) & (numbers >= 0)).all():
        problems.append("capacity_per_s: capacities must be finite and >= 0")
    return problems


def _option_problems(inst: PlanningInstance) -> list[str]:
    problems = []
    for gpu, count in inst.inventory_gpus.items():
        if not _is_int(count) or count < 0:
            problems.append(f"inventory_gpus.{gpu}: must be an integer >= 0, got {count!r}")
    budget = inst.budget_usd_per_hour
    if budget is not None and not (isinstance(budget, (int, float)) and math.isfinite(budget) and budget > 0):
        problems.append(f"budget_usd_per_hour: must be a finite number > 0, got {budget!r}")
    k = inst.max_distinct_configs
    if k is not None and not (_is_int(k) and k >= 1):
        problems.append(f"max_distinct_configs: must be an integer >= 1, got {k!r}")
    known = set(inst.rate_per_s.index) if isinstance(inst.rate_per_s, pd.Series) else set()
    unknown = [w for w in inst.redundancy_workloads if w not in known]
    if unknown:
        problems.append(f"redundancy_workloads: unknown workloads {unknown}")
    s = inst.slices_per_workload
    if s is not None and not (_is_int(s) and s >= 1):
        problems.append(f"slices_per_workload: must be an integer >= 1, got {s!r}")
    return problems
