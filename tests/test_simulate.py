"""Discrete-event simulator: hand-checkable cases, Little's law, schedulers, KV cap, CLI."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from conftest import run_cli
from planner.configs import config_arrays
from planner.serving import memory
from planner.serving.params import ServingParams
from planner.serving.roofline import mixed_step_time_s
from planner.simulate import (
    LENGTH_BUCKET_TOKENS,
    SimulationResult,
    check_simulation_inputs,
    scheduler_timeline,
    simulate_replica,
)
from planner.traffic import Fixed, LogNormal

PROMPT = LogNormal(1000, 3000)
OUTPUT = LogNormal(256, 700)


@pytest.fixture(scope="module")
def arrays_8b(catalog):
    frame = pd.DataFrame({"model": ["llama-3.1-8b"], "gpu": ["h100-sxm"], "quantization": ["bf16"],
                          "kv_cache_dtype": ["bf16"], "tp": [1], "pp": [1], "batch": [64],
                          "prompt_tokens": [1000], "output_tokens": [256], "context_tokens": [np.nan]})
    return config_arrays(catalog, frame)[0]


def _step(arrays, params, n, chunk, context, prompt):
    return float(mixed_step_time_s(arrays, params, n, chunk, context_tokens=context, prompt_tokens=prompt)[0])


# ---------------------------------------------------------------- CLI helpers

def run_sim_cli(*args, expect=0):
    """``planner simulate ARGS`` in this process (:func:`conftest.run_cli`): (stdout, stderr)."""
    return run_cli("simulate", *args, expect=expect)


def sim_json(*args):
    return json.loads(run_sim_cli(*args, "--json")[0])


# ---------------------------------------------------------------- determinism, validation

def test_same_seed_same_result_different_seed_differs(arrays_8b):
    p = ServingParams()
    kw = dict(rate_per_s=8.0, prompt=PROMPT, output=OUTPUT, max_batch=64, requests=1500)
    a = simulate_replica(arrays_8b, p, seed=3, **kw)
    b = simulate_replica(arrays_8b, p, seed=3, **kw)
    c = simulate_replica(arrays_8b, p, seed=4, **kw)
    assert a.to_dict() == b.to_dict()
    for name in SimulationResult.array_fields():
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.to_dict() != c.to_dict()
    assert scheduler_timeline(seed=5) == scheduler_timeline(seed=5)


def test_invalid_settings_are_reported_by_name(arrays_8b):
    problems = dict(check_simulation_inputs(rate_per_s=0.0, max_batch=0, requests=1, scheduler="fifo",
                                            prefill_chunk_tokens=0, warmup_fraction=1.0))
    assert set(problems) == {"rate_per_s", "max_batch", "requests", "scheduler", "prefill_chunk_tokens",
                             "warmup_fraction"}
    with pytest.raises(ValueError, match="rate_per_s"):
        simulate_replica(arrays_8b, ServingParams(), rate_per_s=-1, prompt=Fixed(10), output=Fixed(10),
                         max_batch=4)


# ---------------------------------------------------------------- hand-checkable

@pytest.mark.parametrize("prompt, chunks", [(1000, [1000]), (5000, [2048, 2048, 904])])
def test_isolated_requests_match_the_roofline_step_times(arrays_8b, prompt, chunks):
    """At 0.001 req/s requests never overlap: TTFT = the prefill chunk steps, TPOT = batch-1 decode."""
    p = ServingParams()
    output = 128
    r = simulate_replica(arrays_8b, p, rate_per_s=0.001, prompt=Fixed(prompt), output=Fixed(output),
                         max_batch=8, requests=200, seed=1)
    m = r.measured
    assert np.all(r.admit_s[m] == r.arrival_s[m])          # never waited
    assert np.all(r.arrival_s[1:] > r.finish_s[:-1])       # never overlapped
    ttft = sum(_step(arrays_8b, p, 0, c, 0, prompt) for c in chunks)
    tpot = _step(arrays_8b, p, 1, 0, prompt + output / 2, prompt)
    assert r.ttft_p50_s == pytest.approx(ttft, rel=0.01)
    assert r.ttft_p95_s == pytest.approx(ttft, rel=0.01)
    assert r.tpot_p50_s == pytest.approx(tpot, rel=0.01)
    assert r.tpot_p95_s == pytest.approx(tpot, rel=0.01)
    assert r.mean_wait_s == 0.0
    assert r.requests == 190 and r.rejected_requests == 0
    # tokens per second = rate x output tokens (Little for tokens)
    assert r.throughput_tokens_per_s == pytest.approx(r.request_throughput_per_s * output, rel=0.05)


@pytest.mark.parametrize("prompt, hit, chunks", [(1000, 0.3, [700]), (5000, 0.5, [2048, 452])])
def test_prefix_cache_hits_prefill_only_the_missed_tokens(arrays_8b, prompt, hit, chunks):
    """A hit fraction h prefills round((1 - h) p) tokens attending over the whole prompt p, as in
    the analytic model; the decode context (and KV) is the whole prompt."""
    p = ServingParams()
    r = simulate_replica(arrays_8b, p, rate_per_s=0.001, prompt=Fixed(prompt), output=Fixed(64),
                         max_batch=8, requests=40, seed=1, prefix_hit_fraction=hit)
    assert r.ttft_p50_s == pytest.approx(sum(_step(arrays_8b, p, 0, c, 0, prompt) for c in chunks), rel=0.01)
    assert r.tpot_p50_s == pytest.approx(_step(arrays_8b, p, 1, 0, prompt + 32, prompt), rel=0.01)
    assert check_simulation_inputs(rate_per_s=1.0, max_batch=8, requests=10, prefix_hit_fraction=1.0) == [
        ("prefix_hit_fraction", "must be in [0, 1), got 1.0")]


def test_static_batch_prefills_all_prompts_in_one_step(arrays_8b):
    """Under overload every batch is full: one prefill step over 8 prompts, then batch-8 decodes."""
    p = ServingParams()
    r = simulate_replica(arrays_8b, p, rate_per_s=100.0, prompt=Fixed(800), output=Fixed(64), max_batch=8,
                         requests=200, seed=2, scheduler="static", warmup_fraction=0.0)
    starts, sizes = np.unique(r.admit_s, return_counts=True)
    assert sizes.max() == 8 and np.mean(sizes == 8) > 0.9
    for start, size in zip(starts, sizes):
        batch = r.admit_s == start
        np.testing.assert_allclose(r.first_token_s[batch] - start, _step(arrays_8b, p, 0, 800 * size, 0, 800),
                                   rtol=1e-12)
    full = np.isin(r.admit_s, starts[sizes == 8])
    tpot = (r.finish_s - r.first_token_s)[full] / 63
    np.testing.assert_allclose(tpot, _step(arrays_8b, p, 8, 0, 832, 800), rtol=0.01)


# ---------------------------------------------------------------- reference: one iteration at a time

def _naive_continuous(arrays, params, res, max_batch, chunk_budget):
    """Textbook per-iteration continuous batching on the requests of ``res`` (no event skipping)."""
    arrival, prompt, output = res.arrival_s, res.prompt_tokens.tolist(), res.output_tokens.tolist()
    kv = np.ceil(memory.kv_bytes_per_seq(arrays, res.prompt_tokens + res.output_tokens)
                 * memory.kv_fraction_per_gpu(arrays)).astype(np.int64).tolist()
    budget = math.floor(float(memory.kv_budget_bytes_per_gpu(arrays, params)[0]))
    cache = {}

    def step(n, chunk, ctx, p):
        key = (n, chunk, math.floor(ctx / 16 + 0.5), math.floor(p / 16 + 0.5))
        if key not in cache:
            cache[key] = _step(arrays, params, n, chunk, key[2] * LENGTH_BUCKET_TOKENS,
                               key[3] * LENGTH_BUCKET_TOKENS)
        return cache[key]

    n = len(arrival)
    first, finish = [math.nan] * n, [math.nan] * n
    t, head, kv_used = 0.0, 0, 0
    prefill, decode = [], {}  # [request, prompt tokens left]; request -> tokens generated
    while head < n or prefill or decode:
        while head < n and arrival[head] <= t and len(prefill) + len(decode) < max_batch:
            if kv[head] > budget:  # can never fit: rejected
                head += 1
                continue
            if kv_used + kv[head] > budget:
                break
            prefill.append([head, prompt[head]])
            kv_used += kv[head]
            head += 1
        if not prefill and not decode:
            if head < n:
                t = max(t, arrival[head])
            continue
        left, chunk, weighted, completed = chunk_budget, 0, 0, []
        for entry in prefill:
            take = min(entry[1], left)
            entry[1] -= take
            chunk, weighted, left = chunk + take, weighted + take * prompt[entry[0]], left - take
            if entry[1] == 0:
                completed.append(entry[0])
            if left == 0:
                break
        ctx = sum(prompt[r] + g for r, g in decode.items()) / len(decode) if decode else 0
        t += step(len(decode), chunk, ctx, weighted / chunk if chunk else 0)
        for r in list(decode):
            decode[r] += 1
            if decode[r] == output[r]:
                finish[r] = t
                kv_used -= kv[r]
                del decode[r]
        prefill = [e for e in prefill if e[1] > 0]
        for r in completed:
            first[r] = t
            if output[r] == 1:
                finish[r] = t
                kv_used -= kv[r]
            else:
                decode[r] = 1
    return np.array(first), np.array(finish)


@pytest.mark.parametrize("rate_per_s, max_batch, kv_tokens",
                         [(6.0, 16, None), (30.0, 8, None), (30.0, 64, 5000)])
def test_event_skipping_matches_one_iteration_at_a_time(arrays_8b, rate_per_s, max_batch, kv_tokens):
    """Same times as a per-iteration loop: below and above saturation, and with a tight KV budget."""
    p = ServingParams()
    if kv_tokens is not None:
        need = (memory.weights_bytes_per_gpu(arrays_8b)[0] + p.workspace_bytes
                + memory.kv_bytes_per_seq(arrays_8b, kv_tokens)[0])
        p = ServingParams(gpu_memory_utilization=float(need / arrays_8b.memory_bytes[0]))
    r = simulate_replica(arrays_8b, p, rate_per_s=rate_per_s, prompt=LogNormal(600, 2000),
                         output=LogNormal(60, 200), max_batch=max_batch, requests=250, seed=7,
                         prefill_chunk_tokens=512)
    if kv_tokens is not None:
        assert 0 < r.rejected_requests and r.mean_batch < 0.5 * max_batch
    first, finish = _naive_continuous(arrays_8b, p, r, max_batch, 512)
    np.testing.assert_allclose(r.first_token_s, first, rtol=1e-9)
    np.testing.assert_allclose(r.finish_s, finish, rtol=1e-9)


# ---------------------------------------------------------------- laws and comparisons

@pytest.mark.parametrize("scheduler", ["continuous", "static"])
def test_littles_law(arrays_8b, scheduler):
    """Time-weighted decode batch = completion rate x mean decode time; slots likewise."""
    r = simulate_replica(arrays_8b, ServingParams(), rate_per_s=5.0, prompt=PROMPT, output=OUTPUT,
                         max_batch=64, requests=4000, seed=0, scheduler=scheduler)
    lam = r.request_throughput_per_s
    assert r.mean_batch == pytest.approx(lam * np.mean(r.decode_time_s()), rel=0.05)
    in_slot = (r.finish_s - r.admit_s)[r.measured]
    assert r.slot_utilization * r.max_batch == pytest.approx(lam * np.mean(in_slot), rel=0.05)


def test_timeline_continuous_fills_slots_and_waits_less():
    out = scheduler_timeline()
    s, c = out["static"], out["continuous"]
    assert c["slot_utilization"] > s["slot_utilization"]
    assert c["mean_wait_steps"] < s["mean_wait_steps"]
    assert c["makespan_steps"] < s["makespan_steps"]
    arrival, output = out["arrival_steps"], out["output_tokens"]
    assert len(arrival) == len(output) == 40 and min(output) >= 10 and max(output) <= 500
    for res in (s, c):
        spans = res["timeline"]
        assert sorted(r for _, r, _, _ in spans) == list(range(40))
        assert res["busy_slot_steps"] == sum(output)
        for slot, r, start, end in spans:
            assert 0 <= slot < 8 and end - start == output[r] and start >= arrival[r]
        for slot in range(8):  # one request per slot at a time
            own = sorted((a, b) for k, _, a, b in spans if k == slot)
            assert all(b0 <= a1 for (_, b0), (a1, _) in zip(own, own[1:]))
    # static: a batch starts only when every slot is empty
    for _, _, start, _ in s["timeline"]:
        assert all(e <= start or a >= start for _, _, a, e in s["timeline"])


def test_timeline_cli_prints_the_comparison():
    out = sim_json("--timeline")
    assert out["continuous"]["slot_utilization"] > out["static"]["slot_utilization"]
    assert out["continuous"]["mean_wait_steps"] < out["static"]["mean_wait_steps"]
    assert out == json.loads(json.dumps(scheduler_timeline()))
    text, _ = run_sim_cli("--timeline", "--requests", 12, "--max-batch", 4)
    assert "slot_utilization" in text and "slot  3 |" in text and "continuous (" in text


def test_replica_cli_continuous_beats_static_at_the_same_load():
    """12 req/s: continuous keeps up (short waits), static falls behind (long queue, idle slots)."""
    args = ("--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", 12, "--prompt", "mean=1000,p95=3000",
            "--output", "mean=256,p95=700", "--requests", 3000, "--max-batch", 64)
    c = sim_json(*args, "--scheduler", "continuous")
    s = sim_json(*args, "--scheduler", "static")
    for r in (c, s):
        for key in ("ttft_p50_s", "ttft_p95_s", "tpot_p50_s", "tpot_p95_s", "throughput_tokens_per_s",
                    "mean_batch", "requests", "slot_utilization", "mean_wait_s"):
            assert isinstance(r[key], (int, float)), key
        assert r["requests"] == 2850
    assert c["slot_utilization"] > s["slot_utilization"]
    assert c["mean_wait_s"] < s["mean_wait_s"]
    assert c["ttft_p95_s"] < s["ttft_p95_s"]
    assert c["throughput_tokens_per_s"] > s["throughput_tokens_per_s"]


def test_kv_budget_caps_the_batch(arrays_8b):
    """A budget of 10.5 requests' KV: never more than 10 run, whatever max_batch."""
    prompt, output = 1000, 256
    kv_seq = float(memory.kv_bytes_per_seq(arrays_8b, prompt + output)[0])
    need = memory.weights_bytes_per_gpu(arrays_8b)[0] + ServingParams().workspace_bytes + 10.5 * kv_seq
    p = ServingParams(gpu_memory_utilization=float(need / arrays_8b.memory_bytes[0]))
    r = simulate_replica(arrays_8b, p, rate_per_s=40.0, prompt=Fixed(prompt), output=Fixed(output),
                         max_batch=64, requests=2000, seed=0)
    assert r.rejected_requests == 0
    assert 9.0 < r.mean_batch <= 10.0
    assert r.slot_utilization * 64 <= 10.0 + 1e-9
    events = np.concatenate([np.stack([r.admit_s, np.ones(r.admit_s.size)], 1),
                             np.stack([r.finish_s, -np.ones(r.finish_s.size)], 1)])
    events = events[np.lexsort((events[:, 1], events[:, 0]))]  # finishes before admissions at a tie
    assert np.cumsum(events[:, 1]).max() == 10


