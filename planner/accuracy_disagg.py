"""Predict the disaggregated reference rows (``mode == disagg``) with the P/D serving model.

:func:`prepare_disagg_rows` resolves each disaggregated row as :func:`planner.accuracy_rows.prepare_rows`
does for aggregated ones (model, GPU, formats, engine release, campaign, metric) and reads
its prefill/decode layout from the row and its notes (:func:`disagg_layouts`);
:func:`predict_disagg_rows` predicts every row with the closed loop of
:func:`pd_closed_loop`; :func:`score_disagg_rows` gives the absolute percentage errors.
``benchmarks/bench_accuracy_disagg.py`` prints coverage and median APE per metric family.
The model and the figures: ``docs/serving-model.md`` section 14.4.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.accuracy import QUANTILES, engine_keys
from planner.accuracy_loads import (CLOSED_LOOP_ITERATIONS, RHO_CAP, Harness, mixture_ttft_quantile,
                                    wave_prefill_s)
from planner.accuracy_rows import FAMILIES, prepare_rows
from planner.configs import config_arrays
from planner.parameters import catalog_keys
from planner.serving import memory
from planner.serving.memory import engine_memory_params
from planner.serving.arrays import ConfigArrays
from planner.serving.disagg import scale_out_bytes_per_s
from planner.serving.params import ServingParams
from planner.serving.roofline import StepModel

#: Milliseconds per second.
MS_PER_S = 1000.0
#: Prompt tokens a prefill-only worker batches into one step, C_p (at least the engine's
#: ``prefill_chunk_tokens``): the engines' defaults for serving on 80-180 GB GPUs, SGLang
#: ``chunked_prefill_size`` 8192 (16384 from 160 GB), TensorRT-LLM ``max_num_tokens`` 8192,
#: vLLM ``max_num_batched_tokens`` 8192 (OpenAI server). docs/serving-model.md section 14.4.
PREFILL_BATCH_TOKENS = 8192.0
#: The layout columns :func:`disagg_layouts` adds: worker counts, GPUs per pipeline stage
#: (``tp``, attention-DP ranks included), pipeline stages, attention-DP ranks and max batch
#: per worker (NaN where not recorded), for the prefill (``p_``) and decode (``d_``) pools.
LAYOUT_COLUMNS = ("p_workers", "p_tp", "p_pp", "p_attention_dp", "p_ep", "p_batch",
                  "d_workers", "d_tp", "d_pp", "d_attention_dp", "d_ep", "d_batch")

_AIC = (r"prefill workers=(\d+) tp=(\d+) pp=(\d+) attention_dp=(\d+) moe_tp=\d+ moe_ep=(\d+) batch=(\d+); "
        r"decode workers=(\d+) tp=(\d+) pp=(\d+) attention_dp=(\d+) moe_tp=\d+ moe_ep=(\d+) batch=(\d+)")
_INFERENCEX = r"disagg P: (\d+)x\(tp(\d+)/ep(\d+)/(dpa|nodpa)\)=(\d+)gpu"


def disagg_layouts(df: pd.DataFrame) -> pd.DataFrame:
    """The prefill/decode layout of every row (``LAYOUT_COLUMNS``; NaN where not recorded).

    Notes
    -----
    * aiconfigurator rows: ``prefill workers=W tp=T pp=P attention_dp=D moe_tp=M moe_ep=E
      ...; decode ... batch=B`` in the notes; a worker has T x D GPUs per stage (attention
      DP inside them), expert parallelism E inside them, and runs at most B x D sequences
      (AIC counts ``batch`` per attention-DP rank).
    * InferenceX rows: ``disagg P: Wx(tpT/epE/dpa)=Ggpu`` gives the prefill pool; the row's
      ``tp`` and ``ep`` are one decode worker's, attention DP when the notes say ``attention
      data-parallel``, and the decode workers are (num_gpus - G) / tp. The max batch is
      not recorded (the KV memory decides).
    * Other rows (the LMSYS decode-only points): no prefill layout, NaN.

    ``layout_problem`` names a recorded layout that contradicts itself (InferenceX: prefill
    GPUs != workers x tp; decode GPUs not a multiple of the decode tp), else "".
    """
    notes = df["notes"].fillna("").astype(str)
    out = pd.DataFrame(np.nan, index=df.index, columns=list(LAYOUT_COLUMNS))
    aic = notes.str.extract(_AIC).astype(float)
    ok = aic[0].notna()
    out.loc[ok, "p_workers"], out.loc[ok, "p_tp"] = aic[0], aic[1] * aic[3]
    out.loc[ok, "p_pp"], out.loc[ok, "p_attention_dp"], out.loc[ok, "p_ep"] = aic[2], aic[3], aic[4]
    out.loc[ok, "p_batch"] = aic[5] * aic[3]
    out.loc[ok, "d_workers"], out.loc[ok, "d_tp"] = aic[6], aic[7] * aic[9]
    out.loc[ok, "d_pp"], out.loc[ok, "d_attention_dp"], out.loc[ok, "d_ep"] = aic[8], aic[9], aic[10]
    out.loc[ok, "d_batch"] = aic[11] * aic[9]
    ix = notes.str.extract(_INFERENCEX)
    hit = ix[0].notna() & ~ok
    tp = pd.to_numeric(df["tp"], errors="coerce")
    gpus = pd.to_numeric(df["num_gpus"], errors="coerce")
    p_tp = ix[1].astype(float)
    out.loc[hit, "p_workers"], out.loc[hit, "p_tp"], out.loc[hit, "p_pp"] = ix[0].astype(float), p_tp, 1.0
    out.loc[hit, "p_attention_dp"] = np.where(ix[3] == "dpa", p_tp, 1.0)[hit.to_numpy()]
    out.loc[hit, "p_ep"] = ix[2].astype(float)
    out.loc[hit, "d_ep"] = pd.to_numeric(df["ep"], errors="coerce").fillna(1.0)
    decode_dp = notes.str.split(r"\|\|").str[0].str.contains("attention data-parallel", regex=False)
    out.loc[hit, "d_tp"], out.loc[hit, "d_pp"] = tp, 1.0
    out.loc[hit, "d_attention_dp"] = np.where(decode_dp, tp, 1.0)[hit.to_numpy()]
    out.loc[hit, "d_workers"] = (gpus - ix[4].astype(float)) / tp
    out["layout_problem"] = ""
    width = ix[4].astype(float) / ix[0].astype(float)
    out.loc[hit & (width != p_tp), "layout_problem"] = "prefill GPUs != workers x tp in the recorded layout"
    whole = (out["d_workers"] >= 1) & (out["d_workers"] == np.floor(out["d_workers"]))
    out.loc[hit & ~whole & out["layout_problem"].eq(""), "layout_problem"] = \
        "decode GPUs not a whole number of decode workers in the recorded layout"
    return out


def prepare_disagg_rows(df: pd.DataFrame, catalog) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """The disaggregated rows with a recorded layout, resolved for prediction.

    Returns ``(rows, skipped, recorded)``: ``rows`` has the columns of
    :func:`planner.accuracy_rows.prepare_rows` plus ``LAYOUT_COLUMNS``; ``skipped`` has ``id``,
    ``metric``, ``reason`` for the rows with a layout that cannot be predicted; ``recorded``
    counts the rows with a recorded layout (the coverage's denominator).
    """
    sub = df[df["mode"].eq("disagg")].reset_index(drop=True)
    layout = disagg_layouts(sub)
    has = layout["p_workers"].notna().to_numpy()
    sub, layout = sub[has].reset_index(drop=True), layout[has].reset_index(drop=True)
    # Resolve everything but the layout as an aggregated row would be (the GPU count and EP
    # of a disaggregated row describe the two pools, so they are left to the layout).
    rows, skipped = prepare_rows(sub.assign(mode="agg", num_gpus=np.nan, ep=np.nan), catalog)
    rows = rows.merge(layout.assign(id=sub["id"]), on="id", how="left")
    # The recipes' poll interval and attention-DP balance are aggregated-engine settings.
    rows["poll_steps"], rows["balance_ranks"], rows["balance_timeout_steps"] = 1.0, 1.0, 0.0
    bad = rows["layout_problem"].ne("")
    contradicted = pd.DataFrame({"id": rows.loc[bad, "id"], "metric": rows.loc[bad, "metric"],
                                 "reason": rows.loc[bad, "layout_problem"]})
    skipped = pd.concat([skipped, contradicted], ignore_index=True)
    rows = rows[~bad].reset_index(drop=True)
    rows["gpus_total"] = (rows["p_workers"] * rows["p_tp"] * rows["p_pp"]
                          + rows["d_workers"] * rows["d_tp"] * rows["d_pp"])
    rows["family"] = rows["quantity"].map(FAMILIES)
    return rows, skipped, int(has.sum())


def pool_arrays(catalog, rows: pd.DataFrame, prefix: str) -> ConfigArrays:
    """The serving-model arrays of the prefill (``"p"``) or decode (``"d"``) worker of each row."""
    frame = pd.DataFrame({
        "model": rows["model"].to_numpy(), "gpu": rows["gpu"].to_numpy(),
        "quantization": rows["quantization"].to_numpy(), "kv_cache_dtype": rows["kv_cache_dtype"].to_numpy(),
        "tp": rows[f"{prefix}_tp"].to_numpy(float), "pp": rows[f"{prefix}_pp"].to_numpy(float),
        "batch": 1.0, "prompt_tokens": rows["prompt_tokens"].to_numpy(float),
        "output_tokens": rows["output_tokens"].to_numpy(float), "context_tokens": np.nan})
    c, _ = config_arrays(catalog, frame)
    dp = rows[f"{prefix}_attention_dp"].to_numpy(float)
    ep = np.minimum(np.nan_to_num(rows[f"{prefix}_ep"].to_numpy(float), nan=1.0), c.tp)
    # The layout terms of serving/moe.py: ep inside the tp GPUs, attention DP over D ranks.
    return c.replace(ep=np.maximum(ep, 1.0), attention_dp=np.where(dp > 1.0, dp, 0.0))


def prefill_pool_capacity(pre: ConfigArrays, p: ServingParams, prompt, prefill_workers,
                          prefill_batch=np.inf) -> tuple:
    """``(mu, B, C_p)``: the prefill pool's capacity mu = n_p B / T(B) [prompts/s], the prompts
    per step B = min(max(1, C_p / p), ``prefill_batch``) and the step budget C_p = max(engine
    chunk, :data:`PREFILL_BATCH_TOKENS`) [tokens] of :func:`pd_closed_loop` (T:
    :func:`planner.accuracy_loads.wave_prefill_s`)."""
    budget = np.maximum(p.prefill_chunk_tokens, PREFILL_BATCH_TOKENS)
    per_step = np.minimum(np.maximum(1.0, budget / prompt), np.maximum(prefill_batch, 1.0))
    capacity = prefill_workers * per_step / wave_prefill_s(pre, p, per_step, prompt, budget, per_step)
    return capacity, per_step, budget


def pd_closed_loop(pre: ConfigArrays, dec: ConfigArrays, p: ServingParams, users, prefill_workers,
                   decode_workers, decode_slots, transfer_s, prompt, output, first_wave_weight,
                   quantile, prefill_batch=np.inf, decode_scale=1.0) -> dict:
    """TPOT, TTFT (mean or ``quantile``) and rate of ``users`` closed-loop users on a P/D pair.

    ``decode_scale``: a factor on every decode step time (1: the serving model's own); a
    sensitivity check only (:func:`measured_decode_scale`, ``bench_accuracy_moe.py
    --disagg-breakdown``), no prediction uses another value.

    Notes
    -----
    A = min(U, n_d B_d) users hold decode slots. Staggered steady state (fixed point, damped,
    of the decoders per decode worker n, the prefill batch b and the wait W;
    docs/serving-model.md section 14.4):

    * a prefill worker is a batch server: it prefills the b prompts queued when its previous
      batch ends together, in T(b) (:func:`planner.accuracy_loads.wave_prefill_s`: max(1,
      b p / C_p, b / B) steps), b = clip(lambda T(b) / n_p, 1, B), at most
      B = min(max(1, C_p / p), ``prefill_batch``) prompts per step (C_p =
      :data:`PREFILL_BATCH_TOKENS`; ``prefill_batch``: a recorded engine max batch); its
      capacity is mu = n_p B / T(B) prompts/s;
    * a request finds a batch in service with probability rho = lambda T(b) / (n_p b) and
      waits W_r = rho T(b) / (2 (1 - min(lambda / mu, RHO_CAP))) (the residual of the batch
      in service, growing as M/D/1 where the batch cannot grow), at most (A - 1) T(b) /
      (n_p b); past the capacity the closed loop parks the users the pool cannot serve in
      its queue (Little's law at lambda = mu): W_q = max(0, A / mu - (T(b) + X + (o - 1) tau)
      - W_r), W = W_r + W_q;
    * its KV moves in X, then it decodes o - 1 steps of tau = s_d(n) (no prefill
      interference); lambda = A / (W + T(b) + X + (o - 1) tau), n = lambda (o - 1) tau / n_d.

    TTFT_s = T(b) + X + (A - 1)/A (W + tau/2) (the decode step in progress).
    Synchronized first wave (weight w, as :func:`planner.accuracy_loads.closed_loop`): each
    prefill worker prefills its max(A / n_p, 1) prompts together in T_pf = T(A / n_p),
    TTFT_w = (A + 1)/(2A) T_pf + X and the decode runs at the full batch A / n_d. Blend and
    slot wait (U - A)/lambda as the aggregated closed loop; quantiles from
    :func:`planner.accuracy_loads.mixture_ttft_quantile` (W_r with its exponential tail, the
    parked W_q the same for every user).
    """
    users = np.asarray(users, dtype=float)
    q = np.asarray(quantile, dtype=float)
    quant = np.isfinite(q)
    w = np.asarray(first_wave_weight, dtype=float)
    n_p, n_d = np.asarray(prefill_workers, float), np.asarray(decode_workers, float)
    out_m1 = np.maximum(output - 1.0, 1.0)
    active = np.maximum(np.minimum(users, n_d * decode_slots), 1.0)
    model_step = StepModel(dec, p).time
    scale = np.asarray(decode_scale, dtype=float)
    decode_step = model_step if np.all(scale == 1.0) else (lambda n: model_step(n) * scale)
    capacity, per_step, budget = prefill_pool_capacity(pre, p, prompt, n_p, prefill_batch)

    def batch_s(requests):   # T(b): one prefill worker's batch of b prompts
        return wave_prefill_s(pre, p, requests, prompt, budget, per_step)

    def pool(rate, batch, tau):
        t_b = batch_s(batch)
        rho = np.minimum(rate * t_b / (n_p * batch), 1.0)
        full = np.minimum(rate / capacity, RHO_CAP)
        queued = np.minimum(0.5 * rho * t_b / (1.0 - full), (active - 1.0) * t_b / (n_p * batch))
        parked = np.maximum(active / capacity - (t_b + transfer_s + out_m1 * tau) - queued, 0.0)
        return t_b, rho, queued, parked

    n, batch, wait = active / n_d, np.ones_like(active), np.zeros_like(active)
    for _ in range(CLOSED_LOOP_ITERATIONS):
        tau = decode_step(n)
        t_b = batch_s(batch)
        rate = active / (wait + t_b + transfer_s + out_m1 * tau)
        batch = 0.5 * batch + 0.5 * np.clip(rate * t_b / n_p, 1.0, per_step)
        _, _, queued, parked = pool(rate, batch, tau)
        wait = 0.5 * wait + 0.5 * (queued + parked)
        n = 0.5 * n + 0.5 * rate * out_m1 * tau / n_d
    tau = decode_step(n)
    t_b, rho, queued, parked = pool(active / (wait + batch_s(batch) + transfer_s + out_m1 * tau), batch, tau)
    wait = queued + parked
    others = (active - 1.0) / active
    ttft_s = t_b + transfer_s + others * (wait + 0.5 * tau)
    t_pf = batch_s(np.maximum(active / n_p, 1.0))   # a worker has a prompt or none
    tau_w = decode_step(active / n_d)
    ttft_w = (active + 1.0) / (2.0 * active) * t_pf + transfer_s
    rate = active / ((1.0 - w) * (wait + t_b + transfer_s + out_m1 * tau)
                     + w * (t_pf + transfer_s + out_m1 * tau_w))
    ttft = (1.0 - w) * ttft_s + w * ttft_w
    if quant.any():
        mixed = mixture_ttft_quantile(np.where(quant, q, 0.5), w, t_b + transfer_s + others * parked, others,
                                      queued, rho, tau, t_pf)
        ttft = np.where(quant, mixed, ttft)
    slot_wait = np.maximum(users - active, 0.0) / rate * np.where(quant, 2.0 * q, 1.0)
    return {"ttft_s": ttft + slot_wait, "tpot_s": (1.0 - w) * tau + w * tau_w, "rate_per_s": rate}


def row_params(catalog, rows: pd.DataFrame, calibration=None, base: ServingParams | None = None,
               harness: Harness | None = None) -> tuple:
    """``(params, harness)`` of the rows: the calibration's values per GPU, engine, model, math
    and campaign (both pools of a row share them), else ``base`` and :class:`Harness`."""
    base = base or ServingParams()
    if calibration is None:
        return base, harness or Harness()
    gpus, engines, campaigns = rows["gpu"].to_numpy(), engine_keys(rows), rows["campaign"].to_numpy()
    p = calibration.params_for(base, gpus, engines, model_ids=rows["model"].to_numpy(),
                               math_modes=rows["math"].to_numpy(), campaigns=campaigns,
                               **catalog_keys(catalog, gpus, rows["model"].to_numpy()))
    return p, harness or Harness(**calibration.harness_for(gpus, engines, campaigns))


def predict_disagg_rows(catalog, rows: pd.DataFrame, calibration=None, base: ServingParams | None = None,
                        harness: Harness | None = None, decode_scale=None) -> np.ndarray:
    """Predicted value of every row of :func:`prepare_disagg_rows`, in the row's unit (NaN: none).

    Both pools take the row's calibrated parameters (same GPU type and engine); only
    ``concurrency`` rows are predicted (every recorded-layout row is one). ``harness``:
    the benchmark-harness values (default: the calibration's, else :class:`Harness`).
    ``decode_scale``: per row of ``rows``, the sensitivity factor of :func:`pd_closed_loop`
    (None: 1, the model's own decode steps).
    """
    base = base or ServingParams()
    pred = np.full(len(rows), np.nan)
    idx = np.flatnonzero(rows["load_kind"].eq("concurrency").to_numpy())
    if not idx.size:
        return pred
    r = rows.iloc[idx].reset_index(drop=True)
    gpus = r["gpu"].to_numpy()
    p, harness = row_params(catalog, r, calibration, base, harness)
    pre, dec = pool_arrays(catalog, r, "p"), pool_arrays(catalog, r, "d")
    prompt, output = r["prompt_tokens"].to_numpy(float), r["output_tokens"].to_numpy(float)
    p_dec = engine_memory_params(dec, p, r["engine"].to_numpy())
    slot_ctx = np.where(r["engine"].eq("trtllm"), prompt + output, prompt + output / 2.0)
    slots = memory.max_concurrency(dec.replace(context_tokens=slot_ctx), p_dec)
    slots = np.where(r["d_batch"].notna(), np.minimum(slots, r["d_batch"].to_numpy(float)), slots)
    bandwidth = np.array([scale_out_bytes_per_s(catalog.gpu(g)) for g in gpus])
    links = np.minimum(pre.tp * pre.pp, dec.tp * dec.pp)
    transfer = memory.kv_bytes_per_seq(pre, prompt) / (links * bandwidth)
    q = r["statistic"].map(QUANTILES).to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        res = pd_closed_loop(pre, dec, p, r["load_value"].to_numpy(float), r["p_workers"].to_numpy(float),
                             r["d_workers"].to_numpy(float), slots, transfer, prompt, output,
                             harness.first_wave_weight, q, r["p_batch"].fillna(np.inf).to_numpy(float),
                             1.0 if decode_scale is None else np.asarray(decode_scale, dtype=float)[idx])
        ttft = res["ttft_s"] + p.request_overhead_s
        rate = res["rate_per_s"]
        values = {"ttft": ttft * MS_PER_S, "tpot": res["tpot_s"] * MS_PER_S,
                  "e2e": (ttft + np.maximum(output - 1.0, 0.0) * res["tpot_s"]) * MS_PER_S,
                  "out_total": rate * output, "out_per_gpu": rate * output / r["gpus_total"].to_numpy(float),
                  "out_per_user": 1.0 / res["tpot_s"], "total_total": rate * (prompt + output),
                  "req_rate": rate}
    quantity = r["quantity"].to_numpy()
    out = np.full(len(r), np.nan)
    for name, v in values.items():
        mask = quantity == name
        out[mask] = np.broadcast_to(v, out.shape)[mask]
    # A worker whose weights leave no KV budget in the memory model is not predicted.
    fits = (memory.kv_budget_bytes_per_gpu(pre, engine_memory_params(pre, p, r["engine"].to_numpy())) > 0) \
        & (memory.kv_budget_bytes_per_gpu(dec, p_dec) > 0)
    pred[idx] = np.where(fits, out, np.nan)
    return pred


#: The columns that identify one measured point of a disaggregated run (its TTFT, TPOT and
#: throughput rows share them): source, configuration, both pools' layout and the load.
POINT_COLUMNS = ("source", "model", "gpu", "engine", "release", "quantization", "kv_cache_dtype",
                 *LAYOUT_COLUMNS, "prompt_tokens", "output_tokens", "load_kind", "load_value")
#: Statistics of the TPOT rows :func:`measured_decode_scale` reads (the central ones).
DECODE_SCALE_STATISTICS = ("mean", "median")


def measured_decode_scale(rows: pd.DataFrame, prediction) -> np.ndarray:
    """Per row: measured / predicted TPOT of its point (``POINT_COLUMNS``; the median over the
    point's mean/median TPOT rows), 1 where the point has no such row or no prediction.

    A sensitivity check, not a prediction: :func:`score_disagg_rows` with ``measured_tpot``
    predicts the rows again with every decode step time scaled so that the point's TPOT is
    the measured one, which separates the TTFT and throughput errors that follow from the
    decode step from those of the prefill pool and the queue (``bench_accuracy_moe.py
    --disagg-breakdown``; docs/accuracy.md, section "Frontier MoE rows"). Runs of the same
    point are pooled.
    """
    key = point_keys(rows)
    ratio = rows["value"].to_numpy(float) / np.asarray(prediction, dtype=float)
    tpot = (rows["quantity"].eq("tpot").to_numpy() & rows["statistic"].isin(DECODE_SCALE_STATISTICS).to_numpy()
            & np.isfinite(ratio) & (ratio > 0))
    per_point = pd.Series(ratio[tpot], index=key[tpot]).groupby(level=0).median()
    return key.map(per_point).fillna(1.0).to_numpy(dtype=float)


def point_keys(rows: pd.DataFrame) -> pd.Series:
    """The measured point (``POINT_COLUMNS``) of every row, as a group number."""
    return rows.groupby([c for c in POINT_COLUMNS if c in rows], dropna=False, sort=False).ngroup()


def measured_rate_per_s(rows: pd.DataFrame) -> np.ndarray:
    """Per row: the request rate its point measured [requests/s], NaN where it cannot be read.

    The median over the point's throughput rows, each converted to requests/s (output tokens
    per second / o; per GPU x the GPUs of both pools / o; total tokens per second / (p + o);
    requests per second as is); a point without one: U / (TTFT + (o - 1) TPOT) of its central
    (mean/median) latency rows (the closed loop's cycle, U users). Runs of a point are pooled.
    """
    key = point_keys(rows)
    q, v = rows["quantity"].to_numpy(), rows["value"].to_numpy(float)
    p, o = rows["prompt_tokens"].to_numpy(float), rows["output_tokens"].to_numpy(float)
    gpus = rows["gpus_total"].to_numpy(float) if "gpus_total" in rows else np.full(len(rows), np.nan)
    rate = np.select([q == "out_total", q == "out_per_gpu", q == "total_total", q == "req_rate"],
                     [v / o, v * gpus / o, v / (p + o), v], np.nan)
    ok = np.isfinite(rate) & (rate > 0)
    by_rate = pd.Series(rate[ok], index=key[ok]).groupby(level=0).median()
    central = rows["statistic"].isin(DECODE_SCALE_STATISTICS).to_numpy()
    lat = {name: pd.Series(v[central & (q == name)], index=key[central & (q == name)]).groupby(level=0).median()
           / MS_PER_S for name in ("ttft", "tpot")}
    first = pd.DataFrame({"users": rows["load_value"].to_numpy(float), "o": o}, index=key).groupby(level=0).first()
    by_latency = first["users"] / (lat["ttft"] + (first["o"] - 1.0) * lat["tpot"])
    per_point = by_rate.combine_first(by_latency)
    return key.map(per_point).to_numpy(dtype=float)


def measured_prefill_load(catalog, rows: pd.DataFrame, calibration=None) -> np.ndarray:
    """Per row: its point's measured request rate / the modelled prefill capacity mu =
    n_p B / T(B) (:func:`measured_rate_per_s`, :func:`prefill_pool_capacity`). Above 1 the
    run served more prompts than the model's prefill pool can: the closed loop parks users
    the real pool served (``bench_accuracy_moe.py --disagg-breakdown``; docs/serving-model.md
    section 14.4). A diagnostic: no prediction reads it."""
    p, _ = row_params(catalog, rows, calibration)
    capacity, _, _ = prefill_pool_capacity(pool_arrays(catalog, rows, "p"), p, rows["prompt_tokens"].to_numpy(float),
                                           rows["p_workers"].to_numpy(float),
                                           rows["p_batch"].fillna(np.inf).to_numpy(float))
    return measured_rate_per_s(rows) / capacity


def score_disagg_rows(catalog, measurements: pd.DataFrame, calibration=None,
                      measured_tpot: bool = False) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """``(scored, skipped, recorded)``: the predicted rows with ``prediction`` and ``ape_pct``,
    the unpredicted ones with a reason, and the number of rows with a recorded layout.
    ``measured_tpot``: the sensitivity check of :func:`measured_decode_scale` (each point's
    decode steps scaled to its measured TPOT) instead of the model's prediction."""
    rows, skipped, recorded = prepare_disagg_rows(measurements, catalog)
    pred = predict_disagg_rows(catalog, rows, calibration) if len(rows) else np.zeros(0)
    if measured_tpot and len(rows):
        pred = predict_disagg_rows(catalog, rows, calibration, decode_scale=measured_decode_scale(rows, pred))
    ok = np.isfinite(pred) & (pred > 0)
    extra = pd.DataFrame({"id": rows.loc[~ok, "id"], "metric": rows.loc[~ok, "metric"],
                          "reason": np.where(rows.loc[~ok, "load_kind"].eq("concurrency"),
                                             "weights leave no KV memory on a recorded worker (memory model)",
                                             "load kind not modelled for disaggregated rows")})
    scored = rows[ok].assign(prediction=pred[ok]).reset_index(drop=True)
    scored["ape_pct"] = (scored["prediction"] - scored["value"]).abs() / scored["value"] * 100.0
    return scored, pd.concat([skipped, extra], ignore_index=True), recorded
