"""Frozen pydantic models of every catalog input; the one error type for bad input
(:class:`~planner.errors.PlanningInputError`, re-exported)."""

from __future__ import annotations

import datetime as _dt
import types
import typing
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from planner.errors import PlanningInputError  # noqa: F401 - re-exported: the input error of every module
from planner.units import BITS_PER_BYTE, GIGA, MICROSECONDS, TERA


def _scalar_kinds(annotation) -> set | None:
    """The scalar kinds (``bool``, ``number``, ``str``) a field annotation accepts at its top
    level, or None when it accepts anything (a model, a date, ``Any``)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds: set = set()
        for arg in typing.get_args(annotation):
            sub = _scalar_kinds(arg)
            if sub is None:
                return None
            kinds |= sub
        return kinds
    if origin is typing.Literal:
        return {"bool" if isinstance(a, bool) else "number" if isinstance(a, (int, float)) else "str"
                for a in typing.get_args(annotation)}
    if annotation is type(None):
        return set()
    if annotation is bool:
        return {"bool"}
    if annotation in (int, float):
        return {"number"}
    if annotation is str:
        return {"str"}
    return None


def _strict_scalar_problem(value, annotation) -> str | None:
    """Why a scalar (or the items of a tuple, the values of a mapping) has the wrong kind."""
    origin = typing.get_origin(annotation)
    if origin is tuple and isinstance(value, (list, tuple)):
        item = typing.get_args(annotation)[0] if typing.get_args(annotation) else None
        return next((p for v in value if (p := _strict_scalar_problem(v, item))), None)
    if origin is dict and isinstance(value, dict):
        args = typing.get_args(annotation)
        return next((p for v in value.values() if (p := _strict_scalar_problem(v, args[1]))), None) \
            if len(args) == 2 else None
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if typing.get_origin(arg) in (tuple, dict) and isinstance(value, (list, tuple, dict)):
                return _strict_scalar_problem(value, arg)
    kinds = _scalar_kinds(annotation) if annotation is not None else None
    if kinds is None:
        return None
    kind = "bool" if isinstance(value, bool) else "number" if isinstance(value, (int, float)) else \
        "str" if isinstance(value, str) else None
    if kind is None or kind in kinds or not kinds:
        return None
    want = " or ".join(sorted({"number": "a number", "bool": "true/false", "str": "a string"}[k] for k in kinds))
    return f"expected {want}, got {value!r} (no implicit conversion)"


class Strict(BaseModel):
    """Base of every input model: immutable, unknown keys rejected, no silent type coercion
    (``true``, ``"40"`` or ``"0x28"`` where a number is expected are errors, not 1 or 40).

    ``defer_build``: a model's validator is built when it first validates, not at import, so
    that a run whose catalogs come from the parsed-catalog cache (:mod:`planner.catalog_cache`)
    never builds the catalog models' validators (about half the import time of this module)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_coercion(cls, value, info):
        field = cls.model_fields.get(info.field_name)
        why = _strict_scalar_problem(value, field.annotation) if field is not None else None
        if why:
            raise ValueError(why)
        return value


CatalogId = str

LinkKind = Literal["nvlink", "infinity-fabric", "pcie", "ethernet", "none"]
#: Scale-out network between scale-up domains (catalogs/gpus.yaml, issue 14).
ScaleOutLink = Literal["infiniband", "roce", "efa", "ethernet"]
MathUnit = Literal["bf16", "fp8", "int8", "fp4"]


