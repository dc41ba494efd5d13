# ruff: noqa: E501  (Markdown prose and table rows are long string literals)
"""The disaggregated scenarios of the aiconfigurator benchmark (issue 14, item 6).

In these scenarios the planner's generated problems search ``disaggregation: [false, true]``
(aggregated replicas and prefill/decode pools, docs/serving-model.md section 14) while
aiconfigurator's ``cli default`` searches aggregated against disaggregated serving as it always
does. This module declares the scenarios, reduces each tool's pick to its pools (prefill and
decode replicas, TP, GPUs) and renders the side-by-side table; run.py runs and times them like
the other scenarios. Standard library only.
"""

from __future__ import annotations

#: (model, precision, GPU, GPUs, TTFT ms, TPOT ms, label). Tight TPOT limits, where decode-only
#: replicas (no prefill chunks in their steps) are the natural comparison.
SCENARIOS = (
    ("qwen3-32b", "bf16", "h200-sxm", 16, 1000.0, 15.0, "disagg tpot15"),
    ("llama-3.1-70b", "bf16", "h200-sxm", 16, 1000.0, 15.0, "disagg tpot15"),
    ("deepseek-v3", "fp8", "h200-sxm", 16, 2000.0, 30.0, "disagg tpot30"),
)

#: the search line every generated problem of a disaggregated scenario gains
SEARCH_LINE = "  disaggregation: [false, true]"


def scenarios() -> list[dict]:
    """The scenario dicts (same keys as run.scenarios(), plus ``disagg: True``)."""
    return [
        dict(model=m, gpu=g, gpus=n, precision=p, ttft_ms=ttft, tpot_ms=tpot, slo=label, disagg=True)
        for m, p, g, n, ttft, tpot, label in SCENARIOS
    ]


def plan_pools(plan: dict, precision: str) -> dict:
    """Replicas, TP and GPUs per role of the planner's plan #1 (summarize_plan's output); weight
    and KV formats are named where they differ from the scenario's ``precision``."""
    out: dict = {}
    for d in plan.get("deployments") or []:
        role = d.get("role") or "both"
        part = out.setdefault(role, {"replicas": 0, "gpus": 0, "configs": []})
        part["replicas"] += d["replicas"]
        part["gpus"] += d["gpus"]
        part["configs"].append(f"{d['replicas']}x {d['gpu']} TP{d['tp']}" + (f" PP{d['pp']}" if d["pp"] != 1 else "")
                               + f" batch {d['max_batch']}" + _formats(d, precision))
    return out


def _formats(d: dict, precision: str) -> str:
    if d.get("quantization") == precision and d.get("kv_cache_dtype") == precision:
        return ""
    return f" ({d.get('quantization')}/kv-{d.get('kv_cache_dtype')})"


def aic_pools(pick: dict, n_gpus: int) -> dict:
    """The same for aiconfigurator's pick (summarize_aic_row's output) over the scenario's GPUs."""
    d, reps = pick["detail"], pick.get("replicas") or 0
    if pick["mode"] == "agg":
        layout = d["parallel"] if d.get("dp", 1) > 1 else f"TP{d['tp']}" + (f" PP{d['pp']}" if d["pp"] != 1 else "")
        return {"both": {"replicas": reps, "gpus": pick.get("gpus_used") or n_gpus,
                         "configs": [f"{reps}x {layout} batch {d['batch']}"]}}
    out = {}
    for role in ("prefill", "decode"):
        workers = d[f"{role}_workers"] * reps
        per_worker = d.get(f"{role}_gpus_per_worker") or d[f"{role}_tp"]
        layout = d.get(f"{role}_parallel") if per_worker != d[f"{role}_tp"] else f"TP{d[f'{role}_tp']}"
        out[role] = {
            "replicas": workers,
            "gpus": workers * per_worker,
            "configs": [f"{workers}x {layout}" + (f" batch {d['decode_batch']}" if role == "decode" else "")],
        }
    return out


def _pool_cell(pools: dict, role: str) -> str:
    p = pools.get(role)
    return f"{' + '.join(p['configs'])} ({p['gpus']} GPUs)" if p else "–"


