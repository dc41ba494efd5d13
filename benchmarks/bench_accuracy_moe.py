"""Accuracy on the expert-parallel / attention-DP reference rows (issue 14, item 5).

    python benchmarks/bench_accuracy_moe.py [--calibration default|none|PATH] [--rows-out CSV]
        [--imbalance 1.0 1.2 ...] [--disagg-breakdown]

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
``--disagg-breakdown`` shows where the disaggregated TTFT misses are: per row group (source,
engine, attention DP on the prefill workers; statistic; concurrency band) the rows, median
APE, median predicted/measured and the rows over and under the TTFT target, for the model and
for the sensitivity check with each point's decode steps scaled to its measured TPOT
(:func:`planner.accuracy_disagg.measured_decode_scale`): what a TPOT fix alone would do to
TTFT (docs/accuracy.md, section "Frontier MoE rows").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

from planner.accuracy import load_measurement_files, score_rows
from planner.accuracy_disagg import measured_prefill_load, point_keys, score_disagg_rows
from planner.accuracy_frontier import TARGETS_PCT, frontier_score, score_line
from planner.accuracy_layout import layout_rows
from planner.calibration import load_calibration
from planner.catalog import load_catalog
from planner.serving.params import ServingParams

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data"
FILES = (DATA / "measurements.csv", DATA / "inferencex-deepseek-r1.csv")
#: Issue 14's targets: median APE (%) per family, and the share of rows predicted.
TARGETS = TARGETS_PCT
COVERAGE_TARGET = 0.90
#: Concurrency bands of the disaggregated breakdown (users of the whole deployment).
USER_BANDS = (0, 8, 32, 128, 512, 2048, float("inf"))
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


def _ttft_groups(ttft: pd.DataFrame, by) -> pd.DataFrame:
    """Per group of TTFT rows: rows, median APE, median predicted/measured, rows over and
    under the TTFT target (APE above it, the prediction high or low)."""
    miss = ttft["ape_pct"] > TARGETS["ttft"]
    high = ttft["prediction"] > ttft["value"]
    frame = ttft.assign(ratio=ttft["prediction"] / ttft["value"], over=miss & high, under=miss & ~high)
    return frame.groupby(by, observed=True).agg(rows=("ape_pct", "size"), median_ape_pct=("ape_pct", "median"),
                                                pred_over_measured=("ratio", "median"), over=("over", "sum"),
                                                under=("under", "sum")).round(2)


def prefill_load_table(catalog, scored: pd.DataFrame, calibration) -> pd.DataFrame:
    """Per prefill-worker layout (attention DP, expert parallelism, GPUs per worker), one entry
    per measured point: points, median and largest measured rate / modelled prefill capacity
    (:func:`planner.accuracy_disagg.measured_prefill_load`), points above 1."""
    load = measured_prefill_load(catalog, scored, calibration)
    points = scored.assign(load=load, point=point_keys(scored).to_numpy()).drop_duplicates("point")
    points = points.assign(prefill_attention_dp=points["p_attention_dp"] > 1, prefill_ep=points["p_ep"] > 1,
                           above=points["load"] > 1)
    return points.groupby(["prefill_attention_dp", "prefill_ep", "p_tp"]).agg(
        points=("load", "size"), median_load=("load", "median"), max_load=("load", "max"),
        above_capacity=("above", "sum")).round(2)


def disagg_breakdown(catalog, raw: pd.DataFrame, calibration) -> None:
    """Print where the disaggregated TTFT misses are, for the model and with each point's
    decode steps scaled to its measured TPOT (``--disagg-breakdown``)."""
    for label, measured in (("model", False), ("decode steps scaled to the measured TPOT", True)):
        scored, _, _ = score_disagg_rows(catalog, raw, calibration, measured_tpot=measured)
        ttft = scored[scored["family"] == "ttft"]
        ttft = ttft.assign(source=ttft["source"].str.extract(r"^\s*\[([^\]]+)\]")[0],
                           prefill_attention_dp=ttft["p_attention_dp"] > 1,
                           users=pd.cut(ttft["load_value"], USER_BANDS, right=True))
        meds = {f: scored.loc[scored["family"] == f, "ape_pct"].median() for f in ("tpot_itl", "ttft", "throughput")}
        print(f"disaggregated rows, {label}: median APE " + "; ".join(f"{f} {v:.1f}%" for f, v in meds.items())
              + f"; TTFT rows within {TARGETS['ttft']:.0f}%: {int((ttft['ape_pct'] <= TARGETS['ttft']).sum())}"
              f" of {len(ttft)}")
        for by in (["source", "engine", "prefill_attention_dp"], ["source", "statistic"], ["source", "users"]):
            print(_ttft_groups(ttft, by).to_string())
        if not measured:
            print("measured request rate / modelled prefill capacity n_p B / T(B), per measured point:")
            print(prefill_load_table(catalog, scored, calibration).to_string())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", default="default")
    ap.add_argument("--rows-out", default=None, help="write the scored layout rows to this CSV")
    ap.add_argument("--imbalance", type=float, nargs="*", default=[],
                    help="also score with these expert_load_imbalance values")
    ap.add_argument("--disagg-breakdown", action="store_true",
                    help="print where the disaggregated TTFT misses are, the measured request rate over "
                         "the modelled prefill capacity per prefill layout, and the misses with the decode "
                         "steps scaled to each point's measured TPOT (a sensitivity check)")
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
    if args.disagg_breakdown:
        disagg_breakdown(catalog, raw.drop(columns="file"), load_calibration(args.calibration))
    print(f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