def test_requests_larger_than_the_kv_budget_are_rejected(arrays_8b):
    kv_seq = float(memory.kv_bytes_per_seq(arrays_8b, 4000)[0])
    need = memory.weights_bytes_per_gpu(arrays_8b)[0] + ServingParams().workspace_bytes + kv_seq
    p = ServingParams(gpu_memory_utilization=float(need / arrays_8b.memory_bytes[0]))
    r = simulate_replica(arrays_8b, p, rate_per_s=2.0, prompt=PROMPT, output=Fixed(10), max_batch=8,
                         requests=500, seed=0)
    too_big = r.prompt_tokens + r.output_tokens > 4000
    assert r.rejected_requests == too_big.sum() > 0
    assert np.all(np.isnan(r.first_token_s[too_big])) and not r.measured[too_big].any()
    assert np.all(np.isfinite(r.finish_s[~too_big]))


def test_p95_ttft_grows_with_load(arrays_8b):
    p = ServingParams()
    p95 = [simulate_replica(arrays_8b, p, rate_per_s=rate, prompt=PROMPT, output=OUTPUT, max_batch=64,
                            requests=3000, seed=0).ttft_p95_s for rate in (4.0, 10.0, 15.0)]
    assert p95[0] <= p95[1] <= p95[2]
    assert p95[2] > p95[0]


