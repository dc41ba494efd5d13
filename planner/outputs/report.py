"""The solve report as Markdown and as one self-contained HTML file (inline CSS, PNGs as data URIs).

Both are renderings of one list of blocks built from ``result_to_dict`` (so every number
equals the JSON result) plus the assumptions behind it: prices with their dates and
sources, the serving model's efficiencies, calibration. No external URL is written:
sources are rendered as plain text with the ``http(s)://`` scheme removed.
"""

from __future__ import annotations

import base64
import html
import math
import re

from planner import dimensions

_URL_SCHEME = re.compile(r"https?://", re.IGNORECASE)

CSS = """body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1180px;margin:2em auto;
padding:0 1em;color:#1d232a;line-height:1.45}h1{border-bottom:2px solid #1d232a}h2{margin-top:1.8em;
border-bottom:1px solid #c9d1d9}table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.88em}
th,td{border:1px solid #c9d1d9;padding:.25em .55em;text-align:left;vertical-align:top}
th{background:#eef1f4}tr:nth-child(even) td{background:#f8f9fa}img{max-width:100%;border:1px solid #e1e4e8}
pre{background:#f6f8fa;padding:.8em;overflow-x:auto;font-size:.82em}code{font-size:.92em}"""


def plain(text) -> str:
    """Text with URL schemes removed (sources stay readable, nothing links out)."""
    return _URL_SCHEME.sub("", str(text))


def _num(v, fmt: str = ".2f", none: str = "-") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return none
    return format(v, fmt)


def _ms(v) -> str:
    return _num(None if v is None else v * 1e3, ".1f")


def price_provenance(problem, gpu: str) -> dict:
    """Where the USD/GPU-h price of a GPU comes from (the rule of ``resolve_problem``)."""
    spec = problem.spec
    price = problem.prices_usd_per_gpu_hour.get(gpu)
    overrides = {problem.catalog.gpu(k).id: v for k, v in spec.prices.items()}
    if gpu in overrides:
        return {"gpu": gpu, "usd_per_gpu_hour": price, "offering": spec.price_offering,
                "provider": "problem override", "as_of": "-", "source": f"{problem.path}: prices.{gpu}"}
    rows = [r for r in problem.catalog.rental_prices(gpu) if r.offering == spec.price_offering]
    row = ([r for r in rows if r.default] or rows or [None])[0]
    if row is None:
        return {"gpu": gpu, "usd_per_gpu_hour": price, "offering": spec.price_offering,
                "provider": "-", "as_of": "-", "source": "no catalog price"}
    return {"gpu": gpu, "usd_per_gpu_hour": row.usd_per_gpu_hour, "offering": row.offering,
            "provider": row.provider, "as_of": row.as_of.isoformat(), "source": row.source}


def gpus_involved(result, doc: dict) -> list[str]:
    """GPU types of the plans and the per-GPU fronts (all priced search GPUs if none)."""
    gpus = {d["gpu"] for p in doc["plans"] for d in p["deployments"]}
    if not result.pareto.empty:
        gpus |= {f for f in result.pareto["front"].unique() if f != "mixed"}
    if not gpus:
        gpus = set(result.problem.prices_usd_per_gpu_hour)
    return sorted(gpus)


def _quality(d: dict) -> str:
    """A deployment's published accuracy recovery (catalogs/quality.yaml), or 'unverified'."""
    q = d.get("quality")
    if q is None:
        return "-"
    return "unverified" if q["recovery"] is None else f"{q['recovery']:.1%}"


def _config(d: dict) -> str:
    if not dimensions.has_settings(d):
        return d.get("name", d["candidate_id"])
    return dimensions.label(d, "table") + (f", pool {d['pool']}" if d.get("pool") else "")


def _cost_by_gpu(plan: dict) -> dict:
    out: dict = {}
    for d in plan["deployments"]:
        out[d["gpu"]] = out.get(d["gpu"], 0.0) + d["usd_per_hour"]
    return dict(sorted(out.items()))


def _margin(slo, p95) -> str:
    """Headroom of an SLO over a p95: SLO / p95 - 1, as a signed percentage."""
    if slo is None or p95 is None or not p95 > 0:
        return "-"
    return f"{slo / p95 - 1:+.0%}"


