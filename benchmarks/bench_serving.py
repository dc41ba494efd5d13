"""Time one call of the serving model over >= 1,000,000 configurations.

    python benchmarks/bench_serving.py [--n 1000000] [--repeats 5] [--threads N] [--capacity-n 100000]

Builds random configurations (every catalog GPU with a compute figure x models x TP x
batch x context), then times ``planner.serving.evaluate.evaluate`` on all of them at once
(every output of ``planner eval``, cost included) and prints configurations per second
(best of the repeats, by wall time and by the process's CPU time, which other jobs on a
shared machine disturb less, each line with the load average), with one thread and with
``--threads`` (default: what ``PLANNER_THREADS`` or the CPU count gives,
:mod:`planner.serving.parallel`); a first line times the process's first call alone
(what a ``planner`` command pays: fresh outputs and thread buffers); the timed lines name
the blocks the rows were cut into (``planner.serving.evaluate.block_rows``).

The search reads only a few of those outputs; its own use of the serving model is the
capacity at SLO of every live configuration (``planner.serving.queueing.capacities_at_slos``
at the central and the margined SLOs, as ``planner.search.workload_capacity`` calls it),
which costs far more per configuration: the last lines time it on the first
``--capacity-n`` configurations (0: skipped), one chat workload.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pandas as pd

from planner.catalog import load_catalog
from planner.configs import config_arrays
from planner.margins import Margins
from planner.serving.evaluate import block_rows, evaluate
from planner.serving.parallel import THREADS_ENV, thread_count
from planner.serving.params import ServingParams
from planner.serving.queueing import TrafficArrays, capacities_at_slos
from planner.traffic import LogNormal

#: The capacity lines' workload: chat lengths and SLOs (as benchmarks/bench_search.py's).
CHAT_PROMPT, CHAT_OUTPUT, CHAT_SLOS = LogNormal(1000, 3000), LogNormal(300, 800), (1.0, 0.05)


def best_of(repeats: int, call) -> tuple[float, float]:
    """Best wall and best CPU seconds of ``repeats`` calls."""
    best, best_cpu = np.inf, np.inf
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        call()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best, best_cpu


def with_threads(threads: int, call):
    """``call()`` with ``PLANNER_THREADS`` = ``threads`` (restored after)."""
    before = os.environ.get(THREADS_ENV)
    os.environ[THREADS_ENV] = str(threads)
    try:
        return call()
    finally:
        if before is None:
            del os.environ[THREADS_ENV]
        else:
            os.environ[THREADS_ENV] = before


def report(label: str, n: int, wall: float, cpu: float) -> None:
    print(f"{label}: {wall:.3f} s wall -> {n / wall:,.0f} configurations/s; "
          f"{cpu:.3f} s CPU -> {n / cpu:,.0f} configurations/s; load average {os.getloadavg()[0]:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None,
                    help="threads of the second timing (default: PLANNER_THREADS or the CPUs, at most "
                         "planner.serving.parallel.MAX_DEFAULT_THREADS)")
    ap.add_argument("--capacity-n", type=int, default=100_000,
                    help="configurations of the capacity-at-SLO timing")
    args = ap.parse_args()
    threads = args.threads or thread_count()
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
    print(f"configurations: {n:,}")
    print(f"building arrays from ids: {build_s:.3f} s")
    out = {}

    def call():
        out.update(evaluate(arrays, params, usd_per_gpu_hour=2.5))

    # the planner's own use: one call per model in a process (fresh outputs and buffers)
    wall, cpu = with_threads(1, lambda: best_of(1, call))
    report("evaluate, 1 thread, first call of the process", n, wall, cpu)
    for count in dict.fromkeys([1, threads]):
        wall, cpu = with_threads(count, lambda: best_of(args.repeats, call))
        size = block_rows(n, count)
        report(f"evaluate, {count} thread{'s' if count > 1 else ''} (best of {args.repeats}; "
               f"{-(-n // size)} blocks of {size:,} rows)", n, wall, cpu)
    assert out["tpot_s"].shape == (n,)
    m = min(args.capacity_n, n)
    if m > 0:
        sub = arrays.take(np.arange(m))
        traffic = TrafficArrays.from_distributions(CHAT_PROMPT, CHAT_OUTPUT)
        pairs = list(dict.fromkeys([CHAT_SLOS, Margins().slos(*CHAT_SLOS)]))
        repeats = max(1, min(3, args.repeats))
        for count in dict.fromkeys([1, threads]):
            with np.errstate(all="ignore"):    # random rows: GPUs without a link at TP > 1 (inf times)
                wall, cpu = with_threads(count, lambda: best_of(repeats, lambda: capacities_at_slos(
                    sub, params, traffic, pairs)))
            report(f"capacity at SLO of {m:,} configurations, {len(pairs)} SLO pairs, {count} "
                   f"thread{'s' if count > 1 else ''} (best of {repeats})", m, wall, cpu)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (a shared machine: CPU time is "
          "the steadier figure; with threads, CPU time adds up every thread's)")


if __name__ == "__main__":
    main()