def aic_usd(out: dict, rec: dict, pick: dict) -> tuple:
    """An aiconfigurator pick priced with the catalog: ($/h of all N GPUs, $/1M output tokens at
    the throughput it predicts), as the other tables of the section do."""
    price = out["prices_usd_per_gpu_hour"].get(rec["scenario"]["gpu"])
    if not price or not pick.get("cluster_tokens_per_s"):
        return None, None
    usd_h = price * rec["scenario"]["gpus"]
    return usd_h, usd_h / (pick["cluster_tokens_per_s"] * 3600) * 1e6


def _plan_line(name: str, wall, o: dict, s: dict, fmt) -> str:
    if not o.get("deployments"):
        why = "; ".join(d.get("message", "") for d in (o.get("diagnosis") or [])[:1])
        return f"| | {name} | {fmt(wall, 2)} | {o.get('status') or 'no plan'}{': ' + why if why else ''} | | | | | | | | |"
    pools = plan_pools(o, s["precision"])
    mode = "+".join(m for k, m in (("both", "agg"), ("prefill", "disagg")) if k in pools)
    return (
        f"| | {name} | {fmt(wall, 2)} | {mode} | {_pool_cell(pools, 'prefill')} | "
        f"{_pool_cell(pools, 'decode')} | {_pool_cell(pools, 'both')} | {o['gpus']} | "
        f"{fmt(o.get('usd_per_hour'), 2)} | {fmt(o.get('usd_per_million_tokens'), 3)} | "
        f"{fmt(o.get('ttft_p95_ms'))} | {fmt(o.get('tpot_p95_ms'), 1)} |"
    )


