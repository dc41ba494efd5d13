"""Named, documented, overridable constants of the analytic serving model."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from planner.units import GIGA, MICROSECONDS


@dataclass(frozen=True)
class ServingParams:
    """Efficiencies and overheads of the serving model (the seeds' defaults).

    Every field may be a scalar or a numpy array broadcastable against the configurations
    (per-GPU calibrated values). Override with :meth:`with_overrides`, the problem YAML's
    ``serving:`` section, CLI flags or a calibration file.
    """

    #: eta_m: fraction of peak memory bandwidth kernels achieve (seed: 0.8; "70-90%").
    memory_efficiency: float = 0.8
    #: eta_c: fraction of dense peak FLOP/s kernels achieve (seed: 0.6; "40-70%").
    compute_efficiency: float = 0.6
    #: Fraction of GPU memory the engine may use (vLLM ``gpu_memory_utilization``, 0.9).
    gpu_memory_utilization: float = 0.9
    #: Per-GPU workspace: CUDA context, kernel buffers, activations (seed: 2 GB).
    workspace_bytes: float = 2.0 * GIGA
    #: tau: fixed latency of one all-reduce over NVLink/Infinity Fabric (seed: 5 us).
    allreduce_latency_nvlink_s: float = 5.0 * MICROSECONDS
    #: tau: fixed latency of one all-reduce over PCIe/Ethernet (seed: 20 us).
    allreduce_latency_pcie_s: float = 20.0 * MICROSECONDS
    #: Bytes per activation element sent in all-reduces and between pipeline stages (BF16).
    activation_bytes: float = 2.0
    #: Fixed latency of one pipeline-stage hand-off (seed has none; one link latency).
    pipeline_hop_latency_s: float = 5.0 * MICROSECONDS
    #: Fixed per-decode-step overhead (scheduling, kernel launches); 0 in the seeds.
    step_overhead_s: float = 0.0
    #: Prompt tokens one continuous-batching iteration prefills (chunked prefill budget,
    #: vLLM ``max_num_batched_tokens``).
    prefill_chunk_tokens: float = 2048.0
    #: Fixed latency every request adds to its TTFT outside the GPU steps: API server,
    #: tokenization, scheduling, streaming the first token (0 in the seeds; calibrated
    #: values come from ``catalogs/calibration.yaml``).
    request_overhead_s: float = 0.0
    #: Prefill (prompt) math runs at ``compute_efficiency`` times this: long-prompt GEMMs
    #: and attention kernels reach a different fraction of peak than the decode-side math
    #: (1 in the seeds: one efficiency for both; calibrated per engine).
    prefill_compute_factor: float = 1.0
    #: Expert load imbalance under expert parallelism (ep > 1): tokens routed to the most
    #: loaded EP rank / the mean (its expert FLOPs and expert weight reads scale by this; the
    #: step waits for that rank). 1.0: balanced, as engines with a load balancer aim for
    #: (DeepSeek EPLB, SGLang/TensorRT-LLM redundant experts); no published per-deployment
    #: figure for the reference rows, so the seed value assumes balance (docs/serving-model.md
    #: section 13). Only rows with ep > 1 use it.
    expert_load_imbalance: float = 1.0
    #: Bytes per hidden element of the expert-parallel all-to-all dispatch (BF16: 2; DeepEP's
    #: FP8 dispatch: about 1). The combine returns BF16 activations (``activation_bytes``).
    dispatch_bytes_per_element: float = 2.0
    #: Fixed latency of one all-to-all that leaves the scale-up domain (scale-out RDMA); the
    #: seed's slow-link latency (20 us). Inside the domain the all-reduce latency applies.
    scale_out_latency_s: float = 20.0 * MICROSECONDS

    def with_overrides(self, **overrides) -> "ServingParams":
        """A copy with some fields replaced; unknown names raise ``TypeError``."""
        unknown = set(overrides) - {f.name for f in fields(self)}
        if unknown:
            raise TypeError(f"unknown serving parameter(s): {', '.join(sorted(unknown))}")
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def as_dict(self) -> dict:
        """Every field, except the expert-parallel ones (``LAYOUT_FIELDS``) while they hold
        their scalar defaults: dense deployments' outputs list the parameters they use."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in LAYOUT_FIELDS and np.ndim(value) == 0 and value == f.default:
                continue
            out[f.name] = value
        return out

    def take(self, rows) -> "ServingParams":
        """The parameters of configuration rows ``rows``: 1-D array fields of more than one
        element are indexed; scalars and one-element arrays (they broadcast) are kept."""
        out = {}
        for key, value in self.as_dict().items():
            arr = np.asarray(value)
            out[key] = arr[rows] if arr.ndim == 1 and arr.size > 1 else value
        return replace(self, **out)


#: Parameters of the expert-parallel terms (issue 14, :mod:`planner.serving.moe`).
LAYOUT_FIELDS = ("expert_load_imbalance", "dispatch_bytes_per_element", "scale_out_latency_s")


SEED_PARAMS = ServingParams()
