"""The role capacities' batched bisections (planner/disagg_roles.py: prefill_capacities,
decode_capacities; serving/disagg.py: DisaggArrays.take, decode_state's kept step model and
slots; tails.normal_p95_offset) against plain bisections written out here, one per SLO over
every row, bit for bit, on seeded random rows (dense and MoE, several GPUs, TP, PP, batches,
efficiencies); the search's role copies against the search of every role row."""

import numpy as np
import pandas as pd
import pytest
import yaml

from planner import disagg_roles, search
from planner.margins import Margins
from planner.problem import load_problem
from planner.serving import disagg, tails
from planner.serving.queueing import CAPACITY_BISECTION_STEPS, TrafficArrays
from planner.traffic import LogNormal
from tests.serving.test_capacity_bisection import _random_rows   # dense and MoE rows, random efficiencies

TRAFFIC = TrafficArrays.from_distributions(LogNormal(1500, 2500), LogNormal(250, 600))
LINK_BYTES_PER_S = 50e9
#: TPOT SLOs: a central-like one, its margined-like one, a tight one (most rows at n* = 0)
#: and a loose one; TTFT budgets the same way.
TPOT_SLOS_S = (0.03, 0.02456, 0.012, 0.2)
TTFT_BUDGETS_S = (1.9, 1.3, 0.2, 20.0)


def _same(got, ref, where=""):
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.dtype == ref.dtype and got.shape == ref.shape and got.tobytes() == ref.tobytes(), where


def _plain_decode(d, t, tpot_slo_s, slot_wait_s, steps=CAPACITY_BISECTION_STEPS) -> dict:
    """One decode replica's capacity as section 14.5 states it: every state in full (its own
    step model and slot count), every row bisected."""
    slots = disagg.decode_slots(d, t)

    def good(n):
        s = disagg.decode_state(d, t, n)
        return s["stable"] & (s["tpot_p95_s"] <= tpot_slo_s) & (s["slot_wait_p95_s"] <= slot_wait_s)

    lo, hi = np.zeros(slots.shape), slots.astype(float)
    top_ok = good(hi)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        ok = good(mid)
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    n = np.where(top_ok, hi, lo)
    state = disagg.decode_state(d, t, n)
    trickle = disagg.decode_state(d, t, np.full_like(n, 1e-9))["tpot_p95_s"]
    return {"rate_per_s": np.where(n > 0, np.nan_to_num(state["rate_per_s"]), 0.0),
            "tpot_p95_s": np.where(n > 0, state["tpot_p95_s"], trickle), "occupancy": n}


