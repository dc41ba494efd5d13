"""Accuracy on the expert-parallel / attention-DP reference rows (issue 14, item 5).

    python benchmarks/bench_accuracy_moe.py [--calibration default|none|PATH] [--rows-out CSV]
        [--imbalance 1.0 1.2 ...]

The rows: every aggregated row of ``benchmarks/data`` (``measurements.csv``,
``inferencex-deepseek-r1.csv``) whose recorded layout has ``ep`` > 1 or attention data
parallelism (:func:`planner.accuracy_layout.layout_rows`; disaggregated rows are the P/D
stream's). Prints the coverage (rows predicted / rows with such a layout), then the median
and mean APE per metric family (TPOT/ITL, TTFT, throughput, e2e) over all statistics and
over the mean/median rows, per file, and the skip reasons; the issue's targets are >= 90 %
predicted and median APE TPOT <= 20 %, TTFT <= 35 %, throughput <= 25 %. Then one line scores
these rows and the disaggregated ones together (:func:`planner.accuracy_frontier.frontier_score`,
the figure docs/accuracy.md reports for issue 14's Done-when 3). ``--imbalance``
scores the rows again with other values of ``ServingParams.expert_load_imbalance`` (a
sensitivity check of that factor: its default is not fitted to these rows).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

from planner.accuracy import load_measurement_files, score_rows
from planner.accuracy_frontier import frontier_score, score_line
from planner.accuracy_layout import layout_rows
from planner.calibration import load_calibration
from planner.catalog import load_catalog
from planner.serving.params import ServingParams

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data"
FILES = (DATA / "measurements.csv", DATA / "inferencex-deepseek-r1.csv")
#: Issue 14's targets: median APE (%) per family, and the share of rows predicted.
TARGETS = {"tpot_itl": 20.0, "ttft": 35.0, "throughput": 25.0}
COVERAGE_TARGET = 0.90
FAMILIES = ("tpot_itl", "ttft", "throughput", "e2e")


def _stats(part: pd.DataFrame) -> str:
    out = []
    for fam in FAMILIES:
        a = part[part["family"] == fam]["ape_pct"]
        target = TARGETS.get(fam)
        mark = "" if target is None or not len(a) else (" ok" if a.median() <= target else " MISS")
        out.append(f"{fam}: n={len(a)} median={a.median():.1f}% mean={a.mean():.1f}%{mark}" if len(a)
                   else f"{fam}: n=0")
    return "; ".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", default="default")
    ap.add_argument("--rows-out", default=None, help="write the scored layout rows to this CSV")
    ap.add_argument("--imbalance", type=float, nargs="*", default=[],
                    help="also score with these expert_load_imbalance values")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    catalog = load_catalog()
    frames = []
    for path in FILES:
        df = load_measurement_files([path])
        frames.append(df.assign(file=path.name))
    raw = pd.concat(frames, ignore_index=True)
    selected = raw[layout_rows(raw)].reset_index(drop=True)
    scored, skipped = score_rows(catalog, selected.drop(columns="file"), load_calibration(args.calibration))
    scored = scored.merge(selected[["id", "file"]], on="id", how="left")
    n, k = len(selected), len(scored)
    print(f"layout rows (agg, ep > 1 or attention DP): {n}; predicted {k} ({k / n:.1%}; target "
          f">= {COVERAGE_TARGET:.0%}: {'ok' if k / n >= COVERAGE_TARGET else 'MISS'})")
    derived = int(skipped["reason"].str.contains("tp x pp x ep", regex=False).sum())
    print(f"  of which distinct measurements: {k} of {n - derived} ({k / (n - derived):.1%}; the {derived} "
          "whole-deployment totals skipped are per-GPU rows times num_gpus = tp x ep)")
    central = scored[scored["statistic"].isin(["mean", "median"])]
    print("all statistics:  " + _stats(scored))
    print("mean/median:     " + _stats(central))
    for name, part in scored.groupby("file"):
        print(f"  {name} (all statistics): " + _stats(part))
    ep_only = scored[scored["attention_dp"] <= 1]
    dpa = scored[scored["attention_dp"] > 1]
    print(f"  attention TP (ep > 1 only): " + _stats(ep_only))
    print(f"  attention DP:               " + _stats(dpa))
    if len(skipped):
        print("skipped: " + "; ".join(f"{r}: {c}" for r, c in skipped["reason"].value_counts().items()))
    if args.rows_out:
        scored.to_csv(args.rows_out, index=False)
    both = frontier_score(catalog, raw.drop(columns="file"), load_calibration(args.calibration))
    print(score_line(both))
    for lam in args.imbalance:
        base = ServingParams(expert_load_imbalance=lam)
        other, _ = score_rows(catalog, selected.drop(columns="file"), load_calibration(args.calibration), base)
        print(f"expert_load_imbalance {lam:g}, mean/median: "
              + _stats(other[other["statistic"].isin(["mean", "median"])]))
    print(f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
