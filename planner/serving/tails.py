"""Tail probabilities of the queueing model (:mod:`planner.serving.queueing`): the
Halfin-Whitt wait probability, the p95 of a mixture of normals, exponential wait tails."""

from __future__ import annotations

import functools

import numpy as np

#: Quantile of the latency SLOs.
P95 = 0.95
Z95 = 1.6448536269514722


def erlang_c_halfin_whitt(servers, offered_load, variance_factor=1.0) -> np.ndarray:
    """P(wait) of M/M/c, Halfin-Whitt approximation: 1 / (1 + beta Phi(beta) / phi(beta)).

    ``beta = (c - a) / sqrt(a * variance_factor)``: the occupancy's variance is
    ``variance_factor`` times the Poisson one (bursty, self-exciting occupancy);
    1 when a >= c, 0 when a = 0.
    """
    c = np.asarray(servers, dtype=float)
    a = np.asarray(offered_load, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = (c - a) / np.sqrt(np.maximum(a * variance_factor, 1e-300))
        # Phi(beta)/phi(beta) via the scaled complementary error function is overkill here;
        # beta is clipped where the probability is negligible anyway. Speed (the same
        # numbers): beta has the sign of c - a, and p is kept only where 0 < a < c, where
        # beta >= 0 (p = 1 at beta = 0, whatever Phi): clipped at 0 rather than -8, the erf
        # takes no sign and absolute-value passes (:func:`_erf_positive`).
        b = np.clip(beta, 0.0, 8.0)
        phi = np.exp(-0.5 * b * b) / np.sqrt(2.0 * np.pi)
        Phi = 0.5 * (1.0 + _erf_positive(b / np.sqrt(2.0)))
        p = 1.0 / (1.0 + b * Phi / phi)
    p = np.where(beta > 8.0, 0.0, p)
    return np.where(a >= c, 1.0, np.where(a <= 0, 0.0, np.clip(p, 0.0, 1.0)))


#: beta above which the Halfin-Whitt P(wait) is below 1 - P95 for certain: p = 1 / (1 + beta
#: Phi/phi) and beta Phi/phi >= beta (1/2) sqrt(2 pi) e^(beta^2 / 2) > 19 for beta >= 2.2
#: (at 3, p = 0.0015, far from 0.05 for any rounding or the erf's 1.5e-7): a p95 wait is 0 there.
WAIT_FREE_BETA = 3.0
#: Share of the rows above which :func:`on_rows` computes on every row (the takes of the
#: inputs and the scatter of the result would cost more than the rows saved).
ROWS_SUBSET_MAX_SHARE = 0.75


def on_rows(fn, terms: tuple, rows: np.ndarray, fill: float) -> np.ndarray:
    """``fn(*terms)`` (element-wise; 1-D arrays of the rows' length, or arrays and numbers
    that broadcast against them) at the rows of the 1-D mask ``rows``: on those rows only
    (``fill`` elsewhere) when they are at most :data:`ROWS_SUBSET_MAX_SHARE` of them, else
    on every row (speed: a costly term that only some rows' decisions read)."""
    at = np.flatnonzero(rows)
    if at.size > ROWS_SUBSET_MAX_SHARE * rows.size:
        return fn(*terms)
    out = np.full(rows.shape, fill)
    if at.size:
        out[at] = fn(*[v[at] if np.shape(v) == rows.shape else v for v in terms])
    return out


def halfin_whitt_wait_p95(servers, offered_load, variance_factor, mean_wait_given_wait) -> np.ndarray:
    """:func:`exponential_tail_p95` of :func:`erlang_c_halfin_whitt`'s P(wait) (1-D arrays
    of one length, or numbers): the same numbers. Speed: P(wait) only on the rows with
    beta below :data:`WAIT_FREE_BETA` (or NaN), when they are few enough (:func:`on_rows`); elsewhere it is
    below 1 - P95 and the p95 is 0 whatever its value."""
    terms = np.broadcast_arrays(*[np.asarray(v, dtype=float) for v in
                                  (servers, offered_load, variance_factor, mean_wait_given_wait)])
    c, a, v, mean = terms
    if c.ndim != 1:
        return exponential_tail_p95(erlang_c_halfin_whitt(c, a, v), mean)
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = (c - a) / np.sqrt(np.maximum(a * v, 1e-300))     # (as erlang_c_halfin_whitt's)
    return on_rows(lambda *x: exponential_tail_p95(erlang_c_halfin_whitt(*x[:3]), x[3]), terms,
                   ~(beta >= WAIT_FREE_BETA), 0.0)


def _erf(x):
    """Vectorized erf (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7)."""
    x = np.asarray(x, dtype=float)
    s = np.sign(x)
    return s * _erf_positive(np.abs(x))


def _erf_positive(x):
    """:func:`_erf` of ``x > 0``, where sign(x) = 1 and |x| = x: the same numbers
    without those two passes and the product by the sign (finite at x = 0)."""
    t = 1.0 / (1.0 + 0.3275911 * x)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-x * x)
    return y


#: Smallest spread :func:`mixture_p95_offset` works with: smaller ones (zero) are raised to it.
SPREAD_FLOOR = 1e-300


