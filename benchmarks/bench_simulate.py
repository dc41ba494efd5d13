"""Speed of the discrete-event simulator: wall time of 20,000-request runs per configuration.

Run: ``python benchmarks/bench_simulate.py [--requests N] [--repeat K]``. Prints one row per
configuration and scheduler: wall seconds (best of K), simulated requests per second,
iterations simulated and distinct roofline step times computed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from planner.catalog import load_catalog
from planner.configs import config_arrays
from planner.serving.params import ServingParams
from planner.simulate import simulate_replica
from planner.traffic import parse_length_spec

#: (label, model, gpu, quantization, tp, max_batch, rate [req/s], prompt spec, output spec)
CONFIGURATIONS = (
    ("8b h100 B=64", "llama-3.1-8b", "h100-sxm", "bf16", 1, 64, 12.0, "mean=1000,p95=3000",
     "mean=256,p95=700"),
    ("8b h100 B=256", "llama-3.1-8b", "h100-sxm", "bf16", 1, 256, 18.0, "mean=1000,p95=3000",
     "mean=256,p95=700"),
    ("70b-fp8 h100 tp4 B=128", "llama-3.1-70b", "h100-sxm", "fp8", 4, 128, 6.0, "mean=2000,p95=6000",
     "mean=300,p95=900"),
)


def _arrays(catalog, model, gpu, quant, tp, max_batch, prompt, output):
    frame = pd.DataFrame({"model": [model], "gpu": [gpu], "quantization": [quant], "kv_cache_dtype": ["bf16"],
                          "tp": [tp], "pp": [1], "batch": [max_batch], "prompt_tokens": [prompt.mean],
                          "output_tokens": [output.mean], "context_tokens": [np.nan]})
    return config_arrays(catalog, frame)[0]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the best is reported")
    args = parser.parse_args(argv)
    catalog = load_catalog()
    params = ServingParams()
    print(f"{'configuration':<24}{'scheduler':<12}{'rate/s':>8}{'wall_s':>9}{'sim req/s':>11}"
          f"{'iterations':>12}{'step times':>12}{'p95 TTFT s':>12}{'p95 TPOT ms':>13}")
    for label, model, gpu, quant, tp, max_batch, rate, prompt_spec, output_spec in CONFIGURATIONS:
        prompt, output = parse_length_spec(prompt_spec), parse_length_spec(output_spec)
        arrays = _arrays(catalog, model, gpu, quant, tp, max_batch, prompt, output)
        for scheduler in ("continuous", "static"):
            best = float("inf")
            for _ in range(args.repeat):
                start = time.perf_counter()
                result = simulate_replica(arrays, params, rate_per_s=rate, prompt=prompt, output=output,
                                          max_batch=max_batch, requests=args.requests, seed=0,
                                          scheduler=scheduler)
                best = min(best, time.perf_counter() - start)
            print(f"{label:<24}{scheduler:<12}{rate:>8g}{best:>9.2f}{args.requests / best:>11,.0f}"
                  f"{result.iterations:>12,}{result.distinct_step_times:>12,}{result.ttft_p95_s:>12.3g}"
                  f"{result.tpot_p95_s * 1e3:>13.2f}")


if __name__ == "__main__":
    main()
