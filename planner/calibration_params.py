"""The declarations of a calibration's parameters: per level (hardware per GPU, software per
engine, release, engine build per GPU architecture, benchmark campaign, math and model) what
each parameter is, its bounds, search coordinate and prior (:class:`ParamSpec`), and the
hardware bounds every composition respects. :mod:`planner.calibration` composes and looks
them up; :mod:`planner.calibration_fit` fits them."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

#: Levels of a calibration, in fitting order after the global fit.
LEVELS = ("gpu", "engine", "release", "platform", "campaign", "math", "model")
#: Hardware bound of the achievable fraction of datasheet memory bandwidth: stream-type
#: kernels (copy, triad, decode GEMV) reach 85-92 % of the HBM datasheet figure on A100,
#: H100, H200, B200 and MI300X in published microbenchmarks. No composed memory efficiency
#: (GPU x engine x release x model) exceeds it.
MAX_MEMORY_EFFICIENCY = 0.92
#: Hardware bound of the achievable fraction of dense tensor FLOPS (large GEMMs at the
#: rated clock reach 70-85 % of the datasheet dense peak). No composed compute efficiency,
#: prefill included (GPU x engine x release x math x model x prefill factors), exceeds it.
MAX_COMPUTE_EFFICIENCY = 0.85
#: Range of every software factor (engine, release, math, model): multiplicative, prior 1.
FACTOR_BOUNDS = (0.5, 2.0)
#: Range of the per-layer step cost (engine and model levels, seconds per transformer layer
#: per engine step): the fixed work a layer adds to every step outside its roofline terms
#: (kernel launches, MoE routing and expert dispatch kernels, norms). 100 us per layer is
#: ten to twenty un-fused kernel launches of 5-10 us; engines with CUDA/HIP graphs and fused
#: kernels sit far below.
MAX_LAYER_OVERHEAD_S = 1e-4
#: Loader range of the fitted TP all-reduce latency (a sanity range; the fit bounds each GPU
#: by its link's published small-message latency, ``scale_up_allreduce_latency_us`` in
#: ``catalogs/gpus.yaml``, :func:`allreduce_latency_bound_s`).
MAX_ALLREDUCE_LATENCY_S = 2e-4
#: Parameters a calibration file may omit, with the value an omitted one means (files written
#: before the parameter existed).
OPTIONAL_DEFAULTS = {"layer_overhead_s": 0.0}


@dataclass(frozen=True)
class ParamSpec:
    """One calibrated parameter: bounds [lower, upper] (SI units), its search coordinate u
    (``log``: u = ln x, else u = x / scale; ``step``: the first step in u), its neutral
    value (what a missing group means for factors and deltas) and, where it differs from
    the fit's setting, how many distinct partners a group needs (``min_other``)."""

    lower: float
    upper: float
    scale: float = 1.0
    log: bool = False
    step: float = 0.25
    neutral: float | None = None
    description: str = ""
    #: Distinct partners a group needs for this parameter (None:
    #: ``planner.calibration_fit.FitOptions.min_other``).
    min_other: int | None = None

    def to_u(self, x):
        x = np.clip(np.asarray(x, dtype=float), self.lower, self.upper)
        return np.log(x) if self.log else x / self.scale

    def from_u(self, u):
        x = np.exp(u) if self.log else np.asarray(u, dtype=float) * self.scale
        return np.clip(x, self.lower, self.upper)