def mixture_p95_offset(sds, newton_steps: int = 1) -> np.ndarray:
    """x with mean over i of Phi(x / sd_i) = 0.95: the p95 offset of an equal-weight mixture
    of zero-mean normals.

    Starts from the Cornish-Fisher estimate (mixture variance and kurtosis) and refines it
    with Newton steps on the exact mixture CDF (relative error of the offset < 1.2% after
    one step, < 1e-3 after two).

    Speed (the same numbers): rows whose spreads are all at :data:`SPREAD_FLOOR` (zero
    spreads: the states at n = 0) get the offset of one such row (:func:`_floor_offset`;
    every step is element-wise, so the same inputs give the same bits), the others their own.
    """
    s = np.stack(np.broadcast_arrays(*[np.asarray(v, dtype=float) for v in sds]))
    s = np.maximum(s, SPREAD_FLOOR)
    largest = s.max(axis=0)
    at_floor = largest == SPREAD_FLOOR        # (NaN spreads: False)
    if not at_floor.any():
        return _mixture_offset(s, largest, newton_steps)
    out = np.full(at_floor.shape, _floor_offset(len(s), newton_steps))
    if not at_floor.all():
        rest = ~at_floor
        out[rest] = _mixture_offset(s[:, rest], largest[rest], newton_steps)
    return out if out.ndim else out[()]      # (a number for one row, as the steps give it)


@functools.lru_cache(maxsize=None)
def _floor_offset(spreads: int, newton_steps: int) -> float:
    """:func:`mixture_p95_offset` of ``spreads`` spreads all at :data:`SPREAD_FLOOR` (NaN:
    their squares underflow; the number's bits as the mixture's steps make them)."""
    s = np.full((spreads, 1), SPREAD_FLOOR)
    with np.errstate(all="ignore"):
        return float(_mixture_offset(s, s.max(axis=0), newton_steps)[0])


def _mixture_offset(s: np.ndarray, largest: np.ndarray, newton_steps: int) -> np.ndarray:
    """:func:`mixture_p95_offset` of the floored spreads ``s`` stacked on the first axis
    (``largest``: their maximum over it)."""
    m2 = (s ** 2).mean(axis=0)
    kurt = 3.0 * ((s ** 4).mean(axis=0) / m2 ** 2 - 1.0)
    x = np.sqrt(m2) * (Z95 + (Z95 ** 3 - 3.0 * Z95) * kurt / 24.0)
    low, high = Z95 * s.min(axis=0), Z95 * largest
    x = np.clip(x, low, high)
    for _ in range(newton_steps):
        u = x / s
        # u > 0 (x >= Z95 min(s) > 0, s > 0) unless x / s underflows or is NaN (the NaN's
        # bits then as :func:`_erf` makes them)
        erf = _erf_positive if (u > 0.0).all() else _erf
        cdf = (0.5 * (1.0 + erf(u / np.sqrt(2.0)))).mean(axis=0)
        pdf = (np.exp(-0.5 * u * u) / (np.sqrt(2.0 * np.pi) * s)).mean(axis=0)
        x = np.clip(x - (cdf - P95) / np.maximum(pdf, 1e-300), low, high)
    return x


#: Spreads within [MIXTURE_SAFE_SD_MIN, MIXTURE_SAFE_SD_MAX] keep every intermediate of
#: :func:`mixture_p95_offset` finite and nonzero (s^4 neither underflows nor overflows), so
#: its result is a number inside its clip bracket (:func:`mixture_p95_bracket`).
MIXTURE_SAFE_SD_MIN = 1e-70
MIXTURE_SAFE_SD_MAX = 1e70


def mixture_p95_bracket(sds) -> tuple:
    """``(low, high, sure)``: the bracket [Z95 min(sd), Z95 max(sd)] that
    :func:`mixture_p95_offset` clips its result to, the same numbers, without the Newton
    step; ``sure`` where the result is certain to be a number in it (every spread within
    [MIXTURE_SAFE_SD_MIN, MIXTURE_SAFE_SD_MAX]; NaN spreads are not). With rounding
    monotone, ``tau + low <= tau + offset <= tau + high`` then holds in floating point too:
    a comparison of ``tau + offset`` with a bound that both ends decide needs no offset."""
    floor = [np.maximum(np.asarray(v, dtype=float), SPREAD_FLOOR) for v in sds]   # as mixture_p95_offset
    smallest, largest = floor[0], floor[0]
    for v in floor[1:]:
        smallest, largest = np.minimum(smallest, v), np.maximum(largest, v)
    sure = (smallest >= MIXTURE_SAFE_SD_MIN) & (largest <= MIXTURE_SAFE_SD_MAX)
    return Z95 * smallest, Z95 * largest, sure


def normal_p95_offset(sd) -> np.ndarray:
    """:func:`mixture_p95_offset` of one normal, ``mixture_p95_offset([sd])``: the same
    numbers. With one spread the clip bracket is one point, Z95 max(sd, 1e-300), and the
    result is that point wherever it is certain to be a number (:func:`mixture_p95_bracket`'s
    ``sure``); elsewhere (a spread outside the safe range, NaN) the mixture's own steps run,
    on those rows only (its one choice over all rows, the erf's, is the same there: every
    sure row's u = x / sd is positive)."""
    low, _, sure = mixture_p95_bracket([sd])
    if sure.all():
        return low
    out = np.array(low, dtype=float)
    open_ = ~sure
    out[open_] = mixture_p95_offset([np.broadcast_to(np.asarray(sd, dtype=float), open_.shape)[open_]])
    return out


def exponential_tail_quantile(p_wait, mean_wait_given_wait, q) -> np.ndarray:
    """q-quantile of a wait that is 0 w.p. 1 - p_wait and exponential(mean) otherwise:
    mean ln(p_wait / (1 - q)) where p_wait > 1 - q, else 0."""
    p = np.asarray(p_wait, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mean_wait_given_wait * np.log(p / (1.0 - q))
    return np.where(p > 1.0 - q, t, 0.0)


def exponential_tail_p95(p_wait, mean_wait_given_wait) -> np.ndarray:
    """p95 of a wait that is 0 w.p. 1 - p_wait and exponential(mean) otherwise."""
    return exponential_tail_quantile(p_wait, mean_wait_given_wait, P95)
