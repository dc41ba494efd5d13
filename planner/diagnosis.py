"""Why a problem is infeasible, and the nearest relaxation verified by re-solving.

Problem-level causes (a workload no candidate can serve: memory, SLO, quantization) are
found here from the candidate table; limit-level causes (inventory, budget, distinct
configurations, N+1) come from :func:`planner.optimize.diagnose_infeasible`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.format_rules import format_relaxation
from planner.margins import Margins
from planner.optimize import diagnose_infeasible
from planner.problem import Problem
from planner.search import serving_params, workload_arrays
from planner.serving.queueing import TrafficArrays, state_at_occupancy

#: Relaxed SLOs are proposed this much above the fastest p95 any candidate reaches.
SLO_RELAXATION_MARGIN = 1.05


def _finding(constraint, message, relaxation=None, verified=False) -> dict:
    return {"constraint": constraint, "message": message, "relaxation": relaxation, "verified": verified}


def _served(candidates: pd.DataFrame, name: str) -> bool:
    col = f"capacity_per_s[{name}]"
    return bool(col in candidates and (candidates.loc[candidates["feasible"], col] > 0).any())


def _slo_relaxation(problem: Problem, candidates: pd.DataFrame, index: int) -> dict | None:
    """The SLOs at which some memory-feasible candidate serves workload ``index``."""
    w = problem.workloads[index]
    rows = candidates[(candidates["model"] == w.model) &
                      candidates["infeasible_reason"].isin(["", "slo_ttft_unreachable", "slo_tpot_unreachable"])]
    if rows.empty:
        return None
    arrays = workload_arrays(problem, rows, w)
    traffic = TrafficArrays.from_distributions(w.prompt, w.output, w.prefix_cache_hit_fraction)
    state = state_at_occupancy(arrays, serving_params(problem, rows), traffic, 1e-6)
    margins = Margins.of(problem)  # the SLOs must hold for the p95s at the confidence quantile
    ttft, tpot = state["ttft_p95_s"] * margins.factor("ttft"), state["tpot_p95_s"] * margins.factor("tpot")
    # The candidate that needs the least relaxation (relative to the SLOs).
    need = np.maximum(ttft / w.slo.ttft_p95_s, tpot / w.slo.tpot_p95_s)
    best = int(np.nanargmin(need))
    slo = {"ttft_p95_s": max(w.slo.ttft_p95_s, float(ttft[best]) * SLO_RELAXATION_MARGIN),
           "tpot_p95_s": max(w.slo.tpot_p95_s, float(tpot[best]) * SLO_RELAXATION_MARGIN)}
    return {"slo": slo, "candidate": rows.index[best]}


def _resolve_with(problem: Problem, changes: dict) -> bool:
    """Re-solve the problem with ``changes`` applied to its spec (dotted keys); feasible?"""
    from planner.pipeline import plan
    from planner.problem import ProblemSpec, resolve_problem

    data = problem.spec.model_dump()
    for dotted, value in changes.items():
        node, *path, last = dotted.split(".")
        target = data[node]
        for p in path:
            target = target[int(p)] if p.isdigit() else target[p]
        target[last] = value
    relaxed = resolve_problem(ProblemSpec.model_validate(data), problem.path, problem.catalog)
    return bool(plan(relaxed, pareto=False).plans)


def diagnose(problem: Problem, candidates: pd.DataFrame, instance, options) -> list[dict]:
    """Findings for an infeasible problem, each with a relaxation checked by re-solving."""
    findings = []
    for i, w in enumerate(problem.workloads):
        if _served(candidates, w.name):
            continue
        mine = candidates[candidates["model"] == w.model] if "model" in candidates else candidates
        reasons = mine["infeasible_reason"].value_counts()
        summary = ", ".join(f"{r}: {n}" for r, n in reasons.items() if r)
        detail = f" (rejected: {summary})" if summary else " (no candidate has capacity for it)"
        findings.append(_finding("candidates", f"no candidate serves workload '{w.name}'{detail}"))
        if problem.measured:
            continue
        relax = _slo_relaxation(problem, candidates, i)
        if relax is not None:
            slo = relax["slo"]
            ok = _resolve_with(problem, {f"workloads.{i}.slo": slo})
            findings.append(_finding(
                "slo", f"workloads[{i}].slo: tpot_p95_s >= {slo['tpot_p95_s']:.4g} and ttft_p95_s >= "
                       f"{slo['ttft_p95_s']:.4g} (reachable by {relax['candidate']})",
                {f"workloads[{i}].slo": slo}, ok))
        elif (fix := format_relaxation(problem, mine)) is not None:
            message, changes = fix
            findings.append(_finding(next(iter(changes)).split(".")[0], message,
                                     changes, _resolve_with(problem, changes)))
        elif problem.spec.search.quantization is not None:
            others = [q for q in problem.catalog.weight_formats.entries if q not in problem.quantization]
            if others:
                ok = _resolve_with(problem, {"search.quantization": None})
                findings.append(_finding("memory", f"weights do not fit the searched GPUs: allow "
                                         f"{', '.join(others)} (search.quantization)",
                                         {"search.quantization": None}, ok))
    if instance is not None and not findings:
        for f in diagnose_infeasible(instance, options):
            findings.append(_finding(f.constraint, f.message,
                                     {k: (dict(v) if hasattr(v, "items") else v) for k, v in (f.relaxation or {}).items()},
                                     f.verified))
    return findings
