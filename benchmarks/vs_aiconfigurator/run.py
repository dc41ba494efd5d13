# ruff: noqa: E501  (Markdown prose and table rows are long string literals)
"""Side-by-side benchmark of the planner against NVIDIA aiconfigurator (issue 8).

Run it through the wrapper, which installs aiconfigurator in its own virtualenv first:

    bash benchmarks/vs_aiconfigurator/run.sh [--quick] [--reps 3] [--only SUBSTRING ...]

For every scenario (model x GPU type x total GPUs x TTFT/TPOT limits, ISL 4000 / OSL 500):

1. ``aiconfigurator cli default`` (its default backend, TensorRT-LLM; agg vs disagg) on
   the scenario, timed as a whole process, ``--reps`` times (median reported);
2. the planner, ``planner solve PROBLEM.yaml --json --no-pareto``, timed the same way, on
   three problem files generated from the scenario: the same GPU type and precision as
   aiconfigurator (apples to apples), the whole catalog (every GPU with a price) at that
   precision, and the whole catalog with every weight format and KV dtype (the planner's
   default search space). The traffic is the request rate aiconfigurator's chosen
   configuration serves on the scenario's GPUs (its tokens/s/GPU x GPUs / OSL), with the
   limits as p95 SLOs and ``inventory`` capping every GPU type at the scenario's GPU count;
3. ``planner eval`` on each chosen deployment (mean TTFT/TPOT, p95s at its routed rate,
   capacity at the SLO) and on aiconfigurator's chosen aggregated configuration (the same
   configuration under both models);
4. accuracy: both tools predict the measured rows of aiconfigurator's shipped
   ``silicon_sample.csv`` that cover a scenario's model and GPU (nearest ISL/OSL shape);
5. writes results/ (JSON, CSV) and the "## vs NVIDIA aiconfigurator" section of
   docs/benchmarks.md (other sections of that file are left as they are); with ``--only`` the
   scenarios run are merged into the stored results.json (merge.py).

The disaggregated scenarios (disagg.py) add ``disaggregation: [false, true]`` to the planner's
three problems and get a table of both tools' prefill/decode pools.

Only the standard library is used here; aiconfigurator runs in its own virtualenv
(aic_side.py) and the planner in the project's (ours_side.py, the ``planner`` CLI).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import disagg
import merge
from aic_parse import aic_command, parse_aic
from common import (DOC, HERE, ISL, MODELS, OSL, RESULTS, ROOT, SILICON_MODELS, SILICON_SYSTEMS, SLO_DEFAULT, SLO_TIGHT,
                    SYSTEMS, VARIANTS, WORK, log, timed)
from ours_plan import (AIC_QUANT, accuracy_model, ape, attach_evals, eval_argv, problem_yaml,
                       select_silicon_rows, summarize_plan, write_accuracy_csv)
from render import render_section
from verdict import write_doc

def scenarios() -> list[dict]:
    out = []
    for model in ("qwen3-32b", "llama-3.1-70b"):
        for gpu in ("h100-sxm", "h200-sxm"):
            for n in (8, 16):
                for label, (ttft, tpot) in (("default", SLO_DEFAULT), ("tight", SLO_TIGHT)):
                    out.append(
                        dict(
                            model=model,
                            gpu=gpu,
                            gpus=n,
                            precision="bf16",
                            ttft_ms=ttft,
                            tpot_ms=tpot,
                            slo=label,
                        )
                    )
    out.append(
        dict(
            model="qwen3-32b",
            gpu="h100-sxm",
            gpus=8,
            precision="fp8",
            ttft_ms=SLO_DEFAULT[0],
            tpot_ms=SLO_DEFAULT[1],
            slo="default",
        )
    )
    out += disagg.scenarios()  # the planner also searches prefill/decode pools (issue 14)
    for s in out:
        s["id"] = f"{s['model']} {s['precision']} {s['gpu']} x{s['gpus']} {s['slo']}"
        s["slug"] = re.sub(r"[^a-z0-9]+", "-", s["id"].lower()).strip("-")
        s["aic_model"] = MODELS[s["model"]][s["precision"]]
        s["aic_system"] = SYSTEMS[s["gpu"]]
    return out

# ------------------------------------------------------------------------------ main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic-python", required=True, help="python of aiconfigurator's virtualenv")
    ap.add_argument("--project-python", required=True, help="python of the project's virtualenv")
    ap.add_argument("--aic-unavailable", default=None, help="why aiconfigurator could not be installed")
    ap.add_argument("--reps", type=int, default=3, help="timed runs per tool and scenario (median)")
    ap.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="run scenarios whose id contains any of these; merged into results/results.json (others kept)",
    )
    ap.add_argument("--quick", action="store_true", help="2 scenarios, 1 run, 2 measured rows per group")
    ap.add_argument(
        "--accuracy-rows-per-group",
        type=int,
        default=None,
        help="cap measured rows per (model, GPU, backend, precision) group (default: all)",
    )
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--doc", type=Path, default=DOC)
    ap.add_argument(
        "--render-only",
        action="store_true",
        help="rewrite the doc section from results/results.json without running anything",
    )
    ap.add_argument(
        "--refresh-accuracy",
        action="store_true",
        help="with --render-only: recompute the planner's accuracy-model column first (no timing runs)",
    )
    args = ap.parse_args()
    if args.render_only:
        out = json.loads((RESULTS / "results.json").read_text())
        if args.refresh_accuracy and out.get("accuracy_rows"):
            accuracy_model(args.project_python, out["accuracy_rows"])
            (RESULTS / "results.json").write_text(json.dumps(out, indent=1, default=str))
            write_accuracy_csv(out["accuracy_rows"])
        write_doc(args.doc, render_section(out, quick=out.get("partial", False)))
        log(f"rewrote the section of {args.doc} from {RESULTS / 'results.json'}")
        return 0

    scen = scenarios()
    if args.quick:
        args.reps = 1
        args.accuracy_rows_per_group = args.accuracy_rows_per_group or 2
        scen = [
            s
            for s in scen
            if s["id"] in ("qwen3-32b bf16 h200-sxm x8 default", "qwen3-32b fp8 h100-sxm x8 default")
        ]
    if args.only:
        scen = [s for s in scen if any(o in s["id"] for o in args.only)]
    bin_dir = Path(args.project_python).parent
    planner_bin = str(bin_dir / "planner")
    aic_bin = str(Path(args.aic_python).parent / "aiconfigurator")
    aic_ok = args.aic_unavailable is None
    if WORK.exists():
        for sub in ("aic", "problems", "evals"):
            shutil.rmtree(WORK / sub, ignore_errors=True)
    for sub in ("aic", "problems", "evals"):
        (WORK / sub).mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(exist_ok=True)

    env_info = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "loadavg_start": os.getloadavg(),
        "project_commit": _git_commit(),
        "reps": args.reps,
    }
    aic_info: dict = {}
    if aic_ok:
        r = timed([args.aic_python, str(HERE / "aic_side.py"), "info"])
        if r["rc"] == 0:
            aic_info = json.loads(r["stdout"])
        else:
            aic_ok, args.aic_unavailable = (
                False,
                f"importing aiconfigurator failed: {r['stderr'].strip()[-400:]}",
            )
    env_info["aic"] = aic_info
    log(f"aiconfigurator: {aic_info or args.aic_unavailable}")

    prices = _default_prices(planner_bin)
    priced = sorted(prices)

    # Warm-up (not timed): first start of each tool fills disk caches. aiconfigurator comes
    # from pip with its bytecode compiled; the planner is an editable install, whose bytecode
    # a first start writes only where PYTHONDONTWRITEBYTECODE is unset (it is set on some
    # machines, and then every run would recompile planner/): compile it here, as pip does.
    subprocess.run([args.project_python, "-m", "compileall", "-q", str(ROOT / "planner")], check=True)
    if aic_ok and scen:
        log("warm-up: aiconfigurator")
        timed(aic_command(aic_bin, scen[0], WORK / "aic" / "warmup"))
    if scen:
        log("warm-up: planner")
        warm = WORK / "problems" / "warmup.yaml"
        warm.write_text(problem_yaml(scen[0], "same-gpu", 1.0, priced))
        timed([planner_bin, "solve", str(warm), "--json", "--no-pareto"])

    results = []
    eval_calls = []
    for si, s in enumerate(scen):
        log(f"[{si + 1}/{len(scen)}] {s['id']}")
        rec = {
            "scenario": {k: v for k, v in s.items() if k != "slug"},
            "aic": {"runs": []},
            "ours": {v: {"runs": []} for v in VARIANTS},
        }
        if not aic_ok:
            rec["aic"]["error"] = f"aiconfigurator not run: {args.aic_unavailable}"
        yamls: dict = {}
        for rep in range(args.reps):
            if aic_ok:
                save = WORK / "aic" / s["slug"] / f"rep{rep}"
                run = timed(aic_command(aic_bin, s, save))
                parsed = parse_aic(run, save, s)
                rec["aic"]["runs"].append(
                    {
                        "wall_s": run["wall_s"],
                        "cpu_s": run["cpu_s"],
                        "rc": run["rc"],
                        "self_reported_search_s": parsed["self_reported_search_s"],
                    }
                )
                if rep == 0:
                    rec["aic"].update({k: v for k, v in parsed.items()})
                    rec["aic"]["command"] = " ".join(aic_command("aiconfigurator", s, Path("OUT")))
                    (WORK / "aic" / f"{s['slug']}.log").write_text(
                        run["stdout"] + "\n--- stderr ---\n" + run["stderr"]
                    )
                elif parsed.get("chosen") and rec["aic"].get("chosen"):
                    same = parsed["chosen"]["config"] == rec["aic"]["chosen"]["config"]
                    rec["aic"]["deterministic"] = rec["aic"].get("deterministic", True) and same
                log(
                    f"  aic rep {rep}: {run['wall_s']:.1f} s wall, {run['cpu_s']:.1f} s cpu, "
                    f"{(parsed.get('chosen') or {}).get('config', parsed.get('error'))}"
                )
            if rep == 0:
                chosen = rec["aic"].get("chosen")
                if chosen and chosen.get("cluster_rate_per_s"):
                    rate, rate_src = chosen["cluster_rate_per_s"], "aiconfigurator"
                else:
                    rate, rate_src = 0.125 * s["gpus"], "fallback (aiconfigurator gave no configuration)"
                rec["rate_per_s"], rec["rate_source"] = rate, rate_src
                for v in VARIANTS:
                    path = WORK / "problems" / f"{s['slug']}-{v}.yaml"
                    path.write_text(problem_yaml(s, v, rate, priced))
                    yamls[v] = path
            for v in VARIANTS:
                run = timed([planner_bin, "solve", str(yamls[v]), "--json", "--no-pareto"])
                try:
                    doc = json.loads(run["stdout"])
                except json.JSONDecodeError:
                    doc = {"status": f"error (exit {run['rc']}): {run['stderr'].strip()[-300:]}"}
                rec["ours"][v]["runs"].append(
                    {
                        "wall_s": run["wall_s"],
                        "cpu_s": run["cpu_s"],
                        "rc": run["rc"],
                        "self_reported_total_s": (doc.get("timings_s") or {}).get("total"),
                    }
                )
                if rep == 0:
                    rec["ours"][v].update(summarize_plan(doc))
                log(f"  ours {v} rep {rep}: {run['wall_s']:.2f} s wall, exit {run['rc']}")
        # Infeasible at the scenario's GPU count: solve once more (untimed) with the verified
        # relaxation the planner proposes, to show what it would deploy instead.
        for v in VARIANTS:
            o = rec["ours"][v]
            relax = next(
                (
                    d.get("relaxation", {}).get("inventory_gpus")
                    for d in (o.get("diagnosis") or [])
                    if (d.get("relaxation") or {}).get("inventory_gpus")
                ),
                None,
            )
            if o.get("status") == "infeasible" and relax:
                inv = {g: s["gpus"] for g in ([s["gpu"]] if v == "same-gpu" else priced)} | relax
                path = WORK / "problems" / f"{s['slug']}-{v}-relaxed.yaml"
                path.write_text(problem_yaml(s, v, rec["rate_per_s"], priced, inventory=inv))
                run = timed([planner_bin, "solve", str(path), "--json", "--no-pareto"])
                try:
                    o["relaxed"] = summarize_plan(json.loads(run["stdout"])) | {"inventory": relax}
                except json.JSONDecodeError:
                    o["relaxed"] = {"status": f"error (exit {run['rc']})", "inventory": relax}
        # planner eval calls (run in one process afterwards)
        for v in VARIANTS:
            for plan_key in ("", "relaxed"):
                plan = rec["ours"][v].get(plan_key) if plan_key else rec["ours"][v]
                for i, d in enumerate((plan or {}).get("deployments") or []):
                    if d.get("role") not in (None, "both"):
                        continue  # `planner eval` models aggregated replicas only
                    per_replica = d["rate_per_s"] / d["replicas"]
                    eval_calls.append(
                        {
                            "key": f"{si}|{v}|{plan_key}|{i}",
                            "argv": eval_argv(
                                s["model"],
                                d["gpu"],
                                d["tp"],
                                d["pp"],
                                d["quantization"],
                                d["kv_cache_dtype"],
                                d["max_batch"],
                                rate=per_replica,
                                slo=(s["ttft_ms"] / 1000, s["tpot_ms"] / 1000),
                            ),
                        }
                    )
        agg = rec["aic"].get("agg")
        if agg and agg["detail"].get("dp", 1) == 1:  # `planner eval` has no attention DP / EP flags
            q = AIC_QUANT.get(agg["detail"]["gemm"], s["precision"])
            kv = AIC_QUANT.get(agg["detail"]["kvcache"], s["precision"])
            eval_calls.append(
                {
                    "key": f"{si}|aic-agg",
                    "argv": eval_argv(
                        s["model"],
                        s["gpu"],
                        agg["detail"]["tp"],
                        agg["detail"]["pp"],
                        q,
                        kv,
                        agg["detail"]["batch"],
                        rate=agg["request_rate_per_replica"],
                    ),
                }
            )
        results.append(rec)

    # Accuracy against aiconfigurator's measured samples.
    accuracy_rows: list[dict] = []
    if aic_ok and not args.skip_accuracy:
        wanted = {(s["model"], s["gpu"]) for s in scen}
        rows = select_silicon_rows(Path(aic_info["silicon_sample_csv"]), wanted, args.accuracy_rows_per_group)
        log(f"accuracy: {len(rows)} measured rows; aiconfigurator estimates ...")
        (WORK / "evals" / "silicon_rows.json").write_text(json.dumps(rows))
        r = timed(
            [
                args.aic_python,
                str(HERE / "aic_side.py"),
                "estimate",
                str(WORK / "evals" / "silicon_rows.json"),
                str(WORK / "evals" / "aic_estimates.json"),
            ]
        )
        (WORK / "evals" / "aic_estimate.log").write_text(r["stderr"])
        aic_est = (
            {e["id"]: e for e in json.loads((WORK / "evals" / "aic_estimates.json").read_text())}
            if r["rc"] == 0
            else {}
        )
        for row in rows:
            est = aic_est.get(row["id"], {})
            kv = AIC_QUANT.get(est.get("aic_kvcache") or "", "bf16")
            batch = int(float(row["batch_size"]))
            eval_calls.append(
                {
                    "key": f"acc|{row['id']}",
                    "argv": eval_argv(
                        SILICON_MODELS[row["model_path"]],
                        SILICON_SYSTEMS[row["system"]],
                        int(float(row["tp_size"])),
                        int(float(row["pp_size"] or 1)),
                        row["precision_used"],
                        kv,
                        batch,
                        prompt=int(row["isl"]),
                        output=int(row["osl"]),
                    ),
                }
            )
            accuracy_rows.append(
                {
                    "id": row["id"],
                    "model": row["model_path"],
                    "system": row["system"],
                    "backend": row["backend"],
                    "backend_version": row["backend_version"],
                    "precision": row["precision_used"],
                    "isl": int(row["isl"]),
                    "osl": int(row["osl"]),
                    "tp": int(float(row["tp_size"])),
                    "pp": int(float(row["pp_size"] or 1)),
                    "concurrency": batch,
                    "kv_cache_dtype_used": kv,
                    "measured_ttft_ms": float(row["silicon_ttft_ms"]),
                    "measured_tpot_ms": float(row["silicon_tpot_ms"]),
                    "aic_ttft_ms": est.get("aic_ttft_ms"),
                    "aic_tpot_ms": est.get("aic_tpot_ms"),
                    "aic_error": est.get("aic_error") or (None if est else "no estimate"),
                    "aic_version_fallback": est.get("aic_version_fallback"),
                    "aic_backend_version_used": est.get("aic_backend_version_used"),
                }
            )

    log(f"planner eval: {len(eval_calls)} configurations ...")
    (WORK / "evals" / "calls.json").write_text(json.dumps(eval_calls))
    r = timed(
        [
            args.project_python,
            str(HERE / "ours_side.py"),
            str(WORK / "evals" / "calls.json"),
            str(WORK / "evals" / "evals.json"),
        ]
    )
    evals = json.loads((WORK / "evals" / "evals.json").read_text()) if r["rc"] == 0 else {}
    if r["rc"] != 0:
        log(f"planner eval failed: {r['stderr'][-500:]}")
    attach_evals(results, evals, scen)
    for a in accuracy_rows:
        e = (evals.get(f"acc|{a['id']}") or {}).get("result") or {}
        a["ours_ttft_ms"] = e["ttft_s"] * 1000 if e.get("ttft_s") is not None else None
        a["ours_tpot_ms"] = e["tpot_s"] * 1000 if e.get("tpot_s") is not None else None
        for tool in ("aic", "ours"):
            for m in ("ttft", "tpot"):
                a[f"{tool}_{m}_ape"] = ape(a[f"{tool}_{m}_ms"], a[f"measured_{m}_ms"])
    if accuracy_rows:
        log("planner accuracy (calibrated closed-loop model) on the measured rows ...")
        accuracy_model(args.project_python, accuracy_rows)

    env_info["loadavg_end"] = os.getloadavg()
    if aic_info.get("silicon_sample_csv"):  # no machine-specific paths in results.json
        aic_info["silicon_sample_csv"] = aic_info["silicon_sample_csv"].split("site-packages/")[-1]
    out = {
        "environment": env_info,
        "aic_unavailable": args.aic_unavailable,
        "prices_usd_per_gpu_hour": prices,
        "isl": ISL,
        "osl": OSL,
        "partial": bool(args.quick or args.only),
        "scenarios": results,
        "accuracy_rows": accuracy_rows,
    }
    stored_path = RESULTS / "results.json"
    if args.only and not args.quick and stored_path.exists():  # keep the other scenarios' results
        out = merge.merge(json.loads(stored_path.read_text()), out, [s["id"] for s in scenarios()])
        log(f"merged {len(results)} scenarios into {stored_path} ({len(out['scenarios'])} in all)")
    stored_path.write_text(json.dumps(out, indent=1, default=str))
    write_accuracy_csv(out["accuracy_rows"])
    section = render_section(out, quick=out["partial"])
    write_doc(args.doc, section)
    log(f"wrote {RESULTS / 'results.json'} and the section of {args.doc}")
    return 0

# ------------------------------------------------------------------------------ helpers


def _default_prices(planner_bin: str) -> dict:
    r = subprocess.run(
        [planner_bin, "catalog", "prices", "--json"], capture_output=True, text=True, check=True
    )
    rows = json.loads(r.stdout)["prices"]
    return {
        p["gpu"]: p["usd_per_gpu_hour"]
        for p in rows
        if p.get("kind") == "rental" and p.get("default") and p.get("usd_per_gpu_hour")
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _git_commit() -> str:
    r = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return r.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