#: Hardware: fitted per GPU. A GPU measured on one model only gets values of its own
#: (``min_other=1``): the model's own factor needs two GPUs (:data:`MODEL_PARAMETERS`), so it
#: is pinned by the model's other GPUs, and the GPU keeps what the model does not explain
#: (without this, GPUs measured on one model -- every AMD GPU, B300 -- fell back to the
#: global fit of the other GPUs).
GPU_PARAMETERS: dict[str, ParamSpec] = {
    "memory_efficiency": ParamSpec(0.2, MAX_MEMORY_EFFICIENCY, log=True, step=0.2, min_other=1,
                                   description="eta_m: achieved fraction of peak memory bandwidth"),
    "compute_efficiency": ParamSpec(0.1, MAX_COMPUTE_EFFICIENCY, log=True, step=0.2, min_other=1,
                                    description="eta_c: achieved fraction of dense peak FLOP/s"),
    "allreduce_latency_nvlink_s": ParamSpec(
        1e-6, MAX_ALLREDUCE_LATENCY_S, scale=1e-5, step=1.0, min_other=1,
        description="tau: fixed latency of one TP all-reduce over NVLink (fitted at most the link's "
                    "published small-message latency)"),
}
#: Software: fitted per serving engine. ``first_wave_weight`` describes the benchmark
#: harness (used by ``planner accuracy`` only, see :class:`planner.accuracy.Harness`).
ENGINE_PARAMETERS: dict[str, ParamSpec] = {
    "step_overhead_s": ParamSpec(0.0, 0.05, scale=1e-3, step=1.0,
                                 description="fixed time per engine step (launches, scheduling, sampling)"),
    "layer_overhead_s": ParamSpec(0.0, MAX_LAYER_OVERHEAD_S, scale=1e-5, step=1.0,
                                  description="fixed time per transformer layer per engine step (kernel "
                                              "launches, routing kernels): x the model's layers"),
    "request_overhead_s": ParamSpec(0.0, 1.0, scale=1e-2, step=2.0,
                                    description="fixed TTFT latency outside the GPU steps (server, "
                                                "tokenizer, scheduling, streaming)"),
    "memory_factor": ParamSpec(*FACTOR_BOUNDS, log=True, step=0.2, neutral=1.0,
                               description="multiplies memory efficiency (decode kernels)"),
    "compute_factor": ParamSpec(*FACTOR_BOUNDS, log=True, step=0.2, neutral=1.0,
                                description="multiplies compute efficiency (GEMM and attention kernels)"),
    "prefill_compute_factor": ParamSpec(*FACTOR_BOUNDS, log=True, step=0.2, neutral=1.0,
                                        description="prefill math runs at compute efficiency times this"),
    "first_wave_weight": ParamSpec(0.0, 1.0, scale=0.1, step=1.0,
                                   description="closed-loop benchmarks: share of requests that behave "
                                               "like the synchronized first wave"),
}
#: Per tensor-core math (bf16, fp8, fp4, int8, weight-only): kernels reach a different
#: fraction of each unit's peak (applied when the caller passes the math modes).
MATH_PARAMETERS: dict[str, ParamSpec] = {
    "compute_factor": ParamSpec(*FACTOR_BOUNDS, log=True, step=0.2, neutral=1.0,
                                description="multiplies compute efficiency for this math"),
}
#: Per-model adjustments (applied when the caller passes model ids). The efficiency factor
#: multiplies both of a GPU's efficiencies, so it separates from the GPU only with two GPUs;
#: the prefill factor scales the prefill path alone, which the GPU's compute efficiency (fitted
#: on every model) already pins on one GPU, so groups of one GPU get it (``min_other=1``): out
#: of fold this lowered every family's error (docs/accuracy.md).
MODEL_PARAMETERS: dict[str, ParamSpec] = {
    "efficiency_factor": ParamSpec(*FACTOR_BOUNDS, log=True, step=0.2, neutral=1.0,
                                   description="multiplies memory and compute efficiency"),
    "prefill_factor": ParamSpec(*FACTOR_BOUNDS, log=True, step=0.2, neutral=1.0, min_other=1,
                                description="multiplies the prefill compute factor (the model's prefill "
                                            "path: MoE grouped GEMMs and routing, MLA attention)"),
    "layer_overhead_s": ParamSpec(0.0, MAX_LAYER_OVERHEAD_S, scale=1e-5, step=1.0, neutral=0.0,
                                  description="the model's own fixed time per layer per step, added to the "
                                              "engine's (MoE routing and dispatch kernels, MLA)"),
}
#: The benchmark harness of one campaign (source family x engine release x GPU vendor, the ``campaign``
#: column of :func:`planner.accuracy.prepare_rows`): how its client drove the engine. Fitted
#: per campaign (prior: the release's or engine's value, groups of one (model, GPU) pair),
#: applied to that campaign's rows only; the planner, which serves no benchmark campaign,
#: uses the engine's values. Without it each campaign's TTFT offset landed in the engine's
#: request overhead (SGLang 0.19-0.21 s from the AIC runs against ~0.1 s TTFT measured by
#: InferenceX at low load).
CAMPAIGN_PARAMETERS: dict[str, ParamSpec] = {
    "request_overhead_s": replace(ENGINE_PARAMETERS["request_overhead_s"], min_other=1),
    "first_wave_weight": replace(ENGINE_PARAMETERS["first_wave_weight"], min_other=1),
}
#: The engine's build for one GPU architecture (``<engine>:<architecture>``, e.g.
#: ``sglang:gfx942``: SGLang's ROCm build with the MoE kernels its libraries compile and tune
#: per target -- aiter's fused MoE for gfx942 -- against ``sglang:gfx950`` or
#: ``sglang:sm_90``): a fixed cost per MoE layer per step (routing top-k, token permutation,
#: the grouped-GEMM and dispatch launches), >= 0, prior 0; dense models have no MoE layer, so
#: it never touches them. Groups need one GPU (``min_other=1``): the cost is fixed per step
#: and layer, so it separates from the GPU's bandwidth and compute fractions by how the step
#: time scales with the batch, and from its all-reduce latency (bounded) by TP. A catalog GPU
#: of a measured architecture gets it (GB300 that of B300's sm_103 build); a GPU of an
#: unmeasured architecture (or held out, alone of its architecture) gets 0 here and the
#: engine's and model's per-layer costs (docs/accuracy.md, "Cross-validation").
PLATFORM_PARAMETERS: dict[str, ParamSpec] = {
    "moe_layer_overhead_s": ParamSpec(0.0, MAX_LAYER_OVERHEAD_S, scale=1e-5, step=1.0, neutral=0.0, min_other=1,
                                      description="the engine build's fixed time per MoE layer per step "
                                                  "(routing and dispatch kernels), x the model's MoE layers"),
}
LEVEL_PARAMETERS = {"gpu": GPU_PARAMETERS, "engine": ENGINE_PARAMETERS, "release": ENGINE_PARAMETERS,
                    "platform": PLATFORM_PARAMETERS, "campaign": CAMPAIGN_PARAMETERS, "math": MATH_PARAMETERS,
                    "model": MODEL_PARAMETERS}
#: Parameters of the global fit (the engine's efficiency factor is 1 there by definition).
DEFAULT_PARAMETERS = {**GPU_PARAMETERS, **{k: v for k, v in ENGINE_PARAMETERS.items() if v.neutral is None}}
HARNESS_FIELDS = ("first_wave_weight",)
