"""Benchmark the CP-SAT planner on a large seeded synthetic instance (20 GPU types, 6 workloads).

Usage: python benchmarks/bench_optimize.py [--seed 0] [--types 20] [--workers 8] [--time-limit-s 300]
                                          [--no-proof]
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
import pandas as pd

from planner.optimize import PlanningInstance, SolverOptions, build_model, check_plan, read_plan, run_solver

# (prompt tokens, output tokens, TPOT SLO [s], TTFT SLO [s], share of requests, precisions allowed).
WORKLOADS = {"chat": (512, 256, 0.05, 0.5, 0.35, ("bf16", "fp8", "int4")),
             "code": (2048, 512, 0.04, 1.0, 0.15, ("bf16",)),
             "rag": (8192, 256, 0.08, 2.0, 0.20, ("bf16", "fp8", "int4")),
             "summarize": (16384, 512, 0.10, 4.0, 0.10, ("bf16", "fp8", "int4")),
             "agent": (4096, 1024, 0.03, 1.5, 0.10, ("bf16", "fp8")),
             "batch": (1024, 2048, 0.25, 10.0, 0.10, ("bf16", "fp8", "int4"))}
GPUS_PER_REPLICA = (1, 2, 4, 8)
BATCH_SIZES = (4, 8, 16, 32, 64, 128)
PREFILL_CHUNK_TOKENS = (512, 1024, 2048, 4096)
PRECISIONS = {"bf16": (1.0, 1.0), "fp8": (1.6, 0.5), "int4": (2.1, 0.28)}   # speed-up, bytes factor
MODEL_WEIGHTS_GB = 140.0          # a 70B model in bf16
KV_GB_PER_1K_TOKENS = 0.33        # bf16 KV cache of a 70B GQA model


def synthetic_instance(seed: int = 0, n_types: int = 20, total_rate_per_s: float = 150.0,
                       max_distinct_configs: int | None = 8) -> PlanningInstance:
    """Roofline-flavoured random capacities with SLO, memory and quality cut-offs, 5 % noise.

    Larger batches raise throughput but stretch TPOT; larger prefill chunks speed up long
    prompts but stretch the decode step; low precisions are faster but barred from some
    workloads. These trade-offs leave many non-dominated candidates per GPU type.
    """
    rng = np.random.default_rng(seed)
    rows, caps = [], []
    for t in range(n_types):
        speed = rng.lognormal(0.0, 0.5)                       # decode speed relative to a reference GPU
        memory_gb = float(rng.choice([24, 48, 80, 96, 141, 192]))
        usd_per_gpu_hour = 2.5 * speed ** 0.8 * rng.lognormal(0.0, 0.15)
        for gpr, batch, chunk, (prec, (fast, size)) in itertools.product(
                GPUS_PER_REPLICA, BATCH_SIZES, PREFILL_CHUNK_TOKENS, PRECISIONS.items()):
            free_gb = memory_gb * gpr - MODEL_WEIGHTS_GB * size
            if free_gb <= 0:
                continue
            rel = speed * fast * gpr ** 0.85
            step_s = 0.012 / rel * (1.0 + batch / 48.0) * (1.0 + chunk / 16384.0)
            cap = []
            for prompt, output, tpot_s, ttft_s, _, allowed in WORKLOADS.values():
                kv_gb = batch * (prompt + output) / 1000.0 * KV_GB_PER_1K_TOKENS * size
                prefill_s = prompt * 2.0e-5 / rel * (1.0 + 1024.0 / chunk)
                ttft = prefill_s * (1.0 + batch / 32.0)
                ok = prec in allowed and step_s <= tpot_s and ttft <= ttft_s and kv_gb <= free_gb
                cap.append(batch / (output * step_s + prefill_s) * rng.lognormal(0.0, 0.05) if ok else 0.0)
            rows.append({"candidate_id": f"gpu{t:02d}-tp{gpr}-b{batch}-c{chunk}-{prec}", "gpu": f"gpu{t:02d}",
                         "gpus_per_replica": gpr, "usd_per_replica_hour": round(usd_per_gpu_hour * gpr, 4),
                         "batch_size": batch, "prefill_chunk_tokens": chunk, "precision": prec})
            caps.append(np.round(cap, 3))
    cands = pd.DataFrame(rows).set_index("candidate_id")
    capacity = pd.DataFrame(caps, index=cands.index, columns=list(WORKLOADS))
    share = np.array([w[4] for w in WORKLOADS.values()])
    rate = pd.Series(np.round(total_rate_per_s * share, 2), index=list(WORKLOADS))
    return PlanningInstance(cands, capacity, rate, max_distinct_configs=max_distinct_configs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--types", type=int, default=20)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--time-limit-s", type=float, default=300.0)
    parser.add_argument("--no-proof", action="store_true", help="skip the proof that the plan is unique")
    args = parser.parse_args()
    inst = synthetic_instance(args.seed, args.types)
    start = time.perf_counter()
    built = build_model(inst)
    build_s = time.perf_counter() - start
    result = run_solver(built, SolverOptions(time_limit_s=args.time_limit_s, num_workers=args.workers,
                                                    prove_unique_plan=not args.no_proof))
    plan = read_plan(built, result)
    n = len(inst.candidates)
    print(f"candidates: {n} ({args.types} GPU types, {len(WORKLOADS)} workloads, "
          f"{int((inst.capacity_per_s > 0).any(axis=1).sum())} serve something)")
    print(f"pruned: {len(built.pruned)}, kept: {len(built.candidates)} "
          f"({len(built.candidates) / args.types:.1f} per GPU type), traffic variables: {len(built.traffic)}")
    print(f"scaling: load {built.scales['load_scaling']}, cost {built.scales['cost_scaling']}")
    times = {k: round(v, 2) for k, v in result.solver_params["wall_time_s"].items()}
    print(f"build: {build_s:.2f} s, solve: {result.wall_time_s:.2f} s ({result.solver_params['num_solves']} "
          f"CP-SAT solves, proven unique: {result.solver_params['proven_unique']}, stages: {times})")
    print(f"status: {result.status}, cost: {result.objective_usd_per_hour:.4f} USD/h, "
          f"bound: {result.best_bound_usd_per_hour:.4f}, gap: {result.gap:.2e}")
    if plan is not None:
        print(plan.deployments[["candidate_id", "replicas", "gpus", "usd_per_hour", "load_fraction"]]
              .to_string(index=False))
        print(f"check_plan violations: {check_plan(inst, plan)}")


if __name__ == "__main__":
    main()
