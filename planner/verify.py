"""``planner solve --verify``: every deployment of the reported plans run through the simulator.

One replica of each deployment serves its routed traffic mix: the rate per replica of each
workload routed to it, as one merged Poisson stream whose requests draw their class in
proportion to the rates, then that class's prompt and output lengths and prefix-cache
hit fraction (seeded). The
replica runs with the same serving parameters as the plan (calibration, engine,
``serving:`` overrides) in :func:`planner.simulate.run_requests`, and each routed workload
gets the simulated p95 TTFT and TPOT of its own requests.

The prefill and decode deployments of a disaggregated pool are simulated together, the pool
as a whole (:func:`simulate_pool`, with :mod:`planner.simulate_pd`): the pool's routed
traffic arrives as one merged Poisson stream, each request goes to a prefill deployment and
to a decode deployment in proportion to the rates of its workload routed to them, is
prefilled in the prefill deployment's replicas (least predicted work first), its KV crosses
the scale-out network of that (prefill GPU, decode GPU) pair, and it is decoded in the
decode deployment's replicas (round robin in KV arrival order). A prefill deployment's
workload entries carry the simulated p95 TTFT of the requests it prefilled (arrival ->
first token: prefill queue, prefill, KV transfer, decode admission and its first step,
plus the request overhead) and no TPOT; a decode deployment's entries the p95 TPOT of the
requests it decoded and no TTFT.

Kept fast by a bounded run: enough requests that the smallest routed class of a deployment
(of a pool: the smallest routed (deployment, workload) rate) has :data:`REQUESTS_PER_WORKLOAD`
of them, at most :data:`MAX_REQUESTS` in all.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import NamedTuple

import numpy as np
import pandas as pd

from planner.simulate import DEFAULT_WARMUP_FRACTION, request_overhead_s, run_requests

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


def _request_count(total_per_s: float, smallest_per_s: float) -> int:
    """Requests of one run: :data:`REQUESTS_PER_WORKLOAD` of the smallest routed rate, at most
    :data:`MAX_REQUESTS`."""
    return int(min(MAX_REQUESTS, math.ceil(REQUESTS_PER_WORKLOAD * total_per_s / smallest_per_s)))


class Mix(NamedTuple):
    """One merged Poisson stream of routed workloads: per request its arrival [s], workload
    (index into ``names``), prompt and output tokens and prefix-cache hit fraction."""

    names: list[str]
    rate_per_s: float
    arrival_s: np.ndarray
    label: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    hit: np.ndarray


def _draw_mix(problem, rates_per_s: dict[str, float], rng, smallest_per_s: float | None = None) -> Mix:
    """The workloads at ``rates_per_s`` [1/s] as one stream drawn from ``rng``;
    ``smallest_per_s`` sizes the run (default: the smallest rate)."""
    workloads = {w.name: w for w in problem.workloads}
    names = sorted(n for n, r in rates_per_s.items() if r > 0)
    rates = np.array([rates_per_s[n] for n in names], dtype=float)
    total = float(rates.sum())
    requests = _request_count(total, rates.min() if smallest_per_s is None else smallest_per_s)
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
    return Mix(names, total, arrival, label, prompt, output, hit)


def _p95(values: np.ndarray) -> float:
    return float(np.percentile(values, 95)) if values.size else math.nan


def simulate_deployment(problem, row: pd.DataFrame, params,
                        rates_per_s: dict[str, float]) -> dict[str, tuple]:
    """Simulated (p95 TTFT, p95 TPOT) [s] per workload of one replica of candidate ``row``.

    ``row`` is a one-row frame of the candidate table, ``params`` its serving parameters
    (:meth:`planner.parameters.ProblemParams.of`); ``rates_per_s`` the rate per replica of
    each workload routed to it.
    """
    from planner.search import workload_arrays

    mix = _draw_mix(problem, rates_per_s, np.random.default_rng(SEED))
    arrays = workload_arrays(problem, row, _workload(problem, mix.names[0]))
    result = run_requests(arrays, params, mix.arrival_s, mix.prompt, mix.output,
                          max_batch=int(row["max_batch"].iat[0]), rate_per_s=mix.rate_per_s, seed=SEED,
                          prefill_chunk_tokens=_chunk_tokens(params), prefix_hit_fraction=mix.hit)
    out = {}
    for k, name in enumerate(mix.names):
        ttft, tpot = result.latencies_s(mix.label == k)
        out[name] = (_p95(ttft), _p95(tpot))
    return out


def _workload(problem, name: str):
    return next(w for w in problem.workloads if w.name == name)


def _chunk_tokens(params) -> int:
    """The chunked-prefill budget C of one configuration's parameters [tokens] (what the
    analytic model uses)."""
    return int(np.asarray(params.prefill_chunk_tokens).reshape(-1)[0])


def _assign(rng, label: np.ndarray, names: list[str], rates: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Deployment of each request on one side of a pool: drawn per workload in proportion to
    the rates routed to the side's deployments (``rates``: candidate x workload [1/s]).
    Returns the index into the sorted candidate ids, and those ids."""
    ids = sorted(rates.index)
    out = np.zeros(len(label), dtype=np.int64)
    for k, name in enumerate(names):
        mine = np.flatnonzero(label == k)
        share = rates.reindex(index=ids, columns=[name], fill_value=0.0)[name].to_numpy(float)
        out[mine] = rng.choice(len(ids), size=mine.size, p=share / share.sum())
    return out, ids