class GpuSpec(Strict):
    """One accelerator: memory, bandwidth, dense peak FLOP/s per precision, scale-up link."""

    id: CatalogId
    name: str
    vendor: Literal["nvidia", "amd", "intel", "apple", "google"]
    #: Market segment; only ``datacenter`` GPUs are searched unless ``search.gpus`` names others.
    segment: Literal["datacenter", "workstation", "consumer", "apple"] = "datacenter"
    aliases: tuple[str, ...] = ()
    memory_gb: float = Field(gt=0)
    memory_bandwidth_tb_per_s: float = Field(gt=0)
    #: Memory type (hbm3, hbm3e, gddr6, ...): the calibration's same-technology prior.
    memory_technology: str | None = None
    #: Compute architecture (CUDA compute capability ``sm_90``, AMD target ``gfx942``): the
    #: calibration's same-architecture prior (before the memory technology).
    architecture: str | None = None
    bf16_tflops: float | None = Field(default=None, gt=0)
    fp8_tflops: float | None = Field(default=None, gt=0)
    fp4_tflops: float | None = Field(default=None, gt=0)
    int8_tops: float | None = Field(default=None, gt=0)
    scale_up_link: LinkKind
    scale_up_gb_per_s_per_direction: float | None = Field(default=None, gt=0)
    max_gpus_per_scale_up_domain: int = Field(ge=1)
    #: Upper end of the published small-message all-reduce latency of the scale-up link
    #: (NCCL/RCCL and the engines' custom all-reduce kernels, 8 GPUs), in microseconds: the
    #: calibration fits each GPU's all-reduce latency at most this (None: no NVLink-class link).
    scale_up_allreduce_latency_us: float | None = Field(default=None, gt=0)
    #: Scale-out network (InfiniBand/RoCE/EFA) of one GPU's NIC(s) to other scale-up domains;
    #: optional (None: not found), as its per-direction rate in decimal GB/s and the GPUs of
    #: one node (server or compute tray).
    scale_out_link: ScaleOutLink | None = None
    scale_out_gb_per_s_per_direction: float | None = Field(default=None, gt=0)
    gpus_per_node: int | None = Field(default=None, ge=1)
    tdp_watts: float | None = Field(default=None, gt=0)
    estimate: bool = False
    source: str
    notes: str | None = None

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * GIGA

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_tb_per_s * TERA

    @property
    def scale_up_allreduce_latency_s(self) -> float | None:
        """:attr:`scale_up_allreduce_latency_us` in seconds (None where not given)."""
        us = self.scale_up_allreduce_latency_us
        return None if us is None else us * MICROSECONDS

    @property
    def link_bytes_per_s(self) -> float:
        """Scale-up bandwidth per direction; 0 when the GPU has no link to a peer."""
        return (self.scale_up_gb_per_s_per_direction or 0.0) * GIGA

    @property
    def scale_out_bytes_per_s(self) -> float:
        """Scale-out bandwidth per GPU and direction; 0 when the catalog has none."""
        return (self.scale_out_gb_per_s_per_direction or 0.0) * GIGA

    def peak_flops_per_s(self, math: MathUnit) -> float | None:
        """Dense peak for a math unit, or None when the GPU lacks it natively."""
        tera = {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops,
                "fp4": self.fp4_tflops, "int8": self.int8_tops}[math]
        return None if tera is None else tera * TERA

    @property
    def ridge_point_flop_per_byte(self) -> float | None:
        """BF16 ridge point pi / beta [FLOP/byte]; None without a BF16 figure."""
        if self.bf16_tflops is None:
            return None
        return self.bf16_tflops / self.memory_bandwidth_tb_per_s


