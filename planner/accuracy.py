"""Predict published serving measurements with the analytic model and score the errors.

A measurement file (schema: ``benchmarks/data/README-measurements.md``) has one number per
row. :func:`prepare_rows` maps each row onto a catalog configuration (or a skip reason),
:func:`predict_rows` predicts every prepared row in one vectorized pass per load kind, and
:func:`accuracy_report` scores them (absolute percentage error per row, median and mean per
metric, the worst rows). How each ``load_kind`` is modelled (DESIGN sections 4 and 5):

* ``concurrency`` N: a closed loop of N/replicas users per replica (:func:`closed_loop`):
  the staggered steady state (Little's law fixed point with chunked prefill riding on the
  decode steps, an M/D/1 prefill wait, a wait for KV slots beyond the capacity) blended
  with the synchronized first wave of the run (:class:`Harness`);
* ``request_rate``: open loop (:func:`open_loop`): occupancy from Little's law, mean waits
  from Pollaczek-Khinchine and Erlang C; past the capacity the finite run's backlog;
* ``static_batch`` N: one prefill of N prompts, then o - 1 decode steps of batch N;
* ``max_throughput``: the largest batch the KV memory allows (the engine picked it) in
  steady state, or a burst of R requests (:func:`burst`) when the notes give R;
* ``single``: batch 1; TTFT is one prefill, the per-user speed 1 / TPOT.

Statistics: mean and median use the mean predictions (the median of a wait with an
exponential tail where that is the model), p90/p99 the exponential tails of the waits
and the occupancy spread (an approximation, documented in ``docs/accuracy.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd

from planner.catalog import Catalog
from planner.configs import config_arrays
from planner.schema import PlanningInputError
from planner.serving import memory
from planner.serving.arrays import ConfigArrays
from planner.serving.params import ServingParams
from planner.serving.queueing import erlang_c_halfin_whitt
from planner.serving.roofline import mixed_step_time_s

#: Columns a measurement file must have (the reference schema).
MEASUREMENT_COLUMNS = ("id", "source", "engine", "engine_version", "model", "gpu", "num_gpus", "tp",
                       "pp", "ep", "weight_dtype", "kv_dtype", "mode", "isl", "osl", "load_kind",
                       "load_value", "metric", "value", "unit", "notes")
#: Measurement dtype label -> catalog weight format.
WEIGHT_FORMATS = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8", "int4": "int4-awq",
                  "fp4": "nvfp4", "nvfp4": "nvfp4", "mxfp4": "mxfp4"}
#: Measurement KV dtype label -> catalog KV dtype (fp4/int KV caches are not in the catalog).
KV_DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}
#: Metric -> (quantity, statistic). Quantities: ttft, tpot, itl, e2e, out_total, out_per_gpu,
#: out_per_user, total_total, req_rate.
METRICS = {
    "ttft_ms_mean": ("ttft", "mean"), "ttft_ms_median": ("ttft", "median"),
    "ttft_ms_p90": ("ttft", "p90"), "ttft_ms_p99": ("ttft", "p99"),
    "tpot_ms_mean": ("tpot", "mean"), "tpot_ms_median": ("tpot", "median"), "tpot_ms_p99": ("tpot", "p99"),
    "itl_ms_mean": ("tpot", "mean"), "itl_ms_median": ("tpot", "median"), "itl_ms_p99": ("tpot", "p99"),
    "e2e_ms_mean": ("e2e", "mean"), "e2e_ms_median": ("e2e", "median"),
    "output_tok_s_total": ("out_total", "mean"), "output_tok_s_per_gpu": ("out_per_gpu", "mean"),
    "output_tok_s_per_user": ("out_per_user", "mean"), "total_tok_s_total": ("total_total", "mean"),
    "request_per_s": ("req_rate", "mean"),
}
#: Metric families the accuracy targets are stated for.
FAMILIES = {"ttft": "ttft", "tpot": "tpot_itl", "e2e": "e2e", "out_total": "throughput",
            "out_per_gpu": "throughput", "out_per_user": "throughput", "total_total": "throughput",
            "req_rate": "throughput"}
#: Milliseconds per second, for the ``_ms_`` metrics.
MS_PER_S = 1000.0
#: Quantiles of the named statistics.
QUANTILES = {"median": 0.5, "p90": 0.90, "p95": 0.95, "p99": 0.99}
#: Fixed-point iterations of the closed loop (damped).
CLOSED_LOOP_ITERATIONS = 30
#: Bisection steps of the open-loop occupancy (precision slots / 2^steps).
OPEN_LOOP_BISECTION_STEPS = 24
#: Damping of the occupancy spread one request's TPOT sees (it averages the step time over
#: its decode): quantiles use n + z_q sqrt(n) * this.
OCCUPANCY_SPREAD_DAMPING = 0.5
#: Cap of the prefill lane's utilization in the M/D/1 wait (the closed loop self-limits).
RHO_CAP = 0.98
#: Default weight of the synchronized first wave in a closed-loop run (1 / requests per
#: user): NVIDIA aiconfigurator assumes "requests 10x of concurrency"
#: (``sdk/backends/trtllm_backend.py``, its TTFT correction). Calibrated (globally).
FIRST_WAVE_WEIGHT = 0.1
#: TensorRT-LLM gives the KV cache this fraction of the memory left after weights and
#: activations (``kv_cache_free_gpu_mem_fraction``; aiconfigurator's
#: TRTLLM_DEFAULT_FREE_GPU_MEMORY_FRACTION); vLLM and SGLang cap total use instead
#: (``gpu_memory_utilization`` / ``mem_fraction_static``), as the planner's memory model does.
TRTLLM_FREE_MEMORY_FRACTION = 0.9
#: Largest in-flight batch assumed for ``max_throughput`` rows (the engine picked it and did
#: not publish it): TensorRT-LLM's default ``max_batch_size``.
MAX_THROUGHPUT_BATCH = 2048.0
#: Load kinds measured offline, inside the engine's own C++ benchmark (batch-1 latency,
#: static batches): no HTTP server, tokenizer or streaming, so no ``request_overhead_s``.
OFFLINE_LOAD_KINDS = ("single", "static_batch")


def load_measurements(path: str | Path) -> pd.DataFrame:
    """Read a measurement CSV and check its columns; ``PlanningInputError`` if unusable."""
    path = Path(path)
    if not path.is_file():
        raise PlanningInputError(f"{path}: no such measurement file")
    try:
        df = pd.read_csv(path, dtype={"id": str, "engine_version": str, "notes": str})
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise PlanningInputError(f"{path}: not a readable CSV ({exc})") from None
    missing = [c for c in ("id", "engine", "model", "gpu", "tp", "mode", "isl", "osl", "load_kind",
                           "load_value", "metric", "value") if c not in df.columns]
    if missing:
        raise PlanningInputError(f"{path}: missing column(s) {', '.join(missing)} "
                                 "(see benchmarks/data/README-measurements.md)")
    for col in MEASUREMENT_COLUMNS:
        if col not in df.columns:
            df[col] = np.nan
    df["notes"] = df["notes"].fillna("")
    return df


def _note_int(notes: pd.Series, key: str) -> pd.Series:
    return pd.to_numeric(notes.str.extract(rf"\b{key}=(\d+)")[0], errors="coerce")


def _attention_dp(df: pd.DataFrame) -> pd.Series:
    """Attention data-parallel ranks: AIC's ``attention_dp_size``, or the whole TP group
    where the notes say attention DP is on (``tp='8 (EP8, attention DP)'``)."""
    aic = _note_int(df["notes"], "attention_dp_size")
    text = df["notes"].str.contains("attention DP|attention data parallelism", case=False, regex=True)
    return aic.where(aic.notna(), np.where(text, df["tp"], 1.0)).fillna(1.0).clip(lower=1.0)


def _burst_requests(notes: pd.Series) -> pd.Series:
    """Requests of a finite benchmark run (``500 requests``), NaN when not stated."""
    return pd.to_numeric(notes.str.extract(r"(\d+) requests")[0], errors="coerce")


def prepare_rows(df: pd.DataFrame, catalog: Catalog) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split measurement rows into predictable configurations and skipped rows.

    Returns
    -------
    (rows, skipped): ``rows`` has the measurement columns plus the configuration columns
    of :func:`planner.configs.config_arrays` (``model``/``gpu`` canonical ids,
    ``quantization``, ``kv_cache_dtype``, ``replicas``, ``attention_dp``, ``quantity``,
    ``statistic``, ``assumptions``); ``skipped`` has ``id``, ``metric``, ``reason``.
    """
    df = df.reset_index(drop=True).copy()
    reason = pd.Series("", index=df.index, dtype=object)
    assumptions = pd.Series("", index=df.index, dtype=object)

    def skip(mask, text):
        mask = mask & (reason == "")
        reason[mask] = text

    models = {m: _resolve(catalog.model, m) for m in df["model"].dropna().unique()}
    gpus = {g: _resolve(catalog.gpu, g) for g in df["gpu"].dropna().unique()}
    df["model_id"] = df["model"].map(models)
    df["gpu_id"] = df["gpu"].map(gpus)
    skip(df["mode"].ne("agg"), "disaggregated serving (mode != agg)")
    skip(~df["metric"].isin(list(METRICS)), "unsupported metric")
    skip(df["model_id"].isna(), "model not in catalog")
    skip(df["gpu_id"].isna(), "GPU not in catalog")
    gpu_ok = df["gpu_id"].map(lambda g: g is not None and isinstance(g, str)
                              and catalog.gpu(g).bf16_tflops is not None)
    skip(~gpu_ok.fillna(False).astype(bool), "GPU has no compute figure")
    notes = df["notes"]
    skip(notes.str.contains(r"\bMTP\b", regex=True), "speculative decoding (MTP)")
    skip(~df["load_kind"].isin(["concurrency", "request_rate", "static_batch", "max_throughput",
                                "single"]), "unknown load_kind")
    skip(df["tp"].isna(), "tensor-parallel size not stated")
    single_speed = df["load_kind"].eq("single") & df["metric"].isin(["output_tok_s_per_user",
                                                                    "output_tok_s_total"])
    skip(df["isl"].isna(), "missing isl")
    skip(df["osl"].isna() & ~single_speed, "missing osl")
    skip(df["load_value"].isna() & df["load_kind"].isin(["concurrency", "request_rate", "static_batch"]),
         "missing load_value")
    wdt = df["weight_dtype"].map(_label)
    skip(~wdt.isin(list(WEIGHT_FORMATS) + [""]), "weight dtype not in catalog")
    kdt = df["kv_dtype"].map(_label)
    skip(~kdt.isin(list(KV_DTYPES) + [""]), "KV dtype not in catalog")
    skip(~df["value"].gt(0), "value not positive")

    df["quantization"] = wdt.map(WEIGHT_FORMATS).fillna("bf16")
    assumptions[wdt.eq("")] += "weight dtype not stated: bf16; "
    # KV dtype not stated: TensorRT-LLM FP8/FP4 checkpoints (ModelOpt) carry an FP8 KV cache
    # (the reference README's note for TensorRT-LLM); the other engines keep the model dtype
    # unless told otherwise (an FP8 KV cache for them fitted the reference rows worse).
    low = df["quantization"].isin(["fp8", "nvfp4", "mxfp4"]) & df["engine"].eq("trtllm")
    df["kv_cache_dtype"] = kdt.map(KV_DTYPES)
    df.loc[df["kv_cache_dtype"].isna() & low, "kv_cache_dtype"] = "fp8"
    df["kv_cache_dtype"] = df["kv_cache_dtype"].fillna("bf16")
    assumptions[kdt.eq("")] += "KV dtype not stated: " + df["kv_cache_dtype"] + "; "
    unsupported = [(f, g) for f, g in zip(df["quantization"], df["gpu_id"])]
    bad = np.array([isinstance(g, str) and g in catalog.weight_format(f).unsupported_gpus
                    for f, g in unsupported])
    skip(pd.Series(bad, index=df.index), "weight format unsupported on the GPU")

    df["tp"] = df["tp"].astype(float)
    df["pp"] = df["pp"].fillna(1.0).astype(float)
    per_replica = df["tp"] * df["pp"]
    replicas = (df["num_gpus"] / per_replica).where(df["num_gpus"].notna(), 1.0)
    df["replicas"] = np.maximum(np.floor(replicas.fillna(1.0) + 1e-9), 1.0)
    df["gpus_total"] = df["num_gpus"].where(df["num_gpus"].notna(), per_replica)
    df["attention_dp"] = _attention_dp(df)
    df["burst_requests"] = _burst_requests(notes)
    df["prompt_tokens"] = df["isl"].astype(float)
    out = df["osl"].astype(float)
    assumptions[df["osl"].isna() & single_speed] += "osl not stated: decode context = isl; "
    df["output_tokens"] = out.fillna(1.0)
    quantity = df["metric"].map(lambda m: METRICS.get(m, ("", ""))[0])
    df["quantity"] = quantity
    df["statistic"] = df["metric"].map(lambda m: METRICS.get(m, ("", ""))[1])
    version = df["engine_version"].astype(str).str.extract(r"^v?(\d+)\.(\d+)")
    df["release"] = np.where(version[0].notna(), df["engine"].astype(str) + "@" + version[0].fillna("")
                             + "." + version[1].fillna(""), None)
    df["assumptions"] = assumptions.str.rstrip("; ")
    keep = reason == ""
    df["math"] = None
    df.loc[keep, "math"] = catalog.math_modes(df.loc[keep, "gpu_id"], df.loc[keep, "quantization"])
    rows = df[keep].copy()
    rows["model"] = rows.pop("model_id")
    rows["gpu"] = rows.pop("gpu_id")
    rows["measured_model"], rows["measured_gpu"] = df.loc[keep, "model"], df.loc[keep, "gpu"]
    skipped = pd.DataFrame({"id": df.loc[~keep, "id"], "metric": df.loc[~keep, "metric"],
                            "reason": reason[~keep]})
    return rows.reset_index(drop=True), skipped.reset_index(drop=True)


