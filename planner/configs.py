"""Turn rows of catalog ids (model, GPU, quantization, ...) into serving-model arrays."""

from __future__ import annotations

from dataclasses import fields

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


def _ids(rows: pd.DataFrame, column: str, coded: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    codes, ids = coded[column].factorize() if coded and column in coded else factorize_column(rows[column])
    if (codes < 0).any():
        raise ValueError(f"config_arrays: a row has no '{column}' id")
    return codes, ids


def config_arrays(catalog: Catalog, rows: pd.DataFrame, models: dict | None = None,
                  coded: dict | None = None) -> tuple[ConfigArrays, np.ndarray]:
    """Arrays for every row of ``rows`` (ids already resolved to canonical catalog ids).

    Parameters
    ----------
    models : dict, optional
        Extra ``ModelSpec`` by id (models imported from a config.json path).
    coded : dict, optional
        :class:`planner.dimensions.Coded` forms of (some of) the id columns of ``rows``
        (the search grid's), used instead of factorizing the columns (the same arrays).

    Returns
    -------
    (ConfigArrays, math_fallback): the arrays, and a bool array that is True where the
    quantization's math unit is missing on the GPU and BF16 math is used instead.
    """
    models = models or {}
    model, gpu, fmt, kv = (_ids(rows, k, coded) for k in ("model", "gpu", "quantization", "kv_cache_dtype"))
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


#: Odd 64-bit multiplier of :func:`distinct_rows`' row hash (splitmix64's).
_ROW_HASH_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


def distinct_rows(columns) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inverse)``: the position of the first row of each distinct row of the
    equal-length float ``columns`` (equal bit for bit in every column, in order of first
    appearance), and per row the index of its distinct row (``first[inverse]`` is a row
    equal to each row).

    A per-row 64-bit hash of the columns' bits is factorized, then every row is checked
    against its representative; a hash collision (never seen) falls back to ``np.unique``.
    """
    bits = [np.ascontiguousarray(c, dtype=float).view(np.uint64) for c in columns]
    n = bits[0].size
    h = np.zeros(n, dtype=np.uint64)
    for b in bits:
        h = (h ^ b) * _ROW_HASH_MULTIPLIER     # wraps modulo 2^64
        h ^= h >> np.uint64(31)
    inverse, uniques = pd.factorize(h)
    first = np.empty(len(uniques), dtype=np.int64)
    first[inverse[::-1]] = np.arange(n - 1, -1, -1)
    if all(np.array_equal(b, b[first][inverse]) for b in bits):
        return first, inverse.astype(np.int64)
    _, first, inverse = np.unique(np.stack(bits, axis=1), axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")             # in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return first[order], rank[inverse.reshape(-1)]


def distinct_configs(arrays: ConfigArrays, params, *extra) -> tuple[np.ndarray, np.ndarray]:
    """:func:`distinct_rows` of configuration rows: every per-row field of ``arrays`` and of
    ``params`` (a :class:`~planner.serving.params.ServingParams`) and the ``extra`` per-row
    float arrays (e.g. a role's codes). Rows equal in all of them have the same serving-model
    numbers: computing them once per distinct row and taking them back is the same result."""
    n = len(np.atleast_1d(arrays.tp))
    values = [getattr(arrays, f.name) for f in fields(arrays)] + [*params.as_dict().values(), *extra]
    columns = [v for v in map(np.asarray, values) if v.ndim == 1 and v.size == n]
    if n < 2 or not columns:
        return np.arange(min(n, 1)), np.zeros(n, dtype=np.int64)
    return distinct_rows(columns)