def _latency_table(doc: dict, plan: dict) -> tuple:
    """Per (deployment, workload): rate, central p95s, p95s at the confidence, margins, simulated."""
    slos = {w["name"]: w["slo"] or {} for w in doc["workloads"]}
    q = doc["margins"]["confidence"]
    verified = "verification" in doc
    headers = ["workload", "GPU", "configuration", "rate [req/s]", "p95 TTFT [ms]", f"p95 TTFT at {q:g} [ms]",
               "TTFT margin", "p95 TPOT [ms]", f"p95 TPOT at {q:g} [ms]", "TPOT margin"]
    if verified:
        headers += ["simulated p95 TTFT [ms]", "simulated p95 TPOT [ms]"]
    rows = []
    for d in plan["deployments"]:
        for name, w in d["workloads"].items():
            row = [name, d["gpu"], _config(d), _num(w["rate_per_s"], ".4g")]
            for metric in ("ttft", "tpot"):
                at_q = w.get(f"{metric}_p95_at_confidence_s", w.get(f"{metric}_p95_s"))
                slo = slos[name].get(f"{metric}_p95_s")
                row += [_ms(w.get(f"{metric}_p95_s")), _ms(at_q), _margin(slo, at_q)]
            if verified:
                row += [_ms(w.get("simulated_ttft_p95_s")), _ms(w.get("simulated_tpot_p95_s"))]
            rows.append(row)
    return ("table", headers, rows)


def margin_blocks(doc: dict) -> list[tuple]:
    """The margins in plain words (confidence, load cap, what the latency columns mean)."""
    m = doc["margins"]
    f = m["error_factors"]
    text = ("The serving model's predictions are not exact, and real traffic is burstier than the "
            "Poisson arrivals it assumes. Every plan keeps two margins. **Confidence "
            f"{m['confidence']:g}**: a replica is loaded only as far as its predicted p95 TTFT times "
            f"{f['ttft_p95']:.2f} and p95 TPOT times {f['tpot_p95']:.2f} still meet the SLOs; these factors are "
            f"the {m['confidence']:.0%} quantile of the model's error ({m['error_source']}), so the latencies "
            "should hold with about that probability even where the model is wrong. **Load cap "
            f"{m['max_load_fraction']:.0%}**: no replica carries more than that share of the traffic it could "
            "carry at the SLOs under the central prediction. The `load` column is measured against that "
            "central capacity. Per workload, `p95` is the central prediction at the deployment's load, "
            f"`p95 at {m['confidence']:g}` the same times the error factor, and `margin` how much more "
            f"the SLO allows than that (SLO / p95 at {m['confidence']:g} - 1).")
    if not m["model_error"]:
        text = ("Capacities are measured, so no model error applies. "
                f"**Load cap {m['max_load_fraction']:.0%}**: "
                "no replica carries more than that share of its measured capacity (headroom for bursts); "
                "the `load` column is relative to the measured capacity.")
    blocks = [("h", 2, "Margins"), ("p", text)]
    if "verification" in doc and not m["model_error"]:
        blocks.append(("p", "`--verify`: measured capacities have no serving model to simulate."))
    elif "verification" in doc:
        v = doc["verification"]
        blocks.append(("p", "Verified by simulation (`--verify`): one replica of each deployment ran its routed "
                            f"traffic mix in the discrete-event simulator (seed {v['seed']}, at least "
                            f"{v['requests_per_workload']} requests of its smallest workload, at most "
                            f"{v['max_requests']} in all, the first {v['warmup_fraction']:.0%} left out); the "
                            "`simulated` columns are its p95s per workload."))
        if any(d.get("pool") for p in doc["plans"] for d in p["deployments"]):
            blocks.append(("p", "A prefill/decode pool ran as a whole in the P/D simulator (its prefill replicas "
                                "feeding its decode replicas over the scale-out network, at the pool's routed "
                                "traffic): a prefill deployment's row gives the simulated p95 TTFT of the requests "
                                "it prefilled (queue, prefill, KV transfer, decode admission), a decode "
                                "deployment's row the simulated p95 TPOT of the requests it decoded."))
    return blocks