def _label(value) -> str:
    """A dtype label in lower case; empty when not stated."""
    return value.strip().lower() if isinstance(value, str) else ""


def _resolve(lookup, name):
    try:
        return lookup(name).id
    except PlanningInputError:
        return None


# ------------------------------------------------------------------ the load models


def _arrays(catalog: Catalog, rows: pd.DataFrame, batch, context=None) -> ConfigArrays:
    frame = pd.DataFrame({
        "model": rows["model"].to_numpy(), "gpu": rows["gpu"].to_numpy(),
        "quantization": rows["quantization"].to_numpy(), "kv_cache_dtype": rows["kv_cache_dtype"].to_numpy(),
        "tp": rows["tp"].to_numpy(float), "pp": rows["pp"].to_numpy(float),
        "batch": np.asarray(batch, float) * np.ones(len(rows)),
        "prompt_tokens": rows["prompt_tokens"].to_numpy(float),
        "output_tokens": rows["output_tokens"].to_numpy(float),
        "context_tokens": np.nan if context is None else np.asarray(context, float) * np.ones(len(rows)),
    })
    c, _ = config_arrays(catalog, frame)
    return attention_dp_arrays(c, rows["attention_dp"].to_numpy(float))


def attention_dp_arrays(c: ConfigArrays, attention_dp) -> ConfigArrays:
    """The measured layout with attention data parallelism over ``attention_dp`` ranks.

    Notes
    -----
    With D attention-DP ranks inside the N GPUs of a stage, each rank holds the KV of its
    own b/D sequences over an attention TP group of N/D GPUs, and the dense (non-expert)
    weights are replicated D times. Expressed on the model's columns: the KV bytes per
    element are scaled by (ceil(n_kv/(N/D))/n_kv) / (D f_kv), f_kv the plain-TP share
    (MLA: 1/D), and the dense parameters are counted D times in ``params_total``.
    """
    d = np.asarray(attention_dp, dtype=float)
    if not np.any(d > 1):
        return c
    attn_tp = np.maximum(c.tp / d, 1.0)
    plain = np.where(c.kv_split_by_tp > 0, np.ceil(c.n_kv_heads / c.tp) / c.n_kv_heads, 1.0)
    split = np.where(c.kv_split_by_tp > 0, np.ceil(c.n_kv_heads / attn_tp) / c.n_kv_heads, 1.0)
    kv_scale = split / (d * plain)
    dense = c.params_total - c.routed_expert_params
    return c.replace(kv_bytes_per_element=c.kv_bytes_per_element * kv_scale,
                     params_total=c.params_total + dense * (d - 1.0))




