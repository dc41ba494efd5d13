"""Time one call of the serving model over >= 1,000,000 configurations.

    python benchmarks/bench_serving.py [--n 1000000] [--repeats 5]

Builds random configurations (every catalog GPU with a compute figure x models x TP x
batch x context), then times ``planner.serving.evaluate.evaluate`` on all of them at once
and prints configurations per second (best of the repeats, by wall time and by the
process's CPU time, which other jobs on a shared machine disturb less).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pandas as pd

from planner.catalog import load_catalog
from planner.configs import config_arrays
from planner.serving.evaluate import evaluate
from planner.serving.params import ServingParams


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    cat = load_catalog()
    rng = np.random.default_rng(0)
    gpus = [g for g, spec in cat.gpus.entries.items() if spec.bf16_tflops]
    models = list(cat.models.entries)
    n = args.n
    frame = pd.DataFrame({
        "model": rng.choice(models, n), "gpu": rng.choice(gpus, n),
        "quantization": rng.choice(["bf16", "fp8", "int4-awq"], n), "kv_cache_dtype": rng.choice(["bf16", "fp8"], n),
        "tp": rng.choice([1, 2, 4, 8], n), "pp": rng.choice([1, 2, 4], n), "batch": rng.integers(1, 512, n),
        "prompt_tokens": rng.integers(64, 8192, n), "output_tokens": rng.integers(16, 2048, n),
        "context_tokens": np.nan,
    })
    t0 = time.perf_counter()
    arrays, _ = config_arrays(cat, frame)
    build_s = time.perf_counter() - t0
    params = ServingParams()
    best, best_cpu = np.inf, np.inf
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = evaluate(arrays, params, usd_per_gpu_hour=2.5)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    assert out["tpot_s"].shape == (n,)
    print(f"configurations: {n:,}")
    print(f"building arrays from ids: {build_s:.3f} s")
    print(f"evaluate (best of {args.repeats}): {best:.3f} s wall -> {n / best:,.0f} configurations/s; "
          f"{best_cpu:.3f} s CPU -> {n / best_cpu:,.0f} configurations/s")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (a shared machine: CPU time is "
          "the steadier figure)")


if __name__ == "__main__":
    main()
