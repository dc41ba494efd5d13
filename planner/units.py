"""Unit constants (SI inside the package) and the integer-scaling helpers of the solver."""

from __future__ import annotations

import numpy as np

# Decimal (SI) prefixes: vendors quote memory in GB and bandwidth in TB/s decimal.
KILO = 1e3
MEGA = 1e6
GIGA = 1e9
TERA = 1e12
PETA = 1e15

# Binary (IEC) prefixes, for KiB/GiB figures.
KIB = 2**10
MIB = 2**20
GIB = 2**30

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0
MILLISECONDS = 1e-3
MICROSECONDS = 1e-6
HOURS_PER_MONTH = 730.0  # 8760 h / 12, the cloud-billing convention

TOKENS_PER_MILLION = 1e6
BITS_PER_BYTE = 8.0


def scale_up(values, units_per_unit: float) -> np.ndarray:
    """Scale to integers rounding up (conservative for demands and costs)."""
    return np.ceil(np.asarray(values, dtype=float) * units_per_unit - 1e-9).astype(np.int64)


def scale_down(values, units_per_unit: float) -> np.ndarray:
    """Scale to integers rounding down (conservative for capacities and limits)."""
    return np.floor(np.asarray(values, dtype=float) * units_per_unit + 1e-9).astype(np.int64)
