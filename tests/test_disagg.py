"""Disaggregated prefill/decode: every term by hand, invariants, and the P/D simulator."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from planner.configs import config_arrays
from planner.serving import disagg
from planner.serving.params import ServingParams
from planner.serving.queueing import TrafficArrays
from planner.serving.roofline import StepModel
from planner.traffic import Fixed, LogNormal

P = ServingParams()


def arrays(catalog, model="llama-3.1-70b", gpu="h100-sxm", tp=4, batch=128, quant="bf16", prompt=1000.0,
           output=300.0):
    frame = pd.DataFrame({"model": [model], "gpu": gpu, "quantization": quant, "kv_cache_dtype": quant,
                          "tp": tp, "pp": 1, "batch": batch, "prompt_tokens": prompt, "output_tokens": output,
                          "context_tokens": np.nan})
    return config_arrays(catalog, frame)[0]


def pair(catalog, n_p=1, n_d=1, **kw):
    return disagg.DisaggArrays(arrays(catalog, batch=1), arrays(catalog), P, P, float(n_p), float(n_d), **kw)


FIXED = TrafficArrays.from_distributions(Fixed(1000), Fixed(300))


def test_scale_out_bandwidth_default_until_the_catalog_has_it():
    assert disagg.scale_out_bytes_per_s(SimpleNamespace()) == 50e9
    assert disagg.scale_out_bytes_per_s(SimpleNamespace(scale_out_gb_per_s_per_direction=None)) == 50e9
    gpu = SimpleNamespace(scale_out_gb_per_s_per_direction=100.0)
    assert disagg.scale_out_bytes_per_s(gpu) == 100e9
    assert disagg.transfer_bytes_per_s(gpu, SimpleNamespace()) == 50e9   # the slower end


def test_kv_transfer_by_hand(catalog):
    """Llama 3.1 70B BF16: 2 x 80 layers x 8 KV heads x 128 x 2 B = 327,680 B per token; 1000
    tokens over 4 links of 50 GB/s = 1.6384 ms, plus the fixed latency."""
    d = pair(catalog, kv_transfer_latency_s=1e-3)
    expected = 327_680_000 / 200e9 + 1e-3
    assert float(disagg.kv_transfer_time_s(d, 1000.0)[0]) == pytest.approx(expected, rel=1e-12)
    # The smaller replica sets the parallel links: a TP2 decode replica halves them.
    d2 = disagg.DisaggArrays(d.prefill, arrays(catalog, tp=2), P, P)
    assert float(disagg.kv_transfer_time_s(d2, 1000.0)[0]) == pytest.approx(327_680_000 / 100e9, rel=1e-12)


def test_erlang_c_exact():
    assert disagg.erlang_c(1, 0.7) == pytest.approx(0.7)
    assert disagg.erlang_c(2, 1.0) == pytest.approx(1.0 / 3.0)             # M/M/2 at rho = 1/2
    # c = 3, a = 2: B = (8/6) / (1 + 2 + 2 + 8/6) = 4/19; C = B / (1 - (2/3)(1 - B)) = 4/9.
    assert disagg.erlang_c(3, 2.0) == pytest.approx(4.0 / 9.0)
    assert disagg.erlang_c(np.array([1, 4]), np.array([1.5, 0.0])).tolist() == [1.0, 0.0]


def test_prefill_queue_reduces_to_pollaczek_khinchine_and_pools_help():
    rate, mean, second = 8.0, 0.1, 0.015                                # rho = 0.8
    q = disagg.prefill_queue(1, rate, mean, second)
    assert float(q["mean_s"]) == pytest.approx(rate * second / (2 * (1 - 0.8)))
    # p95: 0 w.p. 0.2, else exponential with mean W / 0.8: (W / 0.8) ln(0.8 / 0.05).
    assert float(q["p95_s"]) == pytest.approx(float(q["mean_s"]) / 0.8 * np.log(0.8 / 0.05))
    pooled = disagg.prefill_queue(2, 2 * rate, mean, second)            # same utilization, 2 servers
    assert float(pooled["mean_s"]) < float(q["mean_s"])
    assert np.isinf(disagg.prefill_queue(1, 10.0, mean, second)["mean_s"])


def test_prefill_service_by_hand(catalog):
    """Fixed 1000-token prompts (< C): one prefill-only iteration, compute bound on H100 TP4:
    1000 (2 P_act + 2 L d 1000) / (4 x 989e12 x 0.6) + TP all-reduces of 1000 rows."""
    d = pair(catalog)
    c = d.prefill
    flops = 1000 * (2 * c.params_active + 2 * c.n_layers * c.hidden_size * 1000)
    comm = 2 * c.n_layers * (2 * 3 / 4 * 2 * 1000 * c.hidden_size / c.link_bytes_per_s + 5e-6)
    svc = disagg.prefill_service(d, FIXED)
    by_hand = float((flops / (4 * c.peak_flops_per_s * 0.6) + comm)[0])
    assert float(svc["mean_s"][0]) == pytest.approx(by_hand, rel=1e-9)
    assert float(svc["second_moment_s2"][0]) == pytest.approx(float(svc["mean_s"][0]) ** 2, rel=1e-9)
    transfer = float(disagg.kv_transfer_time_s(d, 1000.0)[0])
    assert float(svc["p95_own_s"][0]) == pytest.approx(float(svc["mean_s"][0]) + transfer, rel=1e-6)
    # A 5000-token prompt: k = 5000/2048 + 1/2 = 2.94 iterations of 1700.7 tokens.
    long = TrafficArrays.from_distributions(Fixed(5000), Fixed(300))
    k = 5000 / 2048 + 0.5
    step = StepModel(c, P, long.decode_context_tokens).time(0.0, 5000 / k, 5000.0)
    assert float(disagg.prefill_service(d, long)["mean_s"][0]) == pytest.approx(float(k * step[0]), rel=1e-9)


def test_decode_state_by_hand(catalog):
    """Decode-only replica: tau = s_d + b_s Bu, Bu = 1/(1 - phi)^2, phi = n b_s / (2 s_d)."""
    d = pair(catalog)
    n = 40.0
    step = StepModel(d.decode, P, FIXED.decode_context_tokens).time
    s_d, b_s = float(step(n)[0]), float((step(n + 1) - step(n))[0])
    phi = n / (299 * s_d) * b_s * 299 / 2
    tau = s_d + b_s / (1 - phi) ** 2
    st = disagg.decode_state(d, FIXED, n)
    assert float(st["tpot_mean_s"][0]) == pytest.approx(tau, rel=1e-12)
    assert float(st["rate_per_s"][0]) == pytest.approx(n / (299 * tau), rel=1e-12)
    rate = n / (299 * tau)
    sd = np.sqrt(rate * tau / (1 - phi) ** 2 * b_s ** 2 * 299 / 4 + b_s ** 2 * n / 3)
    assert float(st["tpot_p95_s"][0]) == pytest.approx(tau + 1.6448536269514722 * sd, rel=1e-6)
    assert bool(st["stable"][0])


def test_pool_capacities_by_hand(catalog):
    d = pair(catalog, n_p=3, n_d=2)
    caps = disagg.pool_capacities(d, FIXED)
    svc = float(disagg.prefill_service(d, FIXED)["mean_s"][0])
    slots = float(disagg.decode_slots(d, FIXED)[0])
    s_max = float(StepModel(d.decode, P, FIXED.decode_context_tokens).time(slots)[0])
    assert float(caps["prefill_per_s"][0]) == pytest.approx(3 / svc)
    assert float(caps["decode_per_s"][0]) == pytest.approx(2 * slots / (299 * s_max))
    assert float(caps["pair_per_s"][0]) == min(3 / svc, 2 * slots / (299 * s_max))
    assert float(disagg.saturation_rate(d, FIXED)[0]) <= float(caps["pair_per_s"][0]) * (1 + 1e-9)


def test_trickle_load_is_prefill_transfer_and_one_step(catalog):
    d = pair(catalog)
    s = disagg.state_at_rate(d, FIXED, 1e-4)
    svc = disagg.prefill_service(d, FIXED)
    step1 = float(StepModel(d.decode, P, FIXED.decode_context_tokens).time(1.0)[0])   # itself alone
    assert float(s["ttft_p95_s"][0]) == pytest.approx(float(svc["p95_own_s"][0]), rel=1e-3)
    assert float(s["tpot_p95_s"][0]) == pytest.approx(step1, rel=1e-3)


TRAFFIC = TrafficArrays.from_distributions(LogNormal(2000, 4000), LogNormal(300, 800))


def test_monotone_in_load_replicas_network_and_slos(catalog):
    d = pair(catalog, n_p=2)
    rates = np.array([2.0, 5.0, 8.0])
    s = disagg.state_at_rate(d, TRAFFIC, rates)
    assert np.all(np.diff(s["ttft_p95_s"]) > 0) and np.all(np.diff(s["tpot_p95_s"]) > 0)
    slow = disagg.state_at_rate(pair(catalog, n_p=2, scale_out_bytes_per_s=12.5e9), TRAFFIC, rates)
    assert np.all(slow["ttft_p95_s"] > s["ttft_p95_s"])                  # a faster network is never slower
    assert np.allclose(slow["tpot_p95_s"], s["tpot_p95_s"])
    more = disagg.state_at_rate(pair(catalog, n_p=3), TRAFFIC, rates)
    assert np.all(more["ttft_p95_s"] < s["ttft_p95_s"])
    caps = [float(disagg.capacity_at_slo(d, TRAFFIC, ttft, 0.03)["max_rate_per_s"][0])
            for ttft in (0.4, 0.8, 2.0)]
    assert 0 < caps[0] < caps[1] < caps[2]
    cap = disagg.capacity_at_slo(d, TRAFFIC, 0.8, 0.03)
    assert float(cap["ttft_p95_s"][0]) <= 0.8 and float(cap["tpot_p95_s"][0]) <= 0.03
    assert np.isinf(disagg.state_at_rate(d, TRAFFIC, 100.0)["ttft_p95_s"][0])   # overloaded


def test_prefill_capacity_at_slo_is_safe_and_pools(catalog):
    d = pair(catalog)
    one = float(disagg.prefill_capacity_at_slo(d, TRAFFIC, 0.8)[0])
    assert 0 < one < float(disagg.pool_capacities(d, TRAFFIC)["prefill_per_s"][0])
    # A decode pool far from its limits: the pair's TTFT at that rate is the prefill side's
    # plus at most one decode step, within the SLO once that step is allowed for.
    wide = d.with_replicas(decode_replicas=8.0)
    tau = float(disagg.decode_state(wide, TRAFFIC, disagg.decode_slots(wide, TRAFFIC))["tpot_mean_s"][0])
    safe = float(disagg.prefill_capacity_at_slo(d, TRAFFIC, 0.8, decode_step_s=tau)[0])
    assert float(disagg.state_at_rate(wide, TRAFFIC, safe)["ttft_p95_s"][0]) <= 0.8
    two = float(disagg.prefill_capacity_at_slo(d.with_replicas(prefill_replicas=2.0), TRAFFIC, 0.8)[0])
    assert two > 2 * one                                                # pooling shortens the queue
    assert float(disagg.prefill_capacity_at_slo(d, TRAFFIC, 0.01)[0]) == 0.0   # below one prefill


def test_pool_sizes_for_rate_are_the_smallest(catalog):
    d = pair(catalog)
    rate, slo_ttft, slo_tpot = 20.0, 0.8, 0.03
    out = disagg.pool_sizes_for_rate(d, TRAFFIC, rate, slo_ttft, slo_tpot)
    n_p, n_d = float(out["prefill_replicas"][0]), float(out["decode_replicas"][0])
    assert n_p >= 1 and n_d >= 1
    ok = disagg.state_at_rate(d.with_replicas(n_p, n_d), TRAFFIC, rate)
    assert float(ok["ttft_p95_s"][0]) <= slo_ttft and float(ok["tpot_p95_s"][0]) <= slo_tpot
    for fewer in (d.with_replicas(n_p - 1, n_d), d.with_replicas(n_p, n_d - 1)):
        if min(float(fewer.prefill_replicas), float(fewer.decode_replicas)) >= 1:
            s = disagg.state_at_rate(fewer, TRAFFIC, rate)
            assert float(s["ttft_p95_s"][0]) > slo_ttft or float(s["tpot_p95_s"][0]) > slo_tpot


def test_decode_replica_takes_prefilled_requests(catalog):
    """The simulator's hook: a prefilled request is admitted at its KV arrival (its first
    token) and decodes o - 1 steps alone."""
    from planner.simulate import run_requests

    c = arrays(catalog)
    r = run_requests(c, P, [1.0], [1000], [11], max_batch=4, rate_per_s=1.0, seed=0, prefilled=True)
    assert r.first_token_s[0] == 1.0
    steps = StepModel(c, P, 1000 + 1 + np.arange(10)).time(1.0)     # contexts 1001..1010: one bucket
    assert r.finish_s[0] - 1.0 == pytest.approx(float(np.sum(steps)), rel=2e-3)


def test_pd_simulation_conserves_time(catalog):
    from planner.simulate_pd import simulate_pd

    d = pair(catalog, n_p=2)
    r = simulate_pd(d, rate_per_s=4.0, prompt=LogNormal(2000, 4000), output=LogNormal(300, 800), requests=400,
                    seed=1)
    m = r.measured
    assert r.requests == 380 and r.rejected_requests == 0
    assert np.all(r.kv_arrival_s[m] - r.prefill_done_s[m] > 0)
    assert np.all(r.first_token_s[m] >= r.kv_arrival_s[m]) and np.all(r.finish_s[m] >= r.first_token_s[m])
    again = simulate_pd(d, rate_per_s=4.0, prompt=LogNormal(2000, 4000), output=LogNormal(300, 800),
                        requests=400, seed=1)
    assert again.to_dict() == r.to_dict()                                   # deterministic


def test_analytic_p95_matches_the_pd_simulator(catalog):
    """Issue 14: within 15% of the simulator at 50% and 80% of the pair capacity, for the
    three deployments of benchmarks/bench_disagg_vs_sim.py (20,000 requests, seed 0)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_disagg_vs_sim.py"
    spec = importlib.util.spec_from_file_location("bench_disagg_vs_sim", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    prompt = LogNormal(bench.PROMPT_MEAN, bench.PROMPT_P95)
    output = LogNormal(bench.OUTPUT_MEAN, bench.OUTPUT_P95)
    for deployment in bench.DEPLOYMENTS:
        for load in bench.LOADS:
            row = bench.compare(catalog, deployment, load, prompt, output, 20000, 0)
            assert abs(row["ttft_err"]) <= 0.15, row
            assert abs(row["tpot_err"]) <= 0.15, row
