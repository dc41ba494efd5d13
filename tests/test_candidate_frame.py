"""The candidate table assembled from each model's columns (planner/candidate_frame.py)."""

import numpy as np
import pandas as pd
import pytest

from planner import dimensions
from planner.candidate_frame import Scattered, frame_of
from planner.dimensions import CandidateTable


def test_frame_of_is_the_parts_frames_concatenated_and_reordered():
    """frame_of (the search's candidate table, issue 19) gives what pd.concat of the parts'
    frames and .iloc[order] give: values, dtypes, column order (a float column absent from a
    part is NaN there), index; the Coded columns as their distinct values taken."""
    table, coded = CandidateTable.coded_grid({"model": ["m"], "gpu": ["g1", "g2"], "tp": [1, 2], "pp": [1],
                                              "quantization": ["bf16"], "kv_cache_dtype": ["bf16", "fp8"],
                                              "max_batch": [8, 16, 32]})
    n = len(table)
    first = {**coded, "gpus": np.arange(n) * 2, "rate[a]": np.linspace(0.0, 1.0, n),
             "reason": dimensions.Coded(pd.Series(pd.array(["x", ""], dtype="str")), np.arange(n) % 2),
             "ok": np.arange(n) % 3 == 0, "rate[b]": -np.arange(n, dtype=float)}
    other_table, other = CandidateTable.coded_grid({"model": ["m2"], "gpu": ["g2"], "tp": [4], "pp": [2],
                                                    "quantization": ["fp8"], "kv_cache_dtype": ["fp8"],
                                                    "max_batch": [8, 64]})
    second = {**other, "gpus": np.array([8, 8]), "rate[a]": np.array([5.0, 6.0]),
              "reason": dimensions.Coded(pd.Series(pd.array(["y", "x"], dtype="str")), np.array([1, 0])),
              "ok": np.array([True, False]), "rate[c]": np.array([1.5, 2.5])}

    def frame(part, base):
        values = {k: (v.distinct.array.take(v.index) if isinstance(v, dimensions.Coded) else v) for k, v in part.items()}
        return pd.DataFrame({**{k: base[k] for k in base.columns}, **values})

    order = np.random.default_rng(0).permutation(n + 2)
    index = pd.Index([f"c{i:02d}" for i in range(n + 2)], name="candidate_id")
    want = pd.concat([frame(first, table.frame), frame(second, other_table.frame)]).iloc[order].set_axis(index)
    got = frame_of([first, second], order, index)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert list(got.columns)[-2:] == ["rate[b]", "rate[c]"] and np.isnan(got["rate[c]"].to_numpy()).sum() == n
    assert got["reason"].tolist() == [("x", "")[i % 2] if i < n else ("x", "y")[i - n] for i in order]
    # one part alone: the adjacent float columns (rate[a] only; gpus is int) in blocks as one frame has them
    alone = frame_of([first], np.arange(n)[::-1], index[:n])
    pd.testing.assert_frame_equal(alone, frame(first, table.frame).iloc[::-1].set_axis(index[:n]), check_exact=True)
    with pytest.raises(ValueError, match="'ok' is absent from a part"):
        frame_of([first, {k: v for k, v in second.items() if k != "ok"}], order, index)


def test_scattered_columns_equal_their_dense_arrays():
    """A Scattered float column (values at some rows, a fill elsewhere) gives the table what
    its dense array gives, in one part and across parts (with an absent part: NaN)."""
    rng = np.random.default_rng(1)
    sizes = (7, 5)
    rows = (np.array([0, 2, 3, 6]), np.array([1, 4]))
    values = (rng.random(4), rng.random(2))

    def dense(k, fill):
        out = np.full(sizes[k], fill)
        out[rows[k]] = values[k]
        return out

    order = rng.permutation(sum(sizes))
    index = pd.Index([f"c{i:02d}" for i in range(sum(sizes))], name="candidate_id")
    scattered = [{"n": np.arange(sizes[k]), "rate": Scattered(values[k], rows[k], 0.0, sizes[k]),
                  "ttft": Scattered(values[k] * 2, rows[k], np.nan, sizes[k])} for k in (0, 1)]
    scattered[1].pop("ttft")                                         # absent from the second part
    plain = [{"n": np.arange(sizes[k]), "rate": dense(k, 0.0), **({"ttft": 2 * dense(k, np.nan)} if k == 0 else {})}
             for k in (0, 1)]
    got, want = frame_of(scattered, order, index), frame_of(plain, order, index)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert np.isnan(got["ttft"].to_numpy()).sum() == sizes[1] + sizes[0] - len(rows[0])
    assert got["rate"].to_numpy()[np.argsort(order)][rows[0]].tolist() == values[0].tolist()
    one = frame_of(scattered[:1], np.arange(sizes[0])[::-1], index[:sizes[0]])
    pd.testing.assert_frame_equal(one, frame_of(plain[:1], np.arange(sizes[0])[::-1], index[:sizes[0]]), check_exact=True)
