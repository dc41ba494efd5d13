"""CSV text of result tables with one float rule for every file.

Floats are written with at most ``CSV_SIGNIFICANT_DIGITS`` significant digits (``%.15g``):
every decimal of up to 15 digits survives a round trip through a double, so a price sum
such as 9 x 1.85 is written ``16.65`` instead of its binary artefact ``16.650000000000002``,
and nothing a reader could use is lost (a double holds 15.9 decimal digits). JSON
documents keep Python's shortest round-trip form of the exact value.
"""

from __future__ import annotations

import pandas as pd

#: Significant digits of floats in CSV files.
CSV_SIGNIFICANT_DIGITS = 15
CSV_FLOAT_FORMAT = f"%.{CSV_SIGNIFICANT_DIGITS}g"


def csv_text(frame: pd.DataFrame, *, index: bool = False) -> str:
    """``frame.to_csv`` with the float rule of this module."""
    return frame.to_csv(index=index, float_format=CSV_FLOAT_FORMAT)
