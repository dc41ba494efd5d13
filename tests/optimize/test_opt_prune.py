"""Dominance pruning removes candidates without changing the optimum."""

import numpy as np
import pandas as pd
import pytest
from opt_helpers import FAST, pooled, random_pooled_instance, with_random_limits

from planner.optimize import (PlanningInstance, SolveStatus, build_model, prune_dominated, read_plan,
                              run_solver)
from planner.optimize.prune import NO_CAPACITY, candidate_blocks, candidate_pools, role_blocks


def test_prune_rules():
    cands = pd.DataFrame({"gpu": ["g", "g", "g", "g", "h", "g"], "gpus_per_replica": [1, 1, 2, 1, 1, 1],
                          "usd_per_replica_hour": [1.0, 1.0, 1.0, 2.0, 2.0, 1.0]},
                         index=["a", "b", "c", "d", "e", "f"])
    cap = pd.DataFrame({"w1": [3.0, 3.0, 3.0, 4.0, 1.0, 0.0], "w2": [2.0, 2.0, 2.0, 1.0, 1.0, 0.0]},
                       index=cands.index)
    pruned = prune_dominated(cands, cap)
    # b duplicates a (a first); c needs more GPUs for the same; d trades price for w1 capacity;
    # e is another GPU type; f serves nothing.
    assert pruned.to_dict() == {"b": "a", "c": "a", "f": NO_CAPACITY}


def _random(seed):
    rng = np.random.default_rng(1000 + seed)
    n, m = int(rng.integers(4, 10)), int(rng.integers(1, 4))
    ids = [f"k{i:02d}" for i in rng.permutation(n)]
    cands = pd.DataFrame({"gpu": rng.choice(["g1", "g2"], size=n), "gpus_per_replica": rng.integers(1, 3, n),
                          "usd_per_replica_hour": rng.integers(2, 6, size=n) / 2.0}, index=ids)
    cap = pd.DataFrame(rng.integers(0, 5, size=(n, m)).astype(float), index=ids,
                       columns=[f"w{k}" for k in range(m)])
    cap.iloc[0] = 4.0
    rate = pd.Series(rng.integers(1, 9, size=m).astype(float), index=cap.columns)
    opts = {}
    if rng.random() < 0.4:
        opts["max_distinct_configs"] = int(rng.integers(1, 3))
    if rng.random() < 0.4:
        opts["inventory_gpus"] = {"g1": int(rng.integers(0, 8))}
    if rng.random() < 0.4:
        opts["redundancy_workloads"] = ("w0",)
    if rng.random() < 0.5:
        opts["slices_per_workload"] = int(rng.integers(1, 4))
    return PlanningInstance(cands, cap, rate, **opts)


@pytest.mark.parametrize("seed", range(20))
def test_pruning_keeps_the_optimum(seed):
    inst = _random(seed)
    results = []
    for prune in (True, False):
        built = build_model(inst, prune=prune)
        result = run_solver(built, FAST)
        results.append((result, read_plan(built, result), built))
    (pruned, plan, built), (full, _, _) = results
    assert pruned.status == full.status
    if full.status == SolveStatus.OPTIMAL:
        assert pruned.objective_usd_per_hour == pytest.approx(full.objective_usd_per_hour, abs=1e-9)
        assert not set(plan.deployments["candidate_id"]) & set(built.pruned.index)


def test_random_pruning_cases_actually_prune():
    assert sum(len(build_model(_random(s)).pruned) > 0 for s in range(20)) >= 10


def test_pool_rules():
    from planner.optimize.prune import NO_PARTNER, prune_dominated_pools

    cands, cap = pooled([
        ("a-p", "prefill", "bf16/bf16", "g", 1, 2.0, [4]), ("a-d", "decode", "bf16/bf16", "g", 1, 1.0, [6]),
        ("b-p", "prefill", "fp16/fp16", "g", 1, 2.0, [4]), ("b-d", "decode", "fp16/fp16", "g", 1, 1.0, [6]),
        ("c-p", "prefill", "bf16/fp8", "g", 1, 2.0, [4]), ("c-d", "decode", "bf16/fp8", "g", 1, 1.0, [9]),
        ("e-p", "prefill", "int8/fp8", "g", 1, 2.0, [3]), ("e-d", "decode", "int8/fp8", "h", 1, 1.0, [9]),
        ("f-p", "prefill", "int4/fp8", "g", 1, 1.0, [9]),
        ("z", "both", "bf16/bf16", "g", 1, 1.0, [1]),
    ])
    pruned = prune_dominated_pools(cands, cap)
    # a and b are the same pool under two names (both dropped for c, which decodes more at
    # the same price); e decodes on another GPU type (kept); f has no decode candidate;
    # the aggregated z is no pool's.
    assert pruned.to_dict() == {"a-d": "c-d", "a-p": "c-p", "b-d": "c-d", "b-p": "c-p", "f-p": NO_PARTNER}
    # of two identical pools the first key stays
    two = ["a-p", "a-d", "b-p", "b-d"]
    same = prune_dominated_pools(cands.loc[two], cap.loc[two])
    assert same.to_dict() == {"b-d": "a-d", "b-p": "a-p"}


