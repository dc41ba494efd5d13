"""Integer load scaling (:func:`planner.optimize.scaling.scale_loads`) against a reference
written with :class:`fractions.Fraction` (the implementation before the integer arithmetic)."""

import math
from fractions import Fraction

import numpy as np
import pytest

from planner.optimize.scaling import (LOAD_UNITS_PER_REPLICA, MAX_EXACT_LOAD_UNITS_PER_REPLICA,
                                      ceil_fraction, decimal_ratio, scale_loads, to_fraction)


def _reference(rate_per_s, traffic_units, capacity_per_s):
    """``(coef, units, exact)`` of the Fraction implementation."""
    rates = [to_fraction(r) for r in rate_per_s]
    loads = [[None if c <= 0 else rates[k] / (int(traffic_units[k]) * to_fraction(c)) for k, c in enumerate(row)]
             for row in np.asarray(capacity_per_s, dtype=float)]
    units = [math.lcm(*[a.denominator for a in row if a is not None]) if any(a is not None for a in row) else 1
             for row in loads]
    exact = all(u <= MAX_EXACT_LOAD_UNITS_PER_REPLICA for u in units)
    if exact:
        return [[0 if a is None else int(a * u) for a in row] for row, u in zip(loads, units)], units, True
    return ([[0 if a is None else ceil_fraction(a * LOAD_UNITS_PER_REPLICA) for a in row] for row in loads],
            [LOAD_UNITS_PER_REPLICA] * len(loads), False)


@pytest.mark.parametrize("value", [0.1, 1.0, 3.0, 1e-05, 123.456, 2.5e17, 1 / 3, np.float64(7.25)])
def test_decimal_ratio_is_to_fraction(value):
    num, den = decimal_ratio(value)
    assert Fraction(num, den) == to_fraction(value) and math.gcd(num, den) == 1 and den > 0


@pytest.mark.parametrize("seed", range(8))
def test_scale_loads_matches_the_fraction_reference(seed):
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 12)), int(rng.integers(1, 4))
    decimals = int(rng.integers(0, 9))     # few decimals: exact scaling; many: the rounded-up fallback
    cap = np.round(rng.uniform(0.01, 50.0, (n, m)), decimals) * (rng.random((n, m)) > 0.3)
    rate = np.round(rng.uniform(0.1, 20.0, m), 3)
    q = rng.integers(1, 9, m)
    got = scale_loads(rate, q, cap)
    coef, units, exact = _reference(rate, q, cap)
    assert got.exact == exact
    assert got.coef.tolist() == coef and got.units.tolist() == units


def test_scale_loads_rounds_up_when_denominators_are_large():
    cap = np.array([[1 / 3, 1 / 7], [0.0, 2 / 9]])
    got = scale_loads(np.array([1.1, 0.7]), np.array([3, 5]), cap)
    coef, units, exact = _reference([1.1, 0.7], [3, 5], cap)
    assert not got.exact and not exact
    assert got.coef.tolist() == coef and got.units.tolist() == units