def _plain_prefill(d, t, budget_s) -> dict:
    """One prefill replica's capacity: every row bisected on the rate."""
    svc = disagg.prefill_service(d, t)
    hi = (1.0 / svc["mean_s"]).astype(float)
    lo = np.zeros_like(hi)
    for _ in range(disagg_roles.PREFILL_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        ok = disagg_roles.prefill_ttft_p95_s(d, t, mid, svc) <= budget_s
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    trickle = disagg_roles.prefill_ttft_p95_s(d, t, np.zeros_like(lo), svc)
    rate = np.where(trickle <= budget_s, lo, 0.0)
    return {"rate_per_s": rate,
            "ttft_p95_s": np.where(rate > 0, disagg_roles.prefill_ttft_p95_s(d, t, rate, svc), trickle)}


def test_normal_p95_offset_is_the_one_normal_mixture_bit_for_bit():
    """Spreads in the safe range, at and beyond its ends, zero, negative, infinite, NaN."""
    rng = np.random.default_rng(3)
    sds = np.concatenate([rng.lognormal(-6.0, 3.0, 400), [0.0, -1.0, 1e-300, 1e-71, 1e-70, 1e70, 1e71, 1e300,
                                                         np.inf, np.nan, 0.004]])
    with np.errstate(all="ignore"):     # the mixture's s^4 overflows and 0/0 outside the safe range
        _same(tails.normal_p95_offset(sds), tails.mixture_p95_offset([sds]))
        safe = sds[:400]
        # the one-point bracket
        _same(tails.normal_p95_offset(safe), tails.mixture_p95_offset([safe]), "safe")
        _same(tails.normal_p95_offset(safe), tails.Z95 * safe, "Z95 sd")
        for one in (0.01, 0.0, np.nan):
            _same(tails.normal_p95_offset(np.float64(one)), tails.mixture_p95_offset([np.float64(one)]), one)


def test_decode_capacities_equal_plain_bisections_per_slo(catalog):
    c, p = _random_rows(catalog, n=160, seed=11)
    d = disagg_roles._pair("decode", c, p, LINK_BYTES_PER_S)
    refs = [_plain_decode(d, TRAFFIC, slo, TPOT_SLOS_S[0]) for slo in TPOT_SLOS_S]
    for slos in (TPOT_SLOS_S[:2], TPOT_SLOS_S[2:], TPOT_SLOS_S, TPOT_SLOS_S[:1]):
        got = disagg_roles.decode_capacities(d, TRAFFIC, slos, TPOT_SLOS_S[0])
        for slo, one in zip(slos, got):
            ref = refs[TPOT_SLOS_S.index(slo)]
            assert list(one) == ["rate_per_s", "tpot_p95_s"]
            _same(one["rate_per_s"], ref["rate_per_s"], ("rate", slo))
            _same(one["tpot_p95_s"], ref["tpot_p95_s"], ("tpot", slo))
    # the cases the shortcut separates are all there: rows with and without capacity per SLO,
    # rows a tighter SLO takes to 0, and capacities that grow with the SLO
    occupancy = [ref["occupancy"] for ref in refs]
    assert all((o > 0).any() for o in occupancy) and all((o == 0).any() for o in occupancy)
    assert ((occupancy[2] == 0) & (occupancy[0] > 0)).any() and (occupancy[0] < occupancy[3]).any()


def test_prefill_capacities_equal_plain_bisections_per_budget(catalog):
    c, p = _random_rows(catalog, seed=5)
    d = disagg_roles._pair("prefill", c, p, LINK_BYTES_PER_S)
    # and budgets just above some rows' trickle (small capacities next to rows with none)
    trickle = np.sort(disagg_roles.prefill_ttft_p95_s(d, TRAFFIC, np.zeros(c.tp.shape)))
    budgets = TTFT_BUDGETS_S + (float(trickle[40]) * 1.001, float(trickle[100]) * 1.01)
    refs = [_plain_prefill(d, TRAFFIC, budget) for budget in budgets]
    got = disagg_roles.prefill_capacities(d, TRAFFIC, budgets)
    for budget, one, ref in zip(budgets, got, refs):
        _same(one["rate_per_s"], ref["rate_per_s"], ("rate", budget))
        _same(one["ttft_p95_s"], ref["ttft_p95_s"], ("ttft", budget))
    rates = [ref["rate_per_s"] for ref in refs]
    assert all((r > 0).any() for r in rates) and (rates[2] == 0).any() and (rates[2] < rates[3]).any()


def test_role_capacity_is_the_margins_of_the_plain_capacities(catalog):
    """max_rate = min(capacity at the margined SLOs, F x central), per role, bit for bit."""
    c, p = _random_rows(catalog, n=60, seed=2)
    margins = Margins()
    workload = type("W", (), {"slo": type("S", (), {"ttft_p95_s": 2.5, "tpot_p95_s": 0.03})()})()
    ttft, tpot = 2.5, 0.03
    held_ttft, held_tpot = margins.slos(ttft, tpot)
    allowance = disagg_roles.DECODE_TTFT_ALLOWANCE_TPOTS * tpot
    for role in ("prefill", "decode"):
        got = disagg_roles.role_capacity(role, c, p, TRAFFIC, workload, ttft, tpot, margins, LINK_BYTES_PER_S)
        d = disagg_roles._pair(role, c, p, LINK_BYTES_PER_S)
        if role == "prefill":
            central, held = (_plain_prefill(d, TRAFFIC, x - allowance) for x in (ttft, held_ttft))
        else:
            central, held = (_plain_decode(d, TRAFFIC, x, tpot) for x in (tpot, held_tpot))
        _same(got["central_rate_per_s"], central["rate_per_s"], role)
        planned = np.minimum(held["rate_per_s"], margins.load_cap(central["rate_per_s"]))
        _same(got["max_rate_per_s"], planned, role)
        assert ((got["max_rate_per_s"] > 0) & (got["max_rate_per_s"] < got["central_rate_per_s"])).any()


def test_disagg_arrays_take_gives_the_rows_states(catalog):
    c, p = _random_rows(catalog, n=40, seed=9)
    d = disagg_roles._pair("decode", c, p, LINK_BYTES_PER_S)
    rows = np.array([3, 0, 17, 17, 39])
    n = disagg.decode_slots(d, TRAFFIC) * 0.4
    whole, part = disagg.decode_state(d, TRAFFIC, n), disagg.decode_state(d.take(rows), TRAFFIC, n[rows])
    for key in whole:
        _same(part[key], whole[key][rows], key)


def _frames_equal(got: pd.DataFrame, ref: pd.DataFrame) -> None:
    assert list(got.columns) == list(ref.columns) and got.index.equals(ref.index)
    for column in ref.columns:
        a, b = got[column].to_numpy(), ref[column].to_numpy()
        assert a.dtype == b.dtype, column
        if a.dtype.kind == "f":
            assert a.tobytes() == b.tobytes(), column
        else:
            assert (a == b).all(), column


@pytest.mark.parametrize("roles", [[False, True], [True]])
def test_role_copies_give_the_search_of_every_role_row(tmp_path, monkeypatch, roles):
    """The search with each configuration evaluated once for its role rows
    (search._role_copies, _role_copy_capacities) against the search of every role row: the
    candidate table and the carried parameters, bit for bit (two workloads: the second at
    its own lengths)."""
    chat = {"name": "chat", "model": "llama-3.1-70b", "rate_per_s": 20,
            "prompt_tokens": {"mean": 2000, "p95": 6000}, "output_tokens": {"mean": 400, "p95": 1000},
            "slo": {"ttft_p95_s": 2.0, "tpot_p95_s": 0.03}}
    rag = {**chat, "name": "rag", "prompt_tokens": {"mean": 6000, "p95": 12000},
           "slo": {"ttft_p95_s": 4.0, "tpot_p95_s": 0.05}}
    spec = {"name": "roles", "workloads": [chat, rag],
            "search": {"gpus": ["h100-sxm", "h200-sxm", "a100-sxm-80gb", "l40s"],
                       "quantization": ["bf16", "fp8"], "kv_cache_dtype": ["bf16", "fp8"], "tp": [1, 2, 4, 8], "pp": [1, 2],
                       "max_batch": [8, 64, 256], "disaggregation": roles}}
    path = tmp_path / "roles.yaml"
    path.write_text(yaml.safe_dump(spec))
    problem = load_problem(path)
    calls, copies = [], search._role_copy_capacities
    monkeypatch.setattr(search, "_role_copy_capacities",
                        lambda *a, **k: calls.append(a[1].name) or copies(*a, **k))
    got, got_params = search.candidates_and_params(problem)
    assert calls == ["chat", "rag"]    # the role copies' path, once per workload
    monkeypatch.setattr(search, "_role_copies", lambda coded, evaluated: None)
    ref, ref_params = search.candidates_and_params(problem)
    _frames_equal(got, ref)
    assert got_params.ids.equals(ref_params.ids)
    for key, value in ref_params.per_candidate.as_dict().items():
        _same(got_params.per_candidate.as_dict()[key], value, key)
    for name in ("chat", "rag"):   # role rows with and without capacity
        rate = got[f"capacity_per_s[{name}]"]
        for role in ("prefill", "decode"):
            assert (rate[got["role"] == role] > 0).any() and (rate[got["role"] == role] == 0).any()


def test_one_server_erlang_c_and_a_given_cv2_give_the_general_numbers():
    """erlang_c with one server (B_1 = a / (1 + a), no recursion) and prefill_queue with its
    cs^2 given equal the recursion and the queue computed in full, bit for bit (zero,
    negative, infinite and NaN loads included)."""
    rng = np.random.default_rng(3)
    a = np.concatenate([rng.uniform(0.0, 1.5, 2000), [0.0, -0.0, -1.0, 1.0, np.inf, np.nan, 1e-300]])
    c, b = np.ones_like(a), np.ones_like(a)
    with np.errstate(all="ignore"):
        b = np.where(1 <= c, a * b / (1 + a * b), b)        # the recursion's one step
        p = b / (1.0 - a / c * (1.0 - b))
        expected = np.where(a >= c, 1.0, np.where(a <= 0.0, 0.0, np.clip(p, 0.0, 1.0)))
        assert disagg.erlang_c(1.0, a).tobytes() == expected.tobytes()
        mean, second = rng.uniform(0.01, 1.0, a.size), rng.uniform(0.0, 2.0, a.size)
        full = disagg.prefill_queue(1.0, a / mean, mean, second)
        given = disagg.prefill_queue(1.0, a / mean, mean, second, disagg.service_cv2(mean, second))
    assert all(full[key].tobytes() == given[key].tobytes() for key in full)
