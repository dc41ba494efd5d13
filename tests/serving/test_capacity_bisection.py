"""The capacity bisection's and state_at_rate's shortcuts (planner/serving/queueing.py,
replica_state.py, tails.py, roofline.StepModel.monotone_rows) against plain bisections
written out here: the same arrays, bit for bit, on seeded random rows (dense and MoE,
several GPUs, TP, PP, batches, efficiencies); the bounds they rest on."""

import numpy as np
import pandas as pd
import pytest

from planner.configs import config_arrays
from planner.serving import queueing, replica_state, tails
from planner.serving.params import ServingParams
from planner.serving.queueing import TrafficArrays, capacities_at_slos, state_at_occupancy, state_at_rate
from planner.traffic import LogNormal

P = ServingParams()
TRAFFIC = TrafficArrays.from_distributions(LogNormal(1500, 2500), LogNormal(250, 600))
#: Central and margined-like pairs, a tight one (most rows at n* = 0) and a loose one.
PAIRS = [(2.0, 0.03), (1.3868, 0.02456), (0.3, 0.012), (20.0, 0.2)]


def _random_rows(catalog, n=150, seed=7):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"model": rng.choice(["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b"], n),
                          "gpu": rng.choice(["h100-sxm", "a100-sxm-80gb", "l40s", "h200-sxm"], n),
                          "quantization": "bf16", "kv_cache_dtype": "bf16", "tp": rng.choice([1, 2, 4, 8], n),
                          "pp": rng.choice([1, 1, 2], n), "batch": rng.choice([1, 8, 64, 256, 1024], n),
                          "prompt_tokens": 1500.0, "output_tokens": 250.0, "context_tokens": np.nan})
    c = config_arrays(catalog, frame)[0]
    p = P.with_overrides(memory_efficiency=rng.uniform(0.5, 0.9, n), compute_efficiency=rng.uniform(0.3, 0.7, n))
    return c, p


def _plain_capacity(c, p, t, slo, steps=queueing.CAPACITY_BISECTION_STEPS) -> dict:
    """capacity_at_slo as docs/serving-model.md 9.6 states it: every state in full, no
    sharing, nothing kept, no decision by bounds."""
    ttft_slo, tpot_slo = slo
    n_max = queueing._n_max(c, p)

    def ok(s):
        return (s["ttft_p95_s"] <= ttft_slo) & (s["tpot_p95_s"] <= tpot_slo) & s["stable"]

    lo, hi = np.zeros(n_max.shape), n_max.copy()
    top_ok = ok(state_at_occupancy(c, p, t, n_max))
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        good = ok(state_at_occupancy(c, p, t, mid))
        lo, hi = np.where(good, mid, lo), np.where(good, hi, mid)
    n_star = np.where(top_ok, n_max, lo)
    final = state_at_occupancy(c, p, t, n_star)
    trickle = state_at_occupancy(c, p, t, np.full(n_max.shape, 1e-6))
    first = np.where(trickle["ttft_p95_s"] > ttft_slo, "ttft", np.where(trickle["tpot_p95_s"] > tpot_slo, "tpot", ""))
    return {"max_rate_per_s": np.nan_to_num(np.where(n_star > 0, final["rate_per_s"], 0.0)),
            "ttft_p95_s": final["ttft_p95_s"], "tpot_p95_s": final["tpot_p95_s"], "occupancy": n_star,
            "slo_violated_at_low_load": first}


def _assert_same(got: dict, ref: dict, where=""):
    assert list(got) == list(ref), where
    for key in ref:
        assert got[key].dtype == ref[key].dtype and got[key].tobytes() == ref[key].tobytes(), (where, key)


