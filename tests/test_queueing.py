"""Tail-latency model: agreement with the simulator, and monotonicity of capacity at SLO."""

import numpy as np
import pandas as pd
import pytest

from planner.configs import config_arrays
from planner.serving.params import ServingParams
from planner.serving.queueing import (TrafficArrays, capacity_at_slo, erlang_c_halfin_whitt,
                                      mixture_p95_offset, saturation_rate, state_at_rate)
from planner.traffic import Fixed, LogNormal

P = ServingParams()
PROMPT, OUTPUT = LogNormal(1000, 3000), LogNormal(300, 800)


def arrays(catalog, model="llama-3.1-8b", gpu="h100-sxm", tp=1, batch=128, quant="bf16", kv="bf16", n=1):
    frame = pd.DataFrame({"model": [model] * n, "gpu": gpu, "quantization": quant, "kv_cache_dtype": kv,
                          "tp": tp, "pp": 1, "batch": batch, "prompt_tokens": PROMPT.mean,
                          "output_tokens": OUTPUT.mean, "context_tokens": np.nan})
    return config_arrays(catalog, frame)[0]


TRAFFIC = TrafficArrays.from_distributions(PROMPT, OUTPUT)


@pytest.mark.parametrize("load", [0.3, 0.6])
def test_analytic_p95_matches_simulator(catalog, load):
    """Reduced grid of benchmarks/bench_queueing_vs_sim.py (which runs 3 models x 3 loads)."""
    from planner.simulate import simulate_replica

    c = arrays(catalog)
    rate = load * float(saturation_rate(c, P, TRAFFIC)[0])
    state = state_at_rate(c, P, TRAFFIC, rate)
    sim = simulate_replica(c, P, rate_per_s=rate, prompt=PROMPT, output=OUTPUT, max_batch=128,
                           requests=20000, seed=0).to_dict()
    assert float(state["ttft_p95_s"][0]) == pytest.approx(sim["ttft_p95_s"], rel=0.15)
    assert float(state["tpot_p95_s"][0]) == pytest.approx(sim["tpot_p95_s"], rel=0.15)


#: One configuration per engine (model, GPU, TP, weights, max batch, engine) for the check under
#: the shipped calibration (issue 13); ``benchmarks/bench_queueing_vs_sim.py --calibration default``
#: runs the same grid at more loads and requests.
CALIBRATED = [("llama-3.1-8b", "h100-sxm", 1, "bf16", 128, "vllm"),
              ("llama-3.1-8b", "h200-sxm", 1, "fp8", 128, "sglang"),
              ("llama-3.1-70b", "h200-sxm", 4, "fp8", 128, "trtllm")]


@pytest.mark.parametrize("config", CALIBRATED, ids=[c[-1] for c in CALIBRATED])
def test_analytic_p95_matches_simulator_under_the_shipped_calibration(catalog, config):
    """The search's capacities and the simulator use the same calibrated parameters and agree
    within 15% at 50% and 80% of the saturation rate (6,000 requests: a few seconds)."""
    from planner import parameters
    from planner.simulate import simulate_replica

    model, gpu, tp, quant, batch, engine = config
    c = arrays(catalog, model=model, gpu=gpu, tp=tp, batch=batch, quant=quant)
    p = parameters.resolve([gpu], parameters.load("default"), engine=engine, model_ids=[model],
                           math_modes=[catalog.math_mode(gpu, quant)])
    assert float(np.asarray(p.request_overhead_s).reshape(-1)[0]) > 0  # calibrated, not the seeds'
    saturation = float(saturation_rate(c, p, TRAFFIC)[0])
    for load in (0.5, 0.8):
        state = state_at_rate(c, p, TRAFFIC, load * saturation)
        sim = simulate_replica(c, p, rate_per_s=load * saturation, prompt=PROMPT, output=OUTPUT,
                               max_batch=batch, requests=6000, seed=0)
        assert float(state["ttft_p95_s"][0]) == pytest.approx(sim.ttft_p95_s, rel=0.15), load
        assert float(state["tpot_p95_s"][0]) == pytest.approx(sim.tpot_p95_s, rel=0.15), load


def test_fixed_lengths_at_trickle_load_reduce_to_step_times(catalog):
    """At a trickle, TTFT p95 = prefill + one decode step and TPOT = the batch-1 step."""
    from planner.serving.roofline import mixed_step_time_s

    t = TrafficArrays.from_distributions(Fixed(500), Fixed(100))
    c = arrays(catalog)
    state = state_at_rate(c, P, t, 1e-4)
    ctx = float(t.decode_context_tokens)
    step1 = float(mixed_step_time_s(c, P, 1.0, 0.0, context_tokens=ctx)[0])
    prefill = float(mixed_step_time_s(c, P, 0.0, 500.0, context_tokens=ctx, prompt_tokens=500.0)[0])
    assert float(state["tpot_p95_s"][0]) == pytest.approx(step1, rel=0.01)
    assert float(state["ttft_p95_s"][0]) == pytest.approx(prefill + step1, rel=0.05)