@dataclass(frozen=True)
class Harness:
    """How the benchmark client drove the engine (not a property of the serving model).

    first_wave_weight: share of a closed-loop run's requests that behave like the
    synchronized first wave (all users submitting at once), per row or scalar.
    """

    first_wave_weight: object = FIRST_WAVE_WEIGHT

    def take(self, index) -> "Harness":
        w = np.asarray(self.first_wave_weight, dtype=float)
        return Harness(w[index] if w.ndim == 1 and w.size > 1 else w)


def _chunking(p: ServingParams, prompt):
    """k = max(1, p/C + 1/2) prefill chunks of t = p/k tokens (C = ``prefill_chunk_tokens``)."""
    k = np.maximum(1.0, prompt / p.prefill_chunk_tokens + 0.5)
    return k, prompt / k


def step_mix(c: ConfigArrays, p: ServingParams, n, prompt, output) -> dict:
    """Mean step time tau(n) with n sequences decoding and their replacements prefilling.

    Notes
    -----
    Per step n/(o-1) requests finish and as many prompts must be prefilled: T = n p/(o-1)
    prompt tokens per step, carried by mixed steps of t = p/k tokens (chunked prefill).
    The mixed fraction is f = min(1, T/t); when T > t every step carries T tokens.
    tau = (1 - f) s_d(n) + f s_m(n, max(t, T)) [s] (for T <= t the relation of
    :func:`planner.serving.queueing.state_at_occupancy`). The prefill lane's load is
    rho = T / C (C prompt tokens per step at most).
    """
    n = np.asarray(n, dtype=float)
    out_m1 = np.maximum(output - 1.0, 1.0)
    k, t = _chunking(p, prompt)
    need = n * prompt / out_m1
    f = np.minimum(1.0, need / t)
    s_d = mixed_step_time_s(c, p, n, 0.0)
    s_m = mixed_step_time_s(c, p, n, np.maximum(t, need), prompt_tokens=prompt)
    s_chunk = mixed_step_time_s(c, p, n, t, prompt_tokens=prompt)
    return {"tau_s": (1.0 - f) * s_d + f * s_m, "s_d": s_d, "prefill_service_s": k * s_chunk,
            "rho": np.minimum(need / p.prefill_chunk_tokens, RHO_CAP)}