def simulate_pool(problem, candidates: pd.DataFrame, params, deployments: pd.DataFrame,
                  routing: pd.DataFrame) -> dict[tuple[str, str], tuple]:
    """Simulated (p95 TTFT, p95 TPOT) [s] per (candidate id, workload) of one prefill/decode pool.

    ``deployments``: the pool's rows of a plan (``candidate_id``, ``role``, ``replicas``);
    ``routing``: their routed rates (``candidate_id``, ``workload``, ``rate_per_s``, all
    replicas together). Prefill entries get (TTFT, NaN), decode entries (NaN, TPOT): see
    the module notes. A prefill replica runs one request at a time (batch 1, chunked
    prefill), as the analytic model of :mod:`planner.serving.disagg`.
    """
    from planner.search import workload_arrays
    from planner.serving.disagg import DisaggArrays, kv_transfer_time_s, transfer_bytes_per_s
    from planner.simulate_pd import run_decode_pool, run_prefill_pool

    routed = routing[routing["rate_per_s"] > 0]
    by_id = deployments.set_index("candidate_id")
    rates = routed.pivot_table(index="candidate_id", columns="workload", values="rate_per_s", aggfunc="sum")
    side = {r: rates[rates.index.map(by_id["role"]) == r] for r in ("prefill", "decode")}
    rng = np.random.default_rng(SEED)
    mix = _draw_mix(problem, side["prefill"].sum(axis=0).to_dict(), rng,
                    smallest_per_s=float(routed["rate_per_s"].min()))
    n = len(mix.arrival_s)
    common = {"rate_per_s": mix.rate_per_s, "seed": SEED}

    def pool_of(cid, role):
        """One deployment as a DisaggArrays of its side (a prefill replica runs batch 1)."""
        row = candidates.loc[[cid]]
        arrays = workload_arrays(problem, row, _workload(problem, mix.names[0]))
        p = params.of(row)
        if role == "prefill":
            return DisaggArrays(arrays.replace(batch=np.ones_like(np.asarray(arrays.batch, dtype=float))), arrays,
                                p, p, prefill_replicas=float(by_id.loc[cid, "replicas"]))
        return DisaggArrays(arrays, arrays, p, p, decode_replicas=float(by_id.loc[cid, "replicas"]))

    pre, pre_ids = _assign(rng, mix.label, mix.names, side["prefill"])
    dec, dec_ids = _assign(rng, mix.label, mix.names, side["decode"])
    prefill = {cid: pool_of(cid, "prefill") for cid in pre_ids}
    decode = {cid: pool_of(cid, "decode") for cid in dec_ids}
    done, overhead = np.full(n, np.nan), np.zeros(n)
    for j, cid in enumerate(pre_ids):
        d, idx = prefill[cid], np.flatnonzero(pre == j)
        _, done[idx] = run_prefill_pool(d, mix.arrival_s[idx], mix.prompt[idx], prefix_hit_fraction=mix.hit[idx],
                                        prefill_chunk_tokens=_chunk_tokens(d.prefill_params), **common)
        overhead[idx] = request_overhead_s(d.prefill_params)
    kv_arrival = np.full(n, np.nan)
    for (j, pid), (m, did) in itertools.product(enumerate(pre_ids), enumerate(dec_ids)):
        idx = np.flatnonzero((pre == j) & (dec == m))
        link = transfer_bytes_per_s(problem.catalog.gpu(candidates.loc[pid, "gpu"]),
                                    problem.catalog.gpu(candidates.loc[did, "gpu"]))
        pair = DisaggArrays(prefill[pid].prefill, decode[did].decode, prefill[pid].prefill_params,
                            decode[did].decode_params, scale_out_bytes_per_s=link)
        kv_arrival[idx] = done[idx] + kv_transfer_time_s(pair, mix.prompt[idx].astype(float))
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    for m, cid in enumerate(dec_ids):
        idx = np.flatnonzero(dec == m)
        first[idx], finish[idx] = run_decode_pool(decode[cid], kv_arrival[idx], mix.prompt[idx], mix.output[idx],
                                                  prefill_chunk_tokens=_chunk_tokens(decode[cid].decode_params),
                                                  **common)
    measured = np.isfinite(first)
    measured[: int(math.floor(DEFAULT_WARMUP_FRACTION * n))] = False
    ttft = first - mix.arrival_s + overhead
    multi = measured & (mix.output > 1)
    tpot = (finish - first) / np.maximum(mix.output - 1, 1)
    out = {}
    for k, name in enumerate(mix.names):
        mine = mix.label == k
        for j, cid in enumerate(pre_ids):
            out[cid, name] = (_p95(ttft[measured & mine & (pre == j)]), math.nan)
        for m, cid in enumerate(dec_ids):
            out[cid, name] = (math.nan, _p95(tpot[multi & mine & (dec == m)]))
    return out