def test_capacity_bisection_equals_a_plain_full_bisection(catalog, monkeypatch):
    """Two pairs side by side (shared states, kept states, TPOT decided by the bracket) and
    per-row SLO arrays (no sharing): every array of the plain bisection of each pair."""
    c, p = _random_rows(catalog)
    monkeypatch.setenv("PLANNER_THREADS", "1")
    refs = {pair: _plain_capacity(c, p, TRAFFIC, pair) for pair in PAIRS}
    for pairs in (PAIRS[:2], PAIRS[2:], PAIRS):
        for pair, got in zip(pairs, capacities_at_slos(c, p, TRAFFIC, pairs)):
            _assert_same(got, refs[pair], pair)
    n = c.tp.size
    rows = [(np.full(n, a), np.full(n, b)) for a, b in PAIRS[:2]]
    for pair, got in zip(PAIRS[:2], capacities_at_slos(c, p, TRAFFIC, rows)):
        _assert_same(got, refs[pair], ("per-row", pair))
    occupancy = [refs[pair]["occupancy"] for pair in PAIRS]
    assert all((o > 0).any() for o in occupancy) and (occupancy[2] == 0).any()
    assert (occupancy[2] < occupancy[0]).any() and (occupancy[0] < occupancy[3]).any()


def test_monotone_rows_have_step_times_that_never_decrease(catalog):
    """StepModel.monotone_rows: dense rows (no expert term) whose times, in floating point,
    never decrease along a fine grid of decode batches nor with the prefill tokens."""
    c, p = _random_rows(catalog)
    model = queueing.step_model(c, p, TRAFFIC)
    rows = model.monotone_rows()
    assert rows.tolist() == (c.num_experts == 0).tolist()
    grid = np.concatenate([[0.0], np.sort(np.random.default_rng(6).uniform(0.0, 1100.0, 400))])
    previous = None
    for tokens in (0.0, 1.0, 300.0, 2048.0):
        times = np.stack([model.time(np.full(rows.size, n), tokens, 1500.0) for n in grid])
        assert (np.diff(times[:, rows], axis=0) >= 0.0).all(), tokens
        if previous is not None:
            assert (times[:, rows] >= previous[:, rows]).all(), tokens
        previous = times


def test_p95_floors_hold_at_every_occupancy_and_settle_rows(catalog):
    """_p95_floors are at most the p95s of state_at_occupancy on a grid of occupancies in
    [0, n_max] (dense rows proven, MoE rows -inf); the rows they settle are a real share of
    the tight pairs' rows, and the bisection of only the others gives the same arrays."""
    c, p = _random_rows(catalog)
    n_max = queueing._n_max(c, p)
    model = queueing.step_model(c, p, TRAFFIC)
    ttft_floor, tpot_floor = queueing.p95_floors(c, p, TRAFFIC, model, n_max)
    dense = c.num_experts == 0
    assert np.isfinite(ttft_floor[dense]).all() and np.isneginf(ttft_floor[~dense]).all() and (~dense).any()
    closest = np.inf
    for share in np.linspace(0.0, 1.0, 33):
        s = state_at_occupancy(c, p, TRAFFIC, n_max * share)
        # (NaN p95s, at n = 0 without spreads, meet no SLO either)
        assert not (s["ttft_p95_s"] < ttft_floor).any() and not (s["tpot_p95_s"] < tpot_floor).any()
        closest = min(closest, np.nanmin(s["tpot_p95_s"][dense] / tpot_floor[dense]),
                      np.nanmin(s["ttft_p95_s"][dense] / ttft_floor[dense]))
    assert closest < 1.05                           # the floors are close below somewhere
    never = queueing._never_met(c, p, TRAFFIC, model, n_max, PAIRS)
    settled = np.logical_and.reduce(never[:3])
    assert queueing.SETTLED_MIN_SHARE * settled.size <= settled.sum() < settled.size
    assert (never[1] & ~never[0]).any()          # the second pair skips rows of its own


