"""read_plan's and central_load's per-candidate load sums are pandas' groupby sums to the bit."""

import numpy as np
import pandas as pd

from planner.optimize.solve import group_sums


def testgroup_sums_are_the_groupby_sums_bit_for_bit():
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        keys = pd.Index(rng.choice([f"c{i}" for i in range(6)], size=n))
        values = rng.random(n) * 10.0 ** rng.integers(-8, 8, size=n)      # mixed magnitudes: compensation matters
        expected = pd.Series(values).groupby(keys.to_numpy()).sum()
        wanted = pd.Index(sorted(set(keys)) + ["absent"])
        got = group_sums(keys, values, wanted)
        assert got[-1] == 0.0
        assert got[:-1].tobytes() == expected.reindex(wanted[:-1]).to_numpy().tobytes()


    # the compensation is not a no-op: plain left-to-right sums differ somewhere
    keys = pd.Index(["a"] * 4)
    values = np.array([1e16, 1.0, 1.0, -1e16])
    assert group_sums(keys, values, pd.Index(["a"]))[0] == pd.Series(values).groupby(keys.to_numpy()).sum()["a"]
