"""Snapshot and compare ``planner solve --json`` of every shipped problem (speed work guard).

    python benchmarks/compare_solves.py snapshot DIR [--no-pareto] [PROBLEM.yaml ...]
    python benchmarks/compare_solves.py compare BEFORE_DIR AFTER_DIR

``snapshot`` runs ``planner.cli.main(["solve", P, "--json"])`` in this process for every
problem (default: ``problems/*.yaml``) and writes ``DIR/<stem>.json``. ``compare`` prints,
per problem, whether the status, plan costs and deployments are identical, and how the
Pareto front points differ (front, metric, target, cost), ignoring timings.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Plan fields compared exactly (costs rounded to this many decimals).
COST_DECIMALS = 6


def snapshot(out_dir: Path, problems: list[Path], no_pareto: bool) -> None:
    from planner.cli import main

    out_dir.mkdir(parents=True, exist_ok=True)
    for path in problems:
        buf = io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            rc = main(["solve", str(path), "--json", *(["--no-pareto"] if no_pareto else [])])
        wall = time.perf_counter() - t0
        (out_dir / f"{path.stem}.json").write_text(buf.getvalue())
        print(f"{path.stem}: exit {rc}, {wall:.2f} s", flush=True)


def _plans(doc: dict) -> list:
    return [(round(p["usd_per_hour"], COST_DECIMALS),
             sorted((d["candidate_id"], d["replicas"]) for d in p["deployments"])) for p in doc.get("plans", [])]


def _front(doc: dict) -> dict:
    return {(r["front"], r["metric"], round(r["target_s"], 9)):
            (None if r["usd_per_hour"] is None else round(r["usd_per_hour"], COST_DECIMALS))
            for r in doc.get("pareto", [])}


def compare(before: Path, after: Path) -> int:
    differ = 0
    for b in sorted(before.glob("*.json")):
        a = after / b.name
        if not a.exists():
            print(f"{b.stem}: missing in {after}")
            differ += 1
            continue
        db, da = json.loads(b.read_text() or "{}"), json.loads(a.read_text() or "{}")
        same_status = db.get("status") == da.get("status")
        same_plans = _plans(db) == _plans(da)
        fb, fa = _front(db), _front(da)
        shared = sorted(set(fb) & set(fa))
        cost_diff = [k for k in shared if fb[k] != fa[k]]
        print(f"{b.stem}: status {'same' if same_status else 'DIFFERS'}, plans {'same' if same_plans else 'DIFFER'}; "
              f"front points {len(fb)} -> {len(fa)}, {len(shared)} shared targets, {len(cost_diff)} with other costs")
        for k in cost_diff:
            print(f"    {k}: {fb[k]} -> {fa[k]}")
        differ += (not same_status) + (not same_plans)
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snapshot")
    s.add_argument("dir", type=Path)
    s.add_argument("problems", nargs="*", type=Path)
    s.add_argument("--no-pareto", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.cmd == "snapshot":
        snapshot(args.dir, args.problems or sorted((ROOT / "problems").glob("*.yaml")), args.no_pareto)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