def test_tpot_decisions_by_the_mixture_bracket_equal_the_p95s_decisions(catalog):
    """_meets on a state without its TPOT p95 decides as state_at_occupancy's p95s, at SLOs
    placed inside the bracket (the mixture computed on those rows), at its ends and outside."""
    c, p = _random_rows(catalog, n=300, seed=3)
    n_max = queueing._n_max(c, p)
    rng = np.random.default_rng(0)
    occupancy = n_max * rng.uniform(0.0, 1.0, n_max.size)
    full = state_at_occupancy(c, p, TRAFFIC, occupancy)
    parts = queueing._state_parts(queueing.step_model(c, p, TRAFFIC), TRAFFIC, occupancy, n_max,
                                  p.prefill_chunk_tokens, p.request_overhead_s)
    spreads = [np.sqrt(parts["tpot_common"] + parts["tpot_per_inv"] * inv) for inv in TRAFFIC.output_strata_inv]
    low, high, sure = tails.mixture_p95_bracket(spreads)
    with np.errstate(invalid="ignore"):
        offset = tails.mixture_p95_offset(spreads)
    tau, stable = parts["tpot_mean_s"], full["stable"]
    assert sure[occupancy > 0].all() and not sure.all()              # n = 0: no spread (not sure)
    assert (low[sure] <= offset[sure]).all() and (offset[sure] <= high[sure]).all() and (low < high)[sure].all()
    assert stable.any() and not stable.all()
    p95 = full["tpot_p95_s"][stable]
    for tpot_slo in (np.median(p95), tau + 0.5 * (low + high), tau + offset, tau + low, tau + high,
                     np.nextafter(tau + offset, 0.0), 0.0, np.inf):
        expected = (full["ttft_p95_s"] <= 5.0) & (full["tpot_p95_s"] <= tpot_slo) & stable
        got = queueing._meets(dict(parts), (5.0, tpot_slo), TRAFFIC.output_strata_inv)
        assert got.tobytes() == expected.tobytes()
    assert (tau[stable] + low[stable] < p95).any()             # an open bracket: the mixture decided


def test_mixture_bracket_holds_the_offset_and_is_sure_only_where_it_is_a_number():
    """mixture_p95_offset lies in mixture_p95_bracket's [low, high], spreads over 60 decades;
    outside the safe range (or NaN) ``sure`` is False (there the offset may be NaN)."""
    rng = np.random.default_rng(1)
    sds = [10.0 ** rng.uniform(-30, 30, 4000) for _ in range(4)]
    low, high, sure = tails.mixture_p95_bracket(sds)
    x = tails.mixture_p95_offset(sds)
    assert sure.all() and np.isfinite(x).all() and (low <= x).all() and (x <= high).all()
    odd = [np.array([1e-200, np.nan, 1e80]), np.array([1e-200, 1.0, 1.0])]
    assert not tails.mixture_p95_bracket(odd)[2].any()
    with np.errstate(all="ignore"):
        assert np.isnan(tails.mixture_p95_offset(odd)[0])     # s^2 underflows: why such rows are not sure


def _plain_state_at_rate(c, p, t, rate, steps=40) -> dict:
    """state_at_rate as one binary step per state call."""
    n_max = queueing._n_max(c, p)
    lo, hi = np.zeros(n_max.shape), n_max.astype(float)
    top = state_at_occupancy(c, p, t, hi)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        below = state_at_occupancy(c, p, t, mid)["rate_per_s"] < rate
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    state = state_at_occupancy(c, p, t, hi)
    overloaded = (top["rate_per_s"] < rate) | ~state["stable"]
    for key in ("tpot_p95_s", "ttft_p95_s", "tpot_mean_s"):
        state[key] = np.where(overloaded, np.inf, state[key])
    state["overloaded"] = overloaded
    return state


@pytest.mark.parametrize("points", [1, 40, queueing.RATE_TREE_POINTS])   # 1, 2 and 5 levels per call
def test_state_at_rate_equals_one_bisection_step_per_call(catalog, monkeypatch, points):
    c, p = _random_rows(catalog, n=20, seed=5)
    saturation = queueing.saturation_rate(c, p, TRAFFIC)
    rate = saturation * np.linspace(0.05, 1.2, saturation.size)       # some rows overloaded
    monkeypatch.setattr(queueing, "RATE_TREE_POINTS", points)
    got, ref = state_at_rate(c, p, TRAFFIC, rate), _plain_state_at_rate(c, p, TRAFFIC, rate)
    _assert_same(got, ref)
    assert got["overloaded"].any() and not got["overloaded"].all()