# ---------------------------------------------------------------- CLI errors

def test_cli_bad_values_exit_2_one_line_per_flag():
    base = ("--model", "llama-3.1-8b", "--gpu", "h100-sxm")
    _, err = run_sim_cli(*base, "--rate", 0, "--prompt", "mean=10,p95=5", "--output", 100, expect=2)
    lines = err.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("error: --prompt:") and lines[1].startswith("error: --rate:")
    _, err = run_sim_cli(*base, "--rate", 1, "--prompt", 100, "--output", "lots", expect=2)
    assert err.startswith("error: --output:") and len(err.strip().splitlines()) == 1
    _, err = run_sim_cli("--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--rate", 1, "--prompt", 100,
                         "--output", 100, expect=2)
    assert "does not fit" in err
    _, err = run_sim_cli(*base, "--rate", 1, expect=2)
    assert "--prompt" in err and "--output" in err
    run_sim_cli("--timeline", "--gpu", "h100-sxm", expect=2)


# ---------------------------------------------------------------- parameters: the same as eval

def test_request_overhead_adds_to_every_ttft_and_nothing_else(arrays_8b):
    """The fixed per-request overhead (server, tokenizer) sits outside the GPU steps, as in the
    analytic model: TTFT statistics shift by exactly that much, TPOT and the schedule do not."""
    base = ServingParams()
    kw = dict(rate_per_s=8.0, prompt=PROMPT, output=OUTPUT, max_batch=64, requests=600, seed=1)
    a = simulate_replica(arrays_8b, base, **kw)
    b = simulate_replica(arrays_8b, base.with_overrides(request_overhead_s=0.25), **kw)
    for key in ("ttft_p50_s", "ttft_p95_s", "ttft_mean_s"):
        assert getattr(b, key) == pytest.approx(getattr(a, key) + 0.25, abs=1e-12)
    assert (b.tpot_p95_s, b.iterations) == (a.tpot_p95_s, a.iterations)
    np.testing.assert_array_equal(a.first_token_s, b.first_token_s)


def test_simulate_resolves_parameters_exactly_like_eval(capsys):
    """Shipped calibration by default, --engine and --calibration as in eval (issue 13)."""
    from planner import cli

    config = ["--model", "qwen3-32b", "--gpu", "h100-sxm", "--tp", "2", "--quant", "fp8"]
    sim = ["simulate", *config, "--rate", "1", "--prompt", "500", "--output", "20", "--requests", "50"]

    def run(*argv):
        assert cli.main([*argv, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    for extra in ([], ["--engine", "sglang"], ["--calibration", "none"], ["--engine", "trtllm", "--mem-eff", "0.7"]):
        s, e = run(*sim, *extra), run("eval", *config, *extra)
        assert s["parameters"] == e["parameters"] and s["parameters_used"] == e["parameters_used"], extra
    assert run(*sim, "--calibration", "none")["parameters"] == {
        k: float(v) for k, v in ServingParams().as_dict().items()}
    assert run(*sim)["parameters"] != run(*sim, "--engine", "sglang")["parameters"]
