"""Unit constants (SI inside the package); the solver's integer scaling is in :mod:`planner.optimize.scaling`."""

from __future__ import annotations

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

