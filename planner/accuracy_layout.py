"""The parallel layout of reference rows (expert parallelism, attention data parallelism) for
``planner accuracy`` (issue 14).

:func:`planner.accuracy_rows.prepare_rows` resolves a row's ``tp``/``pp`` and its attention
data-parallel ranks (``attention_dp``); this module adds the expert-parallel size, selects
the rows whose layout is expert-parallel or attention-DP, and sets the layout columns
``ep`` and ``attention_dp`` of :class:`planner.serving.arrays.ConfigArrays` so the serving
model's MoE terms (:mod:`planner.serving.moe`, docs/serving-model.md section 13) apply.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.accuracy_rows import _attention_dp
from planner.serving.arrays import ConfigArrays


def expert_parallel_size(rows: pd.DataFrame) -> np.ndarray:
    """The row's ``ep`` column as a number (1 where empty: no expert parallelism).

    Notes
    -----
    The reference files give ``ep`` as the engine's expert-parallel size inside the ``tp``
    GPUs of one engine instance (InferenceX ``tp8/ep8``, AIC ``moe_ep_size``; the AIC rule
    ``tp_size x attention_dp_size = moe_tp_size x moe_ep_size``), so ep <= tp.
    """
    ep = pd.to_numeric(rows["ep"], errors="coerce").to_numpy(dtype=float) if "ep" in rows else np.ones(len(rows))
    return np.where(np.isfinite(ep) & (ep >= 1.0), ep, 1.0)


def layout_rows(rows: pd.DataFrame) -> np.ndarray:
    """Mask of the aggregated rows whose recorded layout is expert-parallel (ep > 1) or
    attention data-parallel (``attention_dp`` > 1): the rows issue 14's accuracy target is
    stated for. ``rows``: prepared rows, or a raw measurement frame (its attention-DP ranks
    are then read from the notes as :func:`~planner.accuracy_rows.prepare_rows` does)."""
    dp = (rows["attention_dp"] if "attention_dp" in rows else _attention_dp(rows)).to_numpy(dtype=float)
    agg = rows["mode"].eq("agg").to_numpy() if "mode" in rows else np.ones(len(rows), dtype=bool)
    return agg & ((expert_parallel_size(rows) > 1.0) | (dp > 1.0))


def layout_arrays(c: ConfigArrays, rows: pd.DataFrame) -> ConfigArrays:
    """``c`` (the rows' configurations) with the rows' ``ep`` and attention-DP ranks."""
    dp = rows["attention_dp"].to_numpy(dtype=float) if "attention_dp" in rows else np.ones(len(rows))
    ep = np.minimum(expert_parallel_size(rows), np.broadcast_to(c.tp, (len(rows),)))
    return c.replace(ep=ep, attention_dp=np.where(dp > 1.0, dp, 0.0))
