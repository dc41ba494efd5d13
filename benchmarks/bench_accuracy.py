"""Accuracy of the serving model on the reference measurements; writes docs/accuracy.md.

    python benchmarks/bench_accuracy.py [--out docs/accuracy.md] [--calibration default|PATH]
        [--folds 5] [--no-cv] [--cv-json PATH] [--cv-parts DIR [--cv-partial]] [--files CSV ...]

One command regenerates ``docs/accuracy.md``: it scores every measurement file of
``benchmarks/data`` with the seeds' parameters and with the calibration, runs the
cross-validation schemes of :mod:`planner.calibration_cv` (the (model, GPU) scheme's
numbers come from the calibration's own ``--cv`` run when it has them; ``campaign`` and
``gpu`` are run here leaving one group out, 41 fits of about 50 CPU seconds each), and fills
``benchmarks/accuracy_template.md`` (the prose) with the tables. ``--cv-json`` stores the
cross-validation results (and reuses them when the file exists: delete it to rerun);
``--cv-parts`` stores each leave-one-out fold as it is done (a run resumes), ``--cv-partial``
reports the folds stored there without running the others; ``--no-cv`` leaves those tables
out. Wall time of each step goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from planner.accuracy import add_families, load_measurement_files, prepare_rows, score_rows
from planner.accuracy_frontier import SETS, TARGETS_PCT, FrontierScore, frontier_score
from planner.calibration import MAX_COMPUTE_EFFICIENCY, MAX_MEMORY_EFFICIENCY, load_calibration
from planner.calibration_fit import FitOptions
from planner.calibration_cv import LEAVE_ONE_OUT, SCHEMES, central, group_count, run_folds, summarize
from planner.catalog import load_catalog

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data"
FILES = (DATA / "measurements.csv", DATA / "inferencex-deepseek-r1.csv")
TEMPLATE = ROOT / "benchmarks" / "accuracy_template.md"
#: Median APE targets (%) of the aggregated rows (mean/median statistics).
TARGETS = {"tpot_itl": 15.0, "ttft": 25.0, "throughput": 15.0}
FAMS = tuple(TARGETS)
#: Largest allowed cross-validation gap (points) for these families.
GAP_TARGET = {"tpot_itl": 8.0, "throughput": 8.0}
#: InferenceX: (GPU, engine) pairs with at least this many throughput rows must have a median
#: predicted / measured throughput within x/÷ this factor.
PAIR_ROWS, PAIR_FACTOR = 20, 1.2


def model_family(model: str) -> str:
    for prefix in ("llama", "qwen", "deepseek", "gpt-oss", "mixtral", "gpt-j"):
        if model.startswith(prefix):
            return prefix
    return model


def _cell(v, fmt=".1f") -> str:
    return "" if v is None or (isinstance(v, float) and not np.isfinite(v)) else format(v, fmt)


def md_table(header: list[str], rows: list[list]) -> str:
    align = ["---" if i == 0 else "---:" for i in range(len(header))]
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
                     + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def summary_table(seed: pd.DataFrame, cal: pd.DataFrame) -> str:
    """Targets table: mean/median rows per family, with TTFT p90/p99 reported apart."""
    rows = []
    for fam in FAMS:
        a, b = central(seed)[central(seed)["family"] == fam], central(cal)[central(cal)["family"] == fam]
        ok = "yes" if b["ape_pct"].median() <= TARGETS[fam] else "**no**"
        rows.append([f"{fam} (mean/median)", len(b), f"<= {TARGETS[fam]:.0f}", _cell(a["ape_pct"].median()),
                     f"**{b['ape_pct'].median():.1f}**", _cell(b["ape_pct"].mean()), ok])
    for stat in ("p90", "p99"):
        b = cal[(cal["family"] == "ttft") & (cal["statistic"] == stat)]
        a = seed[(seed["family"] == "ttft") & (seed["statistic"] == stat)]
        if len(b):
            rows.append([f"ttft ({stat}, reported)", len(b), "", _cell(a["ape_pct"].median()),
                         _cell(b["ape_pct"].median()), _cell(b["ape_pct"].mean()), ""])
    b = cal[(cal["family"] == "tpot_itl") & (cal["statistic"] == "p99")]
    if len(b):
        rows.append(["tpot_itl (p99, reported)", len(b), "", "", _cell(b["ape_pct"].median()),
                     _cell(b["ape_pct"].mean()), ""])
    return md_table(["metric family", "rows", "target", "seed median APE %", "calibrated median APE %",
                     "calibrated mean APE %", "target met"], rows)


def by_file_table(cal: pd.DataFrame) -> str:
    c = central(cal)
    rows = []
    for name, part in c.groupby("file"):
        med = part.groupby("family")["ape_pct"].median()
        rows.append([name, len(part)] + [_cell(med.get(f, np.nan)) for f in FAMS])
    return md_table(["file", "rows (mean/median)"] + [f"{f} median APE %" for f in FAMS], rows)


def group_table(cal: pd.DataFrame, by: str, label: str) -> str:
    c = central(cal)
    med = c.groupby([by, "family"])["ape_pct"].median().unstack("family")
    counts = c.groupby(by).size()
    return md_table([label, "rows"] + [f"{f} median APE %" for f in FAMS],
                    [[k, counts[k]] + [_cell(med.loc[k].get(f, np.nan)) for f in FAMS] for k in med.index])


def metric_table(seed: pd.DataFrame, cal: pd.DataFrame) -> str:
    rows = []
    for metric in sorted(cal["metric"].unique()):
        a, b = seed[seed["metric"] == metric]["ape_pct"], cal[cal["metric"] == metric]["ape_pct"]
        rows.append([metric, len(b), _cell(a.median()), _cell(b.median())])
    return md_table(["metric", "rows", "seed median APE %", "calibrated median APE %"], rows)


def inferencex_pairs(cal: pd.DataFrame) -> tuple[str, bool]:
    """Median predicted / measured per (GPU, engine) on the InferenceX rows."""
    ix = cal[cal["file"] == "inferencex-deepseek-r1.csv"].assign(ratio=lambda f: f["prediction"] / f["value"])
    rows, ok_all = [], True
    for (gpu, engine), part in ix.groupby(["gpu", "engine"]):
        thr = part[part["family"] == "throughput"]["ratio"]
        lat = central(part)
        tpot = lat[lat["family"] == "tpot_itl"]["ratio"].median()
        ttft = lat[lat["family"] == "ttft"]["ratio"].median()
        checked = len(thr) >= PAIR_ROWS
        ok = (1 / PAIR_FACTOR <= thr.median() <= PAIR_FACTOR) if checked else None
        ok_all &= ok is not False
        rows.append([gpu, engine, len(thr), _cell(thr.median(), ".3f"), _cell(tpot, ".3f"), _cell(ttft, ".3f"),
                     {True: "yes", False: "**no**", None: "(< 20 rows)"}[ok]])
    return md_table(["GPU", "engine", "throughput rows", "throughput pred/measured (median)",
                     "TPOT pred/measured", "TTFT pred/measured", f"within x/÷ {PAIR_FACTOR}"], rows), ok_all


def frontier_table(s: FrontierScore) -> tuple[str, str]:
    """Issue 14's Done-when 3 per row set and over both: coverage and median APE per family
    (all statistics; the mean/median rows in a second line); the verdict sentence."""
    fams, rows = list(TARGETS_PCT), []
    for name in (*SETS, "both"):
        keys = SETS if name == "both" else (name,)
        part = s.scored[s.scored["set"].isin(keys)]
        rec, der, k = (sum(d[key] for key in keys) for d in (s.recorded, s.derived, s.predicted))
        for label, sub in (("all statistics", part), ("mean/median", central(part))):
            med, n = sub.groupby("family")["ape_pct"].median(), sub.groupby("family").size()
            cov = [rec, der, k, f"{k / (rec - der):.1%}"] if label == "all statistics" else [""] * 4
            rows.append([f"**{name}**" if name == "both" else name, label] + cov
                        + [f"{_cell(med.get(f, np.nan))} ({n.get(f, 0)})" for f in fams])
    table = md_table(["rows", "statistics", "with a recorded layout", "rescaled totals (left out)",
                      "predicted", "predicted share"] + [f"{f} median APE % (rows)" for f in fams], rows)
    ok, med = s.holds(), s.medians()
    word = {True: "met", False: "**not met**"}
    verdict = (f"Targets: >= 90 % predicted ({s.coverage():.1%}: {word[ok['coverage']]}; "
               f"{s.coverage(distinct=False):.1%} counting the rescaled totals as not predicted), "
               + ", ".join(f"{f} <= {t:.0f} % ({med.get(f, np.nan):.1f} %: {word[ok[f]]})"
                           for f, t in TARGETS_PCT.items()) + ".")
    return table, verdict


def skipped_table(skipped: pd.DataFrame) -> str:
    return md_table(["reason", "rows"], [[r, n] for r, n in skipped["reason"].value_counts().items()])


def worst_table(cal: pd.DataFrame, n: int = 10) -> str:
    rows = []
    for _, r in cal.sort_values("ape_pct", ascending=False).head(n).iterrows():
        load = "" if pd.isna(r["load_value"]) else f"{r['load_value']:g}"
        rows.append([r["id"][:48], r["metric"], f"{r['value']:.4g}", f"{r['prediction']:.4g}", f"{r['ape_pct']:.0f}",
                     f"{r['engine']} {r['model']} {r['gpu']} tp{int(r['tp'])} {r['load_kind']} {load} "
                     f"{r['isl']:g}/{r['osl']:g}"])
    return md_table(["id", "metric", "measured", "predicted", "APE %", "configuration"], rows)


def hardware_table(calibration, catalog) -> str:
    rows = []
    for gid in sorted(catalog.gpus.entries):
        g = catalog.gpu(gid)
        values = calibration.gpus.get(gid)
        prior = calibration.gpu_priors.get(gid, {})
        src = values or calibration.gpus.get(str(prior.get("borrowed_from")), {})
        status = "calibrated" if values else f"uncalibrated: {prior.get('borrowed_from') or 'seed defaults'}"
        rows.append([gid, g.vendor, g.memory_technology or "", _cell(src.get("memory_efficiency", 0.8), ".3f"),
                     _cell(src.get("compute_efficiency", 0.6), ".3f"), status,
                     calibration.stats.get(f"gpu:{gid}", {}).get("rows", "")])
    return md_table(["GPU", "vendor", "memory", "eta_m", "eta_c", "status", "rows"], rows)


def borrow_table(catalog, calibration, rows) -> str:
    """Per measured GPU: the median APE % (TPOT, throughput; mean/median rows) of its rows with
    its own hardware values, with those it borrows when it is held out (the rule,
    ``calibration_fit.gpu_priors``: same architecture first), the same but its own all-reduce
    latency, and those it would borrow by memory technology alone: which prior transfers
    (shipped calibration, nothing refitted)."""
    from dataclasses import replace

    from planner.accuracy import predict_calibrated
    from planner.calibration_cv import family_medians
    from planner.calibration_fit import gpu_priors

    out = []
    for gid in sorted(calibration.gpus):
        part = rows[rows["gpu"] == gid].reset_index(drop=True)
        others = [g for g in calibration.gpus if g != gid]
        cells = []
        rule = gpu_priors(catalog, others)[gid]["borrowed_from"]
        own_tau = {"allreduce_latency_nvlink_s": calibration.gpus[gid]["allreduce_latency_nvlink_s"]}
        for source, keep in ((gid, {}), (rule, {}), (rule, own_tau),
                             (gpu_priors(catalog, others, keys=("memory_technology",))[gid]["borrowed_from"], {})):
            gpus = {**calibration.gpus, gid: {**calibration.gpus[source], **keep}}
            pred = predict_calibrated(catalog, part, replace(calibration, gpus=gpus))
            med = family_medians(part, np.abs(pred - part["value"]) / part["value"] * 100)
            cells.append(f"{source}: {_cell(med.get('tpot_itl', np.nan)) or '–'} / "
                         f"{_cell(med.get('throughput', np.nan)) or '–'}")
        g = catalog.gpu(gid)
        out.append([gid, g.architecture, g.memory_technology, len(central(part))] + cells)
    return md_table(["GPU", "architecture", "memory", "rows", "own values: TPOT / throughput median APE %",
                     "held out, the rule borrows (same architecture first)",
                     "the same, with its own all-reduce latency", "by memory technology alone"], out)


def decode_ratio_table(catalog, calibration_spec: str, calibration) -> str:
    """Batch-1 decode speed-ups H100 -> H200 -> B200 (Llama-3.1-8B, 1,024 tokens of context)
    with no engine, each engine and each release (done-when 2 is >= 1.2 for the engines)."""
    from planner.calculators import eval_config

    rows = []
    for engine in [None, *sorted(set(calibration.engines) | {"vllm", "sglang", "trtllm"}), *sorted(calibration.releases)]:
        t = {g: eval_config(catalog, model="llama-3.1-8b", gpu=g, batch=1, context=1024, calibration=calibration_spec,
                            engine=engine)["tpot_s"] for g in ("h100-sxm", "h200-sxm", "b200")}
        rows.append([engine or "(none)", "release" if engine and "@" in engine else "engine",
                     f"{t['h100-sxm'] * 1e3:.2f}", f"{t['h200-sxm'] * 1e3:.2f}", f"{t['b200'] * 1e3:.2f}",
                     f"{t['h100-sxm'] / t['h200-sxm']:.3f}", f"{t['h200-sxm'] / t['b200']:.3f}"])
    return md_table(["engine", "level", "H100 TPOT ms", "H200 TPOT ms", "B200 TPOT ms", "H200 / H100 speed-up",
                     "B200 / H200 speed-up"], rows)


def at_bounds_table(calibration, catalog) -> str:
    """Fitted values at a bound of their range: where the data pulls against the structure (a
    GPU's all-reduce latency against its link's published figure,
    :func:`planner.calibration_fit.allreduce_latency_bound_s`)."""
    from planner.calibration import LEVEL_PARAMETERS
    from planner.calibration_fit import allreduce_latency_bound_s

    rows = []
    tables = {"gpu": calibration.gpus, "engine": calibration.engines, "release": calibration.releases,
              "platform": calibration.platforms, "math": calibration.maths, "model": calibration.models,
              "campaign": calibration.campaigns}
    for level, table in tables.items():
        for key, values in sorted(table.items()):
            for name, v in sorted(values.items()):
                spec = LEVEL_PARAMETERS[level][name]
                upper = (allreduce_latency_bound_s(catalog, key) if name == "allreduce_latency_nvlink_s"
                         else spec.upper)
                for side, bound in (("lower", spec.lower), ("upper", upper)):
                    if bound and abs(v - bound) <= 1e-3 * max(abs(bound), 1e-9) and not (side == "lower" and bound == 0):
                        rows.append([level, key, name, f"{v:.4g}", f"{side} ({bound:g})"])
    return md_table(["level", "group", "parameter", "value", "bound"], rows) if rows else "(none)"


def intervals_table(calibration) -> str:
    iv = calibration.intervals
    if not iv:
        return "(the calibration has no intervals: `planner calibrate ... --cv 5` stores them)"
    levels = iv["levels"]
    rows = []
    for fam, scopes in sorted(iv["families"].items()):
        for scope, q in sorted(scopes.items(), key=lambda kv: (kv[0] != "all", kv[0])):
            f = {lv: np.exp(v) for lv, v in zip(levels, q["log_quantiles"])}
            rows.append([fam, scope, q["n"], f"{f[0.1]:.2f}-{f[0.9]:.2f}", f"{f[0.025]:.2f}-{f[0.975]:.2f}",
                         f"{f[0.95]:.2f}"])
    return (f"Source of the shipped intervals: {iv.get('source', '')}.\n\n"
            + md_table(["family", "scope", "rows", "80 % interval (x predicted)", "95 % interval",
                        "error_quantile(q=0.95)"], rows))


def _in_out(fold: dict, fam: str) -> str:
    """``in → out``: the held-out rows' median APE % as training rows of the other folds'
    fits and out of fold (``out`` alone where the first is not stored)."""
    inside = fold.get("held_out_in_fold_median_ape_pct", {}).get(fam)
    out = fold["out_of_fold_median_ape_pct"].get(fam)
    return "" if out is None else f"{out:.1f}" if inside is None else f"{inside:.1f} → {out:.1f}"


def cv_tables(results: dict) -> tuple[str, bool]:
    """The pooled table per scheme and family, and one line per fold (per held-out group in
    the leave-one-out schemes)."""
    rows, per_fold, ok_all = [], [], True
    for scheme, cv in results.items():
        folds = f"{cv.get('folds', '')}" + (" (one group each)" if scheme in LEAVE_ONE_OUT else "")
        if "folds_run" in cv:
            folds = f"**{cv['folds_run']} of {cv['folds']} run** (one group each)"
        for fam in FAMS:
            s = cv["by_family"].get(fam)
            if not s:
                continue
            limit = GAP_TARGET.get(fam)
            ok = None if limit is None else s["gap_pct"] <= limit
            ok_all &= ok is not False
            rows.append([scheme, folds, fam, s["n"], _cell(s["in_fold_median_ape_pct"]),
                         _cell(s["out_of_fold_median_ape_pct"]), f"{s['gap_pct']:+.1f}",
                         {True: "yes", False: "**no**", None: ""}[ok]])
        for f in cv.get("per_fold", []):
            held = ", ".join(f["held_out"])
            per_fold.append([scheme, f["fold"], held if len(held) < 160 else held[:157] + "...",
                             f.get("rows", "")] + [_in_out(f, fam) for fam in FAMS])
    return (md_table(["scheme", "folds", "family", "rows", "in-fold median APE %", "out-of-fold median APE %",
                      "gap (points)", "gap <= 8?"], rows)
            + "\n\nPer fold (per held-out group in the leave-one-out schemes): median APE % of the held-out "
              "rows (mean/median statistics), in → out of fold (in: the same rows as training rows of "
              "the other folds' fits, pooled; the (model, GPU) folds store the out-of-fold value only):\n\n"
            + md_table(["scheme", "fold", "held out", "rows"] + [f"{fam} in → out" for fam in FAMS], per_fold)
            + "\n\n" + "\n".join(_gap_lines(results))), ok_all


def _gap_lines(results: dict) -> list:
    """Per leave-one-out scheme, the held-out groups whose own gap (out of fold minus their
    in-fold error) exceeds the target for TPOT or throughput, largest first."""
    lines = []
    for scheme, cv in results.items():
        if scheme not in LEAVE_ONE_OUT:
            continue
        over = []
        for f in cv.get("per_fold", []):
            inside, out = f.get("held_out_in_fold_median_ape_pct", {}), f["out_of_fold_median_ape_pct"]
            gaps = {fam: out[fam] - inside[fam] for fam in GAP_TARGET if fam in out and fam in inside}
            if any(g > GAP_TARGET[fam] for fam, g in gaps.items()):
                over.append((max(gaps.values()), f"{', '.join(f['held_out'])} ({f.get('rows', '')} rows: "
                             + ", ".join(f"{fam} {g:+.1f}" for fam, g in sorted(gaps.items())) + ")"))
        text = "; ".join(t for _, t in sorted(over, reverse=True)) or "none"
        lines.append(f"* {scheme}: held-out groups whose own gap exceeds 8 points: {text}.")
    return lines


def _load_json(path) -> dict:
    return json.loads(Path(path).read_text()) if path and Path(path).is_file() else {}


def run_scheme(catalog, rows, scheme: str, folds: int, only=None, parts_dir: Path | None = None) -> list:
    """The fold parts of ``scheme`` (:func:`planner.calibration_cv.run_folds`): the schemes of
    ``LEAVE_ONE_OUT`` one group per fold on the full fit's schedule, fold by fold, each part
    stored in / reused from ``parts_dir`` (``<scheme>-<fold>.json``: a long run resumes);
    the others in ``folds`` folds at once. ``only``: run these folds alone."""
    if scheme not in LEAVE_ONE_OUT:
        return [run_folds(catalog, rows, folds, FitOptions(), scheme=scheme, only=only)] if only != [] else []
    parts = []
    for k in range(group_count(rows, scheme)):
        path = parts_dir / f"{scheme}-{k}.json" if parts_dir else None
        part = _load_json(path)
        if not part and (only is None or k in only):
            t = time.perf_counter()
            part = run_folds(catalog, rows, group_count(rows, scheme), FitOptions(), scheme=scheme, only=[k],
                             full_schedule=True)
            print(f"{scheme} fold {k} ({', '.join(part['parts'][str(k)]['held_out'])}): "
                  f"{time.perf_counter() - t:.0f} s", file=sys.stderr)
            if path:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(part))
        if part:
            parts.append(part)
    return parts


def run_cv(catalog, rows, calibration, folds: int, caches: list, schemes=tuple(SCHEMES), only=None,
           parts_dir: Path | None = None) -> dict:
    """Cross-validation results per scheme: from the ``caches`` (JSON files of this script),
    the (model, GPU) scheme from the calibration's own ``--cv`` run, the others run here
    (:func:`run_scheme`; their summaries stored in ``caches[0]``)."""
    results = {}
    for cache in caches:
        # partial leave-one-out results (``folds_run``) are run on (from --cv-parts)
        results.update({k: v for k, v in _load_json(cache).items() if ":part" not in k and "folds_run" not in v})
    stored = (calibration.provenance.get("fitted", {}).get("cross_validation") or {}) if calibration else {}
    if "by_family" in stored:  # `planner calibrate --cv K`: the (model, GPU) scheme
        stored = {"model_gpu": stored}
    for scheme in schemes:
        if scheme in results:
            continue
        if scheme in stored and scheme not in LEAVE_ONE_OUT:   # the calibration's own K folds
            results[scheme] = {**stored[scheme], "scheme": scheme, "per_fold": stored[scheme].get("per_fold", [])}
            continue
        t = time.perf_counter()
        parts = run_scheme(catalog, rows, scheme, folds, only, parts_dir)
        print(f"cross-validation {scheme}: {time.perf_counter() - t:.0f} s", file=sys.stderr)
        if not parts:
            continue
        # the leave-one-out schemes: the folds run so far where not all are (``folds_run``)
        summary = {k: v for k, v in summarize(rows, parts, partial=scheme in LEAVE_ONE_OUT).items()
                   if k != "predictions"}
        results[scheme] = summary
        if caches and caches[0]:
            doc = _load_json(caches[0])
            doc[scheme] = summary
            Path(caches[0]).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return {s: results[s] for s in SCHEMES if s in results}


def fill(template: str, parts: dict) -> str:
    """``{{name}}`` placeholders of the template replaced by the generated parts."""
    missing = sorted(set(re.findall(r"\{\{(\w+)\}\}", template)) - set(parts))
    if missing:
        raise KeyError(f"template placeholders without a part: {missing}")
    return re.sub(r"\{\{(\w+)\}\}", lambda m: str(parts[m.group(1)]).strip(), template)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", nargs="+", default=[str(f) for f in FILES])
    ap.add_argument("--calibration", default="default")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--no-cv", action="store_true")
    ap.add_argument("--cv-json", type=Path, nargs="+", default=[],
                    help="store (the first) / reuse (all) cross-validation results here")
    ap.add_argument("--schemes", nargs="+", choices=list(SCHEMES), default=list(SCHEMES),
                    help="cross-validation schemes of the document (default: all)")
    ap.add_argument("--only-folds", help="with --cv-only: run these folds (e.g. 0,2,4) and store the parts")
    ap.add_argument("--cv-parts", type=Path,
                    help="store / reuse each leave-one-out fold here (<scheme>-<fold>.json): a long run resumes")
    ap.add_argument("--cv-partial", action="store_true",
                    help="with --cv-parts: report the leave-one-out folds stored there and run none (the "
                         "document then says how many of the folds were run)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "accuracy.md")
    ap.add_argument("--cv-only", nargs="+", choices=list(SCHEMES), metavar="SCHEME",
                    help="only run these cross-validation schemes into --cv-json (no document)")
    args = ap.parse_args()
    np.seterr(all="ignore")

    catalog = load_catalog()
    measurements = load_measurement_files(args.files)
    if args.cv_only:
        rows, _ = prepare_rows(measurements, catalog)
        only = [int(k) for k in args.only_folds.split(",")] if args.only_folds else None
        run_cv(catalog, add_families(rows), None, args.folds, args.cv_json, args.cv_only, only, args.cv_parts)
        return
    source = pd.Series(np.repeat([Path(f).name for f in args.files],
                                 [len(load_measurement_files([f])) for f in args.files]), dtype=object)
    file_of = dict(zip(measurements["id"], source))
    calibration = load_calibration(args.calibration)
    t1 = time.perf_counter()
    seed, skipped = score_rows(catalog, measurements, None)
    cal, skipped_cal = score_rows(catalog, measurements, calibration)
    print(f"accuracy (seed + calibrated): {time.perf_counter() - t1:.1f} s", file=sys.stderr)
    for frame in (seed, cal):
        frame["model_family"] = frame["model"].map(model_family)
        frame["file"] = frame["id"].map(file_of)
    pairs, pairs_ok = inferencex_pairs(cal)
    frontier, frontier_ok = frontier_table(frontier_score(catalog, measurements, calibration))
    parts = {
        "files": ", ".join(f"`{Path(f).name}` ({n:,} rows)" for f, n in
                           zip(args.files, [len(load_measurement_files([f])) for f in args.files])),
        "rows": f"{len(measurements):,}", "predicted": f"{len(cal):,}",
        "central": f"{len(central(cal)):,}",
        "summary": summary_table(seed, cal), "by_file": by_file_table(cal),
        "inferencex_pairs": pairs, "inferencex_ok": "hold" if pairs_ok else "do **not** all hold",
        "frontier": frontier, "frontier_ok": frontier_ok,
        "per_metric": metric_table(seed, cal), "per_gpu": group_table(cal, "gpu", "GPU"),
        "per_engine": group_table(cal, "engine", "engine"),
        "per_model": group_table(cal, "model_family", "model family"),
        "skipped": skipped_table(skipped_cal), "worst": worst_table(cal),
        "hardware": hardware_table(calibration, catalog), "intervals": intervals_table(calibration),
        "decode_ratios": decode_ratio_table(catalog, args.calibration, calibration),
        "at_bounds": at_bounds_table(calibration, catalog),
        "borrowing": borrow_table(catalog, calibration, add_families(prepare_rows(measurements, catalog)[0])),
        "bound_memory": MAX_MEMORY_EFFICIENCY, "bound_compute": MAX_COMPUTE_EFFICIENCY,
        "calibration_source": calibration.provenance.get("fitted", {}).get("command", ""),
    }
    if args.no_cv:
        parts["cross_validation"], parts["cv_ok"] = "(not run: `--no-cv`)", "were not run"
    else:
        rows, _ = prepare_rows(measurements, catalog)
        results = run_cv(catalog, add_families(rows), calibration, args.folds, args.cv_json, args.schemes,
                         only=[] if args.cv_partial else None, parts_dir=args.cv_parts)
        table, ok = cv_tables(results)
        parts["cross_validation"], parts["cv_ok"] = table, "hold" if ok else "do **not** all hold"
    text = fill(TEMPLATE.read_text(), parts)
    from planner.atomic import atomic_write_text

    atomic_write_text(args.out, text)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
