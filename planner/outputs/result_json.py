"""The ``planner solve --json`` document (docs/problem-format.md section 3) and its readable text form."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from planner import dimensions
from planner.margins import Margins
from planner.planning import PlanResult

#: Plan keys of the cost per 1M tokens, with the token basis each counts.
PER_MILLION_LABELS = (("usd_per_million_tokens", "output"), ("usd_per_million_input_tokens", "input"),
                      ("usd_per_million_total_tokens", "total"))
#: Keys whose values depend on wall-clock time (excluded when comparing runs).
TIMING_KEYS = ("wall_time_s", "timings_s")


def _none_if_nan(v):
    if v is None:
        return None
    if isinstance(v, (float, np.floating)) and not math.isfinite(float(v)):
        return None
    return v


def _records(frame: pd.DataFrame) -> list[dict]:
    """``frame.to_dict(orient="records")``, built from whole columns (``Series.tolist``, numpy
    scalars in object columns boxed as pandas boxes them) instead of pandas' row iteration:
    the same Python values, a few ms less per JSON document."""
    columns = [frame[c].tolist() for c in frame.columns]
    for values, dtype in zip(columns, frame.dtypes):
        if dtype == object:
            values[:] = [v.item() if isinstance(v, (np.integer, np.floating, np.bool_)) else v for v in values]
    return [dict(zip(frame.columns, row)) for row in zip(*columns)]


def _workload_entry(r: dict, margins: Margins, verify_columns: tuple = ()) -> dict:
    """One routed workload of a deployment (its routing row as a mapping): rate, central p95s,
    p95s at the confidence, simulated (``verify_columns``: :data:`planner.verify.COLUMNS` of a
    verified result, else none)."""
    out = {"rate_per_s": float(r["rate_per_s"]), "ttft_p95_s": _none_if_nan(float(r["ttft_p95_s"])),
           "tpot_p95_s": _none_if_nan(float(r["tpot_p95_s"]))}
    if margins.model_error:
        for metric in ("ttft", "tpot"):
            central = out[f"{metric}_p95_s"]
            at_q = None if central is None else central * margins.factor(metric)
            out[f"{metric}_p95_at_confidence_s"] = at_q
    for col in verify_columns:
        if col in r:
            out[col] = _none_if_nan(float(r[col]))
    return out


def _routes_by_candidate(routing: pd.DataFrame) -> dict:
    """The rows of a plan's routing table (mappings, in table order) per candidate id: one
    pass over the table for all its deployments."""
    routes: dict = {}
    for r in _records(routing):
        routes.setdefault(r["candidate_id"], []).append(r)
    return routes


def _deployment(dep: dict, routes: list, margins: Margins, problem=None, verify_columns: tuple = ()) -> dict:
    """One deployment of a plan: ``dep`` is its row of the plan's deployments table as a
    mapping (:func:`_records`), ``routes`` its rows of the routing table."""
    out = {
        "candidate_id": dep["candidate_id"], "gpu": dep["gpu"],
        "model": dep.get("model"), "name": dep.get("name"),
        **{n: dimensions.dimension(n).value(dep.get(n)) for n in dimensions.SETTINGS},
        "replicas": int(dep["replicas"]), "gpus_per_replica": int(dep["gpus_per_replica"]),
        "gpus": int(dep["gpus"]), "usd_per_hour": float(dep["usd_per_hour"]),
        "load_fraction": float(dep["load_fraction"]),
        "quality": ({"recovery": _none_if_nan(dep["quality_recovery"]), "source": dep["quality_source"]}
                    if "quality_source" in dep else None),
        "planned_load_fraction": _none_if_nan(float(dep.get("planned_load_fraction", dep["load_fraction"]))),
        "workloads": {r["workload"]: _workload_entry(r, margins, verify_columns) for r in routes},
    }
    out.update(_calibration_fields(problem, dep["gpu"], out["workloads"]))
    out = {k: v for k, v in out.items() if v is not None}
    if "role" in out:  # a plan with roles: every deployment names its pool (null: aggregated)
        pool = dep.get("pool")
        out["pool"] = pool if isinstance(pool, str) else None  # None or NaN in the table
    return out


def _calibration_fields(problem, gpu: str, workloads: dict) -> dict:
    """``calibrated`` / ``calibration_status`` of the deployment's GPU, and the 80 % / 95 %
    prediction intervals of each routed workload's p95 TTFT and TPOT (docs/accuracy.md)."""
    from planner import parameters

    if problem is None or problem.measured:
        return {}
    cal, engine = problem.calibration, problem.spec.serving.engine
    for w in workloads.values():
        w["intervals"] = parameters.prediction_intervals(
            cal, {k: w.get(k) for k in ("ttft_p95_s", "tpot_p95_s")}, gpu, engine)
    return parameters.gpu_status(cal, gpu)


