"""Launch settings of published benchmark recipes that change what a request sees, for
``planner accuracy`` (issue 14).

A reference row records its layout (``tp``, ``ep``, attention DP) but not every engine flag
of the run. Where the campaign's recipe is published and sets a flag the serving model has
a term for, :func:`scheduler_poll_steps` reads it from the recipe rather than from the row:

* InferenceX (SemiAnalysisAI/InferenceX, ``benchmarks/dsr1_fp4_b200.sh``,
  ``dsr1_fp8_b200*.sh`` and the B300 scripts) starts SGLang with
  ``--scheduler-recv-interval 10`` below 16 concurrent users and ``30`` from 16 on. SGLang's
  ``SchedulerRecvSkipper`` (``python/sglang/srt/managers/scheduler_recv_skipper.py``)
  then receives new requests only once its counter reaches the interval: a decode step adds
  1, any other step (a prefill) 1000, so while the engine decodes it looks for arrivals
  every K decode steps (:func:`planner.accuracy_loads.closed_loop`, ``poll_steps``;
  docs/serving-model.md section 14.6). The skipper refuses attention DP (an ``assert`` in
  the SGLang releases of these runs), so rows with attention DP keep K = 1.

* InferenceX's TensorRT-LLM recipes (``benchmarks/dsr1_fp4_b200_trt.sh`` and the other
  ``*_trt*.sh`` scripts) run attention DP with ``attention_dp_config: {enable_balance:
  true, batching_wait_iters: 0, timeout_iters: 60}``. TensorRT-LLM's executor then
  schedules new context requests only when every attention-DP rank has one, or after
  ``timeout_iters`` iterations of waiting while every rank decodes
  (``tensorrt_llm/_torch/pyexecutor``, the attention-DP balance of context requests):
  :func:`attention_dp_balance` gives (D, T) per row for
  :func:`planner.accuracy_loads.closed_loop`.

Every other row: K = 1 and no balance (the engines' defaults: SGLang
``scheduler_recv_interval`` 1, TensorRT-LLM ``enable_balance`` false, vLLM schedules every
step).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: InferenceX's SGLang recipes: ``--scheduler-recv-interval`` by concurrency (below, from).
INFERENCEX_SGLANG_RECV_INTERVAL = (10.0, 30.0)
#: Concurrency from which the InferenceX SGLang recipes use the larger interval.
INFERENCEX_SGLANG_RECV_INTERVAL_FROM_USERS = 16.0
#: GPUs whose InferenceX SGLang scripts set the interval (the B200 and B300 recipes; the
#: H200 and MI355X scripts do not).
INFERENCEX_SGLANG_RECV_INTERVAL_GPUS = ("b200", "b300")
#: The source family label of InferenceX rows (``[InferenceX dashboard] ...``).
INFERENCEX_FAMILY = "InferenceX dashboard"
#: InferenceX's TensorRT-LLM attention-DP recipes: ``attention_dp_config.timeout_iters``.
INFERENCEX_TRTLLM_BALANCE_TIMEOUT_STEPS = 60.0


def _inferencex_agg(rows: pd.DataFrame, family: pd.Series, engine: str) -> np.ndarray:
    """Aggregated ``concurrency`` rows of InferenceX runs of ``engine``."""
    return (family.eq(INFERENCEX_FAMILY).to_numpy() & rows["engine"].eq(engine).to_numpy()
            & rows["mode"].eq("agg").to_numpy() & rows["load_kind"].eq("concurrency").to_numpy())


def attention_dp_balance(rows: pd.DataFrame, family: pd.Series, attention_dp: pd.Series) -> tuple:
    """(D, T) per row: the attention-DP ranks a new prefill waits to be balanced over and the
    timeout in steps; (1, 0) where the recipe does not balance. Only aggregated InferenceX
    TensorRT-LLM ``concurrency`` rows with attention DP (D = ``attention_dp`` > 1) balance."""
    dp = attention_dp.to_numpy(dtype=float)
    on = _inferencex_agg(rows, family, "trtllm") & (dp > 1.0)
    return np.where(on, dp, 1.0), np.where(on, INFERENCEX_TRTLLM_BALANCE_TIMEOUT_STEPS, 0.0)


def scheduler_poll_steps(rows: pd.DataFrame, family: pd.Series, gpu: pd.Series,
                         attention_dp: pd.Series) -> np.ndarray:
    """K per row: the decode steps between two looks for new requests (1: every step).

    ``family``: :func:`planner.accuracy_rows.source_family` of the rows; ``gpu``: catalog GPU
    ids; ``attention_dp``: attention-DP ranks (1 where off). Only aggregated ``concurrency``
    rows of InferenceX SGLang runs on the GPUs of :data:`INFERENCEX_SGLANG_RECV_INTERVAL_GPUS`
    without attention DP get K > 1.
    """
    users = pd.to_numeric(rows["load_value"], errors="coerce").to_numpy(dtype=float)
    recipe = (_inferencex_agg(rows, family, "sglang") & gpu.isin(INFERENCEX_SGLANG_RECV_INTERVAL_GPUS).to_numpy()
              & (attention_dp.to_numpy(dtype=float) <= 1.0))
    below, above = INFERENCEX_SGLANG_RECV_INTERVAL
    interval = np.where(users >= INFERENCEX_SGLANG_RECV_INTERVAL_FROM_USERS, above, below)
    return np.where(recipe, interval, 1.0)
