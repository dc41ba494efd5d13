"""Analytic p95 TTFT/TPOT of disaggregated deployments (planner.serving.disagg) against the
P/D simulator (planner.simulate_pd).

    python benchmarks/bench_disagg_vs_sim.py [--requests 20000] [--seeds 0 1 2]
                                             [--prompt-mean 2000 --prompt-p95 4000]

Three deployments (``DEPLOYMENTS``: Llama 3.1 70B BF16 on H100 TP4, 2 prefill + 1 decode
replicas; DeepSeek-V3 FP8, 2 prefill replicas on H200 TP8 feeding 1 decode replica on B200
TP8; Llama 3.1 70B FP8, 3 prefill replicas on H100 TP2 feeding 2 decode replicas on H200
TP4), lognormal lengths, 50% and 80% of the analytic pair capacity
(:func:`planner.serving.disagg.pool_capacities`). One row per (deployment, load, seed);
``err`` = analytic / simulated - 1. ``tests/test_disagg.py`` runs the default grid with one
seed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from planner.catalog import load_catalog
from planner.configs import config_arrays
from planner.serving import disagg
from planner.serving.params import ServingParams
from planner.serving.queueing import TrafficArrays
from planner.simulate_pd import simulate_pd
from planner.traffic import LogNormal

#: (model, weights / KV dtype, prefill (gpu, tp), decode (gpu, tp, max batch), n_p, n_d).
DEPLOYMENTS = [
    ("llama-3.1-70b", "bf16", ("h100-sxm", 4), ("h100-sxm", 4, 128), 2, 1),
    ("deepseek-v3", "fp8", ("h200-sxm", 8), ("b200", 8, 256), 2, 1),
    ("llama-3.1-70b", "fp8", ("h100-sxm", 2), ("h200-sxm", 4, 128), 3, 2),
]
LOADS = (0.5, 0.8)
#: Default lengths: long prompts (the workloads disaggregation is for), chat-like outputs.
PROMPT_MEAN, PROMPT_P95, OUTPUT_MEAN, OUTPUT_P95 = 2000, 4000, 300, 800


def deployment(catalog, spec, prompt, output) -> disagg.DisaggArrays:
    """The :class:`DisaggArrays` of one ``DEPLOYMENTS`` entry (seed parameters)."""
    model, dtype, (pgpu, ptp), (dgpu, dtp, batch), n_p, n_d = spec

    def arrays(gpu, tp, b):
        frame = pd.DataFrame({"model": [model], "gpu": gpu, "quantization": dtype, "kv_cache_dtype": dtype,
                              "tp": tp, "pp": 1, "batch": b, "prompt_tokens": prompt.mean,
                              "output_tokens": output.mean, "context_tokens": np.nan})
        return config_arrays(catalog, frame)[0]

    bandwidth = disagg.transfer_bytes_per_s(catalog.gpu(pgpu), catalog.gpu(dgpu))
    p = ServingParams()
    return disagg.DisaggArrays(arrays(pgpu, ptp, 1), arrays(dgpu, dtp, batch), p, p, float(n_p), float(n_d),
                               scale_out_bytes_per_s=bandwidth)


def compare(catalog, spec, load, prompt, output, requests, seed) -> dict:
    """Analytic and simulated p95s of one deployment at ``load`` x its pair capacity."""
    d = deployment(catalog, spec, prompt, output)
    t = TrafficArrays.from_distributions(prompt, output)
    rate = load * float(disagg.pool_capacities(d, t)["pair_per_s"][0])
    state = disagg.state_at_rate(d, t, rate)
    sim = simulate_pd(d, rate_per_s=rate, prompt=prompt, output=output, requests=requests, seed=seed)
    ttft, tpot = float(state["ttft_p95_s"][0]), float(state["tpot_p95_s"][0])
    return {"model": spec[0], "prefill": f"{spec[4]}x {spec[2][0]} tp{spec[2][1]}",
            "decode": f"{spec[5]}x {spec[3][0]} tp{spec[3][1]}", "load": load, "seed": seed,
            "rate": round(rate, 3), "ttft_p95_analytic": ttft, "ttft_p95_sim": sim.ttft_p95_s,
            "ttft_err": ttft / sim.ttft_p95_s - 1.0, "tpot_p95_analytic": tpot,
            "tpot_p95_sim": sim.tpot_p95_s,
            "tpot_err": tpot / sim.tpot_p95_s - 1.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--prompt-mean", type=float, default=PROMPT_MEAN)
    ap.add_argument("--prompt-p95", type=float, default=PROMPT_P95)
    args = ap.parse_args(argv)
    catalog = load_catalog()
    prompt, output = LogNormal(args.prompt_mean, args.prompt_p95), LogNormal(OUTPUT_MEAN, OUTPUT_P95)
    start = time.perf_counter()
    rows = [compare(catalog, spec, load, prompt, output, args.requests, seed)
            for spec in DEPLOYMENTS for load in LOADS for seed in args.seeds]
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    worst = float(np.max(np.abs(table[["ttft_err", "tpot_err"]].to_numpy())))
    elapsed = time.perf_counter() - start
    print(f"worst relative difference: {100 * worst:.1f}% (tolerance 15%); {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
