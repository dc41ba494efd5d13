"""Rows of a large table by id without a hash table of every id.

The candidate table holds every enumerated configuration (often 10^5 rows) sorted by its
string id; the stages after the solve look up a few dozen of them. ``Index.get_indexer``
would first hash every id of the table (tens of ms per index, paid once per index object);
a binary search over the sorted ids costs microseconds. Each found position is checked
against its id, so a table that is not sorted still gives the right rows, by the slower
hash lookup.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


class SortedIds:
    """Unique ids (an index) searchable by binary search: ``order``, when given, is the
    permutation that sorts them (``index[order]`` ascending), else ``index`` is expected
    sorted. Build it once per index and reuse it: the sorted copy is made once."""

    def __init__(self, index: pd.Index, order: np.ndarray | None = None):
        self.index, self.order = index, order
        values = index.to_numpy(object)
        self.ranked = values if order is None else values[order]

    def positions(self, ids) -> np.ndarray:
        """Positions of ``ids`` in the index (-1 where absent), like ``index.get_indexer(ids)``.
        Every position found is checked against its id; any miss is looked up with
        ``get_indexer`` (so an index that is not sorted after all still gives the right rows)."""
        wanted = np.asarray(ids, dtype=object)
        if not len(wanted) or not len(self.ranked):
            return np.full(len(wanted), -1, dtype=np.intp)
        at = np.minimum(np.searchsorted(self.ranked, wanted), len(self.ranked) - 1)
        found = self.ranked[at] == wanted
        out = np.where(found, at if self.order is None else self.order[at], -1).astype(np.intp)
        if not found.all():
            out[~found] = self.index.get_indexer(wanted[~found])
        return out


def rows(frame: pd.DataFrame, ids) -> pd.DataFrame:
    """The rows of ``frame`` (indexed by unique, usually sorted ids) for ``ids``, in that
    order; KeyError for an id it lacks."""
    at = SortedIds(frame.index).positions(ids)
    if (at < 0).any():
        raise KeyError(f"no row for id {np.asarray(ids, dtype=object)[at < 0][0]!r}")
    return frame.iloc[at]