def verify_plans(problem, candidates: pd.DataFrame, params, plans: list) -> list:
    """``plans`` (:class:`planner.planning.RankedPlan`) with :data:`COLUMNS` in their routing.

    ``params``: the problem's serving parameters (:class:`planner.parameters.ProblemParams`).

    A deployment that appears in several plans with the same routed rates is simulated
    once, and so is a pool. Measured-capacity problems have nothing to simulate: the
    columns are NaN. The prefill and decode deployments of a pool are simulated as one
    pool (:func:`simulate_pool`): prefill rows carry the TTFT, decode rows the TPOT, the
    other column NaN.
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
                    continue  # a prefill/decode part of a pool: simulated with its pool below
                rates = {w: r / float(replicas[cid]) for w, r in zip(part["workload"], part["rate_per_s"])}
                key = (cid, tuple(sorted(rates.items())))
                if key not in memo:
                    row = candidates.loc[[cid]]
                    memo[key] = simulate_deployment(problem, row, params.of(row), rates)
                for i, w in zip(part.index, part["workload"]):
                    routing.loc[i, list(COLUMNS)] = memo[key].get(w, (math.nan, math.nan))
            for deps in _pools(p.deployments):
                part = routing[routing["candidate_id"].isin(deps["candidate_id"])]
                key = ("pool", tuple(sorted(zip(deps["candidate_id"], deps["replicas"]))),
                       tuple(sorted(zip(part["candidate_id"], part["workload"], part["rate_per_s"]))))
                if key not in memo:
                    memo[key] = simulate_pool(problem, candidates, params, deps, part)
                for i, cid, w in zip(part.index, part["candidate_id"], part["workload"]):
                    routing.loc[i, list(COLUMNS)] = memo[key].get((cid, w), (math.nan, math.nan))
        out.append(replace(p, routing=routing))
    return out


def _pools(deployments: pd.DataFrame) -> list[pd.DataFrame]:
    """The prefill/decode pools of a plan's deployments (sorted by pool id), each its rows."""
    if "pool" not in deployments.columns:
        return []
    pooled = deployments[deployments["pool"].map(lambda v: isinstance(v, str))]
    return [rows for _, rows in pooled.groupby("pool", sort=True)]
