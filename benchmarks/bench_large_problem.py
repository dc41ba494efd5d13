"""A large planning problem solved to proven optimality, with its cost-vs-latency fronts.

    python benchmarks/bench_large_problem.py [--points 8] [--fronts mixed]    # in-process breakdown
    python benchmarks/bench_large_problem.py --cli [--reps 3] [--fronts used] # whole `planner solve --json`
    python benchmarks/bench_large_problem.py --write-yaml PATH                # the problem file

Every catalog GPU (with a compute figure and a price), three models (llama-3.1-8b,
llama-3.1-70b, mixtral-8x7b) and six workloads, default search space otherwise.

The in-process mode prints candidate counts, the solver status, gap and time of the
optimum, and the time and points of the fronts (``--fronts``: mixed, used or all; the
TPOT metric only unless ``--both-metrics``).

``--cli`` times the default ``planner solve PROBLEM.yaml --json`` (documented default
fronts, ``mixed``, or those of ``--fronts``; default top-k) as a whole process,
interleaved with aiconfigurator 0.12's one-GPU-type search on its default scenario
(Qwen3-32B, 8x H100, ISL 4000 / OSL 500, TTFT 2 s, TPOT 30 ms) when
``benchmarks/vs_aiconfigurator/.venv`` holds it
(``bash benchmarks/vs_aiconfigurator/run.sh --quick`` installs it); it prints the median
wall times, their ratio, the median CPU times (user + sys, children included) and the load
average (the machine is shared: compare ratios from one run, or CPU times, not wall times
across runs).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from planner.catalog import load_catalog
from planner.pareto import pareto_fronts
from planner.pipeline import plan
from planner.problem import ProblemSpec, resolve_problem

HERE = Path(__file__).resolve().parent
AIC_BIN = HERE / "vs_aiconfigurator" / ".venv" / "bin" / "aiconfigurator"
#: aiconfigurator's own `cli default` scenario (one GPU type).
AIC_ARGS = ["cli", "default", "--model", "Qwen/Qwen3-32B", "--total-gpus", "8", "--system", "h100_sxm",
            "--isl", "4000", "--osl", "500", "--ttft", "2000", "--tpot", "30", "--no-color"]

WORKLOADS = [
    ("chat-8b", "llama-3.1-8b", 60, {"mean": 700, "p95": 2000}, {"mean": 250, "p95": 700}, 0.5, 0.03),
    ("agent-8b", "llama-3.1-8b", 20, {"mean": 3000, "p95": 8000}, {"mean": 150, "p95": 400}, 1.5, 0.04),
    ("chat-70b", "llama-3.1-70b", 25, {"mean": 1200, "p95": 3000}, {"mean": 300, "p95": 800}, 1.0, 0.05),
    ("rag-70b", "llama-3.1-70b", 4, {"mean": 8000, "p95": 20000}, {"mean": 250, "p95": 600}, 5.0, 0.08),
    ("chat-moe", "mixtral-8x7b", 15, {"mean": 900, "p95": 2500}, {"mean": 250, "p95": 700}, 1.0, 0.04),
    ("batch-moe", "mixtral-8x7b", 5, 4000, 800, 20.0, 0.2),
]


def spec_dict(points: int | None = None) -> dict:
    out = {
        "name": "bench-large",
        "workloads": [{"name": n, "model": m, "rate_per_s": r, "prompt_tokens": p, "output_tokens": o,
                       "slo": {"ttft_p95_s": ttft, "tpot_p95_s": tpot}} for n, m, r, p, o, ttft, tpot in WORKLOADS],
    }
    if points is not None:
        out["optimize"] = {"pareto_points": points}
    return out


def spec(points: int) -> ProblemSpec:
    return ProblemSpec.model_validate(spec_dict(points))


def _timed(cmd: list[str]) -> tuple[float, float]:
    """Wall time and CPU time (user + sys of the process and its children) of one run [s]."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} failed (exit {proc.returncode}): {proc.stderr[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _summary(runs: list[tuple[float, float]]) -> str:
    walls, cpus = [w for w, _ in runs], [c for _, c in runs]
    return (f"median {statistics.median(walls):.1f} s of {[round(x, 1) for x in walls]} "
            f"(CPU user+sys median {statistics.median(cpus):.1f} s)")


