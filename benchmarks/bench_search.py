"""Enumerate, evaluate and compute capacity at SLO for the whole default search space.

    python benchmarks/bench_search.py [--model llama-3.1-70b] [--repeats 3]

Every catalog GPU x weight format x KV dtype x TP {1,2,4,8} x PP {1,2,4} x 10 max-batch
values, for one model and three workloads (chat, RAG, batch summarization). Prints the
candidate count, rejections per reason and the time (best of the repeats, by wall time and by
the process's CPU time, which other jobs on a shared machine disturb less).
"""

from __future__ import annotations

import argparse
import time

from planner.catalog import load_catalog
from planner.problem import ProblemSpec, resolve_problem
from planner.search import enumerate_candidates, rejection_counts


def problem_spec(model: str) -> ProblemSpec:
    return ProblemSpec.model_validate({
        "name": "bench-search",
        "workloads": [
            {"name": "chat", "model": model, "rate_per_s": 20, "prompt_tokens": {"mean": 1000, "p95": 3000},
             "output_tokens": {"mean": 300, "p95": 800}, "slo": {"ttft_p95_s": 1.0, "tpot_p95_s": 0.05}},
            {"name": "rag", "model": model, "rate_per_s": 3, "prompt_tokens": {"mean": 8000, "p95": 20000},
             "output_tokens": {"mean": 200, "p95": 500}, "slo": {"ttft_p95_s": 4.0, "tpot_p95_s": 0.08}},
            {"name": "summarize", "model": model, "rate_per_s": 1, "prompt_tokens": 4000,
             "output_tokens": 600, "slo": {"ttft_p95_s": 10.0, "tpot_p95_s": 0.2}},
        ],
    })


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    catalog = load_catalog()
    problem = resolve_problem(problem_spec(args.model), "bench-search.yaml", catalog)
    best, best_cpu, frame = float("inf"), float("inf"), None
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        frame = enumerate_candidates(problem)
        best, best_cpu = min(best, time.perf_counter() - t0), min(best_cpu, time.process_time() - c0)
    print(f"model {args.model}: {len(problem.gpus)} GPUs x {len(problem.quantization)} formats x "
          f"{len(problem.kv_cache_dtypes)} KV dtypes x TP {list(problem.spec.search.tp)} x "
          f"PP {list(problem.spec.search.pp)} x {len(problem.spec.search.max_batch)} max-batch values")
    print(f"candidates: {len(frame):,}, feasible: {int(frame['feasible'].sum()):,}")
    print("rejected:", rejection_counts(frame))
    print(f"enumerate + evaluate + capacity for 3 workloads (best of {args.repeats}): {best:.3f} s wall, "
          f"{best_cpu:.3f} s CPU")


if __name__ == "__main__":
    main()
