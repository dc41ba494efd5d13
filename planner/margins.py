"""Planning margins: capacities at SLO that hold when the serving model is wrong, and under bursts.

Two margins decide how much traffic the optimizer may put on one replica (problem YAML
``optimize.confidence`` and ``optimize.max_load_fraction``; ``planner solve --confidence
--max-load-fraction``):

* **confidence Q**: the predicted (central) p95 TTFT and TPOT are multiplied by the
  serving model's error factor at quantile Q (:func:`error_factor`) before they are
  compared with the SLOs; the capacity at SLO is the largest rate at which those
  inflated p95s still meet them. Q = 0.5 is the central prediction (factor 1).
* **max_load_fraction F**: no replica carries more than F times its capacity at SLO under
  the central prediction (headroom for bursts the Poisson model does not see).

The optimizer buys the smaller of the two capacities (:meth:`Margins.planned_capacity`);
``load_fraction`` in every output stays relative to the central capacity, so it is at most
F by construction. Measured capacity tables (``capacity_table``) get F only: they carry no
model error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

#: Metric families whose error the margins cover (the p95 SLO metrics).
FAMILIES = ("ttft", "tpot")

#: Out-of-fold median absolute percentage error of the shipped calibration per metric
#: family (docs/accuracy.md, "Cross-validation (5 folds, grouped by (model, GPU))": TTFT
#: 34.1 %, TPOT/ITL 17.4 %): the error spread used until the calibration carries its own
#: prediction intervals. Point :func:`error_factor` at those when they land.
DEFAULT_OUT_OF_FOLD_MEDIAN_APE = {"ttft": 0.341, "tpot": 0.174}

#: Where :data:`DEFAULT_OUT_OF_FOLD_MEDIAN_APE` comes from (shown in the outputs).
ERROR_SOURCE = ("out-of-fold median APE of the shipped calibration (docs/accuracy.md: TTFT 34.1 %, "
                "TPOT 17.4 %), log errors taken as centred normal")

#: Default ``optimize.confidence``: plans hold at the model's 80th-percentile error.
DEFAULT_CONFIDENCE = 0.8
#: Default ``optimize.max_load_fraction``: at most 90 % of the central capacity at SLO.
DEFAULT_MAX_LOAD_FRACTION = 0.9

#: Median of |Z| for a standard normal Z: median |log error| = this x sigma.
_MEDIAN_ABS_NORMAL = NormalDist().inv_cdf(0.75)


def log_error_sigma(median_ape: float) -> float:
    """Standard deviation of ln(measured / predicted) whose median absolute error is ``median_ape``.

    The log error is taken as a centred normal: median |ln error| = 0.6745 sigma, and an
    APE a corresponds to |ln error| = ln(1 + a) (the larger of the two readings of a).
    """
    return math.log1p(median_ape) / _MEDIAN_ABS_NORMAL


def error_factor(family: str, quantile: float, median_ape: dict | None = None) -> float:
    """Factor by which the real p95 may exceed the predicted one, at ``quantile`` of the error.

    Parameters
    ----------
    family : {"ttft", "tpot"}
        Metric family.
    quantile : float
        Q in [0.5, 1): 0.5 gives 1 (the central prediction); 0.8 gives exp(0.84 sigma).
    median_ape : dict, optional
        Out-of-fold median APE per family (default :data:`DEFAULT_OUT_OF_FOLD_MEDIAN_APE`).

    Returns
    -------
    float
        exp(z_Q sigma_family) >= 1, with z_Q the standard normal quantile.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown metric family '{family}' (expected one of {', '.join(FAMILIES)})")
    if not 0.5 <= quantile < 1.0:
        raise ValueError(f"quantile must be in [0.5, 1), got {quantile}")
    ape = (median_ape or DEFAULT_OUT_OF_FOLD_MEDIAN_APE)[family]
    return math.exp(NormalDist().inv_cdf(quantile) * log_error_sigma(ape))


@dataclass(frozen=True)
class Margins:
    """The margins of one problem: confidence, load cap and the error factors they imply."""

    confidence: float = DEFAULT_CONFIDENCE
    max_load_fraction: float = DEFAULT_MAX_LOAD_FRACTION
    #: False for measured capacities: only the load cap applies.
    model_error: bool = True

    @classmethod
    def of(cls, problem) -> "Margins":
        """The margins a :class:`planner.problem.Problem` asks for (``optimize:``)."""
        opt = problem.spec.optimize
        return cls(opt.confidence, opt.max_load_fraction, model_error=not problem.measured)

    def factor(self, family: str) -> float:
        """Error factor of a metric family (``"ttft"``/``"tpot"`` or ``"ttft_p95_s"``/...)."""
        return error_factor(family.split("_")[0], self.confidence) if self.model_error else 1.0

    def slos(self, ttft_slo_s, tpot_slo_s) -> tuple:
        """The SLOs the central p95s must meet for the inflated p95s to meet ``ttft/tpot_slo_s``."""
        return ttft_slo_s / self.factor("ttft"), tpot_slo_s / self.factor("tpot")

    def planned_capacity(self, capacity, ttft_slo_s, tpot_slo_s, central=None) -> np.ndarray:
        """The capacity the optimizer buys: min(capacity at the inflated p95s, F x central capacity).

        ``capacity(ttft_slo_s, tpot_slo_s)`` returns the central capacity at SLO [1/s] per
        row (any capacity model: bisection, occupancy curve); ``central``, when already
        computed, is its value at the SLOs themselves.
        """
        central = capacity(ttft_slo_s, tpot_slo_s) if central is None else np.asarray(central)
        held = central if self.factor("ttft") == self.factor("tpot") == 1.0 else capacity(
            *self.slos(ttft_slo_s, tpot_slo_s))
        return np.minimum(held, self.load_cap(central))

    def load_cap(self, central_capacity) -> np.ndarray:
        """F x the central capacity at SLO [1/s] (alone: for measured capacities)."""
        return self.max_load_fraction * np.asarray(central_capacity, dtype=float)

    def describe(self) -> dict:
        """For the outputs: the options, the factors and where they come from."""
        return {"confidence": self.confidence, "max_load_fraction": self.max_load_fraction,
                "model_error": self.model_error,
                "error_factors": {"ttft_p95": self.factor("ttft"), "tpot_p95": self.factor("tpot")},
                "error_source": ERROR_SOURCE if self.model_error else "none (measured capacities)"}