def test_bisection_levels_follow_the_binary_steps_of_any_predicate():
    """_bisect_levels with a predicate that is not monotone in n (and steps not a multiple of
    the levels) gives the binary bisection's brackets bit for bit."""
    rng = np.random.default_rng(2)
    top = rng.uniform(0.5, 3000.0, 200)

    def wavy(n):       # True on an irregular set of occupancies, per row
        return np.sin(n * 37.0 + np.arange(top.size)) > 0.3 * np.cos(n * 5.0)

    lo, hi = np.zeros(top.size), top.copy()
    for _ in range(17):
        mid = 0.5 * (lo + hi)
        go = wavy(mid)
        lo, hi = np.where(go, mid, lo), np.where(go, hi, mid)
    for levels in (1, 2, 3, 5):
        a, b, done = np.zeros(top.size), top.copy(), 0
        while done < 17:
            a, b = queueing._bisect_levels(a, b, min(levels, 17 - done), wavy)
            done += levels
        assert a.tobytes() == lo.tobytes() and b.tobytes() == hi.tobytes(), levels
    assert np.unique(np.round(lo / top, 6)).size > 50       # the rows took many different paths


def test_halfin_whitt_equals_the_general_erf_form():
    """erlang_c_halfin_whitt (beta clipped at 0, the erf of a non-negative argument) equals
    the formula with beta clipped at -8 and the signed erf, on loads around the servers,
    zero, negative, infinite and NaN inputs."""
    rng = np.random.default_rng(4)
    n = 20000
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-300, 5e-324, 1e300])
    c = np.where(rng.random(n) < 0.2, rng.choice(special, n), rng.choice([1.0, 8.0, 64.0, 1024.0], n))
    a = np.where(rng.random(n) < 0.2, rng.choice(special, n), c * rng.uniform(0.0, 1.3, n))
    a = np.where(rng.random(n) < 0.1, c * (1.0 - 1e-16 * rng.integers(0, 4, n)), a)
    v = np.where(rng.random(n) < 0.2, rng.choice(special, n), rng.uniform(1.0, 400.0, n))
    with np.errstate(all="ignore"):
        beta = (c - a) / np.sqrt(np.maximum(a * v, 1e-300))
        b = np.clip(beta, -8.0, 8.0)
        phi = np.exp(-0.5 * b * b) / np.sqrt(2.0 * np.pi)
        Phi = 0.5 * (1.0 + tails._erf(b / np.sqrt(2.0)))
        p = np.where(beta > 8.0, 0.0, 1.0 / (1.0 + b * Phi / phi))
        expected = np.where(a >= c, 1.0, np.where(a <= 0, 0.0, np.clip(p, 0.0, 1.0)))
        got = tails.erlang_c_halfin_whitt(c, a, v)
    assert np.array_equal(got, expected, equal_nan=True)
    assert ((got > 0.0) & (got < 1.0)).sum() > n // 10


def _plain_mixture_offset(sds, newton_steps=1):
    """mixture_p95_offset as one pass over every row (no rows at the floor set apart)."""
    s = np.maximum(np.stack(np.broadcast_arrays(*[np.asarray(v, dtype=float) for v in sds])), 1e-300)
    m2 = (s ** 2).mean(axis=0)
    kurt = 3.0 * ((s ** 4).mean(axis=0) / m2 ** 2 - 1.0)
    x = np.sqrt(m2) * (tails.Z95 + (tails.Z95 ** 3 - 3.0 * tails.Z95) * kurt / 24.0)
    low, high = tails.Z95 * s.min(axis=0), tails.Z95 * s.max(axis=0)
    x = np.clip(x, low, high)
    for _ in range(newton_steps):
        u = x / s
        erf = tails._erf_positive if (u > 0.0).all() else tails._erf
        cdf = (0.5 * (1.0 + erf(u / np.sqrt(2.0)))).mean(axis=0)
        pdf = (np.exp(-0.5 * u * u) / (np.sqrt(2.0 * np.pi) * s)).mean(axis=0)
        x = np.clip(x - (cdf - tails.P95) / np.maximum(pdf, 1e-300), low, high)
    return x