def _pruned_and_full(inst):
    """The instance solved with and without pruning: the same status and optimum."""
    built = build_model(inst)
    pruned, full = run_solver(built, FAST), run_solver(build_model(inst, prune=False), FAST)
    assert pruned.status == full.status
    if full.status == SolveStatus.OPTIMAL:
        assert pruned.objective_usd_per_hour == pytest.approx(full.objective_usd_per_hour, abs=1e-9)
    return built, pruned, full


@pytest.mark.parametrize("seed", range(16))
def test_pool_pruning_keeps_the_optimum(seed):
    built, pruned, full = _pruned_and_full(random_pooled_instance(seed))
    if full.status == SolveStatus.OPTIMAL:
        assert not set(read_plan(built, pruned).deployments["candidate_id"]) & set(built.pruned.index)


def test_random_pool_cases_actually_prune_pools():
    def across_pools(seed):   # a candidate replaced by one of another pool
        built = build_model(random_pooled_instance(seed))
        pool = dict(zip(built.candidates.index, candidate_pools(built.candidates)))
        mine = candidate_pools(random_pooled_instance(seed).candidates.loc[built.pruned.index])
        return any(pool.get(by) not in (None, own) for by, own in zip(built.pruned, mine))
    assert sum(map(across_pools, range(16))) >= 6


def test_replica_multiple_rules():
    from planner.optimize.prune import prune_replica_multiples

    cands, cap = pooled([
        ("a", "prefill", "bf16/bf16", "g", 1, 1.0, [3]), ("b", "prefill", "bf16/bf16", "g", 2, 2.0, [6]),
        ("c", "prefill", "bf16/bf16", "g", 2, 2.0, [7]), ("d", "prefill", "bf16/bf16", "g", 4, 4.0, [12]),
        ("e", "prefill", "bf16/bf16", "g", 4, 3.0, [5]), ("f", "prefill", "bf16/bf16", "h", 2, 2.0, [2]),
        ("g", "prefill", "fp8/fp8", "g", 2, 2.0, [4]), ("x", "decode", "bf16/bf16", "g", 1, 1.0, [10]),
        ("y", "decode", "bf16/bf16", "g", 2, 1.5, [10]), ("z", "both", "bf16/bf16", "g", 2, 2.0, [1]),
    ])
    # b and d are 2 and 4 replicas of a; e is 3 of a (its price allows three); c carries more
    # than two a; f is another GPU type, g another pool, z aggregated; y costs less than 2 x.
    assert prune_replica_multiples(cands, cap).to_dict() == {"b": "a", "d": "a", "e": "a"}


def _random_sized(seed):
    """One prefill/decode pool with replicas of 1, 2 and 4 GPUs priced per GPU, capacities
    near proportional to the GPUs, plus random limits."""
    rng = np.random.default_rng(3000 + seed)
    m = int(rng.integers(1, 3))
    rows = []
    per_gpu = {"g1": 1.0, "g2": 1.5}
    for role in ("prefill", "decode"):
        base = {gpu: rng.integers(2, 5, size=m) for gpu in per_gpu}   # capacity per GPU
        for n in range(int(rng.integers(3, 6))):
            gpu, g = str(rng.choice(["g1", "g2"], p=[0.7, 0.3])), int(rng.choice([1, 2, 4]))
            cap = np.floor(g * base[gpu] * rng.uniform(0.75, 1.1, size=m))
            rows.append((f"{role}-{n}", role, "bf16/bf16", gpu, g, g * per_gpu[gpu] + 0.5 * (rng.random() < 0.25),
                         cap))
    cands, cap = pooled(rows)
    rate = pd.Series(rng.integers(2, 10, size=m).astype(float), index=cap.columns)
    return with_random_limits(rng, cands, cap, rate, inventory=(0.4, 2, 10))


@pytest.mark.parametrize("seed", range(16))
def test_replica_multiple_pruning_keeps_the_optimum(seed):
    _pruned_and_full(_random_sized(seed))


def test_random_sized_cases_actually_prune_multiples():
    from planner.optimize.prune import prune_replica_multiples

    def multiples(seed):   # the rule fires on what the plain dominance leaves
        inst = _random_sized(seed)
        cap = role_blocks(candidate_blocks(inst.candidates), inst.capacity_per_s)
        left = inst.candidates.drop(prune_dominated(inst.candidates, cap).index)
        return len(prune_replica_multiples(left, inst.capacity_per_s.loc[left.index])) > 0
    assert sum(map(multiples, range(16))) >= 6


