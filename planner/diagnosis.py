"""Why a problem is infeasible, and the nearest relaxation verified by re-solving.

Problem-level causes (a workload no candidate can serve: memory, SLO, quantization) are
found here from the candidate table; limit-level causes (inventory, budget, distinct
configurations, N+1) come from :func:`planner.optimize.diagnose_infeasible`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.format_rules import format_relaxation
from planner.layout_rules import REASONS as LAYOUT_REASONS
from planner.margins import Margins
from planner.optimize import diagnose_infeasible
from planner.parameters import ProblemParams
from planner.problem import Problem
from planner.search import workload_arrays
from planner.serving.queueing import TrafficArrays, state_at_occupancy

#: Relaxed SLOs are proposed this much above the fastest p95 any candidate reaches.
SLO_RELAXATION_MARGIN = 1.05


def _finding(constraint, message, relaxation=None, verified=False) -> dict:
    return {"constraint": constraint, "message": message, "relaxation": relaxation, "verified": verified}


def _served(candidates: pd.DataFrame, name: str) -> bool:
    col = f"capacity_per_s[{name}]"
    return bool(col in candidates and (candidates.loc[candidates["feasible"], col] > 0).any())


def _slo_relaxation(problem: Problem, candidates: pd.DataFrame, params: ProblemParams, index: int) -> dict | None:
    """The SLOs at which some memory-feasible candidate serves workload ``index``."""
    w = problem.workloads[index]
    rows = candidates[(candidates["model"] == w.model) &
                      candidates["infeasible_reason"].isin(["", "slo_ttft_unreachable", "slo_tpot_unreachable"])]
    if rows.empty:
        return None
    arrays = workload_arrays(problem, rows, w)
    traffic = TrafficArrays.from_distributions(w.prompt, w.output, w.prefix_cache_hit_fraction)
    state = state_at_occupancy(arrays, params.of(rows), traffic, 1e-6)
    margins = Margins.of(problem)  # the SLOs must hold for the p95s at the confidence quantile
    ttft, tpot = state["ttft_p95_s"] * margins.factor("ttft"), state["tpot_p95_s"] * margins.factor("tpot")
    # The candidate that needs the least relaxation (relative to the SLOs).
    need = np.maximum(ttft / w.slo.ttft_p95_s, tpot / w.slo.tpot_p95_s)
    best = int(np.nanargmin(need))
    slo = {"ttft_p95_s": max(w.slo.ttft_p95_s, float(ttft[best]) * SLO_RELAXATION_MARGIN),
           "tpot_p95_s": max(w.slo.tpot_p95_s, float(tpot[best]) * SLO_RELAXATION_MARGIN)}
    return {"slo": slo, "candidate": rows.index[best]}


def _resolve_with(problem: Problem, changes: dict) -> bool:
    """Re-solve the problem with ``changes`` applied to its spec (dotted keys); feasible?

    The re-solve finds one plan, no ranking, fronts or diagnosis of its own (no recursion).
    """
    from planner.planning import has_plan
    from planner.problem import ProblemSpec, resolve_problem
    from planner.schema import PlanningInputError

    data = problem.spec.model_dump()
    for dotted, value in changes.items():
        node, *path, last = dotted.split(".")
        target = data[node]
        for p in path:
            target = target[int(p)] if p.isdigit() else target[p]
        target[last] = value
    try:
        relaxed = resolve_problem(ProblemSpec.model_validate(data), problem.path, problem.catalog)
    except (PlanningInputError, ValueError):
        return False
    return has_plan(relaxed)


def undecided_finding(options) -> dict:
    """The finding of a solve whose time limit ran out before a plan or a proof of infeasibility."""
    return _finding("solver", f"no plan found and infeasibility not proven within the time limit of "
                              f"{options.time_limit_s:g} s per solve (status unknown, not infeasible): raise "
                              "--time-limit or optimize.time_limit_s")


#: Rejection reasons that no SLO or limit explains: the search space itself excludes the model.
STRUCTURAL = ("gpu_has_no_compute_figure", "quantization_unsupported_on_gpu", "tp_does_not_divide_attention_heads",
              "tp_exceeds_scale_up_domain", "pp_exceeds_layers", "no_price_for_gpu", "weights_do_not_fit_memory",
              "max_batch_exceeds_kv_capacity", *LAYOUT_REASONS)


def _structural_proposals(problem: Problem, reasons: pd.Series, model_id: str) -> list[tuple[str, str, dict]]:
    """(constraint, message, changes) that remove the structural rejections of one model, in the
    order of how many candidates each rejection hit."""
    from planner.problem import DEFAULT_PP, DEFAULT_TP

    cat, s = problem.catalog, problem.spec.search
    model = problem.imported_models.get(model_id) or cat.model(model_id)
    gpus = [cat.gpu(g) for g in problem.gpus]
    domain = max((g.max_gpus_per_scale_up_domain for g in gpus), default=1)
    out = []
    for reason in [r for r in reasons.index if r in STRUCTURAL]:
        if reason in ("tp_does_not_divide_attention_heads", "tp_exceeds_scale_up_domain"):
            tps = sorted({t for t in (*s.tp, *DEFAULT_TP) if model.num_attention_heads % t == 0 and t <= domain})
            if tps and tuple(tps) != s.tp:
                out.append(("search.tp", f"tp must divide {model_id}'s {model.num_attention_heads} attention heads "
                            f"and fit a scale-up domain of {domain} GPUs: search.tp: {tps}", {"search.tp": tps}))
        elif reason in LAYOUT_REASONS:
            out += _layout_proposals(s, model, model_id, reason, out)
        elif reason == "pp_exceeds_layers":
            pps = sorted({p for p in (*s.pp, *DEFAULT_PP) if p <= model.num_layers})
            out.append(("search.pp", f"pp must not exceed {model_id}'s {model.num_layers} layers: search.pp: {pps}",
                        {"search.pp": pps}))
        elif reason in ("gpu_has_no_compute_figure", "no_price_for_gpu"):
            no_compute = sorted(g.id for g in gpus if g.bf16_tflops is None)
            no_price = sorted(g.id for g in gpus if g.id not in problem.prices_usd_per_gpu_hour)
            parts = ([f"no compute figure for {', '.join(no_compute)}"] if no_compute else []) + \
                ([f"no price for {', '.join(no_price)} (give prices.<gpu>)"] if no_price else [])
            if s.gpus is not None and not any(c == "search.gpus" for c, _, _ in out):
                out.append(("search.gpus", f"{'; '.join(parts)} in the catalog: search other GPUs (omit search.gpus)",
                            {"search.gpus": None}))
        elif reason == "quantization_unsupported_on_gpu" and s.quantization is not None:
            out.append(("search.quantization", "the searched weight formats do not run on the searched GPUs: "
                        "allow every format (omit search.quantization)", {"search.quantization": None}))
        elif reason == "weights_do_not_fit_memory":
            others = [q for q in cat.weight_formats.entries if q not in problem.quantization]
            if others:
                out.append(("memory", f"weights do not fit the searched GPUs: allow {', '.join(others)} "
                            "(search.quantization)", {"search.quantization": None}))
            wider = {"search.tp": sorted({*s.tp, *(t for t in DEFAULT_TP if t <= domain)}),
                     "search.pp": sorted({*s.pp, *DEFAULT_PP})}
            if wider["search.tp"] != list(s.tp) or wider["search.pp"] != list(s.pp):
                out.append(("memory", f"weights do not fit the searched GPUs: shard over more GPUs "
                            f"(search.tp: {wider['search.tp']}, search.pp: {wider['search.pp']})", wider))
        elif reason == "max_batch_exceeds_kv_capacity":
            batches = sorted({1, 2, 4, 8, *s.max_batch})
            if batches != list(s.max_batch):
                out.append(("search.max_batch", f"the KV cache cannot hold the searched batch sizes at the workload's "
                            f"lengths: search.max_batch: {batches}", {"search.max_batch": batches}))
    return out


def _layout_proposals(s, model, model_id: str, reason: str, found: list) -> list[tuple[str, str, dict]]:
    """The relaxation of an expert-parallel / attention-DP rejection (planner/layout_rules.py):
    the ep values that can hold on this model, or attention DP off."""
    if reason.startswith("ep_"):
        experts = int(model.num_experts)
        eps = sorted({1, *(e for e in s.ep if experts and experts % e == 0 and any(t % e == 0 for t in s.tp))})
        if eps == list(s.ep) or any(c == "search.ep" for c, _, _ in found):
            return []
        why = (f"ep must divide tp and {model_id}'s {experts} routed experts" if experts else
               f"{model_id} has no routed experts (expert parallelism needs an MoE model)")
        return [("search.ep", f"{why}: search.ep: {eps}", {"search.ep": eps})]
    if list(s.attention_dp) == [False] or any(c == "search.attention_dp" for c, _, _ in found):
        return []
    return [("search.attention_dp", f"attention DP needs an MoE model and tp > 1 ({model_id}): "
             "search.attention_dp: [false]", {"search.attention_dp": [False]})]


def _verified_first(problem: Problem, proposals: list[tuple[str, str, dict]]) -> list[dict]:
    """Findings for ``proposals``: re-solved one by one until one is feasible; if none is, all
    together (when there are several)."""
    findings = []
    for constraint, message, changes in proposals:
        ok = _resolve_with(problem, changes)
        findings.append(_finding(constraint, message, dict(changes), ok))
        if ok:
            return findings
    if len(proposals) > 1:
        merged = {k: v for _, _, changes in proposals for k, v in changes.items()}
        findings.append(_finding("combination", "relax together: " + "; ".join(m for _, m, _ in proposals),
                                 merged, _resolve_with(problem, merged)))
    return findings


def diagnose(problem: Problem, candidates: pd.DataFrame, params: ProblemParams, instance, options) -> list[dict]:
    """Findings for an infeasible problem, each with a relaxation checked by re-solving.

    ``params``: the problem's serving parameters (:func:`planner.planning.search_candidates`).

    The last finding is a ``relaxation`` line saying why no relaxation was verified when
    none of the proposals restored feasibility (or none could be made).
    """
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
        proposals = _structural_proposals(problem, reasons, w.model)
        relax = _slo_relaxation(problem, candidates, params, i)
        if relax is not None:
            slo = relax["slo"]
            proposals.insert(0, ("slo", f"workloads[{i}].slo: tpot_p95_s >= {slo['tpot_p95_s']:.4g} and ttft_p95_s "
                                 f">= {slo['ttft_p95_s']:.4g} (reachable by {relax['candidate']})",
                                 {f"workloads.{i}.slo": slo}))
        fix = format_relaxation(problem, mine)
        if fix is not None:     # the quality gate or serving.engine rejected the formats
            message, changes = fix
            proposals.insert(1 if relax is not None else 0, (next(iter(changes)).split(".")[0], message, changes))
        found = _verified_first(problem, proposals)
        for f in found:   # YAML paths in the relaxation, not the dotted keys of the re-solve
            f["relaxation"] = {_yaml_key(k): v for k, v in f["relaxation"].items()}
        findings += found
    if instance is not None and not findings:
        for f in diagnose_infeasible(instance, options):
            findings.append(_finding(f.constraint, f.message,
                                     {k: (dict(v) if hasattr(v, "items") else v) for k, v in (f.relaxation or {}).items()},
                                     f.verified))
    if not any(f["verified"] for f in findings):
        findings.append(_finding("relaxation", _why_unverified(problem, findings)))
    return findings


def _yaml_key(dotted: str) -> str:
    """``workloads.0.slo`` -> ``workloads[0].slo``."""
    return ".".join(f"[{p}]" if p.isdigit() else p for p in dotted.split(".")).replace(".[", "[")


def _why_unverified(problem: Problem, findings: list[dict]) -> str:
    if problem.measured:
        return ("no verified relaxation: the measured capacity table gives no capacity for a workload; add a "
                "capacity_table row that serves it")
    if any(f["relaxation"] for f in findings):
        return ("no verified relaxation: re-solving with each proposal above (and with all of them together) "
                "is still infeasible")
    if any(f["constraint"] == "solver" for f in findings):
        return "no verified relaxation: the diagnosis re-solves ran out of time; raise --time-limit"
    return ("no verified relaxation: no change of the search space, SLOs or limits the planner can propose "
            "makes a candidate serve every workload")