def wave_prefill_s(c: ConfigArrays, p: ServingParams, requests, prompt) -> np.ndarray:
    """Time to prefill ``requests`` prompts submitted together: max(1, R p / C) steps of
    R p / steps tokens each (batched, chunked prefill) [s]."""
    tokens = np.asarray(requests, dtype=float) * prompt
    steps = np.maximum(1.0, tokens / p.prefill_chunk_tokens)
    return steps * mixed_step_time_s(c, p, 0.0, tokens / steps, prompt_tokens=prompt)


def _z(q) -> np.ndarray:
    """Standard normal quantile of q (0 where q is NaN: the mean)."""
    q = np.asarray(q, dtype=float)
    flat = [NormalDist().inv_cdf(v) if np.isfinite(v) else 0.0 for v in q.reshape(-1)]
    return np.array(flat, dtype=float).reshape(q.shape)


def exponential_wait(mean_wait, p_wait, q) -> np.ndarray:
    """Wait that is 0 w.p. 1 - P and exponential otherwise: its mean (q NaN) or q-quantile.

    Notes
    -----
    Mean ``mean_wait``; quantile (mean_wait / P) ln(P / (1 - q)) where P > 1 - q, else 0.
    """
    q = np.asarray(q, dtype=float)
    p_wait = np.clip(np.asarray(p_wait, dtype=float), 1e-12, 1.0)
    tail = mean_wait / p_wait * np.log(np.maximum(p_wait / np.maximum(1.0 - q, 1e-12), 1.0))
    return np.where(np.isfinite(q), tail, mean_wait)