def build_blocks(result, doc: dict, launch: dict[str, str] | None = None) -> list[tuple]:
    """The report as blocks: ("h", level, text), ("p", text), ("table", headers, rows),
    ("img", name, caption), ("code", text), ("list", items)."""
    problem = result.problem
    s = doc["solver"]
    b: list[tuple] = [("h", 1, f"Deployment plan: {doc['problem']}")]
    if problem.spec.description:
        b.append(("p", problem.spec.description))
    solver = f"solver {s['status']}"
    if s.get("objective_usd_per_hour") is not None:
        solver += (f", objective {s['objective_usd_per_hour']:.2f} USD/h, best bound "
                   f"{s['best_bound_usd_per_hour']:.2f} USD/h, gap {s['gap']:.2%}")
    b.append(("p", f"Status: **{doc['status']}** ({solver}). Input: {problem.path}."))

    b.append(("h", 2, "Workloads"))
    b.append(("table", ["workload", "model", "rate [req/s]", "prompt tokens", "output tokens",
                        "SLO p95 TTFT [s]", "SLO p95 TPOT [s]"],
              [[w["name"], w["model"], _num(w["rate_per_s"], ".4g"), w["prompt_tokens"] or "-",
                w["output_tokens"] or "-", _num((w["slo"] or {}).get("ttft_p95_s"), "g"),
                _num((w["slo"] or {}).get("tpot_p95_s"), "g")] for w in doc["workloads"]]))

    b += margin_blocks(doc)
    b.append(("h", 2, "Ranked plans"))
    if not doc["plans"]:
        b.append(("p", "No plan meets the SLOs under the limits (see Diagnosis)."))
    else:
        b.append(("table", ["rank", "USD/h", "USD/1M output tokens", "USD/1M input tokens",
                            "USD/1M total tokens", "GPUs", "GPUs by type", "USD/h by GPU type"],
                  [[p["rank"], _num(p["usd_per_hour"]), _num(p["usd_per_million_tokens"], ".4f"),
                    _num(p["usd_per_million_input_tokens"], ".4f"), _num(p["usd_per_million_total_tokens"], ".4f"),
                    p["gpus"],
                    ", ".join(f"{g}: {n}" for g, n in p["gpus_by_type"].items()),
                    ", ".join(f"{g}: {c:.2f}" for g, c in _cost_by_gpu(p).items())] for p in doc["plans"]]))
        b.append(("img", "plan_costs", "Cost of each ranked plan by GPU type"))
        for p in doc["plans"]:
            b.append(("h", 3, f"Plan #{p['rank']}: {p['usd_per_hour']:.2f} USD/h"))
            b.append(("table", ["GPU", "model", "configuration", "replicas", "GPUs/replica", "GPUs",
                                "USD/h", "load", "accuracy recovery"],
                      [[d["gpu"], d.get("model", "-"), _config(d), d["replicas"], d["gpus_per_replica"],
                        d["gpus"], _num(d["usd_per_hour"]), f"{d['load_fraction']:.0%}", _quality(d)]
                       for d in p["deployments"]]))
            b.append(_latency_table(doc, p))

    from planner.outputs.daily import daily_blocks

    b += daily_blocks(doc)
    b.append(("h", 2, "Cost vs p95 latency fronts"))
    per_gpu = not result.pareto.empty and bool((result.pareto["front"] != "mixed").any())
    b.append(("p", ("Each point re-solves the plan with every workload's SLO tightened to the target: "
                    "the mixed front may combine GPU types, the others use one GPU type."
                    if per_gpu else
                    "Each point re-solves the plan with every workload's SLO tightened to the target; "
                    "the mixed front may combine GPU types. One front per GPU type (what the target "
                    "costs on that type alone): `--fronts used` or `--fronts all`, or `optimize.fronts`.")))
    for metric, name, label in (("tpot_p95_s", "pareto_tpot", "TPOT"), ("ttft_p95_s", "pareto_ttft", "TTFT")):
        b.append(("img", name, f"Cost vs p95 {label} target"))
        part = result.pareto[result.pareto["metric"] == metric] if not result.pareto.empty else result.pareto
        if part.empty:
            b.append(("p", "No front (infeasible problem, measured capacities, or --no-pareto)."))
            continue
        table = part.pivot_table(index="target_s", columns="front", values="usd_per_hour", aggfunc="first",
                                 dropna=False)
        fronts = ["mixed"] + sorted(c for c in table.columns if c != "mixed")
        b.append(("table", [f"p95 {label} target [ms]", *[f"{f} USD/h" for f in fronts]],
                  [[_ms(t), *[_num(table.loc[t, f], ".2f", "infeasible") for f in fronts]]
                   for t in table.index]))

    c = doc["candidates"]
    b.append(("h", 2, "Candidates"))
    counts = [["enumerated", c["enumerated"]], ["feasible", c["feasible"]]]
    counts += [[k, c[k]] for k in ("pruned_dominated", "in_model") if k in c]
    b.append(("table", ["count", "candidates"], counts))
    b.append(("table", ["rejection reason", "candidates"],
              [[k, v] for k, v in c.get("rejected", {}).items()] or [["(none)", 0]]))
    if doc["diagnosis"]:
        b.append(("h", 2, "Diagnosis"))
        b.append(("list", [f"[{f['constraint']}] {f['message']}" + (" (verified by re-solving)"
                                                                      if f.get("verified") else "")
                           for f in doc["diagnosis"]]))

    if launch:
        b.append(("h", 2, "Launch settings (plan #1)"))
        b.append(("p", ("Files under `launch/`: one folder per deployment with vllm.sh, sglang.sh, "
                        "trtllm.sh (one replica each) and a Kubernetes deployment.yaml.")))
        for path, text in launch.items():
            if path.endswith("/vllm.sh"):
                b.append(("p", f"`launch/{path}`"))
                b.append(("code", text))

    b.append(("h", 2, "Assumptions"))
    b.append(("p", f"Prices ({problem.spec.price_offering}) of the GPU types involved, USD per GPU-hour:"))
    b.append(("table", ["GPU", "USD/GPU-h", "offering", "provider", "as of", "source"],
              [[r["gpu"], _num(r["usd_per_gpu_hour"], ".4g"), r["offering"], r["provider"], r["as_of"],
                r["source"]] for r in (price_provenance(problem, g) for g in gpus_involved(result, doc))]))
    params = result.params.base.as_dict()
    overrides = result.params.overrides
    cal = problem.calibration
    b.append(("p", "Serving-model parameters (efficiencies against catalog peak figures, overheads), "
                   "before calibration:"))
    b.append(("table", ["parameter", "value", "set by"],
              [[k, _num(float(v), ".6g"), "problem serving:" if k in overrides else "default"]
               for k, v in params.items()]))
    if cal is None:
        b.append(("p", "Calibration: none applied; predictions use the catalog peaks times the efficiencies "
                       "above" + (" (with the problem's `serving:` overrides)." if overrides else ".")))
    else:
        d = cal.describe()
        b.append(("p", f"Calibration: {d['calibration']} sets {', '.join(d['parameters'])} per GPU "
                       f"({', '.join(d['gpus']) or 'none'}; others use its global fit)"
                       + (f" and engine {problem.spec.serving.engine}" if problem.spec.serving.engine else "")
                       + "; the problem's `serving:` overrides win over it."))
        loose = {g: cal.gpu_status(g) for g in gpus_involved(result, doc) if not cal.gpu_status(g)["calibrated"]}
        if loose:
            b.append(("p", "Uncalibrated GPUs (no measurements of their own; their predictions are less certain): "
                           + "; ".join(f"{g}: {s['calibration_prior']}" for g, s in sorted(loose.items())) + "."))
    b.append(("p", "Catalog versions: " + ", ".join(f"{k} {v}" for k, v in sorted(problem.catalog.versions.items()))
              + ". Cost per 1M tokens counts the output, input (prompt, prefix-cache hits included) or "
                "total tokens of the whole traffic mix."))
    return b


