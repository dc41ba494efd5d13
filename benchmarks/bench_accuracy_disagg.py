"""Accuracy of the disaggregated prefill/decode model on the reference rows with a recorded layout.

    python benchmarks/bench_accuracy_disagg.py [--calibration default|none|PATH] [--reference DIR]

Reads ``measurements.csv`` and ``inferencex-deepseek-r1.csv`` (default: the copies in
``benchmarks/data/``), keeps the ``mode == disagg`` rows whose prefill and decode
layout is recorded (:func:`planner.accuracy_disagg.disagg_layouts`), predicts them
(:func:`planner.accuracy_disagg.predict_disagg_rows`) and prints coverage and median APE per
metric family (issue 14's targets: >= 90% predicted; median APE TPOT <= 20%, TTFT <= 35%,
throughput <= 25%), per source and per engine.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from planner.accuracy_disagg import score_disagg_rows
from planner.accuracy_rows import load_measurement_files, source_family
from planner.catalog import load_catalog
from planner.parameters import load as load_calibration

REFERENCE = Path(__file__).resolve().parent / "data"
FILES = ("measurements.csv", "inferencex-deepseek-r1.csv")
#: Issue 14's targets: median APE per family [%].
TARGETS = {"tpot_itl": 20.0, "ttft": 35.0, "throughput": 25.0}


def summary(scored: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return (scored.groupby(by)["ape_pct"].agg(n="size", median_ape_pct="median", mean_ape_pct="mean")
            .round(1).reset_index())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", default="default")
    ap.add_argument("--reference", type=Path, default=REFERENCE)
    args = ap.parse_args(argv)
    start = time.perf_counter()
    catalog = load_catalog()
    df = load_measurement_files([args.reference / f for f in FILES if (args.reference / f).is_file()])
    scored, skipped, recorded = score_disagg_rows(catalog, df, load_calibration(args.calibration))
    scored["source_family"] = source_family(scored["source"])
    print(f"disaggregated rows: {int(df['mode'].eq('disagg').sum())}; with a recorded layout: {recorded}; "
          f"predicted: {len(scored)} ({100 * len(scored) / max(recorded, 1):.1f}%, target >= 90%)")
    if len(skipped):
        print("not predicted:", skipped["reason"].value_counts().to_dict())
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        fam = summary(scored, ["family"])
        fam["target_pct"] = fam["family"].map(TARGETS)
        print(fam.to_string(index=False))
        print(summary(scored, ["source_family", "family"]).to_string(index=False))
        print(summary(scored, ["source_family", "engine", "gpu", "family"]).to_string(index=False))
    print(f"{time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
