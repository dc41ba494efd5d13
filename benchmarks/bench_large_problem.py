"""A large planning problem solved to proven optimality, with its p95 TPOT front.

    python benchmarks/bench_large_problem.py [--points 8] [--per-gpu-fronts]

Every catalog GPU (with a compute figure and a price), three models (llama-3.1-8b,
llama-3.1-70b, mixtral-8x7b) and six workloads, default search space otherwise. Prints
candidate counts, the solver status, gap and time of the optimum, and the time of the
mixed cost-vs-TPOT front (and, with --per-gpu-fronts, of every per-GPU-type front).
"""

from __future__ import annotations

import argparse
import time

from planner.catalog import load_catalog
from planner.pareto import pareto_fronts
from planner.pipeline import plan
from planner.problem import ProblemSpec, resolve_problem

WORKLOADS = [
    ("chat-8b", "llama-3.1-8b", 60, {"mean": 700, "p95": 2000}, {"mean": 250, "p95": 700}, 0.5, 0.03),
    ("agent-8b", "llama-3.1-8b", 20, {"mean": 3000, "p95": 8000}, {"mean": 150, "p95": 400}, 1.5, 0.04),
    ("chat-70b", "llama-3.1-70b", 25, {"mean": 1200, "p95": 3000}, {"mean": 300, "p95": 800}, 1.0, 0.05),
    ("rag-70b", "llama-3.1-70b", 4, {"mean": 8000, "p95": 20000}, {"mean": 250, "p95": 600}, 5.0, 0.08),
    ("chat-moe", "mixtral-8x7b", 15, {"mean": 900, "p95": 2500}, {"mean": 250, "p95": 700}, 1.0, 0.04),
    ("batch-moe", "mixtral-8x7b", 5, 4000, 800, 20.0, 0.2),
]


def spec(points: int) -> ProblemSpec:
    return ProblemSpec.model_validate({
        "name": "bench-large",
        "workloads": [{"name": n, "model": m, "rate_per_s": r, "prompt_tokens": p, "output_tokens": o,
                       "slo": {"ttft_p95_s": ttft, "tpot_p95_s": tpot}} for n, m, r, p, o, ttft, tpot in WORKLOADS],
        "optimize": {"pareto_points": points},
    })


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=8)
    ap.add_argument("--per-gpu-fronts", action="store_true")
    args = ap.parse_args()
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
    from planner.pipeline import solver_options

    t1 = time.perf_counter()
    fronts = pareto_fronts(problem, result.candidates, solver_options(problem), points=args.points,
                           metrics=("tpot_p95_s",), per_gpu=args.per_gpu_fronts)
    t_front = time.perf_counter() - t1
    mixed = fronts[fronts["front"] == "mixed"]
    print(f"TPOT front: {len(mixed)} points, statuses {sorted(set(mixed['status']))}, {t_front:.2f} s")
    for row in mixed.itertuples():
        print(f"   tpot_p95 <= {row.target_s * 1e3:7.2f} ms: ${row.usd_per_hour:9.2f}/h  {row.gpus:4d} GPUs")
    print(f"total (optimum + TPOT front): {t_opt + t_front:.2f} s")


if __name__ == "__main__":
    main()
