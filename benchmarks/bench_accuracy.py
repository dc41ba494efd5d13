"""Accuracy of the serving model on the reference measurements, before and after calibration.

    python benchmarks/bench_accuracy.py [--file benchmarks/data/measurements.csv]
        [--calibration default|PATH] [--folds 5 | --no-cv] [--refit]

Prints Markdown (the tables of ``docs/accuracy.md``): median absolute percentage error per
metric family, metric, GPU and model family, with the seeds' parameters and with the
calibration; the 10 worst rows with a likely cause; and K-fold cross-validation of the
calibration grouped by (model, GPU): the out-of-fold median APE next to the in-fold one.
``--refit`` fits a calibration to the file first (as ``planner calibrate`` does) instead of
loading one. Wall time of each step goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from planner.accuracy import add_families, load_measurements, prepare_rows, score_rows
from planner.calibration import (FitOptions, cross_validate, fit_calibration, load_calibration,
                                 predict_calibrated)
from planner.catalog import load_catalog

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"tpot_itl": 15.0, "ttft": 25.0, "throughput": 20.0}
FAMS = tuple(TARGETS)


def _family(quantity: str) -> str:
    from planner.accuracy import FAMILIES

    return FAMILIES[quantity]


def model_family(model: str) -> str:
    for prefix in ("llama", "qwen", "deepseek", "gpt-oss", "mixtral", "gpt-j"):
        if model.startswith(prefix):
            return prefix
    return model


def likely_cause(row) -> str:
    """A first guess at why a row is far off (docs/accuracy.md discusses them)."""
    over = row["prediction"] > row["value"]
    notes = str(row.get("notes", ""))
    if row["gpu"] == "gb200" and row["model"] == "deepseek-v3" and row["tp"] >= 12:
        return ("GB200 DeepSeek row with tp as recorded (12-72): the MLA cache is replicated over "
                "that TP group in the model, so KV capacity and queueing are off")
    if "power" in notes.lower() or "330W" in notes:
        return "A100 power-capped at 330 W"
    if row["load_kind"] == "request_rate" and over:
        return "open loop near capacity: the predicted backlog of the finite run is too large"
    if row["family"] == "ttft" and row["load_kind"] == "concurrency":
        return ("closed-loop TTFT: queueing for prefill or KV slots " + ("over-" if over else "under-")
                + "predicted (benchmark harness, scheduler)")
    if row["family"] == "throughput" and row["load_kind"] in ("max_throughput", "static_batch"):
        return ("batch the engine ran is not published: KV capacity / batch cap "
                + ("over" if over else "under") + "-estimated")
    return "model " + ("too slow" if not over else "too fast") + " for this configuration"


def table(frame: pd.DataFrame, by: str, label: str) -> str:
    grouped = frame.groupby([by, "family"])["ape_pct"].median().unstack("family")
    counts = frame.groupby(by).size()
    fams = [f for f in ("tpot_itl", "ttft", "throughput", "e2e") if f in grouped.columns]
    lines = [f"| {label} | rows | " + " | ".join(f"{f} median APE %" for f in fams) + " |",
             "|---|---:|" + "---:|" * len(fams)]
    for key in grouped.index:
        cells = ["" if pd.isna(grouped.loc[key, f]) else f"{grouped.loc[key, f]:.1f}" for f in fams]
        lines.append(f"| {key} | {counts[key]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def family_table(seed: pd.DataFrame, cal: pd.DataFrame) -> str:
    lines = ["| metric family | rows | target | seed median APE % | calibrated median APE % | "
             "calibrated mean APE % |", "|---|---:|---:|---:|---:|---:|"]
    for fam in sorted(cal["family"].unique()):
        a, b = seed[seed["family"] == fam]["ape_pct"], cal[cal["family"] == fam]["ape_pct"]
        target = f"<= {TARGETS[fam]:.0f}" if fam in TARGETS else ""
        lines.append(f"| {fam} | {len(b)} | {target} | {a.median():.1f} | {b.median():.1f} | "
                     f"{b.mean():.1f} |")
    return "\n".join(lines)


def metric_table(seed: pd.DataFrame, cal: pd.DataFrame) -> str:
    lines = ["| metric | rows | seed median APE % | calibrated median APE % |", "|---|---:|---:|---:|"]
    for metric in sorted(cal["metric"].unique()):
        a, b = seed[seed["metric"] == metric]["ape_pct"], cal[cal["metric"] == metric]["ape_pct"]
        lines.append(f"| {metric} | {len(b)} | {a.median():.1f} | {b.median():.1f} |")
    return "\n".join(lines)


def worst_table(cal: pd.DataFrame, n: int = 10) -> str:
    lines = ["| id | metric | measured | predicted | APE % | configuration | likely cause |",
             "|---|---|---:|---:|---:|---|---|"]
    for _, r in cal.sort_values("ape_pct", ascending=False).head(n).iterrows():
        config = (f"{r['engine']} {r['model']} {r['gpu']} tp{int(r['tp'])} {r['load_kind']} "
                  f"{'' if pd.isna(r['load_value']) else f'{r.load_value:g}'} {r['isl']:g}/{r['osl']:g}")
        lines.append(f"| {r['id'][:60]} | {r['metric']} | {r['value']:.4g} | {r['prediction']:.4g} | "
                     f"{r['ape_pct']:.0f} | {config} | {likely_cause(r)} |")
    return "\n".join(lines)


#: Which tables of a fold's fit each row of the transfer table replaces with the full fit's.
SWAPS = {"hardware (per GPU)": ("gpus",), "software (global, per engine and release)":
         ("default", "engines", "releases"), "math": ("maths",), "model": ("models",)}


def transfer_table(catalog, rows: pd.DataFrame, cv: dict, full) -> str:
    """Out-of-fold median APE when one level of each fold's fit is replaced by the full fit's
    values (which saw the held-out pairs): how much of the gap each level's values carry."""
    fams = add_families(rows.reset_index(drop=True))
    measured, fold = fams["value"].to_numpy(float), cv["fold_of"]
    lines = ["| values taken from the full fit | " + " | ".join(f"{f} OOF median APE %" for f in FAMS) + " |",
             "|---|" + "---:|" * len(FAMS)]
    for label, tables in {"none (plain out-of-fold)": (), **SWAPS}.items():
        pred = np.full(len(fams), np.nan)
        for k, fit in enumerate(cv["fits"]):
            test = fold == k
            cal = replace(fit, **{t: getattr(full, t) for t in tables})
            pred[test] = predict_calibrated(catalog, fams[test].reset_index(drop=True), cal)
        ape = pd.Series(np.abs(pred - measured) / measured * 100.0)
        med = ape.groupby(fams["family"]).median()
        lines.append(f"| {label} | " + " | ".join(f"{med.get(f, np.nan):.1f}" for f in FAMS) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default=str(ROOT / "benchmarks" / "data" / "measurements.csv"))
    ap.add_argument("--calibration", default="default")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--no-cv", action="store_true")
    ap.add_argument("--refit", action="store_true")
    args = ap.parse_args()

    catalog = load_catalog()
    measurements = load_measurements(args.file)
    t0 = time.perf_counter()
    if args.refit:
        rows, _ = prepare_rows(measurements, catalog)
        calibration = fit_calibration(catalog, rows)
        print(f"fit: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    else:
        calibration = load_calibration(args.calibration)
    t1 = time.perf_counter()
    seed, skipped = score_rows(catalog, measurements, None)
    cal, _ = score_rows(catalog, measurements, calibration)
    print(f"accuracy (seed + calibrated): {time.perf_counter() - t1:.1f} s", file=sys.stderr)
    for frame in (seed, cal):
        frame["model_family"] = frame["model"].map(model_family)

    print(f"## Accuracy on `{Path(args.file).name}` ({len(measurements)} rows, {len(cal)} predicted)\n")
    print(family_table(seed, cal) + "\n")
    print("### Per metric\n\n" + metric_table(seed, cal) + "\n")
    print("### Per GPU (calibrated)\n\n" + table(cal, "gpu", "GPU") + "\n")
    print("### Per model family (calibrated)\n\n" + table(cal, "model_family", "model family") + "\n")
    print("### Per engine (calibrated)\n\n" + table(cal, "engine", "engine") + "\n")
    print("### Skipped rows\n\n| reason | rows |\n|---|---:|")
    for reason, count in skipped["reason"].value_counts().items():
        print(f"| {reason} | {count} |")
    print("\n### The 10 worst rows (calibrated)\n\n" + worst_table(cal) + "\n")

    if not args.no_cv:
        t2 = time.perf_counter()
        rows, _ = prepare_rows(measurements, catalog)
        cv = cross_validate(catalog, rows, args.folds, FitOptions(), keep_fits=True)
        print(f"cross-validation: {time.perf_counter() - t2:.1f} s", file=sys.stderr)
        print(f"### {args.folds}-fold cross-validation grouped by (model, GPU)\n")
        print("| metric family | rows | in-fold median APE % | out-of-fold median APE % | gap (points) |")
        print("|---|---:|---:|---:|---:|")
        for fam, s in cv["by_family"].items():
            print(f"| {fam} | {s['n']} | {s['in_fold_median_ape_pct']:.1f} | "
                  f"{s['out_of_fold_median_ape_pct']:.1f} | {s['gap_pct']:+.1f} |")
        oof = rows.assign(oof=rows["id"].map(cv["predictions"]))
        oof["lr"] = np.log(oof["oof"] / oof["value"])
        oof = oof[np.isfinite(oof["lr"])]
        key = oof["model"] + "|" + oof["gpu"] + "|" + oof["engine"]
        centred = oof["lr"] - oof.groupby(key)["lr"].transform("median")
        print("\nOut-of-fold median APE % after removing each (model, GPU, engine) median offset "
              "(what a single measurement per new pair would fix): "
              + ", ".join(f"{fam} {np.median(np.abs(np.expm1(centred[fams == fam]))) * 100:.1f}"
                          for fams in [oof["quantity"].map(_family)] for fam in sorted(fams.unique())))
        print("\nWhere the gap sits: each fold's fit predicts its held-out rows with one level's values "
              "replaced by the full fit's (which saw those pairs)\n")
        print(transfer_table(catalog, rows, cv, calibration))
        print("\n| fold | held-out (model, GPU) pairs | out-of-fold median APE % per family |")
        print("|---:|---|---|")
        for f in cv["per_fold"]:
            oof = ", ".join(f"{k} {v:.1f}" for k, v in f["out_of_fold_median_ape_pct"].items())
            print(f"| {f['fold']} | {', '.join(f['held_out'])} | {oof} |")
    np.seterr(all="ignore")


if __name__ == "__main__":
    main()
