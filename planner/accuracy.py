"""Predict published serving measurements with the analytic model and score the errors.

A measurement file (schema: ``benchmarks/data/README-measurements.md``) has one number per
row. :func:`planner.accuracy_rows.prepare_rows` (re-exported here with the file readers)
maps each row onto a catalog configuration (or a skip reason), the load models are in
:mod:`planner.accuracy_loads`,
:func:`predict_rows` predicts every prepared row in one vectorized pass per load kind, and
:func:`accuracy_report` scores them (absolute percentage error per row, median and mean per
metric, the worst rows). How each ``load_kind`` is modelled (step times: docs/serving-model.md sections 4-6;
waits: section 9; docs/accuracy.md, "How a row is predicted"):

* ``concurrency`` N: a closed loop of N/replicas users per replica (:func:`planner.accuracy_loads.closed_loop`):
  the staggered steady state (Little's law fixed point with chunked prefill riding on the
  decode steps, an M/D/1 prefill wait, a wait for KV slots beyond the capacity) blended
  with the synchronized first wave of the run (:class:`Harness`);
* ``request_rate``: open loop (:func:`planner.accuracy_loads.open_loop`): occupancy from Little's law, mean waits
  from Pollaczek-Khinchine and Erlang C; past the capacity the finite run's backlog;
* ``static_batch`` N: one prefill of N prompts, then o - 1 decode steps of batch N;
* ``max_throughput``: the largest batch the KV memory allows (the engine picked it) in
  steady state, or a burst of R requests (:func:`planner.accuracy_loads.burst`) when the notes give R;
* ``single``: batch 1; TTFT is one prefill, the per-user speed 1 / TPOT.

Statistics: mean and median use the mean predictions (the median of a wait with an
exponential tail where that is the model), p90/p99 the exponential tails of the waits
and the occupancy spread (an approximation, documented in ``docs/accuracy.md``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.accuracy_layout import layout_arrays
from planner.accuracy_loads import Harness, burst, closed_loop, open_loop, static_batch
from planner.accuracy_rows import (FAMILIES, KV_DTYPES, MEASUREMENT_COLUMNS, METRICS, WEIGHT_FORMATS,  # noqa: F401
                                   engine_release, load_measurement_files, load_measurements, prepare_rows,
                                   source_family)
from planner.catalog import Catalog
from planner.configs import config_arrays
from planner.parameters import catalog_keys
from planner.serving import memory
from planner.serving.arrays import ConfigArrays
from planner.serving.params import ServingParams

#: Milliseconds per second, for the ``_ms_`` metrics.
MS_PER_S = 1000.0
#: Quantiles of the named statistics.
QUANTILES = {"median": 0.5, "p90": 0.90, "p95": 0.95, "p99": 0.99}
#: Largest in-flight batch assumed for ``max_throughput`` rows (the engine picked it and did
#: not publish it): TensorRT-LLM's default ``max_batch_size``.
MAX_THROUGHPUT_BATCH = 2048.0
#: Load kinds measured offline, inside the engine's own C++ benchmark (batch-1 latency,
#: static batches): no HTTP server, tokenizer or streaming, so no ``request_overhead_s``.
OFFLINE_LOAD_KINDS = ("single", "static_batch")

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
    return layout_arrays(c, rows)   # issue 14: ep and attention DP in the serving model (serving/moe.py)


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
    return predict_columns(_row_columns(rows), arrays, params, harness)


def row_columns(rows: pd.DataFrame, index=None) -> dict:
    """The columns :func:`predict_columns` reads of prepared ``rows`` (of its rows ``index``)."""
    cols = _row_columns(rows)
    return cols if index is None else _take_columns(cols, index)


def predict_columns(cols: dict, arrays: ConfigArrays, params: ServingParams, harness: Harness) -> np.ndarray:
    """:func:`predict_rows` of the rows whose :func:`row_columns` are ``cols`` (aligned with
    ``arrays``, ``params`` and ``harness``): the calibration fit predicts subsets of the same
    rows thousands of times (:mod:`planner.calibration_fit`)."""
    pred = np.full(len(cols["point_code"]), np.nan)
    first, inverse = _distinct_points(cols, params, harness)
    for kind in ("concurrency", "request_rate", "static_batch", "max_throughput", "single"):
        idx = np.flatnonzero(cols["load_kind"] == kind)
        if not idx.size:
            continue
        # One prediction per distinct measurement point (its TTFT, TPOT and throughput rows
        # share it), expanded back to the rows.
        points, back = np.unique(first[idx], return_inverse=True)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            r = _predict_kind(_take_columns(cols, points), arrays.take(points), params.take(points),
                              harness.take(points), kind)
            r = {k: np.broadcast_to(v, points.shape)[back] for k, v in r.items()}
            pred[idx] = _metric_values(_take_columns(cols, idx), r, params.take(idx))
    return pred


#: Columns the load models and metric values read.
PREDICT_COLUMNS = ("model", "gpu", "quantization", "kv_cache_dtype", "tp", "pp", "attention_dp", "replicas",
                   "prompt_tokens", "output_tokens", "osl", "load_kind", "load_value", "engine", "burst_requests",
                   "statistic", "quantity", "gpus_total", "poll_steps", "balance_ranks",
                   "balance_timeout_steps")
#: Columns that decide a row's load-model result (with its parameters and statistic).
POINT_COLUMNS = ("model", "gpu", "quantization", "kv_cache_dtype", "tp", "pp", "ep", "attention_dp", "replicas",
                 "prompt_tokens", "output_tokens", "osl", "load_kind", "load_value", "engine",
                 "burst_requests", "statistic", "poll_steps", "balance_ranks", "balance_timeout_steps")
_COLUMN_CACHE: dict = {}


def _row_columns(rows: pd.DataFrame) -> dict:
    """The columns :func:`predict_rows` reads, as numpy arrays (``q``: the statistic's
    quantile, NaN for the mean; ``online``: not an offline load kind; ``point_code``: the
    configuration and load of the row), cached for the frame last seen (the fit predicts the
    same rows hundreds of times)."""
    if _COLUMN_CACHE.get("rows") is rows:
        return _COLUMN_CACHE["cols"]
    cols = {c: rows[c].to_numpy() for c in PREDICT_COLUMNS if c in rows}
    cols["q"] = rows["statistic"].map(QUANTILES).to_numpy(dtype=float)
    cols["online"] = ~rows["load_kind"].isin(OFFLINE_LOAD_KINDS).to_numpy()
    codes = np.zeros(len(rows), dtype=np.int64)
    for c in POINT_COLUMNS:
        if c in rows:
            codes = _combine_codes(codes, rows[c].to_numpy())
    cols["point_code"] = codes
    _COLUMN_CACHE.update(rows=rows, cols=cols)
    return cols


def _combine_codes(codes: np.ndarray, column) -> np.ndarray:
    """Codes of the pairs (code, column value), re-factorized to stay small."""
    c, uniques = pd.factorize(column, use_na_sentinel=False)
    return pd.factorize(codes * (len(uniques) + 1) + c)[0]


def _take_columns(cols: dict, index) -> dict:
    return {k: v[index] for k, v in cols.items()}


def _distinct_points(cols: dict, params: ServingParams, harness: Harness):
    """(first, codes): per row the index of the first row with the same configuration, load,
    statistic, parameters and harness values (rows that share one load-model prediction)."""
    n = len(cols["point_code"])
    codes = cols["point_code"]
    for v in (*params.as_dict().values(), harness.first_wave_weight):
        v = np.asarray(v, dtype=float)
        if v.ndim == 1 and v.size == n and v.size > 1:
            codes = _combine_codes(codes, v)
    first = np.full(int(codes.max()) + 1 if n else 0, n, dtype=np.int64)
    np.minimum.at(first, codes, np.arange(n))
    return first[codes], codes


def _predict_kind(rows: dict, base: ConfigArrays, p: ServingParams, h: Harness, kind: str) -> dict:
    prompt = rows["prompt_tokens"].astype(float)
    output = rows["output_tokens"].astype(float)
    replicas = rows["replicas"].astype(float)
    load = rows["load_value"].astype(float)
    engines = rows["engine"]
    q = rows["q"]
    p = memory.engine_memory_params(base, p, engines)
    # Slots: TensorRT-LLM reserves a request's whole length, paged engines its current one.
    slot_ctx = np.where(engines == "trtllm", prompt + output, prompt + output / 2.0)
    slots = memory.max_concurrency(base.replace(context_tokens=slot_ctx), p)
    if kind == "concurrency":
        recipe = {k: rows[k].astype(float) for k in ("poll_steps", "balance_ranks", "balance_timeout_steps")
                  if k in rows}
        r = closed_loop(base, p, load / replicas, slots, prompt, output, h.first_wave_weight, q, **recipe)
    elif kind == "max_throughput":
        slots = np.minimum(slots, MAX_THROUGHPUT_BATCH)
        requests = rows["burst_requests"].astype(float) / replicas
        r = closed_loop(base, p, slots, slots, prompt, output, 0.0, q)
        finite = np.isfinite(requests)
        if finite.any():
            b = burst(base, p, np.where(finite, requests, 1.0), slots, prompt, output)
            r = {k: np.where(finite, b[k], r[k]) for k in r}
    elif kind == "request_rate":
        r = open_loop(base.replace(batch=slots), p, load / replicas, prompt, output,
                      rows["burst_requests"].astype(float) / replicas, q)
    else:  # static_batch N, or single (N = 1)
        r = static_batch(base, p, load if kind == "static_batch" else 1.0, prompt, output)
    return r


def _metric_values(rows: dict, r: dict, p: ServingParams) -> np.ndarray:
    quantity = rows["quantity"]
    prompt, output = rows["prompt_tokens"].astype(float), rows["output_tokens"].astype(float)
    ttft = r["ttft_s"] + np.where(rows["online"], p.request_overhead_s, 0.0)
    rate_total = r["rate_per_s"] * rows["replicas"].astype(float)
    values = {
        "ttft": ttft * MS_PER_S, "tpot": r["tpot_s"] * MS_PER_S,
        "e2e": (ttft + np.maximum(output - 1.0, 0.0) * r["tpot_s"]) * MS_PER_S,
        "out_total": rate_total * output,
        "out_per_gpu": rate_total * output / rows["gpus_total"].astype(float),
        "out_per_user": 1.0 / r["tpot_s"], "total_total": rate_total * (prompt + output),
        "req_rate": rate_total,
    }
    out = np.full(len(quantity), np.nan)
    for q, v in values.items():
        mask = quantity == q
        out[mask] = np.broadcast_to(v, out.shape)[mask]
    return out


def predict_calibrated(catalog, rows: pd.DataFrame, calibration,
                       base: ServingParams | None = None, arrays=None) -> np.ndarray:
    """Predictions of prepared rows with a calibration (None: ``base``, the seeds' values)."""
    base = base or ServingParams()
    if calibration is None:
        return predict_rows(catalog, rows, base, arrays=arrays)
    gpus, models = rows["gpu"].to_numpy(), rows["model"].to_numpy()
    engines = engine_keys(rows)
    maths = rows["math"].to_numpy() if "math" in rows else None
    campaigns = rows["campaign"].to_numpy() if "campaign" in rows else None
    params = calibration.params_for(base, gpus, engines, model_ids=models, math_modes=maths, campaigns=campaigns,
                                    **catalog_keys(catalog, gpus, models))
    return predict_rows(catalog, rows, params, Harness(**calibration.harness_for(gpus, engines, campaigns)),
                        arrays=arrays)


def engine_keys(rows: pd.DataFrame) -> np.ndarray:
    """``<engine>@<release>`` where the row has a release, else the engine."""
    release = rows["release"] if "release" in rows else pd.Series(np.nan, index=rows.index)
    return np.where(release.notna(), release.astype(str), rows["engine"].astype(str)).astype(object)


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
