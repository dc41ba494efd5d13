"""Which expert-parallel / attention-DP layouts the search rejects, and the scale-up domain rule
with them (issue 14; docs/problem-format.md section 3.6, docs/serving-model.md section 13).

The layout of one pipeline stage of ``tp`` GPUs (:mod:`planner.serving.moe`):

- ``ep`` (expert-parallel size) divides ``tp``: the expert-parallel group lies inside the
  ``tp`` GPUs of a stage (its TP x attention-DP ranks), each expert sliced over ``tp / ep``
  GPUs (MoE TP). This is SGLang's ``moe_tp_size = tp_size / ep_size`` and TensorRT-LLM's
  ``moe_tp_size x moe_ep_size = tp_size``; aiconfigurator's ``tp x attention_dp =
  moe_tp x moe_ep`` is the same rule with its ``tp`` the attention TP of one DP rank
  (planner/accuracy_layout.py). With pipeline parallelism each stage holds the experts of
  its own layers, so ``ep <= tp <= GPUs per replica``. ``ep`` must also divide the routed
  experts (whole experts per GPU) and needs a model with routed experts.
- ``attention_dp`` (true): attention runs data-parallel on ``tp`` ranks of one GPU each
  (SGLang ``--enable-dp-attention --dp-size tp``, TensorRT-LLM ``enable_attention_dp``):
  it needs ``tp > 1`` and, as the engines implement it, an MoE model.
- The scale-up domain: the all-reduces of a stage run on the GPU's scale-up link, so
  ``tp`` must fit one domain, except the layout with no all-reduce across GPUs at all:
  attention DP with ``ep = tp`` (every GPU its own attention rank and expert-parallel
  member), whose all-to-all crosses the scale-out network (:func:`planner.serving.moe.
  all_to_all_transfer_s`). Such a stage may span several domains (multi-node replicas)
  when the GPU has a scale-out bandwidth (``scale_out_gb_per_s_per_direction``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner import dimensions

EP_NEEDS_MOE = "ep_needs_moe_model"
EP_NOT_DIVIDING_EXPERTS = "ep_does_not_divide_experts"
EP_NOT_DIVIDING_TP = "ep_does_not_divide_tp"
ATTENTION_DP_NEEDS_MOE = "attention_dp_needs_moe_model"
ATTENTION_DP_NEEDS_TP = "attention_dp_needs_tp"
#: The reasons this module adds to planner/search.py REASONS, in check order.
REASONS = (EP_NEEDS_MOE, EP_NOT_DIVIDING_EXPERTS, EP_NOT_DIVIDING_TP, ATTENTION_DP_NEEDS_MOE,
           ATTENTION_DP_NEEDS_TP)


def _column(frame: pd.DataFrame, name: str, dtype) -> np.ndarray:
    """Dimension ``name`` of every row (its default where the frame has no column)."""
    return np.broadcast_to(np.asarray(dimensions.value_of(frame, name), dtype=dtype), (len(frame),))


def layout_rejections(model, frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """One boolean mask per reason of :data:`REASONS` over the rows of ``frame`` (one
    model's grid: columns tp and, where searched, ep and attention_dp)."""
    tp = frame["tp"].to_numpy()
    ep = _column(frame, "ep", int)
    dpa = _column(frame, "attention_dp", bool)
    experts = int(model.num_experts)
    return {
        EP_NEEDS_MOE: (ep > 1) & (experts == 0),
        EP_NOT_DIVIDING_EXPERTS: (ep > 1) & (experts > 0) & (experts % ep != 0),
        EP_NOT_DIVIDING_TP: tp % ep != 0,
        ATTENTION_DP_NEEDS_MOE: dpa & (experts == 0),
        ATTENTION_DP_NEEDS_TP: dpa & (tp <= 1),
    }


def exceeds_scale_up_domain(frame: pd.DataFrame, domain_gpus: np.ndarray,
                            scale_out_bytes_per_s: np.ndarray) -> np.ndarray:
    """Rows whose stage of ``tp`` GPUs does not fit one scale-up domain of ``domain_gpus`` and
    is not the all-reduce-free layout (attention DP with ``ep = tp``) on a GPU with a
    scale-out network (``scale_out_bytes_per_s`` > 0). With the default layout: tp > domain."""
    tp = frame["tp"].to_numpy()
    spans = (_column(frame, "attention_dp", bool) & (_column(frame, "ep", int) == tp)
             & (np.asarray(scale_out_bytes_per_s, dtype=float) > 0))
    return (tp > domain_gpus) & ~spans


def layout_warnings(search, models: dict) -> list[str]:
    """Warnings (YAML paths) on ``search.ep`` / ``search.attention_dp`` values whose candidates
    are all rejected: a layout searched for dense models only, ep values that divide no
    ``search.tp`` value. ``models``: the workloads' model specs by id."""
    out = []
    if (max(search.ep) > 1 or any(search.attention_dp)) and models \
            and not any(m.num_experts for m in models.values()):
        out.append(f"search.ep / search.attention_dp: no workload model has routed experts "
                   f"({', '.join(sorted(models))}): every candidate with ep > 1 or attention DP is rejected "
                   f"({EP_NEEDS_MOE}, {ATTENTION_DP_NEEDS_MOE})")
    lost = [e for e in search.ep if e > 1 and all(t % e for t in search.tp)]
    if lost:
        out.append(f"search.ep: {', '.join(map(str, lost))} divide(s) no search.tp value "
                   f"({', '.join(map(str, search.tp))}): those candidates are rejected ({EP_NOT_DIVIDING_TP})")
    return out
