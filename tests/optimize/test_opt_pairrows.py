"""The tie-break's per-pair lookups (:func:`planner.optimize.tiebreak._pair_rows`) against the
pandas lookups they replace."""

import numpy as np
import pytest

from opt_helpers import random_instance, random_pooled_instance
from planner.optimize.model import build_model
from planner.optimize.tiebreak import _pair_rows


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("make", [random_instance, random_pooled_instance])
def test_pair_rows_equal_the_pandas_lookups(seed, make):
    built = build_model(make(seed))
    owner, workloads, units = _pair_rows(built)
    pairs = built.traffic.index
    np.testing.assert_array_equal(owner, built.replicas.index.get_indexer(pairs.get_level_values("candidate_id")))
    assert workloads.dtype == object and workloads.tolist() == list(pairs.get_level_values("workload"))
    expected = built.traffic_units.loc[pairs.get_level_values("workload")].to_numpy(np.int64)
    assert units.dtype == np.int64 and units.tolist() == expected.tolist()
    assert (owner >= 0).all()