def _md_cell(v) -> str:
    return plain(v).replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: list[tuple]) -> str:
    """Markdown of the blocks; images link to the PNG files next to the report."""
    out = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            out.append("#" * block[1] + " " + plain(block[2]))
        elif kind == "p":
            out.append(plain(block[1]))
        elif kind == "table":
            out.append("| " + " | ".join(_md_cell(h) for h in block[1]) + " |")
            out.append("|" + "---|" * len(block[1]))
            out += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in block[2]]
        elif kind == "img":
            out.append(f"![{plain(block[2])}]({block[1]}.png)")
        elif kind == "code":
            out.append("```bash\n" + block[1].rstrip("\n") + "\n```")
        elif kind == "list":
            out += [f"- {plain(item)}" for item in block[1]]
        out.append("")
    return "\n".join(out)


def _inline_html(text: str) -> str:
    esc = html.escape(plain(text), quote=False)
    esc = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", esc)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", esc)


def render_html(blocks: list[tuple], images_png: dict[str, bytes], title: str) -> str:
    """One self-contained HTML page: inline CSS, plots as base64 PNG data URIs."""
    body = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            body.append(f"<h{block[1]}>{_inline_html(block[2])}</h{block[1]}>")
        elif kind == "p":
            body.append(f"<p>{_inline_html(block[1])}</p>")
        elif kind == "table":
            head = "".join(f"<th>{_inline_html(h)}</th>" for h in block[1])
            rows = "".join("<tr>" + "".join(f"<td>{_inline_html(v)}</td>" for v in row) + "</tr>"
                           for row in block[2])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif kind == "img":
            data = base64.b64encode(images_png[f"{block[1]}.png"]).decode("ascii")
            alt = html.escape(plain(block[2]))
            body.append(f'<figure><img alt="{alt}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{alt}</figcaption></figure>")
        elif kind == "code":
            body.append(f"<pre><code>{html.escape(plain(block[1]), quote=False)}</code></pre>")
        elif kind == "list":
            body.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in block[1]) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(plain(title))}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")

