"""``planner solve --verify``: every deployment of the reported plans run through the simulator.

One replica of each deployment serves its routed traffic mix: the rate per replica of each
workload routed to it, as one merged Poisson stream whose requests draw their class in
proportion to the rates, then that class's prompt and output lengths and prefix-cache
hit fraction (seeded). The
replica runs with the same serving parameters as the plan (calibration, engine,
``serving:`` overrides) in :func:`planner.simulate.run_requests`, and each routed workload
gets the simulated p95 TTFT and TPOT of its own requests.

Kept fast by a bounded run: enough requests that the smallest routed class of a deployment
has :data:`REQUESTS_PER_WORKLOAD` of them, at most :data:`MAX_REQUESTS` in all.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from planner.simulate import DEFAULT_WARMUP_FRACTION, run_requests

#: Requests drawn for the routed workload with the smallest rate on a deployment.
REQUESTS_PER_WORKLOAD = 2000
#: Most requests simulated per deployment (the smallest class then gets fewer).
MAX_REQUESTS = 12000
#: Seed of every verification run (same plan, same simulated p95s).
SEED = 0

#: Columns added to each plan's routing (and per workload in the JSON).
COLUMNS = ("simulated_ttft_p95_s", "simulated_tpot_p95_s")


def settings() -> dict:
    """The verification settings, for the outputs."""
    return {"requests_per_workload": REQUESTS_PER_WORKLOAD, "max_requests": MAX_REQUESTS, "seed": SEED,
            "warmup_fraction": DEFAULT_WARMUP_FRACTION, "scheduler": "continuous"}


def simulate_deployment(problem, row: pd.DataFrame, params,
                        rates_per_s: dict[str, float]) -> dict[str, tuple]:
    """Simulated (p95 TTFT, p95 TPOT) [s] per workload of one replica of candidate ``row``.

    ``row`` is a one-row frame of the candidate table, ``params`` its serving parameters
    (:meth:`planner.parameters.ProblemParams.of`); ``rates_per_s`` the rate per replica of
    each workload routed to it.
    """
    from planner.search import workload_arrays

    workloads = {w.name: w for w in problem.workloads}
    names = sorted(n for n, r in rates_per_s.items() if r > 0)
    rates = np.array([rates_per_s[n] for n in names], dtype=float)
    total = float(rates.sum())
    requests = int(min(MAX_REQUESTS, math.ceil(REQUESTS_PER_WORKLOAD * total / rates.min())))
    rng = np.random.default_rng(SEED)
    arrival = np.cumsum(rng.standard_exponential(requests)) / total
    label = rng.choice(len(names), size=requests, p=rates / total)
    prompt = np.zeros(requests, dtype=np.int64)
    output = np.zeros(requests, dtype=np.int64)
    hit = np.zeros(requests)
    for k, name in enumerate(names):
        mine = label == k
        prompt[mine] = workloads[name].prompt.sample(rng, int(mine.sum()))
        output[mine] = workloads[name].output.sample(rng, int(mine.sum()))
        hit[mine] = workloads[name].prefix_cache_hit_fraction
    arrays = workload_arrays(problem, row, workloads[names[0]])
    # The chunked-prefill budget of the plan's parameters (what the analytic model uses).
    chunk = int(np.asarray(params.prefill_chunk_tokens).reshape(-1)[0])
    result = run_requests(arrays, params, arrival, prompt, output, max_batch=int(row["max_batch"].iat[0]),
                          rate_per_s=total, seed=SEED, prefill_chunk_tokens=chunk, prefix_hit_fraction=hit)
    out = {}
    for k, name in enumerate(names):
        ttft, tpot = result.latencies_s(label == k)
        out[name] = (float(np.percentile(ttft, 95)) if ttft.size else math.nan,
                     float(np.percentile(tpot, 95)) if tpot.size else math.nan)
    return out


def verify_plans(problem, candidates: pd.DataFrame, params, plans: list) -> list:
    """``plans`` (:class:`planner.planning.RankedPlan`) with :data:`COLUMNS` in their routing.

    ``params``: the problem's serving parameters (:class:`planner.parameters.ProblemParams`).

    A deployment that appears in several plans with the same routed rates is simulated
    once. Measured-capacity problems have nothing to simulate: the columns are NaN; so are
    they for the prefill and decode deployments of a pool (the replica simulator runs
    aggregated replicas; pools: planner/simulate_pd.py).
    """
    memo: dict = {}
    out = []
    for p in plans:
        routing = p.routing.copy()
        for col in COLUMNS:
            routing[col] = np.nan
        if not problem.measured:
            replicas = p.deployments.set_index("candidate_id")["replicas"]
            for cid, part in routing.groupby("candidate_id", sort=True):
                if candidates.loc[cid].get("role", "both") != "both":
                    continue  # a prefill/decode part of a pool: not one replica of its own (NaN)
                rates = {w: r / float(replicas[cid]) for w, r in zip(part["workload"], part["rate_per_s"])}
                key = (cid, tuple(sorted(rates.items())))
                if key not in memo:
                    row = candidates.loc[[cid]]
                    memo[key] = simulate_deployment(problem, row, params.of(row), rates)
                for i, w in zip(part.index, part["workload"]):
                    routing.loc[i, list(COLUMNS)] = memo[key].get(w, (math.nan, math.nan))
        out.append(replace(p, routing=routing))
    return out