def closed_loop(c: ConfigArrays, p: ServingParams, users, slots, prompt, output,
                first_wave_weight=FIRST_WAVE_WEIGHT, quantile=np.nan) -> dict:
    """TPOT, TTFT (mean, or the ``quantile`` where given) and rate of a closed loop of ``users``.

    Notes
    -----
    A = min(U, slots) requests hold KV slots. Two limits of a closed loop of identical
    requests are blended with the weight w of the synchronized first wave:

    * staggered (steady state): requests cycle through the prefill wait W, the prefill
      service S (k mixed steps) and o - 1 steps of tau(n); fixed point (damped) of
      n = A (o-1) tau / C_s, C_s = W + S + (o-1) tau, with the M/D/1 wait
      W = rho S / (2 (1 - rho)); an arriving request meets the other A - 1 requests:
      TTFT_s = S + (A - 1)/A (W + tau/2) (half a step in progress);
    * synchronized wave: all A prompts prefill together in T_pf (:func:`wave_prefill_s`),
      then all decode: TTFT_w = (A + 1)/(2A) T_pf, TPOT_w = s_d(A) + (A - 1)/(2A) T_pf/(o - 1),
      C_w = T_pf + (o - 1) s_d(A).

    TTFT = (1-w) TTFT_s + w TTFT_w + (U - A)/lambda, TPOT likewise,
    lambda = A / ((1-w) C_s + w C_w) [1/s]. Quantiles (an approximation): the waits'
    exponential tails (:func:`exponential_wait`), the wave's uniform spread (q T_pf and
    q T_pf / (o - 1)) and the step in progress (q tau), blended with the same weight.
    """
    users = np.asarray(users, dtype=float)
    w = np.asarray(first_wave_weight, dtype=float)
    q = np.asarray(quantile, dtype=float)
    quant = np.isfinite(q)
    out_m1 = np.maximum(output - 1.0, 1.0)
    active = np.maximum(np.minimum(users, np.asarray(slots, dtype=float)), 1.0)
    n = active.copy()
    for _ in range(CLOSED_LOOP_ITERATIONS):
        mix = step_mix(c, p, n, prompt, output)
        wait = mix["rho"] * mix["prefill_service_s"] / (2.0 * (1.0 - mix["rho"]))
        n = 0.5 * n + 0.5 * active * out_m1 * mix["tau_s"] / (wait + mix["prefill_service_s"]
                                                               + out_m1 * mix["tau_s"])
    mix = step_mix(c, p, n, prompt, output)
    tau, service, rho = mix["tau_s"], mix["prefill_service_s"], mix["rho"]
    wait = rho * service / (2.0 * (1.0 - rho))
    cycle_s = wait + service + out_m1 * tau
    others = (active - 1.0) / active  # an arriving request meets the other A - 1 only
    ttft_s = others * (exponential_wait(wait, rho, q) + np.where(quant, q, 0.5) * tau) + service
    t_pf = wave_prefill_s(c, p, active, prompt)
    s_full = mixed_step_time_s(c, p, active, 0.0)
    ttft_w = np.where(quant, q, (active + 1.0) / (2.0 * active)) * t_pf
    tpot_w = s_full + np.where(quant, q, (active - 1.0) / (2.0 * active)) * t_pf / out_m1
    cycle_w = t_pf + out_m1 * s_full
    rate = active / ((1.0 - w) * cycle_s + w * cycle_w)
    slot_wait = np.maximum(users - active, 0.0) / rate * np.where(quant, 2.0 * q, 1.0)
    ttft = (1.0 - w) * ttft_s + w * ttft_w + slot_wait
    return {"tpot_s": (1.0 - w) * tau + w * tpot_w, "ttft_s": ttft, "rate_per_s": rate, "occupancy": n}


