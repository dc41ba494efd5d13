"""Integer scaling of the planning model: exact rationals when small, else conservative rounding."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import numpy as np

from planner.schema import PlanningInputError

# Cost in micro-dollars: exact for prices with at most 6 decimals, otherwise rounded up.
COST_UNITS_PER_USD = 10**6
# Fallback load resolution: one replica = 10**6 load units, per-piece loads rounded up.
LOAD_UNITS_PER_REPLICA = 10**6
# Exact load scaling is used when every candidate's common denominator stays below this.
MAX_EXACT_LOAD_UNITS_PER_REPLICA = 10**12
# Overflow guard: max |coefficient| x variable upper bound, summed over a constraint.
MAX_SCALED_MAGNITUDE = 2**53


def to_fraction(value) -> Fraction:
    """The rational a float was written as (shortest decimal repr: 0.1 -> 1/10)."""
    return Fraction(repr(float(value)))


def decimal_ratio(value) -> tuple[int, int]:
    """``(numerator, denominator)`` in lowest terms of :func:`to_fraction` ``(value)`` (speed:
    the C decimal parser, no Fraction object)."""
    return Decimal(repr(float(value))).as_integer_ratio()


def ceil_fraction(value: Fraction) -> int:
    """Smallest integer >= value, exactly."""
    return -((-value.numerator) // value.denominator)


def cost_units(prices_usd) -> tuple[np.ndarray, bool]:
    """Prices in integer cost units, rounded up; also whether every price was exact (each
    distinct price converted once)."""
    distinct, inverse = np.unique(np.asarray(prices_usd, dtype=float), return_inverse=True)
    scaled = [to_fraction(p) * COST_UNITS_PER_USD for p in distinct]
    units = np.array([ceil_fraction(s) for s in scaled], dtype=np.int64)
    return units[inverse.reshape(-1)], all(s.denominator == 1 for s in scaled)


def limit_cost_units(limit_usd: float) -> int:
    """A cost limit in integer cost units, rounded down (conservative)."""
    return math.floor(to_fraction(limit_usd) * COST_UNITS_PER_USD)


@dataclass(frozen=True)
class LoadScaling:
    """Per-candidate integer load rows: sum_k coef[j, k] * x[j, k] <= units[j] * replicas[j].

    ``coef[j, k]`` is the scaled load of one traffic unit of workload k on candidate j
    (0 where j cannot serve k), ``units[j]`` the load units per replica of candidate j.
    """

    coef: np.ndarray          # (n, m) int64
    units: np.ndarray         # (n,) int64
    exact: bool
    max_overestimate_replicas: float


def _piece_ratios(rate_per_s, traffic_units, capacity_per_s) -> list[list[tuple[int, int] | None]]:
    """Exact replicas per traffic unit, rate_k / (Q_k * cap_jk), as ``(numerator, denominator)``
    in lowest terms; None where cap is 0 (speed: integer arithmetic, no Fraction objects)."""
    rates = [decimal_ratio(r) for r in rate_per_s]
    q = [int(u) for u in traffic_units]
    out = []
    for row in np.asarray(capacity_per_s, dtype=float).tolist():
        ratios = []
        for k, c in enumerate(row):
            if c <= 0:
                ratios.append(None)
                continue
            (rate_num, rate_den), (cap_num, cap_den) = rates[k], decimal_ratio(c)
            num, den = rate_num * cap_den, rate_den * q[k] * cap_num
            common = math.gcd(num, den)
            ratios.append((num // common, den // common))
        out.append(ratios)
    return out


def scale_loads(rate_per_s, traffic_units, capacity_per_s) -> LoadScaling:
    """Scale the load constraints to integers.

    Parameters
    ----------
    rate_per_s : array-like, shape (m,)
        Workload rates [1/s].
    traffic_units : array-like of int, shape (m,)
        Pieces per workload.
    capacity_per_s : array-like, shape (n, m)
        Requests/s one replica carries [1/s]; 0 = cannot serve.

    Returns
    -------
    LoadScaling

    Raises
    ------
    PlanningInputError
        When even the fallback rows exceed ``MAX_SCALED_MAGNITUDE``.

    Notes
    -----
    Each row is an independent constraint, so each candidate gets its own exact scale,
    the least common multiple of its piece loads' denominators. Exact scaling is used
    only when every row's scale is at most ``MAX_EXACT_LOAD_UNITS_PER_REPLICA`` and passes
    the overflow guard; otherwise every row uses ``LOAD_UNITS_PER_REPLICA`` with piece
    loads rounded up. Using one mode for all rows keeps the effective piece loads
    monotone in capacity, which dominance pruning relies on. The piece loads are exact
    rationals (:func:`_piece_ratios`), so every coefficient is an exact integer.
    """
    loads = _piece_ratios(rate_per_s, traffic_units, capacity_per_s)
    q = [int(u) for u in traffic_units]
    n, m = len(loads), len(q)
    units = [math.lcm(*[a[1] for a in row if a is not None]) if any(
        a is not None for a in row) else 1 for row in loads]
    exact = all(u <= MAX_EXACT_LOAD_UNITS_PER_REPLICA for u in units)
    if exact:
        coef = [[0 if a is None else a[0] * (u // a[1]) for a in row] for row, u in zip(loads, units)]
        exact = all(_row_fits(row, u, q) for row, u in zip(coef, units))
    if not exact:
        units = [LOAD_UNITS_PER_REPLICA] * n
        coef = [[0 if a is None else -((-a[0] * LOAD_UNITS_PER_REPLICA) // a[1]) for a in row]
                for row in loads]
        overestimate = sum(q) / LOAD_UNITS_PER_REPLICA
        if not all(_row_fits(row, LOAD_UNITS_PER_REPLICA, q) for row in coef):
            raise PlanningInputError("workloads[].rate_per_s: the traffic needs more replicas than the "
                                     "optimizer's integer range holds (optimizer scaling overflow guard: rates "
                                     "far above the candidates' capacities)")
    else:
        overestimate = 0.0
    return LoadScaling(coef=np.array(coef, dtype=np.int64).reshape(n, m),
                       units=np.array(units, dtype=np.int64), exact=exact,
                       max_overestimate_replicas=overestimate)


def _row_fits(coef_row, units: int, traffic_units) -> bool:
    full = sum(c * q for c, q in zip(coef_row, traffic_units))
    return full + 2 * units <= MAX_SCALED_MAGNITUDE


def replica_upper_bounds(scaling: LoadScaling, traffic_units, spare) -> np.ndarray:
    """Replicas no optimal plan exceeds: all servable traffic on j, rounded up, plus a spare."""
    full = scaling.coef @ np.asarray(traffic_units, dtype=np.int64)
    return -(-full // scaling.units) + np.asarray(spare, dtype=np.int64)


def check_magnitudes(upper, price_units, budget_units) -> list[str]:
    """Overflow guard on the cost rows (load rows are guarded in :func:`scale_loads`)."""
    cost = sum(int(p) * int(b) for p, b in zip(price_units, upper))
    if cost > MAX_SCALED_MAGNITUDE or (budget_units or 0) > MAX_SCALED_MAGNITUDE:
        return ["workloads[].rate_per_s, prices, budget_usd_per_hour: the plan's cost bound exceeds the "
                "optimizer's integer range (optimizer scaling overflow guard: rates far above capacities, "
                "or prices or budget too large)"]
    return []
