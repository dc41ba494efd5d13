"""The candidate table, assembled once from each model's columns in candidate-id order.

The search evaluates one model's grid at a time (:mod:`planner.search`); its table has one
row per configuration of every model, sorted by ``candidate_id``. :func:`frame_of` builds
it from the models' columns directly (the dimension columns as their
:class:`planner.dimensions.Coded` forms), without a frame per model and the take of a wide
frame that ``pd.concat`` and ``.iloc`` would cost (speed, issue 19; the same frame).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from planner import dimensions


@dataclass(frozen=True)
class Scattered:
    """A float column of ``size`` rows given as its ``values`` at positions ``rows`` and
    ``fill`` elsewhere (the search's evaluated rows): :func:`frame_of` writes it to the
    table's rows directly (speed: no full-size column to take from, nor its memory)."""

    values: np.ndarray
    rows: np.ndarray
    fill: float
    size: int


def frame_of(parts: Sequence[Mapping[str, Any]], order: np.ndarray, index: pd.Index) -> pd.DataFrame:
    """One DataFrame of consecutive blocks of rows, at positions ``order`` of their
    concatenation, indexed by ``index``: what ``pd.concat`` of the blocks' frames and
    ``.iloc[order]`` give (the same values, dtypes and column order), without the blocks'
    frames and the take of a wide frame (speed: the search's candidate table).

    Each part maps a column name to its rows' values: a :class:`planner.dimensions.Coded`
    column (taken from its few distinct values), a :class:`Scattered` float column or an
    array. The columns are the parts' in order of first appearance; a float column may be
    absent from a part (NaN there, as in ``pd.concat``), another may not. Adjacent float
    columns share one block (as one frame's do)."""
    sizes = [_size(next(iter(part.values()))) for part in parts]
    starts = np.cumsum([0] + sizes[:-1])
    names = list(dict.fromkeys(name for part in parts for name in part))
    place = np.empty(len(order), dtype=np.intp)   # each concatenated row's position in the table
    place[order] = np.arange(len(order))

    def kind(name: str) -> str:
        each = [part.get(name) for part in parts]
        if all(isinstance(v, dimensions.Coded) for v in each):
            return "coded"
        if all(v is None or isinstance(v, Scattered) or np.asarray(v).dtype == np.float64 for v in each):
            return "float"
        if any(v is None for v in each):
            raise ValueError(f"frame_of: column '{name}' is absent from a part and not a float column")
        return "array"

    scratch = np.empty(len(order), dtype=np.intp)   # the coded columns' row codes, one column at a time
    pieces = []
    for what, run in itertools.groupby(names, key=kind):
        run = list(run)
        each = {name: [part.get(name) for part in parts] for name in run}
        if what == "float":   # one 2-D block, filled row by row: no per-column frame to consolidate
            block = np.empty((len(run), len(order)))
            placed: dict = {}
            for row, name in zip(block, run):
                _fill(row, each[name], starts, sizes, order, place, placed)
            pieces.append(pd.DataFrame(block.T, columns=run, index=index, copy=False))
        else:
            pieces.append(pd.DataFrame({name: _taken(each[name], order, scratch) for name in run}, index=index,
                                       copy=False))
    return pd.concat(pieces, axis=1) if len(pieces) > 1 else pieces[0]


def _fill(row: np.ndarray, each: list, starts, sizes, order: np.ndarray, place: np.ndarray, placed: dict) -> None:
    """Write a float column's parts (arrays, :class:`Scattered` columns, None: NaN) to
    ``row``, the table's row order: ``row[place[j]]`` is the concatenation's row j.
    ``placed``: the table rows of the :class:`Scattered` parts' rows arrays seen so far, by
    the array's id and the part's start (speed: the search's columns share a few arrays)."""
    if len(each) == 1 and not isinstance(each[0], Scattered):   # one array: taken in table order
        np.take(np.asarray(each[0], dtype=float), order, out=row, mode="clip")   # (valid: "clip" skips a buffer)
        return
    for value, start, size in zip(each, starts, sizes):
        at = slice(None) if len(each) == 1 else place[start:start + size]
        if isinstance(value, Scattered):
            row[at] = value.fill
            key = (id(value.rows), start)
            if key not in placed:   # (the array kept: its id stays its own)
                placed[key] = (value.rows, place[start + value.rows])
            row[placed[key][1]] = value.values
        else:
            row[at] = np.nan if value is None else value


def _taken(each: list, order: np.ndarray, scratch: np.ndarray):
    """The rows ``order`` of a :func:`frame_of` column that is not a float column: its parts'
    arrays concatenated, or its :class:`planner.dimensions.Coded` parts' (their distinct
    values in part order, the codes offset). ``scratch``: an intp array of ``len(order)``
    rows that this overwrites (the rows' codes; speed: one buffer for every coded column,
    not a fresh array each)."""
    if not isinstance(each[0], dimensions.Coded):
        return (each[0] if len(each) == 1 else np.concatenate(each)).take(order)
    distinct = each[0].distinct if len(each) == 1 else pd.concat([v.distinct for v in each], ignore_index=True)
    offsets = np.cumsum([0] + [len(v.distinct) for v in each[:-1]])
    codes = each[0].index if len(each) == 1 else np.concatenate([v.index + o for v, o in zip(each, offsets)])
    # (valid positions: "clip" writes straight into scratch, no buffer)
    return dimensions.values_at(distinct, np.take(codes.astype(np.intp, copy=False), order, out=scratch, mode="clip"))


def _size(column) -> int:
    """Rows of a :func:`frame_of` column."""
    if isinstance(column, Scattered):
        return column.size
    return len(column.index if isinstance(column, dimensions.Coded) else column)
