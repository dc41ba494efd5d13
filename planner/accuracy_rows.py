"""Measurement files for ``planner accuracy``: reading them and mapping each row onto a
catalog configuration (or a skip reason).

A measurement file (schema: ``benchmarks/data/README-measurements.md``) has one number per
row. :func:`prepare_rows` resolves the row's model, GPU, dtypes, layout (replicas, attention
data parallelism, expert parallelism inside the TP group), engine release and benchmark
campaign, and says why a row cannot be predicted.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from planner.accuracy_recipes import attention_dp_balance, scheduler_poll_steps
from planner.catalog import Catalog
from planner.dimensions import gpus_per_replica
from planner.schema import PlanningInputError

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


def load_measurement_files(paths) -> pd.DataFrame:
    """:func:`load_measurements` of every path, concatenated (row ids must stay unique)."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    frames = [load_measurements(p) for p in paths]
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    dup = df["id"][df["id"].duplicated()]
    if len(dup):
        raise PlanningInputError(f"{', '.join(map(str, paths))}: row id(s) appear twice: "
                                 f"{', '.join(map(str, dup.unique()[:5]))}")
    return df


def _note_int(notes: pd.Series, key: str) -> pd.Series:
    return pd.to_numeric(notes.str.extract(rf"\b{key}=(\d+)")[0], errors="coerce")


def _attention_dp(df: pd.DataFrame) -> pd.Series:
    """Attention data-parallel ranks: AIC's ``attention_dp_size``, or the whole TP group
    where the notes say attention DP is on (``tp='8 (EP8, attention DP)'``, InferenceX
    ``attention data-parallel (dp-attention)``)."""
    aic = _note_int(df["notes"], "attention_dp_size")
    text = df["notes"].str.contains("attention DP|attention data parallelism|attention data-parallel", case=False,
                                    regex=True)   # the last: InferenceX "attention data-parallel (dp-attention)"
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
    # "fp4" is NVFP4 on NVIDIA and MXFP4 (OCP MX, the only FP4 format CDNA 4 runs) on AMD
    # (InferenceX README: "FP4 (NVFP4/MXFP4)").
    amd = df["gpu_id"].map(lambda g: isinstance(g, str) and catalog.gpu(g).vendor == "amd").astype(bool)
    df.loc[wdt.eq("fp4") & amd, "quantization"] = "mxfp4"
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
    per_replica = gpus_per_replica(df)
    # Expert parallelism runs inside the TP group (``--tp 8 --ep 8`` is 8 GPUs). Rows whose
    # GPU count is tp x pp x ep count each GPU ep times: their per-GPU throughput matches one
    # instance of tp x pp GPUs serving the whole concurrency (InferenceX: per-GPU x tp /
    # (users x osl / e2e) = 0.87-0.89 for every layout, ep 1 or not), while their whole-deployment
    # totals were multiplied by the inflated count. Keep one instance; skip the totals.
    ep = pd.to_numeric(df["ep"], errors="coerce")
    inflated = (ep > 1) & df["num_gpus"].eq(per_replica * ep)
    skip(inflated & df["metric"].isin(["output_tok_s_total", "total_tok_s_total", "request_per_s"]),
         "whole-deployment total computed from num_gpus = tp x pp x ep (EP counted as extra GPUs)")
    df.loc[inflated, "num_gpus"] = per_replica[inflated]
    assumptions[inflated] += "num_gpus = tp x pp x ep read as one instance of tp x pp GPUs; "
    replicas = (df["num_gpus"] / per_replica).where(df["num_gpus"].notna(), 1.0)
    df["replicas"] = np.maximum(np.floor(replicas.fillna(1.0) + 1e-9), 1.0)
    df["gpus_total"] = df["num_gpus"].where(df["num_gpus"].notna(), per_replica)
    df["attention_dp"] = _attention_dp(df)
    family = source_family(df["source"])
    df["poll_steps"] = scheduler_poll_steps(df, family, df["gpu_id"], df["attention_dp"])
    df["balance_ranks"], df["balance_timeout_steps"] = attention_dp_balance(df, family, df["attention_dp"])
    polled, balanced = df["poll_steps"].gt(1.0), df["balance_ranks"].gt(1.0)
    poll_text = "recipe: SGLang --scheduler-recv-interval " + df["poll_steps"].map("{:g}".format) + "; "
    assumptions[polled] += poll_text[polled]
    assumptions[balanced] += "recipe: TensorRT-LLM attention-DP balance, timeout_iters 60; "
    df["burst_requests"] = _burst_requests(notes)
    df["prompt_tokens"] = df["isl"].astype(float)
    out = df["osl"].astype(float)
    assumptions[df["osl"].isna() & single_speed] += "osl not stated: decode context = isl; "
    df["output_tokens"] = out.fillna(1.0)
    quantity = df["metric"].map(lambda m: METRICS.get(m, ("", ""))[0])
    df["quantity"] = quantity
    df["statistic"] = df["metric"].map(lambda m: METRICS.get(m, ("", ""))[1])
    version = engine_release(df["engine"], df["engine_version"])
    df["release"] = np.where(version.notna(), df["engine"].astype(str) + "@" + version.fillna(""), None)
    # A campaign: one benchmark setup (source, engine build, hardware platform): InferenceX runs
    # its AMD and NVIDIA points on different clusters with different engine builds.
    vendor = df["gpu_id"].map(lambda g: catalog.gpu(g).vendor if isinstance(g, str) else "unknown")
    df["campaign"] = (source_family(df["source"]) + " x " + df["release"].fillna(df["engine"]).astype(str)
                      + " x " + vendor.astype(str))
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


def engine_release(engines: pd.Series, versions: pd.Series) -> pd.Series:
    """``<major>.<minor>`` of an engine version string, or NaN.

    Plain versions (``1.0.0rc3``, ``v0.5.9``) and container images: the tag after the last
    ``:`` (``lmsysorg/sglang:v0.5.12-cu130`` -> 0.5, ``.../release:1.2.0rc6.post2`` -> 1.2),
    or the engine's name followed by a version inside the tag (``...-atom0.1.1-MI350x`` ->
    0.1).
    """
    tag = versions.astype(str).where(versions.notna(), "").str.rsplit(":", n=1).str[-1]
    plain = tag.str.extract(r"^v?(\d+)\.(\d+)")
    named = pd.Series([re.search(rf"{re.escape(str(e))}(\d+)\.(\d+)", t) for e, t in zip(engines, tag)],
                      index=tag.index, dtype=object)
    named = named.map(lambda m: f"{m.group(1)}.{m.group(2)}" if m else np.nan)
    return (plain[0] + "." + plain[1]).where(plain[0].notna(), named)


def source_family(sources: pd.Series) -> pd.Series:
    """The bracketed family label of a ``source`` cell (``[AIC silicon_sample] ...``), or
    ``unknown``."""
    return sources.astype(str).str.extract(r"^\s*\[([^\]]+)\]")[0].fillna("unknown")


def _label(value) -> str:
    """A dtype label in lower case; empty when not stated."""
    return value.strip().lower() if isinstance(value, str) else ""


def _resolve(lookup, name):
    try:
        return lookup(name).id
    except PlanningInputError:
        return None
