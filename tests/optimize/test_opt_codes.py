"""Integer codes of candidate columns and their groups (planner.optimize.codes) against pandas."""

import numpy as np
import pandas as pd

from planner.dimensions import factorize_column
from planner.optimize.codes import group_codes, stable_order


def test_group_codes_partition_as_groupby_with_missing_rows_alone():
    rng = np.random.default_rng(3)
    n = 400
    frame = pd.DataFrame({"gpu": rng.choice(["h100", "h200", None], n, p=[0.45, 0.45, 0.1]),
                          "gpus": rng.choice([1, 2, 4], n), "price": rng.choice([2.0, 3.5, np.nan], n, p=[0.5, 0.45, 0.05]),
                          "model": rng.choice(["m1", "m2"], n)}).astype({"gpu": "str", "model": "str"})
    codes = group_codes([factorize_column(frame[c]) for c in frame.columns])
    expected = frame.groupby(list(frame.columns), sort=False).ngroup().to_numpy()   # NaN: a missing value
    missing = np.isnan(expected)
    assert missing.any() and (~missing).sum() > 100
    # the rows groupby groups share a code exactly when they share a group
    same = codes[:, None] == codes[None, :]
    assert (same[np.ix_(~missing, ~missing)] == (expected[~missing, None] == expected[None, ~missing])).all()
    # a row with a missing value shares its code with no other row
    assert (same[missing].sum(axis=1) == 1).all()


def test_stable_order_is_the_stable_argsort():
    rng = np.random.default_rng(4)
    for codes in (np.zeros(0, dtype=np.int64), rng.integers(0, 50, 1000), rng.integers(0, 2 ** 16 - 1, 3000),
                  rng.integers(0, 2 ** 20, 3000)):
        assert np.array_equal(stable_order(codes), np.argsort(codes, kind="stable"))