def _capacity(c, ttft=1.0, tpot=0.05, traffic=TRAFFIC):
    return capacity_at_slo(c, P, traffic, ttft, tpot)["max_rate_per_s"]


#: The capacity is found by bisection on the occupancy over [0, n_max] (13 steps): two
#: configurations with different n_max are compared to within that resolution.
RESOLUTION = 1e-3


def test_capacity_monotone_in_slos(catalog):
    c = arrays(catalog, model="llama-3.1-70b", gpu="h200-sxm", tp=4)
    tpots = np.array([0.015, 0.02, 0.03, 0.05, 0.1])
    ttfts = np.array([0.2, 0.4, 0.8, 1.6, 5.0])
    cap_tpot = [float(_capacity(c, 1.0, t)[0]) for t in tpots]
    cap_ttft = [float(_capacity(c, t, 0.05)[0]) for t in ttfts]
    assert np.all(np.diff(cap_tpot) >= -1e-9) and cap_tpot[-1] > cap_tpot[0]
    assert np.all(np.diff(cap_ttft) >= -1e-9) and cap_ttft[-1] > cap_ttft[0]


def test_capacity_monotone_in_bandwidth_and_memory(catalog):
    c = arrays(catalog)
    base = float(_capacity(c)[0])
    faster = c.replace(bandwidth_bytes_per_s=c.bandwidth_bytes_per_s * 1.5)
    bigger = arrays(catalog, batch=512).replace(memory_bytes=c.memory_bytes * 2)
    assert float(_capacity(faster)[0]) >= base * (1 - RESOLUTION)
    assert float(_capacity(bigger)[0]) >= float(_capacity(arrays(catalog, batch=512))[0]) * (1 - RESOLUTION)


def test_capacity_monotone_in_max_batch_until_memory_cap(catalog):
    batches = np.array([8, 16, 32, 64, 128, 256, 512, 1024])
    frame = pd.DataFrame({"model": "llama-3.1-8b", "gpu": "h100-sxm", "quantization": "bf16",
                          "kv_cache_dtype": "bf16", "tp": 1, "pp": 1, "batch": batches,
                          "prompt_tokens": 1000.0, "output_tokens": 300.0, "context_tokens": np.nan})
    c = config_arrays(catalog, frame)[0]
    caps = _capacity(c, 2.0, 0.1)
    assert np.all(np.diff(caps) >= -RESOLUTION * caps[1:])


