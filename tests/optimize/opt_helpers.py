"""Instance factories shared by the optimizer tests (imported by basename)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.optimize import PlanningInstance, SolverOptions

FAST = SolverOptions(time_limit_s=20.0)
MELANGE_WORKLOADS = ["short_in_short_out", "short_in_long_out", "long_in_short_out", "long_in_long_out"]


def melange_instance(**options) -> PlanningInstance:
    """Melange (Griggs et al. 2024) example: A10G vs A100-80GB on a 30 req/s mix."""
    cands = pd.DataFrame({"gpu": ["a10g", "a100-80gb"], "gpus_per_replica": [1, 1],
                          "usd_per_replica_hour": [1.01, 3.67], "source": ["melange", "melange"]},
                         index=pd.Index(["a10g-x1", "a100-x1"], name="candidate_id"))
    cap = pd.DataFrame([[2, 1, 5, 2], [20, 20, 40, 20]], index=cands.index, columns=MELANGE_WORKLOADS,
                       dtype=float)
    mix = np.array([[0.2, 0.1], [0.5, 0.2]]).ravel()   # fractions of the request mix
    rate = pd.Series(mix * 30.0, index=MELANGE_WORKLOADS)
    return PlanningInstance(cands, cap, rate, **options)


def random_instance(seed: int, *, n_max: int = 4, m_max: int = 2, limits: bool = True) -> PlanningInstance:
    """A tiny random instance with small integer capacities and prices."""
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(2, n_max + 1)), int(rng.integers(1, m_max + 1))
    ids = [f"c{i}" for i in rng.permutation(n)]
    gpu = rng.choice(["g1", "g2"], size=n)
    cands = pd.DataFrame({"gpu": gpu, "gpus_per_replica": rng.integers(1, 3, size=n),
                          "usd_per_replica_hour": rng.integers(2, 17, size=n) / 2},
                         index=pd.Index(ids, name="candidate_id"))
    cap = rng.integers(1, 7, size=(n, m)) * (rng.random((n, m)) > 0.2)
    workloads = [f"w{k}" for k in range(m)]
    capacity = pd.DataFrame(cap.astype(float), index=cands.index, columns=workloads)
    rate = pd.Series(rng.integers(1, 7, size=m).astype(float), index=workloads)
    opts = {}
    if limits and rng.random() < 0.3:
        opts["inventory_gpus"] = {"g1": int(rng.integers(0, 7))}
    if limits and rng.random() < 0.3:
        opts["budget_usd_per_hour"] = float(rng.integers(4, 30))
    if limits and rng.random() < 0.2:
        opts["max_distinct_configs"] = int(rng.integers(1, 3))
    if limits and rng.random() < 0.25:
        opts["redundancy_workloads"] = ("w0",)
    if rng.random() < 0.5:
        opts["slices_per_workload"] = int(rng.integers(1, 4))
    return PlanningInstance(cands, capacity, rate, **opts)


def tie_instance() -> PlanningInstance:
    """Many equal-cost optima: identical price/capacity on three GPU types, two workloads."""
    ids = ["b-2", "a-1", "c-3", "d-4", "e-5"]
    cands = pd.DataFrame({"gpu": ["t1", "t2", "t3", "t1", "t2"], "gpus_per_replica": [1, 1, 1, 2, 2],
                          "usd_per_replica_hour": [2.0, 2.0, 2.0, 4.0, 4.0]},
                         index=pd.Index(ids, name="candidate_id"))
    capacity = pd.DataFrame({"chat": [3.0, 3.0, 3.0, 6.0, 6.0], "rag": [2.0, 2.0, 2.0, 4.0, 4.0]},
                            index=cands.index)
    rate = pd.Series({"chat": 7.0, "rag": 5.0})
    return PlanningInstance(cands, capacity, rate)


def pooled(rows):
    """Candidates from (id, role, pool format, gpu, gpus, price, capacity per workload) rows."""
    ids = [r[0] for r in rows]
    cands = pd.DataFrame({"gpu": [r[3] for r in rows], "gpus_per_replica": [r[4] for r in rows],
                          "usd_per_replica_hour": [r[5] for r in rows], "model": "m",
                          "quantization": [r[2].split("/")[0] for r in rows],
                          "kv_cache_dtype": [r[2].split("/")[1] for r in rows],
                          "role": [r[1] for r in rows]}, index=pd.Index(ids, name="candidate_id"))
    cap = pd.DataFrame([list(r[6]) for r in rows], index=cands.index,
                       columns=[f"w{k}" for k in range(len(rows[0][6]))], dtype=float)
    return cands, cap


def with_random_limits(rng, cands, cap, rate, inventory) -> PlanningInstance:
    """The instance with random slices, g1 inventory (chance, low, high), distinct-config,
    N+1 and budget limits."""
    chance, low, high = inventory
    opts = {"slices_per_workload": int(rng.integers(1, 4))} if rng.random() < 0.5 else {}
    if rng.random() < chance:
        opts["inventory_gpus"] = {"g1": int(rng.integers(low, high))}
    if rng.random() < 0.3:
        opts["max_distinct_configs"] = int(rng.integers(2, 4))
    if rng.random() < 0.3:
        opts["redundancy_workloads"] = ("w0",)
    if rng.random() < 0.2:
        opts["budget_usd_per_hour"] = float(rng.integers(8, 30))
    return PlanningInstance(cands, cap, rate, **opts)


def random_pooled_instance(seed):
    """Prefill/decode pools of one model (a pool is often a cheaper or stronger copy of
    another) plus aggregated candidates, with random limits."""
    rng = np.random.default_rng(2000 + seed)
    m = int(rng.integers(1, 3))
    base = [(role, str(rng.choice(["g1", "g2"])), int(rng.integers(1, 3)), float(rng.integers(2, 6)),
             rng.integers(0, 6, size=m).astype(float)) for role in ("prefill", "decode")
            for _ in range(int(rng.integers(1, 3)))]
    rows = []
    for pool in ("bf16/bf16", "fp16/fp16", "bf16/fp8", "int8/fp8")[:int(rng.integers(2, 5))]:
        shift = int(rng.integers(-1, 3))   # -1: a stronger copy of the base pool, 0: mixed, 1-2: weaker
        for n, (role, gpu, g, price, cap) in enumerate(base):
            if shift > 0:
                cap = np.maximum(cap - rng.integers(0, 2, size=m), 0)
                price = price + 0.5 * int(rng.integers(0, 2))
            elif shift < 0:
                cap = cap + rng.integers(0, 2, size=m)
                price = price - 0.5 * int(rng.integers(0, 2))
            elif rng.random() < 0.5:
                cap = np.maximum(cap + rng.integers(-1, 2, size=m), 0)
                price = price + 0.5 * int(rng.integers(-1, 2))
            else:
                gpu, price = str(rng.choice(["g1", "g2"])), float(rng.integers(2, 6))
                cap = rng.integers(0, 6, size=m)
            rows.append((f"{pool}-{role}-{n}", role, pool, gpu, g, max(price, 1.0), cap))
    for n in range(int(rng.integers(0, 3))):
        rows.append((f"agg-{n}", "both", "bf16/bf16", str(rng.choice(["g1", "g2"])), 1,
                     float(rng.integers(3, 9)), rng.integers(0, 4, size=m)))
    cands, cap = pooled(rows)
    rate = pd.Series(rng.integers(1, 7, size=m).astype(float), index=cap.columns)
    return with_random_limits(rng, cands, cap, rate, inventory=(0.3, 0, 8))