def test_mixture_offset_of_rows_at_the_floor_equals_one_pass():
    """mixture_p95_offset with rows whose spreads are all zero (or below the floor) set apart
    gives the one-pass numbers bit for bit (NaN bits included): some, all and none of the
    rows at the floor, NaN and huge spreads, one and four spreads, 2-D and 0-d inputs."""
    rng = np.random.default_rng(8)
    n = 3000
    zero = rng.random(n) < 0.3
    odd = rng.choice([np.nan, 1e-310, 1e200, -0.0, 0.0], n)
    sds = [np.where(zero, rng.choice([0.0, -0.0, 1e-301], n),
                    np.where(rng.random(n) < 0.05, odd, 10.0 ** rng.uniform(-6, 0, n))) for _ in range(4)]
    cases = [sds, [s[zero] for s in sds], [s[~zero] for s in sds], sds[:1], [s.reshape(60, 50) for s in sds],
             [np.float64(0.0)] * 4, [np.float64(0.01), np.float64(0.02)], [np.zeros(0)] * 4]
    with np.errstate(all="ignore"):
        for steps in (1, 2):
            for case in cases:
                got, ref = tails.mixture_p95_offset(case, steps), _plain_mixture_offset(case, steps)
                assert np.shape(got) == np.shape(ref)
                assert np.asarray(got).tobytes() == np.asarray(ref).tobytes()
        assert zero.any() and np.isnan(_plain_mixture_offset([np.zeros(3)])).all()   # why zero rows are "no"s


@pytest.mark.parametrize("share", [0.0, tails.ROWS_SUBSET_MAX_SHARE, 1.0])
def test_bisection_state_takes_the_ttft_only_where_the_tpot_may_be_met(catalog, monkeypatch, share):
    """_state_parts with the TPOT SLOs: every array of the full state, its bracket, and the
    TTFT p95 of the rows that may meet the TPOT SLO (stable, the bracket's low end within
    it), +inf elsewhere (computed on those rows only), or everywhere (on every row, past
    the share)."""
    c, p = _random_rows(catalog, n=300, seed=9)
    monkeypatch.setattr(tails, "ROWS_SUBSET_MAX_SHARE", share)
    n_max = queueing._n_max(c, p)
    model = queueing.step_model(c, p, TRAFFIC)
    occupancy = n_max * np.random.default_rng(1).uniform(0.0, 1.0, n_max.size)
    slo = np.where(np.arange(n_max.size) % 2, 0.02, 0.05)
    args = (model, TRAFFIC, occupancy, n_max, p.prefill_chunk_tokens, p.request_overhead_s)
    full, part = queueing._state_parts(*args), queueing._state_parts(*args, slo)
    bracket = queueing.tpot_bracket(full, TRAFFIC.output_strata_inv)
    may = full["stable"] & ~(bracket[0] > slo)
    assert 0 < may.sum() < may.size and (full["ttft_p95_s"][~may] < np.inf).any()
    every = may.sum() > share * may.size         # (every row computed: the numbers everywhere)
    for key in full:
        expected = np.where(may | every, full[key], np.inf) if key == "ttft_p95_s" else full[key]
        assert part[key].tobytes() == expected.tobytes(), key
    assert all(a.tobytes() == b.tobytes() for a, b in zip(part["_tpot_bracket"], bracket))


