"""Turn rows of catalog ids (model, GPU, quantization, ...) into serving-model arrays."""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.catalog import Catalog
from planner.dimensions import factorize_column
from planner.serving.arrays import GPU_COLUMNS, MODEL_COLUMNS, ConfigArrays, gpu_columns, math_flops_per_s, model_columns

#: Columns a configuration frame must have (``context_tokens`` may be NaN: p + o/2); the
#: layout columns ``ep`` and ``attention_dp`` are optional (absent: the dense layout).
CONFIG_COLUMNS = ("model", "gpu", "quantization", "kv_cache_dtype", "tp", "pp", "batch",
                  "prompt_tokens", "output_tokens", "context_tokens")


def _lookup(coded: tuple[np.ndarray, np.ndarray], table, columns) -> dict[str, np.ndarray]:
    """Per row, ``table(id)[column]`` of each column, from ``coded = (codes, ids)`` (one
    entry per distinct id: the table is read once per id)."""
    codes, uniques = coded
    entries = [table(u) for u in uniques]
    return {col: np.array([e[col] for e in entries], dtype=float)[codes] for col in columns}


def _ids(rows: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    codes, ids = factorize_column(rows[column])
    if (codes < 0).any():
        raise ValueError(f"config_arrays: a row has no '{column}' id")
    return codes, ids


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
    model, gpu, fmt, kv = (_ids(rows, k) for k in ("model", "gpu", "quantization", "kv_cache_dtype"))
    cols = _lookup(model, lambda m: model_columns(models.get(m) or catalog.model(m)), MODEL_COLUMNS)
    cols.update(_lookup(gpu, lambda g: gpu_columns(catalog.gpu(g)), GPU_COLUMNS))
    # the math unit of each (GPU, format) pair present
    pair_codes, pairs = pd.factorize(gpu[0] * len(fmt[1]) + fmt[0])

    def flops_entry(pair):
        flops, fallback = math_flops_per_s(catalog.gpu(gpu[1][pair // len(fmt[1])]),
                                           catalog.weight_format(fmt[1][pair % len(fmt[1])]))
        return {"peak": flops, "fallback": float(fallback)}

    fl = _lookup((pair_codes, pairs), flops_entry, ("peak", "fallback"))
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
        weight_bytes_per_param=_lookup(fmt, lambda q: {"w": catalog.weight_format(q).bytes_per_weight}, ("w",))["w"],
        kv_bytes_per_element=_lookup(kv, lambda k: {"k": catalog.kv_dtype(k).bytes_per_element}, ("k",))["k"],
        batch=rows["batch"].to_numpy(dtype=float),
        prompt_tokens=prompt,
        output_tokens=output,
        context_tokens=context,
    )
    return arrays, fl["fallback"] > 0
