"""Turn rows of catalog ids (model, GPU, quantization, ...) into serving-model arrays."""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.catalog import Catalog
from planner.serving.arrays import GPU_COLUMNS, MODEL_COLUMNS, ConfigArrays, gpu_columns, math_flops_per_s, model_columns

#: Columns a configuration frame must have (``context_tokens`` may be NaN: p + o/2); the
#: layout columns ``ep`` and ``attention_dp`` are optional (absent: the dense layout).
CONFIG_COLUMNS = ("model", "gpu", "quantization", "kv_cache_dtype", "tp", "pp", "batch",
                  "prompt_tokens", "output_tokens", "context_tokens")


def _lookup(ids: pd.Series, table: dict[str, dict], columns) -> dict[str, np.ndarray]:
    codes, uniques = pd.factorize(ids, sort=False)
    out = {}
    for col in columns:
        values = np.array([table[u][col] for u in uniques], dtype=float)
        out[col] = values[codes]
    return out


def config_arrays(catalog: Catalog, rows: pd.DataFrame, models: dict | None = None) -> tuple[ConfigArrays, np.ndarray]:
    """Arrays for every row of ``rows`` (ids already resolved to canonical catalog ids).

    Parameters
    ----------
    models : dict, optional
        Extra ``ModelSpec`` by id (models imported from a config.json path).

    Returns
    -------
    (ConfigArrays, math_fallback): the arrays, and a bool array that is True where the
    quantization's math unit is missing on the GPU and BF16 math is used instead.
    """
    models = models or {}
    model_table = {m: model_columns(models.get(m) or catalog.model(m)) for m in rows["model"].unique()}
    gpu_table = {g: gpu_columns(catalog.gpu(g)) for g in rows["gpu"].unique()}
    pairs = rows["gpu"] + "|" + rows["quantization"]
    flops_table = {}
    for pair in pairs.unique():
        gpu_id, fmt_id = pair.split("|")
        flops, fallback = math_flops_per_s(catalog.gpu(gpu_id), catalog.weight_format(fmt_id))
        flops_table[pair] = {"peak": flops, "fallback": float(fallback)}
    wbytes = {q: {"w": catalog.weight_format(q).bytes_per_weight} for q in rows["quantization"].unique()}
    kbytes = {k: {"k": catalog.kv_dtype(k).bytes_per_element} for k in rows["kv_cache_dtype"].unique()}

    cols = _lookup(rows["model"], model_table, MODEL_COLUMNS)
    cols.update(_lookup(rows["gpu"], gpu_table, GPU_COLUMNS))
    fl = _lookup(pairs, flops_table, ("peak", "fallback"))
    prompt = rows["prompt_tokens"].to_numpy(dtype=float)
    output = rows["output_tokens"].to_numpy(dtype=float)
    context = rows["context_tokens"].to_numpy(dtype=float)
    context = np.where(np.isnan(context), prompt + output / 2.0, context)
    layout = {}   # issue 14: expert parallelism / attention DP where the rows have them
    if "ep" in rows.columns:
        layout["ep"] = rows["ep"].to_numpy(dtype=float)
    if "attention_dp" in rows.columns:
        layout["attention_dp"] = rows["attention_dp"].to_numpy(dtype=bool)   # True: tp ranks
    arrays = ConfigArrays(
        **cols, **layout,
        peak_flops_per_s=fl["peak"],
        tp=rows["tp"].to_numpy(dtype=float),
        pp=rows["pp"].to_numpy(dtype=float),
        weight_bytes_per_param=_lookup(rows["quantization"], wbytes, ("w",))["w"],
        kv_bytes_per_element=_lookup(rows["kv_cache_dtype"], kbytes, ("k",))["k"],
        batch=rows["batch"].to_numpy(dtype=float),
        prompt_tokens=prompt,
        output_tokens=output,
        context_tokens=context,
    )
    return arrays, fl["fallback"] > 0