@pytest.mark.parametrize("share", [0.0, tails.ROWS_SUBSET_MAX_SHARE, 1.0])
def test_halfin_whitt_wait_p95_equals_the_tail_of_the_full_wait_probability(monkeypatch, share):
    """halfin_whitt_wait_p95 (P(wait) only where beta < WAIT_FREE_BETA) equals the exponential
    tail of erlang_c_halfin_whitt on every row, bit for bit: loads around and far below the
    servers (beta near the bound), zero, negative, infinite and NaN inputs; 0-d and 2-D too."""
    monkeypatch.setattr(tails, "ROWS_SUBSET_MAX_SHARE", share)
    rng = np.random.default_rng(11)
    n = 20000
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-300, 5e-324, 1e300])
    with np.errstate(all="ignore"):
        c = np.where(rng.random(n) < 0.1, rng.choice(special, n), rng.choice([1.0, 8.0, 64.0, 1024.0], n))
        a = c * rng.uniform(0.0, 1.2, n)
        near = c - tails.WAIT_FREE_BETA * np.sqrt(np.abs(a)) * rng.uniform(0.97, 1.03, n)   # beta about 3
        a = np.where(rng.random(n) < 0.2, near, a)
        a = np.where(rng.random(n) < 0.1, rng.choice(special, n), a)
        v = np.where(rng.random(n) < 0.1, rng.choice(special, n), rng.uniform(1.0, 30.0, n))
        mean = np.where(rng.random(n) < 0.1, rng.choice(special, n), rng.uniform(0.0, 5.0, n))
        for args in ((c, a, v, mean), (c[:1], a[:1], 2.0, mean[:1]), (8.0, 6.0, 2.0, 1.0),
                     tuple(x[:n // 100 * 100].reshape(100, -1) for x in (c, a, v, mean))):
            expected = tails.exponential_tail_p95(tails.erlang_c_halfin_whitt(*args[:3]), args[3])
            got = tails.halfin_whitt_wait_p95(*args)
            assert np.shape(got) == np.shape(expected)
            assert np.asarray(got).tobytes() == np.asarray(expected).tobytes()
        beta = (c - a) / np.sqrt(np.maximum(a * v, 1e-300))
        p = tails.erlang_c_halfin_whitt(c, a, v)
    free = beta >= tails.WAIT_FREE_BETA
    assert (p[free] < 0.01).all() and (free & (beta < 3.1)).any() and (p[~free] > 1.0 - tails.P95).any()


def test_tpot_bracket_from_the_extreme_inverse_lives_equals_every_spread():
    """tpot_bracket (with spread parts >= 0: the spreads of the smallest and largest inverse
    lives only) equals mixture_p95_bracket of every stratum's spread, bit for bit; with a
    negative or NaN part somewhere (every spread then) too."""
    rng = np.random.default_rng(12)
    n = 5000
    inverse = tuple(np.asarray(v) for v in (0.02, 0.5, 0.004, 0.1))        # not in order
    state = {"tpot_mean_s": rng.uniform(0.005, 0.05, n), "tpot_common": 10.0 ** rng.uniform(-12, -2, n),
             "tpot_per_inv": np.where(rng.random(n) < 0.05, 0.0, 10.0 ** rng.uniform(-12, -1, n))}
    state["tpot_common"][:50] = 0.0
    odd = dict(state, tpot_common=np.where(rng.random(n) < 0.01, rng.choice([-1e-5, np.nan, np.inf], n),
                                           state["tpot_common"]))
    for s in (state, odd):
        with np.errstate(invalid="ignore"):
            ref = tails.mixture_p95_bracket([np.sqrt(s["tpot_common"] + s["tpot_per_inv"] * v)
                                             for v in inverse])
        got = replica_state.tpot_bracket(s, inverse)
        assert all(a.tobytes() == (s["tpot_mean_s"] + b if b.dtype == float else b).tobytes()
                   for a, b in zip(got, ref))


def test_on_rows_broadcasts_the_terms_that_are_not_per_row():
    """on_rows takes the per-row terms at the rows and broadcasts 1-element arrays and
    numbers: the rows' values of the full computation, +inf elsewhere."""
    rng = np.random.default_rng(13)
    a, one, rows = rng.random(50), np.array([2.5]), rng.random(50) < 0.3
    got = tails.on_rows(lambda x, y, z: x * y + z, (a, one, 1.0), rows, np.inf)
    assert got.tobytes() == np.where(rows, a * one + 1.0, np.inf).tobytes()
