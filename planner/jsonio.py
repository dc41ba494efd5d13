"""JSON for results: numpy scalars to Python, NaN/inf to null, sorted, stable."""

from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path

import numpy as np


#: Types :func:`to_jsonable` returns as they are (checked first, by exact type: speed).
_PLAIN = frozenset({str, int, bool, type(None)})


def to_jsonable(obj):
    """Recursively convert numpy, pandas and date values; non-finite floats become None."""
    if type(obj) in _PLAIN:
        return obj
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [to_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, (_dt.date, _dt.datetime)):
        return obj.isoformat()
    if isinstance(obj, Path):
        return str(obj)
    return obj


def dumps(obj, indent: int | None = 2) -> str:
    return json.dumps(to_jsonable(obj), indent=indent, sort_keys=True, allow_nan=False)
