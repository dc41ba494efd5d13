"""Rows by id through a binary search (planner.lookup): the same positions as a hash lookup."""

from dataclasses import fields

import numpy as np
import pandas as pd
import pytest

from planner import lookup


@pytest.mark.parametrize("shuffled", [False, True])
def test_positions_equal_get_indexer(shuffled):
    rng = np.random.default_rng(7)
    ids = np.array(sorted({f"c{int(v):08x}" for v in rng.integers(0, 2**31, 500)}), dtype=object)
    index = pd.Index(rng.permutation(ids) if shuffled else ids)
    wanted = np.concatenate([rng.choice(ids, 40), ["absent", "c", "zzzz", ids[0], ids[-1]]]).astype(object)
    expected = index.get_indexer(wanted)
    # without an order the index is expected sorted; a shuffled one still gives the right rows
    np.testing.assert_array_equal(lookup.SortedIds(index).positions(wanted), expected)
    order = np.argsort(index.to_numpy(object))
    np.testing.assert_array_equal(lookup.SortedIds(index, order).positions(wanted), expected)
    assert (expected[-5:-2] == -1).all() and (expected[:40] >= 0).all()    # the check can fail


def test_rows_in_the_order_asked_and_key_error_for_a_missing_id():
    frame = pd.DataFrame({"v": [1, 2, 3]}, index=pd.Index(["a", "b", "c"], name="candidate_id"))
    assert lookup.rows(frame, ["c", "a", "c"])["v"].tolist() == [3, 1, 3]
    assert lookup.SortedIds(frame.index).positions([]).tolist() == []
    with pytest.raises(KeyError, match="'x'"):
        lookup.rows(frame, ["a", "x"])


def test_search_params_find_the_rows_of_the_sorted_table():
    """The search's ``id_order`` sorts its parameter ids: ``ProblemParams.of`` by binary search
    gives the rows a hash lookup gives."""
    from pathlib import Path

    from planner.problem import load_problem
    from planner.search import candidates_and_params

    problem = load_problem(Path(__file__).resolve().parents[1] / "problems" / "chat-70b.yaml")
    candidates, params = candidates_and_params(problem)
    assert params.id_order is not None
    ranked = params.ids.to_numpy(object)[params.id_order]
    assert (ranked[1:] > ranked[:-1]).all()
    rows = candidates.iloc[::37]
    expected = params.ids.get_indexer(rows.index)
    rows = rows[expected >= 0]
    assert len(rows) > 10
    np.testing.assert_array_equal(params._sorted_ids.positions(rows.index), expected[expected >= 0])
    got, want = params.of(rows), params.per_candidate.take(expected[expected >= 0])
    for f in fields(got):
        np.testing.assert_array_equal(np.asarray(getattr(got, f.name)), np.asarray(getattr(want, f.name)))