def open_loop(c: ConfigArrays, p: ServingParams, rate, prompt, output, requests=np.nan,
              quantile=np.nan) -> dict:
    """TPOT, TTFT (mean or ``quantile``) and achieved rate at a Poisson ``rate`` per replica.

    ``c.batch`` holds the replica's slots (max batch and KV capacity).

    Notes
    -----
    The mean occupancy n solves lambda = n / ((o - 1) tau(n)) (bisection; tau(n) of
    :func:`step_mix`, Little's law as in :func:`planner.serving.queueing.state_at_occupancy`).
    TTFT = M/G/1 prefill wait (Pollaczek-Khinchine, fixed prompts) + Erlang-C slot wait
    P(wait) T / (slots - a) (Halfin-Whitt) + prefill service S + half a step in progress.
    Past the capacity mu the finite run of R requests builds a backlog whose mean wait is
    (R/2)(1/mu - 1/lambda) (infinite when R is unknown). Quantiles: exponential tails of
    the waits, TPOT at the occupancy n + z_q sqrt(n) d (d = OCCUPANCY_SPREAD_DAMPING).
    """
    rate = np.asarray(rate, dtype=float)
    q = np.asarray(quantile, dtype=float)
    quant = np.isfinite(q)
    slots = np.maximum(np.minimum(c.batch, memory.max_concurrency(c, p)), 1.0)
    out_m1 = np.maximum(output - 1.0, 1.0)
    shape = np.broadcast_shapes(slots.shape, rate.shape, np.shape(prompt))
    lo, hi = np.zeros(shape), np.broadcast_to(slots, shape).astype(float)
    mu = hi / (out_m1 * step_mix(c, p, hi, prompt, output)["tau_s"])
    over = mu < rate
    for _ in range(OPEN_LOOP_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        below = mid / (out_m1 * step_mix(c, p, mid, prompt, output)["tau_s"]) < rate
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    n = np.where(over, slots, hi)
    mix = step_mix(c, p, n, prompt, output)
    tau, service = mix["tau_s"], mix["prefill_service_s"]
    achieved = np.where(over, mu, rate)
    rho = np.minimum(achieved * service, RHO_CAP)
    w_pf = achieved * service ** 2 / (2.0 * (1.0 - rho))
    in_system = service + out_m1 * tau
    offered = np.minimum(achieved * in_system, slots * RHO_CAP)
    p_wait = erlang_c_halfin_whitt(slots, offered)
    w_slot = p_wait * in_system / (slots - offered)
    requests = np.asarray(requests, dtype=float)
    known = np.isfinite(requests)
    backlog = np.nan_to_num(requests) * np.where(quant, q, 0.5) * np.maximum(1.0 / mu - 1.0 / rate, 0.0)
    backlog = np.where(over, np.where(known, backlog, np.inf), 0.0)
    ttft = (exponential_wait(w_pf, rho, q) + exponential_wait(w_slot, p_wait, q) + service
            + np.where(quant, q, 0.5) * tau + backlog)
    n_q = np.clip(n + _z(q) * np.sqrt(n) * OCCUPANCY_SPREAD_DAMPING, 0.0, slots)
    tpot = np.where(quant, step_mix(c, p, n_q, prompt, output)["tau_s"], tau)
    return {"tpot_s": tpot, "ttft_s": ttft, "rate_per_s": achieved, "occupancy": n}


def burst(c: ConfigArrays, p: ServingParams, requests, slots, prompt, output) -> dict:
    """R requests submitted at once (``max_throughput`` with a known request count).

    Notes
    -----
    The first m = min(R, slots) requests are prefilled together (:func:`wave_prefill_s`),
    their mean TTFT is (m + 1)/(2m) T_pf(m); the other R - m wait for slots freed at the
    steady-state rate mu (the staggered closed loop of m), on average (R - m + 1)/(2 mu) + S.
    Duration T_pf(m) + (R - m)/mu + (o - 1) tau; the achieved rate is R / duration.
    """
    requests = np.asarray(requests, dtype=float)
    m = np.maximum(np.minimum(requests, slots), 1.0)
    steady = closed_loop(c, p, m, m, prompt, output, first_wave_weight=0.0)
    t_pf = wave_prefill_s(c, p, m, prompt)
    mu = steady["rate_per_s"]
    later = np.maximum(requests - m, 0.0)
    single = wave_prefill_s(c, p, 1.0, prompt)
    ttft = (m * (m + 1.0) / (2.0 * m) * t_pf + later * ((later + 1.0) / (2.0 * mu) + single)) / requests
    duration = t_pf + later / mu + np.maximum(output - 1.0, 0.0) * steady["tpot_s"]
    return {"tpot_s": steady["tpot_s"], "ttft_s": ttft, "rate_per_s": requests / duration,
            "occupancy": steady["occupancy"]}


def _take(p: ServingParams, index) -> ServingParams:
    """The rows ``index`` of a ServingParams whose fields may be per-row arrays."""
    out = {}
    for key, value in p.as_dict().items():
        arr = np.asarray(value)
        out[key] = arr[index] if arr.ndim == 1 and arr.size > 1 else value
    return ServingParams(**out)


def engine_memory_params(c: ConfigArrays, p: ServingParams, engines) -> ServingParams:
    """``p`` with TensorRT-LLM rows' memory budget expressed as the planner's utilization.

    Notes
    -----
    TensorRT-LLM: KV = f (M - W - ws) with f = TRTLLM_FREE_MEMORY_FRACTION, which equals the
    planner's u M - W - ws for u = (f (M - W - ws) + W + ws) / M (per GPU; clipped to
    [0, 1]). Other engines keep ``p.gpu_memory_utilization``.
    """
    engines = np.asarray(engines, dtype=object)
    trt = engines == "trtllm"
    if not trt.any():
        return p
    weights = memory.weights_bytes_per_gpu(c)
    fixed = weights + p.workspace_bytes
    util = (TRTLLM_FREE_MEMORY_FRACTION * np.maximum(c.memory_bytes - fixed, 0.0) + fixed) / c.memory_bytes
    util = np.clip(util, 0.0, 1.0)
    base = np.broadcast_to(np.asarray(p.gpu_memory_utilization, dtype=float), util.shape)
    return p.with_overrides(gpu_memory_utilization=np.where(trt, util, base))


def row_arrays(catalog: Catalog, rows: pd.DataFrame) -> ConfigArrays:
    """The serving-model arrays of prepared rows (batch 1; mean decode context p + o/2, or
    the prompt for batch-1 speed rows without an output length)."""
    prompt = rows["prompt_tokens"].to_numpy(float)
    context = np.where(rows["osl"].isna(), prompt, np.nan)
    return _arrays(catalog, rows, 1.0, context=context)


def predict_rows(catalog: Catalog, rows: pd.DataFrame, params: ServingParams,
                 harness: Harness | None = None, arrays: ConfigArrays | None = None) -> np.ndarray:
    """Predicted value of every prepared row, in the row's metric unit (ms, tok/s, req/s).

    Parameters
    ----------
    catalog : Catalog
    rows : DataFrame
        From :func:`prepare_rows`.
    params : ServingParams
        Fields may be arrays aligned with ``rows`` (per-row calibrated values).
    harness : Harness, optional
        How the benchmarks drove the engines (default :class:`Harness`).
    arrays : ConfigArrays, optional
        :func:`row_arrays` of ``rows``, when the caller predicts the same rows repeatedly.

    Returns
    -------
    numpy array of predictions (NaN where a row cannot be predicted). One vectorized
    pass per load kind.
    """
    harness = harness or Harness()
    arrays = row_arrays(catalog, rows) if arrays is None else arrays
    pred = np.full(len(rows), np.nan)
    kinds = rows["load_kind"].to_numpy()
    for kind in ("concurrency", "request_rate", "static_batch", "max_throughput", "single"):
        idx = np.flatnonzero(kinds == kind)
        if idx.size:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                pred[idx] = _predict_kind(rows.iloc[idx], take_arrays(arrays, idx, len(rows)),
                                          _take(params, idx), harness.take(idx), kind)
    return pred


def take_arrays(c: ConfigArrays, index, n: int) -> ConfigArrays:
    return c.replace(**{f.name: getattr(c, f.name)[index] for f in fields(c)
                        if np.ndim(getattr(c, f.name)) == 1 and getattr(c, f.name).size == n})


def _predict_kind(rows: pd.DataFrame, base: ConfigArrays, p: ServingParams, h: Harness,
                  kind: str) -> np.ndarray:
    prompt = rows["prompt_tokens"].to_numpy(float)
    output = rows["output_tokens"].to_numpy(float)
    replicas = rows["replicas"].to_numpy(float)
    load = rows["load_value"].to_numpy(float)
    engines = rows["engine"].to_numpy()
    q = rows["statistic"].map(QUANTILES).to_numpy(dtype=float)
    p = engine_memory_params(base, p, engines)
    # Slots: TensorRT-LLM reserves a request's whole length, paged engines its current one.
    slot_ctx = np.where(engines == "trtllm", prompt + output, prompt + output / 2.0)
    slots = memory.max_concurrency(base.replace(context_tokens=slot_ctx), p)
    if kind == "concurrency":
        r = closed_loop(base, p, load / replicas, slots, prompt, output, h.first_wave_weight, q)
    elif kind == "max_throughput":
        slots = np.minimum(slots, MAX_THROUGHPUT_BATCH)
        requests = rows["burst_requests"].to_numpy(float) / replicas
        r = closed_loop(base, p, slots, slots, prompt, output, 0.0, q)
        finite = np.isfinite(requests)
        if finite.any():
            b = burst(base, p, np.where(finite, requests, 1.0), slots, prompt, output)
            r = {k: np.where(finite, b[k], r[k]) for k in r}
    elif kind == "request_rate":
        r = open_loop(base.replace(batch=slots), p, load / replicas, prompt, output,
                      rows["burst_requests"].to_numpy(float) / replicas, q)
    elif kind == "static_batch":
        s_d = mixed_step_time_s(base, p, load, 0.0)
        t_pf = mixed_step_time_s(base, p, 0.0, load * prompt, prompt_tokens=prompt)
        r = {"tpot_s": s_d, "ttft_s": t_pf, "rate_per_s": load / (t_pf + np.maximum(output - 1.0, 0.0) * s_d)}
    else:  # single
        s_d = mixed_step_time_s(base, p, 1.0, 0.0)
        t_pf = mixed_step_time_s(base, p, 0.0, prompt, prompt_tokens=prompt)
        r = {"tpot_s": s_d, "ttft_s": t_pf, "rate_per_s": 1.0 / (t_pf + np.maximum(output - 1.0, 0.0) * s_d)}
    return _metric_values(rows, r, replicas, prompt, output, p)


def _metric_values(rows, r, replicas, prompt, output, p: ServingParams) -> np.ndarray:
    quantity = rows["quantity"].to_numpy()
    online = ~rows["load_kind"].isin(OFFLINE_LOAD_KINDS).to_numpy()
    ttft = r["ttft_s"] + np.where(online, p.request_overhead_s, 0.0)
    rate_total = r["rate_per_s"] * replicas
    values = {
        "ttft": ttft * MS_PER_S, "tpot": r["tpot_s"] * MS_PER_S,
        "e2e": (ttft + np.maximum(output - 1.0, 0.0) * r["tpot_s"]) * MS_PER_S,
        "out_total": rate_total * output,
        "out_per_gpu": rate_total * output / rows["gpus_total"].to_numpy(float),
        "out_per_user": 1.0 / r["tpot_s"], "total_total": rate_total * (prompt + output),
        "req_rate": rate_total,
    }
    out = np.full(len(rows), np.nan)
    for q, v in values.items():
        mask = quantity == q
        out[mask] = np.broadcast_to(v, out.shape)[mask]
    return out


def add_families(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with a ``family`` column (ttft, tpot_itl, e2e, throughput) if it lacks one."""
    if "family" not in rows.columns:
        rows = rows.assign(family=rows["quantity"].map(FAMILIES))
    return rows


def score_rows(catalog: Catalog, measurements: pd.DataFrame, calibration=None,
               base: ServingParams | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Predict and score every predictable row.

    Returns
    -------
    (scored, skipped): ``scored`` is :func:`prepare_rows`' frame plus ``prediction``,
    ``ape_pct`` (absolute percentage error), ``family``; rows whose prediction is not
    finite move to ``skipped`` (reason ``prediction not finite``).
    """
    from planner.calibration import predict_calibrated

    rows, skipped = prepare_rows(measurements, catalog)
    rows = add_families(rows)
    pred = predict_calibrated(catalog, rows, calibration, base) if len(rows) else np.zeros(0)
    ok = np.isfinite(pred) & (pred > 0)
    if (~ok).any():
        extra = pd.DataFrame({"id": rows.loc[~ok, "id"], "metric": rows.loc[~ok, "metric"],
                              "reason": "prediction not finite (overloaded run of unknown length, or "
                                        "no memory for the weights)"})
        skipped = pd.concat([skipped, extra], ignore_index=True)
    scored = rows[ok].assign(prediction=pred[ok]).reset_index(drop=True)
    scored["ape_pct"] = (scored["prediction"] - scored["value"]).abs() / scored["value"] * 100.0
    return scored, skipped


def _stats(ape: pd.Series) -> dict:
    return {"n": int(len(ape)), "median_ape_pct": round(float(ape.median()), 2),
            "mean_ape_pct": round(float(ape.mean()), 2)}


#: Columns of ``planner accuracy --rows-out``: one line per measurement row.
ROW_COLUMNS = ("id", "metric", "value", "prediction", "ape_pct", "engine", "release", "model", "gpu", "tp", "pp",
               "quantization", "kv_cache_dtype", "load_kind", "load_value", "isl", "osl", "assumptions")


def rows_table(scored: pd.DataFrame, skipped: pd.DataFrame) -> pd.DataFrame:
    """Every measurement row with its prediction (``skipped`` empty), or its skip reason."""
    predicted = scored[[c for c in ROW_COLUMNS if c in scored.columns]].assign(skipped="")
    dropped = skipped.rename(columns={"reason": "skipped"})
    return pd.concat([predicted, dropped], ignore_index=True).sort_values(["id", "metric"], ignore_index=True)


def accuracy_report(catalog: Catalog, measurements: pd.DataFrame, calibration=None,
                    base: ServingParams | None = None, worst: int = 20, scored=None) -> dict:
    """The ``planner accuracy`` result: counts, per-metric errors, the worst rows, the parameters.

    Parameters
    ----------
    catalog : Catalog
    measurements : DataFrame
        From :func:`load_measurements`.
    calibration : Calibration, optional
        None: the seeds' parameters (``base``).
    worst : int
        How many of the largest errors to list.

    Returns
    -------
    dict with ``rows``, ``predicted``, ``skipped`` (rows per reason), ``by_metric`` and
    ``by_family`` (``n``, ``median_ape_pct``, ``mean_ape_pct``), ``worst`` (id, metric,
    value, prediction, ape_pct and the configuration) and ``calibration``. ``scored``: the
    ``(scored, skipped)`` pair of :func:`score_rows` when the caller already has it.
    """
    base = base or ServingParams()
    scored, skipped = scored if scored is not None else score_rows(catalog, measurements, calibration, base)
    by_metric = {m: _stats(g["ape_pct"]) for m, g in scored.groupby("metric")}
    by_family = {f: _stats(g["ape_pct"]) for f, g in scored.groupby("family")}
    cols = ["id", "metric", "value", "prediction", "ape_pct", "engine", "model", "gpu", "tp", "load_kind",
            "load_value", "isl", "osl"]
    top = scored.sort_values("ape_pct", ascending=False).head(worst)[cols]
    if calibration is None:
        used = {"calibration": "none", "parameters": {k: v for k, v in base.as_dict().items()}}
    else:
        used = calibration.describe()
    return {
        "rows": int(len(measurements)),
        "predicted": int(len(scored)),
        "skipped": {str(k): int(v) for k, v in skipped["reason"].value_counts().items()},
        "by_metric": by_metric,
        "by_family": by_family,
        "worst": [{k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in r.items()}
                  for r in top.to_dict(orient="records")],
        "calibration": used,
    }
