"""One score for issue 14's accuracy target over the frontier-MoE reference rows.

The rows: the aggregated rows whose recorded layout is expert-parallel or attention-DP
(:func:`planner.accuracy_layout.layout_rows`, scored by :func:`planner.accuracy.score_rows`)
and the disaggregated rows with a recorded prefill/decode layout
(:func:`planner.accuracy_disagg.score_disagg_rows`). :func:`frontier_score` gives the
coverage and the median APE per metric family over both sets together; the targets are
issue 14's Done-when 3. Figures and the treatment of each row kind: docs/accuracy.md,
section "Frontier MoE rows".
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from planner.accuracy import score_rows
from planner.accuracy_disagg import score_disagg_rows
from planner.accuracy_layout import layout_rows
from planner.calibration_cv import central

#: Issue 14's targets: median APE [%] per metric family (all statistics), and the share of
#: the rows with a recorded layout that are predicted.
TARGETS_PCT = {"tpot_itl": 20.0, "ttft": 35.0, "throughput": 25.0}
COVERAGE_TARGET = 0.90
#: Skip reason of the aggregated whole-deployment totals that are a per-GPU row of the same
#: point times an inflated GPU count (``num_gpus = tp x pp x ep``;
#: :func:`planner.accuracy_rows.prepare_rows`): a rescaled copy of a predicted row, not a
#: distinct measurement, so they are left out of both sides of the coverage.
DERIVED_REASON = "tp x pp x ep"
#: The row sets, in report order.
SETS = ("aggregated EP / attention DP", "disaggregated")


@dataclass(frozen=True)
class FrontierScore:
    """``scored``: every predicted row (``set``, ``family``, ``statistic``, ``ape_pct``, ...);
    ``recorded``: rows with a recorded layout per set; ``derived``: the rescaled copies left
    out per set; ``predicted``: predicted rows per set."""

    scored: pd.DataFrame
    recorded: dict
    derived: dict
    predicted: dict

    def coverage(self, distinct: bool = True) -> float:
        """Predicted / recorded over both sets (``distinct``: without the rescaled copies)."""
        den = sum(self.recorded.values()) - (sum(self.derived.values()) if distinct else 0)
        return sum(self.predicted.values()) / den if den else float("nan")

    def medians(self, central_only: bool = False) -> dict:
        """Median APE [%] per family over both sets (``central_only``: mean/median rows)."""
        s = central(self.scored) if central_only else self.scored
        return {f: float(s.loc[s["family"] == f, "ape_pct"].median()) for f in sorted(s["family"].unique())}

    def holds(self) -> dict:
        """Each target of Done-when 3: True where met (coverage over distinct measurements)."""
        med = self.medians()
        out = {"coverage": self.coverage() >= COVERAGE_TARGET}
        out.update({f: med.get(f, float("inf")) <= t for f, t in TARGETS_PCT.items()})
        return out


def frontier_score(catalog, measurements: pd.DataFrame, calibration=None) -> FrontierScore:
    """Score the aggregated EP / attention-DP rows and the disaggregated rows of
    ``measurements`` (a frame of :func:`planner.accuracy.load_measurement_files`)."""
    agg_rows = measurements[layout_rows(measurements)].reset_index(drop=True)
    agg, agg_skipped = score_rows(catalog, agg_rows, calibration)
    dis, _, dis_recorded = score_disagg_rows(catalog, measurements, calibration)
    reasons = agg_skipped["reason"] if len(agg_skipped) else pd.Series([], dtype=str)
    derived = int(reasons.str.contains(DERIVED_REASON, regex=False).sum())
    cols = ["id", "family", "statistic", "metric", "ape_pct"]
    scored = pd.concat([agg[cols].assign(set=SETS[0]), dis[cols].assign(set=SETS[1])], ignore_index=True)
    return FrontierScore(scored=scored, recorded={SETS[0]: len(agg_rows), SETS[1]: dis_recorded},
                         derived={SETS[0]: derived, SETS[1]: 0},
                         predicted={SETS[0]: len(agg), SETS[1]: len(dis)})


def score_line(s: FrontierScore) -> str:
    """One line: coverage (distinct and strict) and median APE per target family, with ok/MISS."""
    med, ok = s.medians(), s.holds()
    word = {True: "ok", False: "MISS"}
    fams = "; ".join(f"{f} {med.get(f, float('nan')):.1f}% (<= {t:.0f}: {word[ok[f]]})"
                     for f, t in TARGETS_PCT.items())
    cover = word[ok["coverage"]]
    k = sum(s.predicted.values())
    return (f"issue 14 Done-when 3, both row sets: predicted {k} = {s.coverage():.1%} "
            f"of the distinct rows with a recorded layout (>= {COVERAGE_TARGET:.0%}: {cover}; "
            f"{s.coverage(distinct=False):.1%} counting the {sum(s.derived.values())} rescaled totals); "
            f"median APE {fams}")