class ModelSpec(Strict):
    """One transformer: sizes, attention kind (GQA/MLA, sliding windows) and MoE shape."""

    id: CatalogId
    name: str
    aliases: tuple[str, ...] = ()
    hf_config: str | None = None
    params_total: float = Field(gt=0)
    params_active: float = Field(gt=0)
    routed_expert_params: float = Field(default=0.0, ge=0)
    num_experts: int = Field(default=0, ge=0)
    experts_per_token: int = Field(default=0, ge=0)
    num_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    intermediate_size: int | None = Field(default=None, ge=1)
    moe_intermediate_size: int | None = Field(default=None, ge=1)
    vocab_size: int | None = Field(default=None, ge=1)
    attention: Literal["gqa", "mla"] = "gqa"
    kv_lora_rank: int | None = Field(default=None, ge=1)
    qk_rope_head_dim: int | None = Field(default=None, ge=0)
    sliding_window_tokens: int | None = Field(default=None, ge=1)
    sliding_window_layers: int = Field(default=0, ge=0)
    max_context_tokens: int = Field(ge=1)
    source: str
    notes: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "ModelSpec":
        if self.params_active > self.params_total * (1 + 1e-9):
            raise ValueError("params_active must be <= params_total")
        if self.routed_expert_params > self.params_total:
            raise ValueError("routed_expert_params must be <= params_total")
        if (self.num_experts > 0) != (self.experts_per_token > 0):
            raise ValueError("num_experts and experts_per_token must both be set for MoE")
        if self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token must be <= num_experts")
        if self.attention == "mla" and (self.kv_lora_rank is None or self.qk_rope_head_dim is None):
            raise ValueError("attention 'mla' needs kv_lora_rank and qk_rope_head_dim")
        if self.sliding_window_layers > self.num_layers:
            raise ValueError("sliding_window_layers must be <= num_layers")
        if self.sliding_window_layers and self.sliding_window_tokens is None:
            raise ValueError("sliding_window_layers needs sliding_window_tokens")
        return self

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def full_attention_layers(self) -> int:
        return self.num_layers - self.sliding_window_layers


class WeightFormat(Strict):
    """A weight quantization format: storage bits and the math unit it runs on."""

    id: CatalogId
    name: str
    aliases: tuple[str, ...] = ()
    bits_per_weight: float = Field(gt=0, le=32)
    math: MathUnit
    fallback: Literal["weight-only", "none"] = "weight-only"
    unsupported_gpus: tuple[str, ...] = ()
    engines: dict[str, str | None] = Field(default_factory=dict)
    source: str
    notes: str | None = None

    @property
    def bytes_per_weight(self) -> float:
        return self.bits_per_weight / BITS_PER_BYTE


class KvCacheDtype(Strict):
    """A KV-cache element type."""

    id: CatalogId
    aliases: tuple[str, ...] = ()
    bits_per_element: float = Field(gt=0, le=32)
    source: str
    notes: str | None = None

    @property
    def bytes_per_element(self) -> float:
        return self.bits_per_element / BITS_PER_BYTE


Offering = Literal["on-demand", "reserved-1y", "reserved-3y", "spot"]


class RentalPrice(Strict):
    """USD per GPU-hour for one GPU, offering and provider, dated."""

    gpu: CatalogId
    offering: Offering
    usd_per_gpu_hour: float = Field(gt=0)
    provider: str
    as_of: _dt.date
    default: bool = False
    source: str
    notes: str | None = None


class PurchasePrice(Strict):
    """Purchase price of a GPU (and of a server, when known), dated."""

    gpu: CatalogId
    usd_per_gpu: float = Field(gt=0)
    usd_per_server: float | None = Field(default=None, gt=0)
    gpus_per_server: int | None = Field(default=None, ge=1)
    as_of: _dt.date
    source: str
    notes: str | None = None


class GpuCatalog(Strict):
    catalog_version: str
    gpus: tuple[GpuSpec, ...]


class ModelCatalog(Strict):
    catalog_version: str
    models: tuple[ModelSpec, ...]


class QuantizationCatalog(Strict):
    catalog_version: str
    weight_formats: tuple[WeightFormat, ...]
    kv_cache_dtypes: tuple[KvCacheDtype, ...]


class PriceCatalog(Strict):
    catalog_version: str
    rental: tuple[RentalPrice, ...] = ()
    purchase: tuple[PurchasePrice, ...] = ()

    @field_validator("rental")
    @classmethod
    def _one_default_per_gpu(cls, rental):
        seen: set[str] = set()
        for row in rental:
            if row.default:
                if row.gpu in seen:
                    raise ValueError(f"more than one default price for {row.gpu}")
                seen.add(row.gpu)
        return rental
