# ruff: noqa: E501  (Markdown prose and table rows are long string literals)
"""The "## vs NVIDIA aiconfigurator" section of docs/benchmarks.md: setup, speed, picks,
cross-prediction and accuracy tables (the verdict and the file rewrite are in verdict.py)."""

from __future__ import annotations

import statistics

import disagg
from common import BEGIN_MARK, COMMAND, END_MARK, ISL, OSL, SECTION_TITLE, VARIANTS, _ms, fmt, median, pct
from verdict import render_verdict

def render_section(out: dict, quick: bool) -> str:
    env, res, prices = out["environment"], out["scenarios"], out["prices_usd_per_gpu_hour"]
    aic = env.get("aic") or {}
    L = [BEGIN_MARK, SECTION_TITLE, ""]
    L += [
        "NVIDIA [aiconfigurator](https://github.com/ai-dynamo/aiconfigurator) (Apache-2.0) is the tool a user "
        "would pick instead of the planner: for one model, one GPU type, one request shape and a GPU count it "
        "searches TP/PP/batch (aggregated and disaggregated prefill/decode serving) against kernel timings "
        "measured on that GPU, ranks by tokens/s per GPU, and emits engine configs. This section runs both "
        "tools on the same scenarios, on the same machine, and prices both answers with the planner's catalog.",
        "",
    ]
    if quick:
        L += [
            "> **Partial run** (`--quick` or `--only`): not every scenario below; rerun the full command "
            "for the complete table.",
            "",
        ]
    L += [
        "### Reproduce",
        "",
        "```bash",
        COMMAND + "            # every scenario, 3 timed runs of each tool (~25 min on 2 cores)",
        "```",
        "",
        "It creates `benchmarks/vs_aiconfigurator/.venv` and pip-installs `aiconfigurator` there (never into "
        "the project's environment; `AIC_VERSION=...` picks another release), uses the project's `.venv` for "
        "`planner`, times both tools, writes `benchmarks/vs_aiconfigurator/results/` (`results.json`, "
        "`accuracy_rows.csv`) and rewrites this section. `--quick` runs two scenarios once (a smoke test); "
        "`--only TEXT` runs the scenarios whose id contains TEXT and merges them into the stored results; `--reps N` changes the repetitions; "
        "`--render-only --refresh-accuracy` recomputes only the planner's accuracy-model column (after a "
        "recalibration) and rewrites this section without timing anything.",
        "",
    ]
    if out.get("aic_unavailable"):
        L += [
            "### aiconfigurator could not be run",
            "",
            "On this machine aiconfigurator could not be installed or imported, so no aiconfigurator numbers "
            "appear below and nothing was made up in their place. The error:",
            "",
            "```",
            out["aic_unavailable"],
            "```",
            "",
            "The planner's rows use a fallback rate of 0.125 requests/s per GPU instead of aiconfigurator's "
            "throughput.",
            "",
        ]
    L += [
        "### Setup",
        "",
        f"- Machine: {env['cpus']} CPU cores ({env['cpu_model']}), shared with other jobs: load average "
        f"{env['loadavg_start'][0]:.1f} at the start and {env['loadavg_end'][0]:.1f} at the end. "
        f"Run {env['date']}, project commit `{env['project_commit']}`, Python {env['python']}.",
        f"- aiconfigurator {aic.get('aiconfigurator', '–')} (aiconfigurator-core {aic.get('aiconfigurator_core', '–')}), "
        f"`cli default` with its default backend (TensorRT-LLM) and serving modes (agg vs disagg), its shipped "
        "`SILICON` performance database, `--isl 4000 --osl 500 --ttft T --tpot T --total-gpus N --save-dir DIR`. "
        "It prints a deprecation notice (the command is moving to the `aisimulate` distribution) but runs.",
        "- Scenarios: Qwen3-32B and Llama-3.1-70B (BF16) on H100 SXM and H200 SXM with 8 and 16 GPUs, "
        f"ISL {ISL} / OSL {OSL}, at aiconfigurator's default limits (TTFT 2000 ms, TPOT 30 ms) and a tighter "
        "pair (TTFT 1000 ms, TPOT 20 ms); plus Qwen3-32B FP8 (aiconfigurator's `Qwen/Qwen3-32B-FP8`, FP8 "
        "weights and KV cache) on 8 H100. Three disaggregated scenarios (ids ending in `disagg ...`: "
        + "; ".join(
            f"{m} {p} on {n} {g}, TTFT {ttft:g} / TPOT {tpot:g} ms" for m, p, g, n, ttft, tpot, _ in disagg.SCENARIOS
        )
        + ") in which the planner also searches prefill/decode pools; see their own table below.",
        "- Mapping to a planner problem: one workload whose rate is the request rate aiconfigurator's chosen "
        "configuration serves on the N GPUs (its tokens/s/GPU x N / OSL), fixed 4000/500-token requests, and "
        "its TTFT/TPOT limits as **p95** SLOs (aiconfigurator's are limits on its predicted mean, so the "
        "planner is asked for more). Three problem files per scenario: **same GPU type and precision** "
        "(`search: {gpus: [G], quantization: [P], kv_cache_dtype: [P]}`, `inventory: {G: N}`; apples to "
        f"apples), **whole catalog, same precision** (`search.gpus` = the {len(prices)} catalog GPUs with a "
        "price, i.e. every GPU the optimizer could buy; each capped at N), and **whole catalog, every format** "
        "(the planner's default search space over those GPUs: every weight format and KV dtype, TP 1-8, "
        "PP 1-4, ten max-batch values; each GPU type capped at N). "
        "The whole-catalog rows may pick lower-precision weights (INT8, FP8, INT4) whose accuracy loss the "
        "planner does not model; the same-precision rows are the like-for-like ones.",
        "- Timing: wall time of the whole process (Python start, imports, search, output), "
        f"median of {env['reps']} runs, the two tools interleaved, after one untimed warm-up run of each; the planner's bytecode compiled first (`compileall`), as pip compiles aiconfigurator's. "
        "`planner solve ... --json --no-pareto` (no Pareto sweep: aiconfigurator's `default` has none either).",
        "- Prices: the planner catalog's default on-demand USD/GPU-hour for both tools ("
        + ", ".join(f"{g} ${prices[g]:.2f}" for g in ("h100-sxm", "h200-sxm") if g in prices)
        + "). $/1M tokens counts output tokens: GPUs x price / (output tokens/s x 3600) x 10^6; "
        "for aiconfigurator with all N GPUs, for the planner with the GPUs its plan uses.",
        "- Semantics: aiconfigurator's TTFT/TPOT are its predicted means at a closed-loop concurrency equal "
        "to the batch size. The planner's solve reports p95 TTFT/TPOT under Poisson arrivals at the routed "
        "rate; each chosen deployment is re-evaluated with `planner eval ... --rate R` for the mean TPOT at "
        "that rate and the mean TTFT without queueing (prefill + one decode step at a full batch), shown in "
        "parentheses. The planner has no mean-TTFT-under-load output, so that mean is the closed-loop one.",
    ]
    for m in out.get("merged_runs", []):
        L.append(
            f"- Merged in later with `--only` (the rest of the table is from the run above): "
            f"{', '.join(m['scenarios'])}; run {m['date']}, project commit `{m['project_commit']}`, "
            f"{m['reps']} timed run(s) each, load average {m['loadavg_start'][0]:.1f} / {m['loadavg_end'][0]:.1f}."
        )
    L.append("")

    # ---- speed table
    L += [
        "### Speed",
        "",
        "Median wall seconds per solve (CPU seconds in parentheses). *configs* is how many configurations "
        "each tool evaluated (aiconfigurator: agg + disagg results it reports; planner: candidates enumerated). "
        "*ratio* = aiconfigurator's single-GPU-type search / the planner's whole-catalog, every-format search.",
        "",
        "| scenario | aiconfigurator | configs | ours: same GPU + precision | ours: whole catalog, same precision | ours: whole catalog, every format | configs | ratio | ratio, same precision | search only: aiconfigurator / ours |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    ratios, ratios_same, ratios_inner = [], [], []
    for rec in res:
        s = rec["scenario"]
        a_wall = median([r["wall_s"] for r in rec["aic"]["runs"]])
        a_cpu = median([r["cpu_s"] for r in rec["aic"]["runs"]])
        cells = []
        for v in VARIANTS:
            runs = rec["ours"][v]["runs"]
            cells.append(
                f"{fmt(median([r['wall_s'] for r in runs]), 2)} ({fmt(median([r['cpu_s'] for r in runs]), 1)})"
            )
        o_wall = median([r["wall_s"] for r in rec["ours"]["catalog-all"]["runs"]])
        o_same = median([r["wall_s"] for r in rec["ours"]["catalog"]["runs"]])
        a_in = median([r.get("self_reported_search_s") for r in rec["aic"]["runs"]])
        o_in = median([r.get("self_reported_total_s") for r in rec["ours"]["catalog-all"]["runs"]])
        ratio = a_wall / o_wall if a_wall and o_wall else None
        ratio_same = a_wall / o_same if a_wall and o_same else None
        ratio_in = a_in / o_in if a_in and o_in else None
        for bucket, x in ((ratios, ratio), (ratios_same, ratio_same), (ratios_inner, ratio_in)):
            if x:
                bucket.append(x)
        L.append(
            f"| {s['id']} | {fmt(a_wall, 1)} ({fmt(a_cpu, 1)}) | {fmt(rec['aic'].get('configs_evaluated'))} | "
            f"{' | '.join(cells)} | {fmt((rec['ours']['catalog-all'].get('candidates') or {}).get('enumerated'))} | "
            f"{fmt(ratio, 1, 'x')} | {fmt(ratio_same, 1, 'x')} | {fmt(a_in, 1)} / {fmt(o_in, 2)} = {fmt(ratio_in, 1, 'x')} |"
        )
    L.append("")
    if ratios_same:
        note = (
            "*ratio, same precision*: against the whole-catalog search restricted to the scenario's "
            f"precision (median {statistics.median(ratios_same):.1f}x). *search only*: each tool's own timer "
            "around its search, without interpreter start and imports (aiconfigurator's \"All experiments "
            "completed in\" log line, the planner's `timings_s.total`)"
        )
        if ratios_inner:
            note += f": median {statistics.median(ratios_inner):.1f}x"
        L += [note + ".", ""]
    if ratios:
        passed = sum(r >= 5 for r in ratios)
        ours_total = median([median([r["wall_s"] for r in x["ours"]["catalog-all"]["runs"]]) for x in res])
        ours_start = median(
            [
                r["wall_s"] - r["self_reported_total_s"]
                for x in res
                for r in x["ours"]["catalog-all"]["runs"]
                if r.get("self_reported_total_s") is not None
            ]
        )
        aic_total = median([median([r["wall_s"] for r in x["aic"]["runs"]]) for x in res])
        aic_start = median(
            [
                r["wall_s"] - r["self_reported_search_s"]
                for x in res
                for r in x["aic"]["runs"]
                if r.get("self_reported_search_s") is not None
            ]
        )
        overhead = (
            f" Of the planner's median {ours_total:.1f} s, about {ours_start:.1f} s is interpreter start, imports "
            f"and catalog loading outside its search timer; of aiconfigurator's {aic_total:.1f} s, about "
            f"{aic_start:.1f} s."
            if ours_start is not None and aic_start is not None
            else ""
        )
        L += [
            f"Speed ratio (aiconfigurator single-GPU-type search / planner whole-catalog search, median wall "
            f"time, same machine): **median {statistics.median(ratios):.1f}x**, range {min(ratios):.1f}x to "
            f"{max(ratios):.1f}x; at least 5x in {passed} of {len(ratios)} scenarios, at least 10x (the target of "
            f"issue 19) in {sum(r >= 10 for r in ratios)} of {len(ratios)}." + overhead,
            "",
        ]

    # ---- decisions table
    L += [
        "### What each tool picks",
        "",
        "One block per scenario. TTFT/TPOT in ms: aiconfigurator's predicted means; for the planner p95 at "
        "the routed load (mean in parentheses). tok/s/GPU: aiconfigurator's per-GPU throughput at its batch; "
        "for the planner the throughput it is asked to serve per GPU it deploys, and in brackets its capacity "
        "per GPU at the p95 SLOs (the planner's counterpart of aiconfigurator's number). Wall s: median solve time.",
        "",
        "| scenario | tool | wall s | configuration | GPUs | tok/s/GPU | TTFT ms | TPOT ms | $/1M tok |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for rec in res:
        s = rec["scenario"]
        if s.get("disagg"):
            continue  # their own table (pools side by side) follows
        price = prices.get(s["gpu"])
        a = rec["aic"]
        a_wall = median([r["wall_s"] for r in a["runs"]])
        ch = a.get("chosen")
        sid = f"{s['id']} ({fmt(rec['rate_per_s'], 2)} req/s)"
        if ch:
            usd = price * s["gpus"] / (ch["cluster_tokens_per_s"] * 3600) * 1e6 if price else None
            L.append(
                f"| {sid} | aiconfigurator ({ch['mode']}) | {fmt(a_wall, 1)} | {ch['config']} | {s['gpus']} | "
                f"{fmt(ch['tokens_per_s_per_gpu'])} | {fmt(ch['ttft_ms'])} | {fmt(ch['tpot_ms'], 1)} | {fmt(usd, 3)} |"
            )
            if ch["mode"] == "disagg" and a.get("agg"):
                ag = a["agg"]
                usd = price * s["gpus"] / (ag["cluster_tokens_per_s"] * 3600) * 1e6 if price else None
                L.append(
                    f"| | aiconfigurator, best agg | | {ag['config']} | {s['gpus']} | {fmt(ag['tokens_per_s_per_gpu'])} | "
                    f"{fmt(ag['ttft_ms'])} | {fmt(ag['tpot_ms'], 1)} | {fmt(usd, 3)} |"
                )
        elif out.get("aic_unavailable") is None:
            L.append(
                f"| {sid} | aiconfigurator | {fmt(a_wall, 1)} | {a.get('error', 'no result')} | | | | | |"
            )
        for v, label in VARIANTS.items():
            o = rec["ours"][v]
            wall = median([r["wall_s"] for r in o["runs"]])
            L.append(_plan_row(label.removeprefix("ours: "), wall, o))
            if o.get("relaxed"):
                rl = o["relaxed"]
                L.append(
                    _plan_row(
                        f"↳ needs {', '.join(f'{n} {g}' for g, n in rl['inventory'].items())}", None, rl
                    )
                )
    L.append("")
    L += disagg.render(out, VARIANTS, fmt, median)

    # ---- cross-prediction
    L += [
        "### The same configuration under both models",
        "",
        "aiconfigurator's chosen aggregated configuration, evaluated by `planner eval` at the same TP/PP/batch "
        "and precision: TTFT and TPOT at a closed-loop batch equal to the batch size (the seeds' formulas), "
        "and the mean TPOT at aiconfigurator's request rate per replica (our queueing model, prefill work "
        "included).",
        "",
        "| scenario | configuration | aiconfigurator TTFT / TPOT ms | ours TTFT / TPOT ms (batch) | ours mean TPOT at its rate | aiconfigurator tok/s/GPU | ours tok/s/GPU (batch) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    same_config: dict = {}  # x8 and x16 scenarios often share aiconfigurator's per-replica config
    for rec in res:
        ag, sc = rec["aic"].get("agg"), rec["scenario"]
        if ag:
            d = ag["detail"]
            key = (sc["model"], sc["precision"], sc["gpu"], sc["slo"], d["tp"], d["pp"], d["batch"])
            same_config.setdefault(key, []).append(rec)
    for (model, prec, gpu, slo, tp, pp, batch), recs in same_config.items():
        ag = recs[0]["aic"]["agg"]
        label = f"{model} {prec} {gpu} " + "/".join(f"x{r['scenario']['gpus']}" for r in recs) + f" {slo}"
        config = f"TP{tp} PP{pp} batch {batch} ({ag['detail']['gemm']} GEMM, {ag['detail']['kvcache']} KV)"
        e = ag.get("ours_eval") or {}
        tput = (
            e["throughput_tokens_per_s"] / e["gpus"]
            if e.get("throughput_tokens_per_s") and e.get("gpus")
            else None
        )
        fits = "" if e.get("fits", True) else " (does not fit in memory by our model)"
        L.append(
            f"| {label} | {config}{fits} | {fmt(ag['ttft_ms'])} / {fmt(ag['tpot_ms'], 1)} | "
            f"{fmt(_ms(e.get('ttft_s')))} / {fmt(_ms(e.get('tpot_s')), 1)} | "
            f"{fmt(_ms(e.get('tpot_mean_s')), 1)}{' (overloaded)' if e.get('overloaded') else ''} | "
            f"{fmt(ag['tokens_per_s_per_gpu'])} | {fmt(tput)} |"
        )
    L.append("")

    # ---- accuracy
    acc = out["accuracy_rows"]
    L += ["### Accuracy against aiconfigurator's measured samples", ""]
    if not acc:
        L += ["Not run (aiconfigurator unavailable, or `--skip-accuracy`).", ""]
    else:
        L += [
            f"aiconfigurator ships `silicon_sample.csv` ({aic.get('silicon_sample_csv', '').split('site-packages/')[-1]}), "
            "end-to-end measurements of real deployments. None is at exactly ISL 4000 / OSL 500 nor BF16 on "
            "H200; the rows below are every aggregated row for a scenario's model and GPU type at the "
            "measured request shape nearest to 4000/500 (per backend and precision). Both tools predict each "
            "row at its TP/PP, batch = measured concurrency, ISL/OSL and precision: aiconfigurator with "
            "`cli_estimate` (the Python form of `aiconfigurator cli estimate`) for the row's backend, the "
            "planner twice: `planner eval` (the planning model: closed loop, users = batch, no prefill "
            "interference in TPOT, no queueing in TTFT; KV dtype as aiconfigurator resolved it) and "
            "`planner accuracy` (the calibrated benchmark model of docs/accuracy.md: staggered closed loop "
            "with the replacing prefills riding on decode steps, the first wave of the run, the engine and "
            "release overheads of `catalogs/calibration.yaml`). "
            f"{sum(1 for a in acc if a.get('in_calibration_data'))} of these {len(acc)} rows are among the "
            "reference measurements that calibration was fitted to, so that column is in-sample, as "
            "aiconfigurator's own numbers are (its database was collected on the same systems); the planner's "
            "out-of-sample error is the cross-validation in docs/accuracy.md. "
            "Median absolute percentage error per group; row by row in "
            "`benchmarks/vs_aiconfigurator/results/accuracy_rows.csv`.",
            "",
            "| model | GPU | backend | precision | ISL/OSL | rows | TTFT: aiconfigurator | TTFT: ours, eval | TTFT: ours, accuracy model | TPOT: aiconfigurator | TPOT: ours, eval | TPOT: ours, accuracy model |",
            "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        groups: dict = {}
        for a in acc:
            groups.setdefault(
                (a["model"], a["system"], a["backend"], a["precision"], f"{a['isl']}/{a['osl']}"), []
            ).append(a)

        def cells(rows):
            return " | ".join(
                pct(median([r.get(f"{t}_{m}_ape") for r in rows]))
                for m in ("ttft", "tpot")
                for t in ("aic", "ours", "model")
            )

        for key, rows in sorted(groups.items()):
            L.append(f"| {' | '.join(key)} | {len(rows)} | {cells(rows)} |")
        L.append(f"| **all** | | | | | {len(acc)} | {cells(acc)} |")
        fails = [a for a in acc if a.get("aic_error")]
        fb = [a for a in acc if a.get("aic_version_fallback")]
        L.append("")
        if fails:
            L += [
                f"aiconfigurator could not estimate {len(fails)} of {len(acc)} rows (first error: "
                f"`{fails[0]['aic_error'][:200]}`); they count only for the planner.",
                "",
            ]
        if fb:
            used = sorted(
                {
                    f"{a['backend']} {a.get('aic_backend_version_used')}"
                    for a in fb
                    if a.get("aic_ttft_ms") is not None
                }
            )
            L += [
                f"{len(fb)} of {len(acc)} rows were measured on an engine version that the shipped database "
                f"no longer holds (e.g. `{fb[0]['backend']} {fb[0]['backend_version']}`); aiconfigurator "
                f"estimated them with its current version ({', '.join(used)}), as its own regression tooling "
                "does. That works against aiconfigurator: it predicts a newer engine than the one measured.",
                "",
            ]
        bias = []
        for m, name in (("ttft", "TTFT"), ("tpot", "TPOT")):
            for t, tname in (("aic", "aiconfigurator"), ("ours", "`planner eval`"),
                             ("model", "`planner accuracy`")):
                signed = [
                    (r[f"{t}_{m}_ms"] - r[f"measured_{m}_ms"]) / r[f"measured_{m}_ms"]
                    for r in acc
                    if r.get(f"{t}_{m}_ms") is not None
                ]
                if signed:
                    under = sum(x < 0 for x in signed)
                    bias.append(
                        f"{tname} {name} {100 * statistics.median(signed):+.0f}% "
                        f"(under in {under} of {len(signed)} rows)"
                    )
        ours_under = [r for r in acc if r.get("ours_ttft_ms") is not None]
        if ours_under and sum(r["ours_ttft_ms"] < r["measured_ttft_ms"] for r in ours_under) > 0.8 * len(
            ours_under
        ):
            explain = (
                " The planner's `eval` TTFT is prefill plus one decode step with no wait behind other requests' "
                "prefills, which a closed-loop benchmark at concurrency C does incur, and its TPOT at a full batch "
                "leaves out the prefill chunks that share decode steps, so both come out low."
            )
        else:
            explain = ""
        if bias:
            L += [
                "Median signed error (negative = predicts faster than measured): "
                + "; ".join(bias)
                + "."
                + explain,
                "",
            ]
        L += [
            "Caveat: these measurements are aiconfigurator's own validation data, on the GPUs whose kernels "
            "its database was collected on; they are not independent of it. Neither are they of the "
            "planner's accuracy model: most rows are in the reference file its calibration was fitted to. "
            "`planner eval` uses the same calibrated efficiencies but the planning semantics above.",
            "",
        ]

    L += render_verdict(out, ratios, ratios_inner)
    L.append(END_MARK)
    return "\n".join(L) + "\n"


def _plan_row(label: str, wall, o: dict) -> str:
    if not o.get("deployments"):
        why = o.get("status") or "no plan"
        diag = "; ".join(d.get("message", "") for d in (o.get("diagnosis") or [])[:2])
        return f"| | {label} | {fmt(wall, 2)} | {why}{': ' + diag if diag else ''} | | | | | |"
    ttft = f"{fmt(o.get('ttft_p95_ms'))} ({fmt(o.get('ttft_mean_ms'))})"
    tpot = f"{fmt(o.get('tpot_p95_ms'), 1)} ({fmt(o.get('tpot_mean_ms'), 1)})"
    tput = f"{fmt(o.get('served_tokens_per_s_per_gpu'))} [{fmt(o.get('capacity_tokens_per_s_per_gpu'))}]"
    return (
        f"| | {label} | {fmt(wall, 2)} | {o['config']} | {o['gpus']} | {tput} | {ttft} | {tpot} | "
        f"{fmt(o.get('usd_per_million_tokens'), 3)} |"
    )
