"""The candidate table, assembled once from each model's columns in candidate-id order.

The search evaluates one model's grid at a time (:mod:`planner.search`); its table has one
row per configuration of every model, sorted by ``candidate_id``. :func:`frame_of` builds
it from the models' columns directly (the dimension columns as their
:class:`planner.dimensions.Coded` forms), without a frame per model and the take of a wide
frame that ``pd.concat`` and ``.iloc`` would cost (speed, issue 19; the same frame).
"""

from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from planner import dimensions


def frame_of(parts: Sequence[Mapping[str, Any]], order: np.ndarray, index: pd.Index) -> pd.DataFrame:
    """One DataFrame of consecutive blocks of rows, at positions ``order`` of their
    concatenation, indexed by ``index``: what ``pd.concat`` of the blocks' frames and
    ``.iloc[order]`` give (the same values, dtypes and column order), without the blocks'
    frames and the take of a wide frame (speed: the search's candidate table).

    Each part maps a column name to its rows' values: a :class:`planner.dimensions.Coded` column (taken from
    its few distinct values) or an array. The columns are the parts' in order of first
    appearance; a float column may be absent from a part (NaN there, as in ``pd.concat``),
    another may not. Adjacent float columns share one block (as one frame's do)."""
    sizes = [len(_values_of(next(iter(part.values())))) for part in parts]
    names = list(dict.fromkeys(name for part in parts for name in part))
    sources: dict[str, Any] = {}      # per column: its Coded parts, or its rows' array (in part order)
    for name in names:
        each = [part.get(name) for part in parts]
        if all(isinstance(v, dimensions.Coded) for v in each):
            sources[name] = each
            continue
        arrays = [np.full(n, np.nan) if v is None else np.asarray(_values_of(v)) for v, n in zip(each, sizes)]
        if any(v is None for v in each) and any(a.dtype.kind != "f" for a in arrays):
            raise ValueError(f"frame_of: column '{name}' is absent from a part and not a float column")
        sources[name] = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
    pieces = []
    for is_float, run in itertools.groupby(names, key=lambda n: getattr(sources[n], "dtype", None) == np.float64):
        run = list(run)
        if is_float:   # one 2-D block, filled row by row: no per-column frame to consolidate
            block = np.empty((len(run), len(order)))
            for row, name in zip(block, run):   # (valid positions: "clip" only skips numpy's buffer)
                np.take(sources[name], order, out=row, mode="clip")
            pieces.append(pd.DataFrame(block.T, columns=run, index=index, copy=False))
        else:
            pieces.append(pd.DataFrame({name: _taken(sources[name], order) for name in run}, index=index, copy=False))
    return pd.concat(pieces, axis=1) if len(pieces) > 1 else pieces[0]


def _taken(source, order: np.ndarray):
    """The rows ``order`` of a :func:`frame_of` column that is not a float array: its array's,
    or its :class:`planner.dimensions.Coded` parts' (their distinct values in part order, the codes offset)."""
    if not isinstance(source, list):
        return source.take(order)
    distinct = source[0].distinct if len(source) == 1 else pd.concat([v.distinct for v in source], ignore_index=True)
    offsets = np.cumsum([0] + [len(v.distinct) for v in source[:-1]])
    codes = source[0].index if len(source) == 1 else np.concatenate([v.index + o for v, o in zip(source, offsets)])
    return dimensions.values_at(distinct, codes[order])


def _values_of(column):
    """The rows' values of a :func:`frame_of` column (a :class:`planner.dimensions.Coded` column or an array)."""
    return column.index if isinstance(column, dimensions.Coded) else column