def render(out: dict, variants: dict, fmt, median) -> list[str]:
    """The "Disaggregated scenarios" subsection: both tools' pools side by side, priced with the
    planner's catalog. ``variants`` is run.VARIANTS; ``fmt``/``median`` are run.py's helpers."""
    recs = [r for r in out["scenarios"] if r["scenario"].get("disagg")]
    if not recs:
        return []
    L = [
        "### Disaggregated scenarios (issue 14)",
        "",
        "In these scenarios the planner's three problems search `disaggregation: [false, true]`: every "
        "configuration as an aggregated replica and as a prefill-only and a decode-only replica, paired by "
        "CP-SAT into pools (docs/serving-model.md section 14). aiconfigurator's `cli default` compares its "
        "best aggregated against its best disaggregated (xPyD) configuration, as in every scenario. Both picks "
        "are shown as pools (replicas x TP, GPUs) and priced with the planner's catalog: aiconfigurator's on "
        "all N GPUs at the throughput it predicts, the planner's on the GPUs its plan uses at the rate it is "
        "asked to serve (aiconfigurator's throughput). TTFT/TPOT: aiconfigurator's predicted means; the "
        "planner's p95 at the routed load (the worst deployment of the plan).",
        "",
        "| scenario | tool | wall s | mode | prefill pool | decode pool | aggregated | GPUs | $/h | $/1M tok | TTFT ms | TPOT ms |",
        "| --- | --- | ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for rec in recs:
        s, a = rec["scenario"], rec["aic"]
        sid = f"{s['id']} ({fmt(rec.get('rate_per_s'), 2)} req/s)"
        a_wall = median([r["wall_s"] for r in a.get("runs", [])])
        picks = [("aiconfigurator", a.get("chosen"))]
        if a.get("chosen") and a["chosen"]["mode"] == "disagg" and a.get("agg"):
            picks.append(("aiconfigurator, best agg", a["agg"]))
        elif a.get("chosen") and a["chosen"]["mode"] == "agg" and a.get("disagg"):
            picks.append(("aiconfigurator, best disagg", a["disagg"]))
        for i, (tool, pick) in enumerate(picks):
            first = i == 0
            if not pick:
                why = a.get("error") or ("not run" if out.get("aic_unavailable") else "no result")
                L.append(f"| {sid} | {tool} | {fmt(a_wall, 1)} | {why} | | | | | | | | |")
                continue
            pools = aic_pools(pick, s["gpus"])
            usd_h, usd_m = aic_usd(out, rec, pick)
            L.append(
                f"| {sid if first else ''} | {tool} | {fmt(a_wall, 1) if first else ''} | {pick['mode']} | "
                f"{_pool_cell(pools, 'prefill')} | {_pool_cell(pools, 'decode')} | {_pool_cell(pools, 'both')} | "
                f"{s['gpus']} | {fmt(usd_h, 2)} | {fmt(usd_m, 3)} | {fmt(pick.get('ttft_ms'))} | {fmt(pick.get('tpot_ms'), 1)} |"
            )
        for v, label in variants.items():
            o = rec["ours"][v]
            L.append(_plan_line(label.removeprefix("ours: "), median([r["wall_s"] for r in o.get("runs", [])]), o, s, fmt))
            if o.get("relaxed"):
                need = ", ".join(f"{n} {g}" for g, n in o["relaxed"]["inventory"].items())
                L.append(_plan_line(f"↳ with {need}", None, o["relaxed"], s, fmt))
    L.append("")
    L += _reading(recs)
    return L


def _reading(recs: list[dict]) -> list[str]:
    """What each tool picked and why they differ: counts from the results, then the structural
    differences between the two models that explain them."""
    aic_disagg = sum(1 for r in recs if (r["aic"].get("chosen") or {}).get("mode") == "disagg")
    same = [r["ours"]["same-gpu"] for r in recs]

    def has_pools(o: dict) -> bool:
        return any(d.get("role") not in (None, "both") for d in (o.get("deployments") or []))

    pooled = sum(1 for o in same if has_pools(o.get("relaxed") or o))
    short = [
        f"{r['scenario']['model']}: {o['relaxed']['gpus']} {r['scenario']['gpu']}"
        for r, o in zip(recs, same)
        if o.get("status") == "infeasible" and (o.get("relaxed") or {}).get("gpus")
    ]
    cat = [r["ours"]["catalog"] for r in recs]
    mixed = sum(1 for o in cat if len({d["gpu"] for d in o.get("deployments") or []}) > 1)
    return [
        f"What they picked: aiconfigurator chose disaggregated serving in {aic_disagg} of {len(recs)} of these "
        f"scenarios. With the same GPU type and precision the planner's plan #1 (or, where it is infeasible on "
        f"the scenario's GPUs, its plan with the verified relaxation) uses prefill/decode pools in "
        f"{pooled} of {len(recs)}"
        + (f"; in {len(short)} it cannot meet the p95 SLOs on the scenario's GPU count and needs "
           + ", ".join(short) + " (the ↳ rows)" if short else "")
        + f". Over the whole catalog its plan mixes GPU types in {mixed} of {len(recs)}. Why they differ:",
        "",
        "- **p95 against mean.** The planner meets p95 TTFT/TPOT under Poisson arrivals at aiconfigurator's "
        "throughput; aiconfigurator's limits are on its predicted means at a closed-loop concurrency. The same "
        "GPUs therefore serve less within the planner's SLOs, and its same-GPU plans need more GPUs or a "
        "looser batch.",
        "- **Safe-side pool capacities.** The planner sizes pools with the separable bounds of "
        "`planner/disagg_roles.py` (one prefill replica's queue, one KV link at the slowest scale-out bandwidth, "
        "two TPOT SLOs of the TTFT budget left to the decode side), and its prefill candidates come from the "
        "same TP/PP/max-batch grid as aggregated replicas. aiconfigurator fits many small prefill workers "
        "(TP1/TP2, batch 1) to measured context-phase kernels and rates each xPyD split by its simulated "
        "throughput.",
        "- **One GPU type against the catalog.** aiconfigurator's `cli default` searches one system; the "
        "planner's whole-catalog rows may put prefill and decode on different GPU types (a pool keeps one "
        "weight format and KV dtype on both sides; the every-format rows may pick INT8/FP8 weights), which is "
        "where most of their saving comes from.",
        "- **MoE layouts.** For DeepSeek-V3 aiconfigurator searches attention data parallelism and expert "
        "parallelism (its `parallel` column, e.g. `tp1pp1dp16etp1ep16`); these problems search the planner's "
        "TP/PP/batch only (the planner's `search: ep` / `attention_dp` keys are not used by these generated "
        "problems yet), so its DeepSeek candidates are tensor/pipeline-parallel replicas and the comparison "
        "favours aiconfigurator's search space.",
        "",
    ]