def cli_mode(reps: int, fronts: str | None = None) -> None:
    """Whole-process default solve (``--fronts`` when given) vs aiconfigurator's one-GPU-type
    search, interleaved."""
    import yaml

    planner_bin = str(Path(sys.executable).parent / "planner")
    with tempfile.TemporaryDirectory() as tmp:
        problem = Path(tmp) / "bench-large.yaml"
        problem.write_text(yaml.safe_dump(spec_dict()))
        flags = ["--fronts", fronts] if fronts else []
        ours_cmd = [planner_bin, "solve", str(problem), "--json", *flags]
        aic_cmd = [str(AIC_BIN), *AIC_ARGS, "--save-dir", str(Path(tmp) / "aic")] if AIC_BIN.exists() else None
        load_start = os.getloadavg()
        ours, aic = [], []
        for _ in range(reps):
            if aic_cmd:
                aic.append(_timed(aic_cmd))
            ours.append(_timed(ours_cmd))
        doc = json.loads(subprocess.run(ours_cmd, capture_output=True, text=True).stdout)
        load_end = os.getloadavg()
    fronts_flag, fronts = fronts, sorted({p["front"] for p in doc["pareto"]})
    print(f"planner solve --json ({'default ' if not fronts_flag else ''}fronts: "
          f"{len(doc['pareto'])} points, fronts {', '.join(fronts)}): "
          f"{_summary(ours)}; timings {doc['timings_s']}")
    if aic:
        ratio = statistics.median(w for w, _ in ours) / statistics.median(w for w, _ in aic)
        print(f"aiconfigurator cli default (one GPU type): {_summary(aic)}")
        print(f"ratio planner / aiconfigurator: {ratio:.2f} (target <= 0.5)")
    else:
        print(f"aiconfigurator not installed at {AIC_BIN}: no paired timing")
    print(f"load average at start {load_start[0]:.2f}, at end {load_end[0]:.2f} on {os.cpu_count()} CPUs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=8)
    ap.add_argument("--fronts", choices=["mixed", "used", "all"],
                    help="fronts of the in-process run (default mixed); with --cli, passed to planner solve")
    ap.add_argument("--both-metrics", action="store_true")
    ap.add_argument("--cli", action="store_true", help="time the whole default `planner solve --json`")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--write-yaml", type=Path, help="write the problem file (default options) and exit")
    args = ap.parse_args()
    if args.write_yaml:
        import yaml

        args.write_yaml.write_text(yaml.safe_dump(spec_dict()))
        return
    if args.cli:
        cli_mode(args.reps, args.fronts)
        return
    catalog = load_catalog()
    problem = resolve_problem(spec(args.points), "bench-large.yaml", catalog)
    t0 = time.perf_counter()
    result = plan(problem, pareto=False, top_k=1)
    t_opt = time.perf_counter() - t0
    c = result.counts
    print(f"{len(problem.gpus)} GPU types, 3 models, {len(problem.workloads)} workloads")
    print(f"candidates: {c['enumerated']:,} enumerated, {c['feasible']:,} feasible, "
          f"{c.get('in_model', 0)} in the model after pruning {c.get('pruned_dominated', 0):,}")
    s = result.solver
    print(f"optimum: {s['status']}, ${s['objective_usd_per_hour']:.2f}/h, gap {s['gap']}, "
          f"search {result.timings_s['search']:.2f} s + solve {result.timings_s['solve']:.2f} s = {t_opt:.2f} s")
    from planner.planning import solver_options

    metrics = ("tpot_p95_s", "ttft_p95_s") if args.both_metrics else ("tpot_p95_s",)
    t1 = time.perf_counter()
    fronts = pareto_fronts(problem, result.candidates, result.params, solver_options(problem), points=args.points,
                           metrics=metrics, fronts=args.fronts or "mixed",
                           used_gpus=sorted(result.best.gpus_by_type), optimum=result.best)
    t_front = time.perf_counter() - t1
    mixed = fronts[fronts["front"] == "mixed"]
    print(f"fronts ({args.fronts or 'mixed'}): {len(fronts)} points, {len(mixed)} mixed, statuses "
          f"{sorted(set(fronts['status']))}, {t_front:.2f} s")
    for row in mixed.itertuples():
        print(f"   {row.metric} <= {row.target_s * 1e3:9.2f} ms: ${row.usd_per_hour:9.2f}/h  {row.gpus:4d} GPUs")
    print(f"total (optimum + fronts): {t_opt + t_front:.2f} s; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