def _maxima_by_hand(codes, cap):
    """Rows no other row of their group matches or beats on every workload (of equal rows
    the first): the pairwise definition of :func:`planner.optimize.prefilter._capacity_maxima`."""
    keep = []
    for j in range(len(cap)):
        same = [i for i in range(len(cap)) if codes[i] == codes[j] and i != j]
        if not any((cap[i] >= cap[j]).all() and ((cap[i] > cap[j]).any() or i < j) for i in same):
            keep.append(j)
    return keep


@pytest.mark.parametrize("workloads,blocks", [(1, False), (2, False), (3, False), (3, True), (4, True)])
def test_capacity_maxima_are_the_pairwise_ones(workloads, blocks):
    from planner.optimize.prefilter import _capacity_maxima
    from planner.optimize.codes import group_codes

    rng = np.random.default_rng(workloads)
    n = 300
    codes = rng.integers(0, 60, n)                     # groups of 0 to ~12 rows, some of one
    cap = rng.integers(0, 4, (n, workloads)).astype(float)
    if blocks:   # role_blocks-like: most groups serve one column (or none), a few several
        cap *= (np.arange(workloads)[None, :] == (codes % workloads)[:, None]) | (codes[:, None] % 7 == 0)
    groups = pd.DataFrame({"gpu": [f"g{c % 7}" for c in codes], "price": codes // 7})
    got = _capacity_maxima(group_codes([pd.factorize(groups[c]) for c in groups]), pd.DataFrame(cap), block=16)
    assert got.tolist() == _maxima_by_hand(codes, cap)
    assert 0 < len(got) < n


@pytest.mark.parametrize("dtype", ["str", object])   # labels per combination, or joined row by row
def test_blocks_and_pools_are_the_rows_joined(dtype):
    rng = np.random.default_rng(7)
    n = 500
    cands = pd.DataFrame({"gpu": rng.choice(["g", "h"], n), "role": rng.choice(["both", "prefill", "decode"], n),
                          "model": rng.choice(["m1", "m2"], n), "quantization": rng.choice(["bf16", "fp8"], n),
                          "kv_cache_dtype": rng.choice(["fp8", "bf16"], n)}).astype(dtype)
    cands.loc[cands.index[::7], "role"] = None          # a missing role is ``both``
    pools = candidate_pools(cands)
    blocks = candidate_blocks(cands)
    for i, row in enumerate(cands.itertuples()):
        both = not isinstance(row.role, str) or row.role == "both"
        pool = "" if both else f"{row.model}|{row.quantization}|{row.kv_cache_dtype}"
        assert pools[i] == pool
        assert blocks[i] == ("both" if both else f"{row.role}@{pool}")
    assert candidate_blocks(cands.assign(role="both")).tolist() == ["both"] * n
    assert candidate_pools(cands.iloc[:0]).tolist() == candidate_blocks(cands.iloc[:0]).tolist() == []


def test_prefilter_on_plain_capacities_is_the_one_on_role_blocks():
    """prefilter_dominated's first pass on the plain capacities keeps what it keeps on the
    role-block capacities (a group holds one block), and its cross-type pass on the role
    blocks of the maxima alone what it keeps on the whole table's role blocks."""
    from planner.dimensions import factorize_column
    from planner.optimize.codes import group_codes
    from planner.optimize.prefilter import _capacity_maxima, _cheaper_elsewhere, prefilter_dominated
    from planner.optimize.prune import block_codes

    rng = np.random.default_rng(11)
    n = 600
    cands = pd.DataFrame({"gpu": rng.choice(["g", "h", "k"], n), "gpus": rng.choice([1, 2], n),
                          "usd_per_replica_hour": rng.choice([1.0, 2.0], n), "model": rng.choice(["m1", "m2"], n),
                          "role": rng.choice(["both", "prefill", "decode"], n), "quantization": rng.choice(["bf16", "fp8"], n),
                          "kv_cache_dtype": "bf16"}).astype("str").astype({"gpus": int, "usd_per_replica_hour": float})
    cap = pd.DataFrame(rng.choice([0.0, 0.5, 1.0, 1.5], (n, 3)), columns=["a", "b", "c"])
    block, labels = block_codes(cands)
    codes = group_codes([factorize_column(cands[c]) for c in ("gpu", "gpus", "usd_per_replica_hour", "model")]
                        + [(block, labels)])
    blocked = role_blocks(labels[block], cap)
    first = _capacity_maxima(codes, cap)
    assert first.tolist() == _capacity_maxima(codes, blocked).tolist()
    for limited in (set(), {"g"}):
        whole = first[~_cheaper_elsewhere(cands.iloc[first], blocked.iloc[first], limited)]
        assert prefilter_dominated(cands, cap, limited).tolist() == whole.tolist()
        assert 0 < len(whole) < len(first) < n
