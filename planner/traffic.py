"""Token-length distributions of a traffic class: fixed, lognormal (mean + p95), histogram, trace.

Pure numpy. Every distribution answers ``mean``, ``quantile(q)`` and ``sample(rng, n)``
in whole tokens (>= 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner import limits

#: z-score of the 95th percentile of a standard normal.
Z95 = 1.6448536269514722


@dataclass(frozen=True)
class Fixed:
    tokens: int

    @property
    def mean(self) -> float:
        return float(self.tokens)

    def quantile(self, q: float) -> float:
        return float(self.tokens)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.tokens, dtype=np.int64)

    def describe(self) -> str:
        return f"{self.tokens}"


@dataclass(frozen=True)
class LogNormal:
    """Lognormal with the given mean and 95th percentile (``mu``, ``sigma`` of log tokens)."""

    mean_tokens: float
    p95_tokens: float

    @property
    def sigma(self) -> float:
        # mean = exp(mu + s^2/2), p95 = exp(mu + z s)  =>  s^2/2 - z s + ln(p95/mean) = 0
        r = math.log(self.p95_tokens / self.mean_tokens)
        return Z95 - math.sqrt(Z95 * Z95 - 2.0 * r)

    @property
    def mu(self) -> float:
        return math.log(self.mean_tokens) - self.sigma ** 2 / 2.0

    @staticmethod
    def check(mean: float, p95: float) -> str | None:
        """Why (mean, p95) has no lognormal fit, or None."""
        if not p95 > mean:
            return f"p95 ({p95}) must be greater than mean ({mean})"
        if math.log(p95 / mean) > Z95 * Z95 / 2.0:
            return (f"p95/mean = {p95 / mean:.2f} exceeds {math.exp(Z95 * Z95 / 2):.2f}, the largest "
                    "ratio a lognormal can have; give a histogram instead")
        return None

    @property
    def mean(self) -> float:
        return float(self.mean_tokens)

    def quantile(self, q: float) -> float:
        from statistics import NormalDist

        return float(math.exp(self.mu + self.sigma * NormalDist().inv_cdf(q)))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        x = rng.lognormal(self.mu, self.sigma, size=n)
        return np.maximum(np.rint(x), 1).astype(np.int64)

    def describe(self) -> str:
        return f"lognormal(mean={self.mean_tokens:g}, p95={self.p95_tokens:g})"


@dataclass(frozen=True)
class Empirical:
    """A histogram (``tokens`` with ``weights``) or a trace (equal weights)."""

    tokens: tuple[int, ...]
    weights: tuple[float, ...]
    label: str = "histogram"

    def _arrays(self):
        t = np.asarray(self.tokens, dtype=float)
        w = np.asarray(self.weights, dtype=float)
        order = np.argsort(t, kind="stable")
        return t[order], w[order] / w.sum()

    @property
    def mean(self) -> float:
        t, w = self._arrays()
        return float(np.dot(t, w))

    def quantile(self, q: float) -> float:
        t, w = self._arrays()
        idx = int(np.searchsorted(np.cumsum(w), q - 1e-12))
        return float(t[min(idx, len(t) - 1)])

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        t, w = self._arrays()
        return t[rng.choice(len(t), size=n, p=w)].astype(np.int64)

    def describe(self) -> str:
        return f"{self.label}({len(self.tokens)} values, mean={self.mean:.0f})"


LengthDistribution = Fixed | LogNormal | Empirical


def _check_tokens(tokens: float) -> None:
    if tokens > limits.MAX_TOKENS:
        raise ValueError(f"{tokens:.6g} tokens is above the limit of {limits.MAX_TOKENS}")


def parse_length_spec(text: str) -> LengthDistribution:
    """CLI form: ``1200`` | ``mean=1200,p95=3000`` | ``hist=128:0.5,1024:0.5``.

    Raises
    ------
    ValueError
        With a message naming what is wrong.
    """
    text = text.strip()
    if text.isdigit():
        if len(text) > limits.MAX_INT_DIGITS or int(text) < 1:
            raise ValueError(f"must be a whole number of tokens in [1, {limits.MAX_TOKENS}]")
        _check_tokens(int(text))
        return Fixed(int(text))
    if text.startswith("hist="):
        pairs = [p.split(":") for p in text[5:].split(",") if p]
        try:
            tokens = tuple(int(a) for a, _ in pairs)
            weights = tuple(float(b) for _, b in pairs)
        except ValueError:
            raise ValueError(f"expected hist=TOKENS:WEIGHT,..., got '{text}'") from None
        if not tokens or min(tokens) < 1 or min(weights) < 0 or sum(weights) <= 0:
            raise ValueError("histogram needs tokens >= 1 and non-negative weights with a positive sum")
        if not all(math.isfinite(w) for w in weights) or not math.isfinite(sum(weights)):
            raise ValueError("histogram weights must be finite numbers")
        _check_tokens(max(tokens))
        return Empirical(tokens, weights)
    fields = dict(p.split("=", 1) for p in text.split(",") if "=" in p)
    if set(fields) == {"mean", "p95"}:
        try:
            mean, p95 = float(fields["mean"]), float(fields["p95"])
        except ValueError:
            raise ValueError(f"expected mean=M,p95=Q with numbers, got '{text}'") from None
        if not (math.isfinite(mean) and math.isfinite(p95)):
            raise ValueError("mean and p95 must be finite numbers")
        _check_tokens(max(mean, p95))
        why = LogNormal.check(mean, p95)
        if why:
            raise ValueError(why)
        return LogNormal(mean, p95)
    raise ValueError(f"expected N, mean=M,p95=Q or hist=T:W,..., got '{text}'")
