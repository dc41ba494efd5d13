"""Dominance pruning (planner.optimize.prune) against brute-force readings of its definitions."""

import itertools

import numpy as np
import pandas as pd

from planner.optimize.prune import (NO_CAPACITY, NO_PARTNER, block_codes, prune_dominated, prune_dominated_pools,
                                    role_blocks)

WORKLOADS = ["chat", "code"]


def _candidates(seed: int, n: int, roles: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """n random candidates on a coarse grid (ties and dominance are common), sorted by id."""
    rng = np.random.default_rng(seed)
    ids = [f"c{i:03d}" for i in range(n)]
    frame = pd.DataFrame({
        "gpu": rng.choice(["h100", "h200"], n),
        "gpus_per_replica": rng.choice([1, 2, 4], n),
        "usd_per_replica_hour": rng.choice([2.0, 3.0, 4.0], n),
    }, index=pd.Index(ids, name="candidate_id"))
    if roles:
        frame["role"] = rng.choice(["prefill", "decode"], n)
        frame["model"] = "m"
        frame["quantization"] = rng.choice(["bf16", "fp8", "int4", "nvfp4"], n)
        frame["kv_cache_dtype"] = rng.choice(["bf16", "fp8"], n)
    cap = pd.DataFrame(rng.choice([0.0, 1.0, 2.0, 3.0], (n, len(WORKLOADS))), index=frame.index,
                       columns=WORKLOADS)
    if roles:   # a copy of one pool with at least its capacities: it covers that pool
        copy = frame[(frame["quantization"] == "bf16") & (frame["kv_cache_dtype"] == "bf16")]
        more = copy.assign(kv_cache_dtype="fp16").rename(index=lambda i: "d" + i[1:])
        frame = pd.concat([frame, more])
        cap = pd.concat([cap, (cap.loc[copy.index] + rng.integers(0, 2, (len(copy), len(WORKLOADS))))
                         .set_axis(more.index)])
    return frame, cap


def _weak(frame, cap, i, j) -> bool:
    """Candidate j weakly dominates candidate i (same GPU, no more GPUs, price, at least the capacity)."""
    a, b = frame.loc[i], frame.loc[j]
    return bool(a["gpu"] == b["gpu"] and b["gpus_per_replica"] <= a["gpus_per_replica"]
                and b["usd_per_replica_hour"] <= a["usd_per_replica_hour"]
                and (cap.loc[j] >= cap.loc[i]).all())


def _strict(frame, cap, i, j) -> bool:
    a, b = frame.loc[i], frame.loc[j]
    return bool(b["gpus_per_replica"] < a["gpus_per_replica"]
                or b["usd_per_replica_hour"] < a["usd_per_replica_hour"]
                or (cap.loc[j] > cap.loc[i]).any() or j < i)


def test_prune_dominated_matches_its_definition_and_keeps_a_dominator():
    for seed in range(3):
        frame, cap = _candidates(seed, 40, roles=False)
        pruned = prune_dominated(frame, cap, block=7)   # several blocks per GPU type
        useless = ~(cap > 0).any(axis=1)
        live = [j for j in frame.index if not useless[j]]
        expected = {j for j in live if any(i != j and _weak(frame, cap, j, i) and _strict(frame, cap, j, i)
                                           for i in live)}
        assert set(pruned.index) == expected | set(frame.index[useless])
        assert (pruned[useless[pruned.index].to_numpy()] == NO_CAPACITY).all()
        for j, i in pruned.items():
            if i != NO_CAPACITY:
                assert i not in pruned.index and _weak(frame, cap, j, i), (j, i)
        assert prune_dominated(frame, cap).equals(pruned)   # the block size changes nothing
        assert len(expected) >= 5


def _kept_dominator(rows, cap, gpr, price, ids) -> str:
    """The maximal element among the dominators ``rows`` of a candidate (none of them
    dominates it), the first by larger capacity sum, fewer GPUs, lower price, position: the
    per-row reading of the kept dominator of :func:`prune_dominated`."""
    order = np.lexsort((rows, price, gpr, -cap.sum(axis=1)))
    for pos in order:
        beaten = ((cap >= cap[pos]).all(axis=1) & (gpr <= gpr[pos]) & (price <= price[pos])
                  & ((cap > cap[pos]).any(axis=1) | (gpr < gpr[pos]) | (price < price[pos])
                     | (rows < rows[pos])))
        beaten[pos] = False
        if not beaten.any():
            return str(ids[rows[pos]])
    raise AssertionError("no maximal dominator")   # a strict partial order has one


def test_prune_dominated_keeps_the_per_row_kept_dominator():
    """Each pruned candidate's dominator is the per-row maximal dominator of its own
    dominators, with plain capacities and with role blocks (grouped by block or not)."""
    checked = 0
    for seed, roles in itertools.product(range(3), (False, True)):
        frame, cap = _candidates(seed, 60, roles=roles)
        frame, cap = frame.sort_index(), cap.sort_index()
        if roles:
            block, labels = block_codes(frame)
            cap = role_blocks(labels[block], cap)
        c, gpr = cap.to_numpy(float), frame["gpus_per_replica"].to_numpy(float)
        price, ids = frame["usd_per_replica_hour"].to_numpy(float), frame.index.to_numpy()
        pruned = prune_dominated(frame, cap, block=5)
        if roles:
            assert prune_dominated(frame, cap, blocks=block).equals(pruned)
        gpu = frame["gpu"].to_numpy()
        for j in map(frame.index.get_loc, pruned.index[pruned != NO_CAPACITY]):
            dom = np.array([k for k in range(len(frame)) if k != j and gpu[k] == gpu[j] and gpr[k] <= gpr[j]
                            and price[k] <= price[j] and (c[k] >= c[j]).all()
                            and ((c[k] > c[j]).any() or gpr[k] < gpr[j] or price[k] < price[j] or k < j)])
            assert _kept_dominator(dom, c[dom], gpr[dom], price[dom], ids) == pruned[ids[j]], ids[j]
            checked += 1
    assert checked >= 30


def test_prune_dominated_pools_matches_its_definition():
    dropped_pools = 0
    for seed in range(4):
        frame, cap = _candidates(seed, 48, roles=True)
        pools = (frame["model"] + "|" + frame["quantization"] + "|" + frame["kv_cache_dtype"]).to_numpy()
        roles = frame["role"].to_numpy()
        members = {(k, r): list(frame.index[(pools == k) & (roles == r)])
                   for k in set(pools) for r in ("prefill", "decode")}
        live = sorted(k for k in set(pools) if members[k, "prefill"] and members[k, "decode"])

        def covers(b, a):
            return all(any(_weak(frame, cap, i, j) for j in members[b, r]) for r in ("prefill", "decode")
                       for i in members[a, r])

        beats = {(b, a) for b, a in itertools.permutations(live, 2)
                 if covers(b, a) and (not covers(a, b) or b < a)}
        dropped = {a for _, a in beats}
        dropped_pools += len(dropped)
        pruned = prune_dominated_pools(frame, cap)
        partnerless = {j for k in set(pools) - set(live) for r in ("prefill", "decode")
                       for j in members[k, r]}
        expected = partnerless | {j for a in dropped for r in ("prefill", "decode") for j in members[a, r]}
        assert set(pruned.index) == expected
        assert (pruned[sorted(partnerless)] == NO_PARTNER).all()
        for j, i in pruned.drop(sorted(partnerless)).items():   # a kept pool's dominator of the same role
            assert i not in pruned.index and frame.loc[i, "role"] == frame.loc[j, "role"]
            assert _weak(frame, cap, j, i)
    assert dropped_pools   # the seeds drop pools, not only partnerless candidates


def test_pool_dominators_are_the_kept_dominator_of_each_row():
    """The pooled pass picks, for every candidate of a dropped pool, what the per-row
    :func:`_kept_dominator` picks among its dominators in the pool that replaces it."""
    checked = 0
    for seed in range(4):
        frame, cap = _candidates(seed, 48, roles=True)
        pruned = prune_dominated_pools(frame, cap)
        pos = {cid: k for k, cid in enumerate(frame.index)}
        c, gpr = cap.to_numpy(float), frame["gpus_per_replica"].to_numpy(float)
        price = frame["usd_per_replica_hour"].to_numpy(float)
        ids = frame.index.to_numpy()
        for j, i in pruned[pruned != NO_PARTNER].items():
            pool_of_i = frame.loc[i, ["quantization", "kv_cache_dtype"]].tolist()
            same = ((frame["quantization"] == pool_of_i[0]) & (frame["kv_cache_dtype"] == pool_of_i[1])
                    & (frame["role"] == frame.loc[j, "role"]))
            dom = np.array([pos[k] for k in frame.index[same.to_numpy()] if _weak(frame, cap, j, k)])
            assert _kept_dominator(dom, c[dom], gpr[dom], price[dom], ids) == i, (j, i)
            checked += 1
    assert checked >= 10


def test_replica_multiples_compare_near_equal_capacities_exactly():
    """Three replicas of a 0.1/s candidate replace one of 0.3/s (3/10 = 3/10 exactly) but not
    one of 0.30000000000000004/s (above 3/10 as written, though 3 * 0.1 == it in floats)."""
    from planner.optimize.prune import prune_replica_multiples

    frame = pd.DataFrame({"gpu": "g", "gpus_per_replica": [1, 3, 3, 3], "usd_per_replica_hour": [1.0, 3.0, 3.0, 3.0],
                          "role": "prefill", "model": "m", "quantization": "bf16", "kv_cache_dtype": "bf16"},
                         index=pd.Index(["a", "b", "c", "d"], name="candidate_id"))
    assert 3 * 0.1 == 0.30000000000000004
    cap = pd.DataFrame({"chat": [0.1, 0.3, 0.30000000000000004, 0.29]}, index=frame.index)
    assert prune_replica_multiples(frame, cap).to_dict() == {"b": "a", "d": "a"}
