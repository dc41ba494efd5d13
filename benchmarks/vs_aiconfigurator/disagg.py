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
    ("qwen3-32b", "bf16", "h200-sxm", 16, 1000.0, 10.0, "disagg tpot10"),
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


def plan_pools(plan: dict) -> dict:
    """Replicas, TP and GPUs per role of the planner's plan #1 (summarize_plan's output)."""
    out: dict = {}
    for d in plan.get("deployments") or []:
        role = d.get("role") or "both"
        part = out.setdefault(role, {"replicas": 0, "gpus": 0, "configs": []})
        part["replicas"] += d["replicas"]
        part["gpus"] += d["gpus"]
        part["configs"].append(f"{d['replicas']}x {d['gpu']} TP{d['tp']}" + (f" PP{d['pp']}" if d["pp"] != 1 else "")
                               + f" batch {d['max_batch']}")
    return out


def aic_pools(pick: dict, n_gpus: int) -> dict:
    """The same for aiconfigurator's pick (summarize_aic_row's output) over the scenario's GPUs."""
    d, reps = pick["detail"], pick.get("replicas") or 0
    if pick["mode"] == "agg":
        return {"both": {"replicas": reps, "gpus": n_gpus, "configs": [f"{reps}x TP{d['tp']} batch {d['batch']}"]}}
    out = {}
    for role, key in (("prefill", "prefill"), ("decode", "decode")):
        workers = d[f"{key}_workers"] * reps
        out[role] = {
            "replicas": workers,
            "gpus": workers * d[f"{key}_tp"],
            "configs": [f"{workers}x TP{d[f'{key}_tp']}" + (f" batch {d['decode_batch']}" if role == "decode" else "")],
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
            wall = median([r["wall_s"] for r in o.get("runs", [])])
            name = label.removeprefix("ours: ")
            if not o.get("deployments"):
                L.append(f"| | {name} | {fmt(wall, 2)} | {o.get('status') or 'no plan'} | | | | | | | | |")
                continue
            pools = plan_pools(o)
            mode = "+".join(k for k in ("both", "prefill") if k in pools).replace("both", "agg").replace("prefill", "disagg")
            L.append(
                f"| | {name} | {fmt(wall, 2)} | {mode} | {_pool_cell(pools, 'prefill')} | "
                f"{_pool_cell(pools, 'decode')} | {_pool_cell(pools, 'both')} | {o['gpus']} | "
                f"{fmt(o.get('usd_per_hour'), 2)} | {fmt(o.get('usd_per_million_tokens'), 3)} | "
                f"{fmt(o.get('ttft_p95_ms'))} | {fmt(o.get('tpot_p95_ms'), 1)} |"
            )
    L.append("")
    return L