def test_property_random_configs(catalog):
    """Loosening either SLO never lowers capacity, over random configurations."""
    rng = np.random.default_rng(1)
    n = 200
    frame = pd.DataFrame({
        "model": rng.choice(["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "qwen3-32b"], n),
        "gpu": rng.choice(["h100-sxm", "h200-sxm", "a100-sxm-80gb", "b200", "mi300x"], n),
        "quantization": rng.choice(["bf16", "fp8"], n), "kv_cache_dtype": "bf16",
        "tp": rng.choice([2, 4, 8], n), "pp": 1, "batch": rng.choice([16, 64, 256], n),
        "prompt_tokens": 1000.0, "output_tokens": 300.0, "context_tokens": np.nan})
    c = config_arrays(catalog, frame)[0]
    ttft = rng.uniform(0.2, 3.0, n)
    tpot = rng.uniform(0.01, 0.1, n)
    base = _capacity(c, ttft, tpot)
    assert np.all(_capacity(c, ttft * 1.5, tpot) >= base - 1e-9)
    assert np.all(_capacity(c, ttft, tpot * 1.5) >= base - 1e-9)


def test_erlang_c_and_mixture_helpers():
    assert float(erlang_c_halfin_whitt(10, 0.0)) == 0.0
    assert float(erlang_c_halfin_whitt(10, 12.0)) == 1.0
    p = erlang_c_halfin_whitt(100, np.array([50.0, 80.0, 95.0]))
    assert np.all(np.diff(p) > 0)
    # one component: the normal p95
    assert float(mixture_p95_offset([np.array(2.0)])) == pytest.approx(1.6449 * 2.0, rel=1e-3)


def _mixed_rows(catalog, n=60, seed=3):
    """Dense and MoE rows on three GPUs, TP 1-4, three max batches, per-row efficiencies (seeded)."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"model": rng.choice(["llama-3.1-8b", "mixtral-8x7b"], n),
                          "gpu": rng.choice(["h100-sxm", "a100-sxm-80gb", "l40s"], n),
                          "quantization": "bf16", "kv_cache_dtype": "bf16", "tp": rng.choice([1, 2, 4], n),
                          "pp": 1, "batch": rng.choice([8, 64, 256], n), "prompt_tokens": 1000.0,
                          "output_tokens": 300.0, "context_tokens": np.nan})
    return config_arrays(catalog, frame)[0], P.with_overrides(memory_efficiency=rng.uniform(0.6, 0.9, n))


def test_capacity_bisection_in_threads_equals_one_thread(catalog, monkeypatch):
    """Rows bisected in contiguous ranges by several threads (PLANNER_THREADS) give every
    array of the one-thread call, bit for bit, with and without a step model passed in."""
    from planner.serving import queueing

    c, p = _mixed_rows(catalog)
    pairs = [(1.0, 0.05), (0.7, 0.04)]
    monkeypatch.setenv("PLANNER_THREADS", "1")
    alone = queueing.capacities_at_slos(c, p, TRAFFIC, pairs)
    monkeypatch.setenv("PLANNER_THREADS", "3")
    monkeypatch.setattr(queueing, "THREAD_MIN_ROWS", 7)   # 60 rows: three ranges of 20
    model = queueing.step_model(c, p, TRAFFIC)
    for threaded in (queueing.capacities_at_slos(c, p, TRAFFIC, pairs),
                     queueing.capacities_at_slos(c, p, TRAFFIC, pairs, model=model)):
        for got, ref in zip(threaded, alone):
            assert list(got) == list(ref)
            for key in ref:
                assert got[key].dtype == ref[key].dtype and got[key].tobytes() == ref[key].tobytes(), key
    assert (alone[0]["max_rate_per_s"] > 0).any()


def test_joint_bisection_of_several_slo_pairs_equals_one_call_per_pair(catalog):
    """capacities_at_slos shares the states the pairs need at the same occupancy (and computes
    the others on their rows only, through StepModel.take / ConfigArrays.take): every array
    equals that of a separate capacity_at_slo call, bit for bit."""
    from planner.serving.queueing import capacities_at_slos

    c, p = _mixed_rows(catalog)
    pairs = [(1.0, 0.05), (0.7, 0.04), (1.0, 0.05)]
    joint = capacities_at_slos(c, p, TRAFFIC, pairs)
    for pair, got in zip(pairs, joint):
        alone = capacity_at_slo(c, p, TRAFFIC, *pair)
        assert list(got) == list(alone)
        for key in alone:
            assert got[key].tobytes() == alone[key].tobytes(), (pair, key)
    assert (joint[1]["max_rate_per_s"] <= joint[0]["max_rate_per_s"]).all()     # tighter SLOs
    assert (joint[0]["max_rate_per_s"] > joint[1]["max_rate_per_s"]).any()


def test_bisection_reports_the_state_at_its_occupancy(catalog):
    """The p95s and rate capacities_at_slos keeps during its bisection are, bit for bit, those
    of state_at_occupancy at the occupancy it returns (rows at a good mid, and rows that no
    occupancy satisfies, whose state at n = 0 is reported)."""
    from planner.serving.queueing import capacities_at_slos, state_at_occupancy

    c, p = _mixed_rows(catalog)
    pairs = [(1.0, 0.05), (0.3, 0.012)]
    for got in capacities_at_slos(c, p, TRAFFIC, pairs):
        direct = state_at_occupancy(c, p, TRAFFIC, got["occupancy"])
        for key in ("ttft_p95_s", "tpot_p95_s"):
            assert got[key].tobytes() == direct[key].tobytes(), key
        rate = np.nan_to_num(np.where(got["occupancy"] > 0, direct["rate_per_s"], 0.0))
        assert got["max_rate_per_s"].tobytes() == rate.tobytes()
    assert (got["occupancy"] == 0).any() and (got["occupancy"] > 0).any()


def test_bisection_decides_with_the_tpot_p95_only_where_the_slos_may_be_met(catalog):
    """With scalar SLOs the bisection's states skip the TPOT mixture where the loosest pair
    is missed anyway (``within``): the same capacities, bit for bit, as per-row SLO arrays,
    which compute every state in full."""
    from planner.serving.queueing import capacities_at_slos, state_at_occupancy

    c, p = _mixed_rows(catalog)
    n = c.tp.size
    pairs = [(1.0, 0.05), (0.3, 0.012)]
    fast = capacities_at_slos(c, p, TRAFFIC, pairs)
    full = capacities_at_slos(c, p, TRAFFIC, [(np.full(n, a), np.full(n, b)) for a, b in pairs])
    for got, ref in zip(fast, full):
        for key in ref:
            assert got[key].tobytes() == ref[key].tobytes(), key
    occupancy = np.full(n, 20.0)
    plain = state_at_occupancy(c, p, TRAFFIC, occupancy)
    decided = state_at_occupancy(c, p, TRAFFIC, occupancy, within=(0.3, 0.012))
    skipped = np.isinf(decided["tpot_p95_s"]) & np.isfinite(plain["tpot_p95_s"])
    assert skipped.any() and not skipped.all()
    kept = ~np.isinf(decided["tpot_p95_s"])
    assert decided["tpot_p95_s"][kept].tobytes() == plain["tpot_p95_s"][kept].tobytes()
    assert decided["ttft_p95_s"].tobytes() == plain["ttft_p95_s"].tobytes()
    met = (plain["ttft_p95_s"] <= 0.3) & (plain["tpot_p95_s"] <= 0.012) & plain["stable"]
    assert not (met & skipped).any()          # no row that meets the SLOs lost its p95
