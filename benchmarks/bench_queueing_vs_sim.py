"""Analytic p95 TTFT/TPOT (planner.serving.queueing) against the discrete-event simulator.

    python benchmarks/bench_queueing_vs_sim.py [--requests 80000] [--seed 0] [--calibration default]

Three configurations (llama-3.1-8b on h100-sxm TP1, llama-3.1-70b on h200-sxm TP4,
mixtral-8x7b on a100-sxm-80gb TP2), chat-like lognormal lengths, loads of 30%, 60% and
85% of the analytic capacity (the saturation rate). Prints one row per (configuration,
load) with both p95s from each model and the relative differences.

With ``--calibration default`` (or a calibration YAML) both models run with the calibrated
parameters of one configuration per engine (vLLM, SGLang, TensorRT-LLM: the grid of
``tests/test_queueing.py``) at 50% and 80% of capacity instead.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from planner import parameters
from planner.catalog import load_catalog
from planner.configs import config_arrays
from planner.serving.params import ServingParams
from planner.serving.queueing import TrafficArrays, saturation_rate, state_at_rate
from planner.simulate import simulate_replica
from planner.traffic import LogNormal

CONFIGS = [
    # model, gpu, tp, max_batch
    ("llama-3.1-8b", "h100-sxm", 1, 128),
    ("llama-3.1-70b", "h200-sxm", 4, 128),
    ("mixtral-8x7b", "a100-sxm-80gb", 2, 64),
]
LOADS = (0.30, 0.60, 0.85)
#: One configuration per engine: model, gpu, tp, max_batch, weights, engine (--calibration).
CALIBRATED_CONFIGS = [
    ("llama-3.1-8b", "h100-sxm", 1, 128, "bf16", "vllm"),
    ("llama-3.1-8b", "h200-sxm", 1, 128, "fp8", "sglang"),
    ("llama-3.1-70b", "h200-sxm", 4, 128, "fp8", "trtllm"),
]
CALIBRATED_LOADS = (0.50, 0.80)
PROMPT = LogNormal(1000, 3000)
OUTPUT = LogNormal(300, 800)


def compare(requests: int, seed: int, configs=CONFIGS, loads=LOADS, prompt=PROMPT, output=OUTPUT,
            calibration: str | None = None) -> pd.DataFrame:
    """One row per (configuration, load): analytic vs simulated p95s.

    ``configs`` rows are (model, gpu, tp, max_batch[, weights, engine]); with a
    ``calibration`` ('default' or a path) both models use its parameters for each row.
    """
    catalog = load_catalog()
    cal = parameters.load(calibration)
    traffic = TrafficArrays.from_distributions(prompt, output)
    rows = []
    for model, gpu, tp, max_batch, *rest in configs:
        quant, engine = (*rest, "bf16", None)[:2]
        frame = pd.DataFrame([{"model": model, "gpu": gpu, "quantization": quant, "kv_cache_dtype": "bf16",
                               "tp": tp, "pp": 1, "batch": max_batch, "prompt_tokens": prompt.mean,
                               "output_tokens": output.mean, "context_tokens": np.nan}])
        arrays, _ = config_arrays(catalog, frame)
        params = ServingParams() if cal is None else parameters.resolve(
            [gpu], cal, engine=engine, model_ids=[model], math_modes=[catalog.math_mode(gpu, quant)])
        capacity = float(saturation_rate(arrays, params, traffic)[0])
        for load in loads:
            rate = load * capacity
            state = state_at_rate(arrays, params, traffic, rate)
            sim = simulate_replica(arrays, params, rate_per_s=rate, prompt=prompt, output=output,
                                   max_batch=max_batch, requests=requests, seed=seed).to_dict()
            a_ttft, a_tpot = float(state["ttft_p95_s"][0]), float(state["tpot_p95_s"][0])
            rows.append({"model": model, "gpu": gpu, "tp": tp, "max_batch": max_batch, "engine": engine,
                         "load": load,
                         "rate_per_s": rate, "ttft_p95_analytic_s": a_ttft, "ttft_p95_sim_s": sim["ttft_p95_s"],
                         "ttft_err": a_ttft / sim["ttft_p95_s"] - 1, "tpot_p95_analytic_s": a_tpot,
                         "tpot_p95_sim_s": sim["tpot_p95_s"], "tpot_err": a_tpot / sim["tpot_p95_s"] - 1})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=80000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calibration", help="'default' or a calibration YAML: the per-engine grid, calibrated")
    args = ap.parse_args()
    t0 = time.perf_counter()
    table = (compare(args.requests, args.seed, CALIBRATED_CONFIGS, CALIBRATED_LOADS, calibration=args.calibration)
             if args.calibration else compare(args.requests, args.seed))
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.4g}".format):
        print(table.to_string(index=False))
    worst = max(table["ttft_err"].abs().max(), table["tpot_err"].abs().max())
    print(f"\nworst relative difference: {worst:.1%} (tolerance 15%); {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