def _int(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return int(v)


def _parameters_used(result: PlanResult) -> dict:
    if result.problem.measured:
        return {"calibration": "not used (measured capacities)", "engine": None, "overrides": {}}
    return result.params.used


def result_to_dict(result: PlanResult) -> dict:
    """The JSON document of a solve: status, plans, pareto, solver, candidates, diagnosis."""
    problem = result.problem
    margins = Margins.of(problem)
    verification = None
    if result.verified:  # the simulator's modules only for a verified result (process start)
        from planner.verify import COLUMNS as verify_columns, settings as verify_settings

        verification = verify_settings()
    else:
        verify_columns = ()
    plans = []
    for p in result.plans:
        routes = _routes_by_candidate(p.routing)
        plans.append({
            "rank": p.rank, "usd_per_hour": p.usd_per_hour,
            "usd_per_million_tokens": p.usd_per_million_tokens,
            "usd_per_million_input_tokens": p.usd_per_million_input_tokens,
            "usd_per_million_total_tokens": p.usd_per_million_total_tokens,
            "gpus": int(p.deployments["gpus"].sum()),
            "gpus_by_type": p.gpus_by_type,
            "deployments": [_deployment(d, routes.get(d["candidate_id"], []), margins, problem, verify_columns)
                            for d in _records(p.deployments)],
        })
    pareto = [] if result.pareto.empty else [
        {k: _none_if_nan(v) for k, v in row.items()} for row in result.pareto.to_dict(orient="records")]
    return {
        "problem": problem.name,
        "status": result.status,
        "plans": plans,
        "pareto": pareto,
        "solver": {k: v for k, v in result.solver.items()},
        "candidates": result.counts,
        "diagnosis": result.diagnosis,
        "warnings": list(problem.warnings),
        "workloads": [{"name": w.name, "model": w.model, "rate_per_s": w.rate_per_s,
                       "prompt_tokens": w.prompt.describe() if w.prompt else None,
                       "output_tokens": w.output.describe() if w.output else None,
                       "slo": dict(w.slo) if w.slo else None} for w in problem.workloads],  # flat: = model_dump()
        "prices_usd_per_gpu_hour": dict(sorted(problem.prices_usd_per_gpu_hour.items())),
        "serving_parameters": _parameters_used(result),
        "margins": margins.describe(),
        **({"verification": verification} if result.verified else {}),
        "timings_s": result.timings_s,
        **({"usd_per_day": result.daily["usd_per_day"], "daily": result.daily} if result.daily else {}),
    }


def strip_timings(doc):
    """A copy of a result document without its wall-clock fields (for comparing runs)."""
    if isinstance(doc, dict):
        return {k: strip_timings(v) for k, v in doc.items() if k not in TIMING_KEYS}
    if isinstance(doc, list):
        return [strip_timings(v) for v in doc]
    return doc


def _latency_text(w: dict, margins: dict) -> str:
    """``  p95 TTFT .. ms, p95 TPOT .. ms (.. at confidence Q) ; simulated ..`` for one workload."""
    # a prefill-role deployment has no TPOT, a decode-role one no TTFT of its own
    shown = [(m, fmt) for m, fmt in (("ttft", ".0f"), ("tpot", ".1f")) if w.get(f"{m}_p95_s") is not None]
    if not shown:
        return ""
    text = "  " + ", ".join(f"p95 {m.upper()} {w[f'{m}_p95_s'] * 1e3:{fmt}} ms" for m, fmt in shown)
    if all(w.get(f"{m}_p95_at_confidence_s") is not None for m, _ in shown):
        text += (f" (at confidence {margins['confidence']:g}: "
                 + ", ".join(f"{w[f'{m}_p95_at_confidence_s'] * 1e3:{fmt}} ms" for m, fmt in shown) + ")")
    # a pool's prefill deployment has a simulated TTFT only, its decode deployment a TPOT only
    simulated = [f"{w[f'simulated_{m}_p95_s'] * 1e3:{fmt}} ms" for m, fmt in (("ttft", ".0f"), ("tpot", ".1f"))
                 if w.get(f"simulated_{m}_p95_s") is not None]
    if simulated:
        text += "; simulated " + ", ".join(simulated)
    return text


def _pool_lines(deployments: list[dict]) -> list[str]:
    """One line per prefill/decode pool of a plan: its replicas and GPUs per role, its rate."""
    pools: dict = {}
    for d in deployments:
        if d.get("pool"):
            part = pools.setdefault(d["pool"], {"prefill": [0, 0], "decode": [0, 0], "rate": 0.0})
            part[d["role"]][0] += d["replicas"]
            part[d["role"]][1] += d["gpus"]
            if d["role"] == "prefill":
                part["rate"] += sum(w["rate_per_s"] for w in d["workloads"].values())
    def replicas(role, counts):
        return f"{counts[0]} {role} replica{'s' if counts[0] != 1 else ''} ({counts[1]} GPUs)"

    return [f"    pool {pool}: {replicas('prefill', v['prefill'])} + {replicas('decode', v['decode'])}, "
            f"{v['rate']:.3g} req/s" for pool, v in sorted(pools.items())]


def result_text(result: PlanResult) -> str:
    """A readable summary: status, the ranked plans and their deployments."""
    doc = result_to_dict(result)
    lines = [f"problem: {doc['problem']}   status: {doc['status']}"]
    c = doc["candidates"]
    lines.append(f"candidates: {c['enumerated']} enumerated, {c['feasible']} feasible"
                 + (f", {c['in_model']} in the model after pruning {c['pruned_dominated']} dominated"
                    if "in_model" in c else ""))
    if c.get("rejected"):
        lines.append("rejected: " + ", ".join(f"{k} {v}" for k, v in c["rejected"].items()))
    s = doc["solver"]
    if s.get("objective_usd_per_hour") is not None:
        lines.append(f"solver: {s['status']}, objective ${s['objective_usd_per_hour']:.2f}/h, "
                     f"bound ${s['best_bound_usd_per_hour']:.2f}/h, gap {s['gap']:.2%}, {s['wall_time_s']:.2f} s")
    for p in doc["plans"]:
        per_million = "".join(f"  ${p[key]:.3f}/1M {label} tokens" for key, label in PER_MILLION_LABELS
                              if p.get(key) is not None)
        lines.append("")
        lines.append(f"#{p['rank']}  ${p['usd_per_hour']:.2f}/h" + per_million
                     + f"  {p['gpus']} GPUs " + ", ".join(f"{g}: {n}" for g, n in p["gpus_by_type"].items()))
        for d in p["deployments"]:
            cfg = (dimensions.label(d, "text") if dimensions.has_settings(d)
                   else d.get("name", d["candidate_id"])) + (f" (pool {d['pool']})" if d.get("pool") else "")
            quality = d.get("quality")
            rec = ("" if quality is None else ", quality unverified" if quality["recovery"] is None
                   else f", quality {quality['recovery']:.1%}")
            lines.append(f"    {d['replicas']:>3} x {d['gpu']:<14} {cfg}  (${d['usd_per_hour']:.2f}/h, "
                         f"load {d['load_fraction']:.0%}{rec})")
            for name, w in d["workloads"].items():
                lines.append(f"          {name}: {w['rate_per_s']:.3g} req/s{_latency_text(w, doc['margins'])}")
        lines += _pool_lines(p["deployments"])
    if doc["diagnosis"]:
        lines.append("")
        lines.append("infeasible because:")
        for f in doc["diagnosis"]:
            mark = " (verified by re-solving)" if f["verified"] else ""
            lines.append(f"  - [{f['constraint']}] {f['message']}{mark}")
    return "\n".join(lines)
