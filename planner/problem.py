"""The problem YAML: workloads (traffic classes), search space, limits, prices, budget.

``load_problem(path)`` reads, validates (schema, then catalog references) and returns a
:class:`Problem`; every error is one line naming the YAML path of the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from planner.catalog import Catalog, load_catalog, suggest
from planner.problem_checks import check_context, check_engine, default_gpus
from planner.layout_rules import layout_warnings
from planner.margins import DEFAULT_CONFIDENCE, DEFAULT_MAX_LOAD_FRACTION
from planner.schema import PlanningInputError, Strict
from planner.problem_lengths import LengthSpec, length_distribution, parse_length_spec, read_trace
from planner.traffic import LengthDistribution
from planner.units import SECONDS_PER_DAY
from planner.yamlio import parse_file_cached

#: Default max-batch grid of the search (engines' typical max_num_seqs values).
DEFAULT_MAX_BATCH = (8, 16, 32, 48, 64, 96, 128, 192, 256, 384)
DEFAULT_TP = (1, 2, 4, 8)
DEFAULT_PP = (1, 2, 4)
#: Expert parallelism and attention DP searched by default: none (the dense layout).
DEFAULT_EP = (1,)
DEFAULT_ATTENTION_DP = (False,)
#: Default minimum published accuracy recovery of a weight format (``quality.min_recovery``).
DEFAULT_MIN_RECOVERY = 0.99


class Slo(Strict):
    ttft_p95_s: float = Field(gt=0)
    tpot_p95_s: float = Field(gt=0)


HOURS_PER_DAY = 24


class LoadProfile(Strict):
    """A daily load curve: 24 hourly multipliers of the rate, normalized to their peak.

    Hour t carries rate x hourly[t] / max(hourly): the workload's rate is its peak-hour
    rate. ``planner solve`` sizes an always-on base plus on-demand replicas per hour, and
    ``planner budget`` sizes its pay-per-use tiers per hour (docs/reports.md).
    """

    hourly: tuple[float, ...]
    base_offering: Literal["on-demand", "reserved-1y", "reserved-3y"] = "reserved-1y"
    scale_up_lead_time_s: float = Field(default=600.0, ge=0, le=3600)

    @field_validator("hourly")
    @classmethod
    def _hours(cls, v):
        if len(v) != HOURS_PER_DAY:
            raise ValueError(f"give {HOURS_PER_DAY} multipliers (hour 0..23), got {len(v)}")
        if min(v) < 0 or not max(v) > 0:
            raise ValueError("multipliers must be >= 0 with at least one > 0")
        return v


class Workload(Strict):
    """One traffic class: a model, Poisson arrivals, length distributions and p95 SLOs."""

    name: str = Field(min_length=1)
    model: str | None = None
    rate_per_s: float | None = Field(default=None, gt=0)
    requests_per_day: float | None = Field(default=None, gt=0)
    tokens_per_day: float | None = Field(default=None, gt=0)
    prompt_tokens: LengthSpec | None = None
    output_tokens: LengthSpec | None = None
    trace_csv: str | None = None
    prefix_cache_hit_fraction: float = Field(default=0.0, ge=0, lt=1)
    slo: Slo | None = None
    load_profile: LoadProfile | None = None

    @field_validator("prompt_tokens", "output_tokens", mode="before")
    @classmethod
    def _length(cls, v):
        return None if v is None else parse_length_spec(v)

    @model_validator(mode="after")
    def _one_rate(self):
        given = [k for k in ("rate_per_s", "requests_per_day", "tokens_per_day") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of rate_per_s, requests_per_day, tokens_per_day"
                             + (f" (got {', '.join(given)})" if given else ""))
        if self.trace_csv and (self.prompt_tokens is not None or self.output_tokens is not None):
            raise ValueError("give either trace_csv or prompt_tokens/output_tokens, not both")
        return self


class SearchSpace(Strict):
    gpus: tuple[str, ...] | None = None
    quantization: tuple[str, ...] | None = None
    kv_cache_dtype: tuple[str, ...] | None = None

    @field_validator("gpus", "quantization", "kv_cache_dtype")
    @classmethod
    def _non_empty(cls, v):
        if v is not None and not v:
            raise ValueError("must list at least one id (omit the key to search the whole catalog)")
        return v
    tp: tuple[int, ...] = DEFAULT_TP
    pp: tuple[int, ...] = DEFAULT_PP
    max_batch: tuple[int, ...] = DEFAULT_MAX_BATCH
    #: Disaggregated prefill/decode serving: false searches aggregated replicas, true adds
    #: prefill-role and decode-role replicas (planner.disagg_roles); None: [false].
    disaggregation: tuple[bool, ...] | None = None
    #: Expert-parallel sizes (issue 14; rules in planner/layout_rules.py).
    ep: tuple[int, ...] = DEFAULT_EP
    #: Attention data parallelism off / on (on: tp attention ranks of one GPU each).
    attention_dp: tuple[bool, ...] = DEFAULT_ATTENTION_DP

    @field_validator("tp", "pp", "max_batch", "ep")
    @classmethod
    def _positive_ints(cls, v):
        if not v or min(v) < 1:
            raise ValueError("must be a non-empty list of integers >= 1")
        return tuple(sorted(set(v)))

    @field_validator("disaggregation")
    @classmethod
    def _bools(cls, v):
        if v is not None and not v:
            raise ValueError("must list false, true or both (omit the key for [false])")
        return v if v is None else tuple(sorted(set(v)))
    @field_validator("attention_dp")
    @classmethod
    def _attention_dp_flags(cls, v):
        if not v:
            raise ValueError("must be a non-empty list of true/false")
        return tuple(sorted(set(v)))


def _reject_keys(mapping: dict, is_bad, message: str) -> dict:
    """``mapping`` itself, or a ValueError ``message`` naming (``{keys}``) the keys whose value ``is_bad``."""
    bad = [k for k, x in mapping.items() if is_bad(x)]
    if bad:
        raise ValueError(message.format(keys=", ".join(bad)))
    return mapping


#: Per-key rules of the problem's top-level mappings: field -> (a value is bad if, error message).
_PER_KEY_RULES = {
    "inventory": (lambda n: n < 0, "must be >= 0 GPUs ({keys})"),
    "prices": (lambda x: not x > 0, "prices must be > 0 USD per GPU-hour ({keys})"),
}


class CapacityRow(Strict):
    """A measured capacity (Mélange-style): requests/s one replica carries per workload."""

    name: str = Field(min_length=1)
    gpu: str
    gpus: int = Field(default=1, ge=1)
    usd_per_hour: float | None = Field(default=None, gt=0)
    capacity_per_s: dict[str, float]

    @field_validator("capacity_per_s")
    @classmethod
    def _non_negative(cls, v):
        return _reject_keys(v, lambda x: x < 0, "capacities must be >= 0 (negative for {keys})")


class Constraints(Strict):
    max_distinct_configs: int | None = Field(default=None, ge=1)
    redundancy: tuple[str, ...] = ()  # workloads whose deployments keep one spare replica (N+1)


class OptimizeOptions(Strict):
    slices_per_workload: int | None = Field(default=None, ge=1)
    top_k: int = Field(default=5, ge=1)
    time_limit_s: float = Field(default=30.0, gt=0)
    num_workers: int = Field(default=8, ge=1)
    pareto_points: int = Field(default=10, ge=2)
    #: Quantile of the serving model's error the capacities at SLO hold at (planner.margins).
    confidence: float = Field(default=DEFAULT_CONFIDENCE, ge=0.5, lt=1.0)
    #: Most load per replica relative to its central capacity at SLO (burst headroom).
    max_load_fraction: float = Field(default=DEFAULT_MAX_LOAD_FRACTION, gt=0, le=1.0)
    #: Least load of every deployment of a ranked alternative (rank >= 2); None:
    #: planner.optimize.alternatives.MIN_ALTERNATIVE_LOAD_FRACTION (0.05).
    min_alternative_load_fraction: float | None = Field(default=None, ge=0, lt=1)
    #: Most equal-cost distinct plans compared by latency for rank 1; None:
    #: planner.optimize.alternatives.EQUAL_COST_PLANS_LIMIT (8).
    equal_cost_plans: int | None = Field(default=None, ge=1)
    #: Which cost-vs-latency fronts a solve computes (docs/problem-format.md, ``fronts``);
    #: the per-GPU-type fronts (``used``, ``all``) on request.
    fronts: Literal["none", "mixed", "used", "all"] = "mixed"
    #: The fronts start at the knee where tightening the target by 1 % raises the cost by
    #: more than this many percent (planner.pareto.KNEE_ELASTICITY).
    front_knee_elasticity: float = Field(default=3.0, gt=0)


class QualityOptions(Strict):
    """Accuracy gate of quantized formats (catalogs/quality.yaml)."""

    #: Formats whose published recovery is below this fraction of the unquantized score are rejected.
    min_recovery: float = Field(default=DEFAULT_MIN_RECOVERY, gt=0, le=1)
    #: Use formats with no published figure for the model (reported as unverified).
    allow_unverified_formats: bool = False


class ServingOverrides(Strict):
    #: 'default' (catalogs/calibration.yaml), 'none' (the seeds' constants) or a YAML path.
    calibration: str = "default"
    #: Serving engine whose calibrated software overheads apply (vllm, sglang, trtllm).
    engine: str | None = None
    memory_efficiency: float | None = Field(default=None, gt=0, le=1)
    compute_efficiency: float | None = Field(default=None, gt=0, le=1)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    workspace_bytes: float | None = Field(default=None, ge=0)
    step_overhead_s: float | None = Field(default=None, ge=0)
    #: Expert-parallel terms (issue 14; searched with search.ep, docs/serving-model.md 13).
    expert_load_imbalance: float | None = Field(default=None, ge=1)
    dispatch_bytes_per_element: float | None = Field(default=None, gt=0)


class ProblemSpec(Strict):
    """The problem file as written (before catalog resolution)."""

    name: str = Field(min_length=1)
    description: str | None = None
    workloads: tuple[Workload, ...]
    # The sections' defaults are built without a validation (their fields' defaults; the
    # validators would build at import for nothing, ~10 ms of each run's start;
    # tests/test_problem_build.py checks them against validated instances).
    search: SearchSpace = Field(default_factory=SearchSpace.model_construct)
    capacity_table: tuple[CapacityRow, ...] | None = None
    inventory: dict[str, int] = Field(default_factory=dict)
    prices: dict[str, float] = Field(default_factory=dict)
    price_offering: Literal["on-demand", "reserved-1y", "reserved-3y", "spot"] = "on-demand"
    budget_usd_per_hour: float | None = Field(default=None, gt=0)
    constraints: Constraints = Field(default_factory=Constraints.model_construct)
    optimize: OptimizeOptions = Field(default_factory=OptimizeOptions.model_construct)
    serving: ServingOverrides = Field(default_factory=ServingOverrides.model_construct)
    quality: QualityOptions = Field(default_factory=QualityOptions.model_construct)
    procurement: dict | None = None
    load_profile: LoadProfile | None = None

    @field_validator("capacity_table")
    @classmethod
    def _unique_rows(cls, v):
        if v is not None:
            names = [row.name for row in v]
            dups = sorted({n for n in names if names.count(n) > 1})
            if dups:
                raise ValueError(f"duplicate row names: {', '.join(dups)}")
            if not v:
                raise ValueError("must have at least one row")
        return v

    @field_validator("workloads")
    @classmethod
    def _some_workload(cls, v):
        if not v:
            raise ValueError("give at least one workload")
        return v

    @field_validator(*_PER_KEY_RULES)
    @classmethod
    def _per_key_rules(cls, v, info):
        return _reject_keys(v, *_PER_KEY_RULES[info.field_name])


class ResolvedWorkload(Strict):
    """A workload with its model resolved, rate in requests/s, and length distributions."""

    model_config = Strict.model_config | {"arbitrary_types_allowed": True}

    name: str
    model: str | None
    rate_per_s: float
    prompt: LengthDistribution | None
    output: LengthDistribution | None
    prefix_cache_hit_fraction: float
    slo: Slo | None


class Problem(Strict):
    """A validated problem: the spec plus resolved workloads, GPUs, formats and prices."""

    model_config = Strict.model_config | {"arbitrary_types_allowed": True}

    spec: ProblemSpec
    path: str
    workloads: tuple[ResolvedWorkload, ...]
    gpus: tuple[str, ...]
    quantization: tuple[str, ...]
    kv_cache_dtypes: tuple[str, ...]
    prices_usd_per_gpu_hour: dict[str, float]
    catalog: Catalog
    imported_models: dict
    calibration: object = None
    #: Valid-but-risky findings (one line each, with the YAML path), printed on stderr and in the JSON.
    warnings: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def measured(self) -> bool:
        return self.spec.capacity_table is not None


def resolve_problem(spec: ProblemSpec, path: str, catalog: Catalog) -> Problem:
    """Check ``spec`` against the catalog and resolve ids; all problems reported at once."""
    problems: list[str] = []
    warnings: list[str] = []
    base = Path(path).parent
    imported: dict = {}

    def check(fn, *args):
        try:
            return fn(*args)
        except PlanningInputError as exc:
            problems.extend(exc.problems)
            return None

    names = [w.name for w in spec.workloads]
    for i, n in enumerate(names):
        if names.index(n) != i:
            problems.append(f"workloads[{i}].name: duplicate workload name '{n}'")

    resolved = []
    for i, w in enumerate(spec.workloads):
        where = f"workloads[{i}]"
        model_id = None
        if w.model is not None:
            if w.model.endswith(".json"):
                m = check(catalog.model, str((base / w.model) if not Path(w.model).is_absolute() else w.model), f"{where}.model")
                if m is not None:
                    taken = imported.get(m.id)
                    if m.id in catalog.models.entries or m.id in catalog.models.aliases or (
                            taken is not None and taken.hf_config != m.hf_config):
                        from planner.hf_import import model_from_hf_config

                        m = model_from_hf_config(m.hf_config, model_id=f"{m.id}-{w.name}")
                    imported[m.id] = m
            else:
                m = check(catalog.model, w.model, f"{where}.model")
            model_id = m.id if m is not None else None
        elif spec.capacity_table is None:
            problems.append(f"{where}.model: required key is missing")
        prompt, output = length_distribution(w.prompt_tokens), length_distribution(w.output_tokens)
        if w.trace_csv:
            trace = check(read_trace, base / w.trace_csv, f"{where}.trace_csv")
            if trace:
                prompt, output = trace
        if spec.capacity_table is None:
            for key, dist in (("prompt_tokens", prompt), ("output_tokens", output)):
                if dist is None:
                    problems.append(f"{where}.{key}: required key is missing (or give trace_csv)")
            if model_id is not None and prompt is not None and output is not None:
                spec_m = imported.get(model_id) or catalog.model(model_id)
                check_context(where, model_id, spec_m.max_context_tokens, prompt, output, problems, warnings)
            if w.slo is None:
                problems.append(f"{where}.slo: required key is missing")
        rate = w.rate_per_s
        if w.requests_per_day is not None:
            rate = w.requests_per_day / SECONDS_PER_DAY
        if w.tokens_per_day is not None:
            if prompt is None or output is None:
                problems.append(f"{where}.tokens_per_day: needs prompt and output lengths to convert")
                rate = 1.0
            else:
                rate = w.tokens_per_day / (prompt.mean + output.mean) / SECONDS_PER_DAY
        resolved.append(ResolvedWorkload.model_construct(  # validated values, see the return below
            name=w.name, model=model_id, rate_per_s=rate, prompt=prompt, output=output,
            prefix_cache_hit_fraction=w.prefix_cache_hit_fraction, slo=w.slo))

    s = spec.search
    gpus = tuple(dict.fromkeys(g.id for i, name in enumerate(s.gpus) if (g := check(catalog.gpu, name, f"search.gpus[{i}]")))) \
        if s.gpus is not None else default_gpus(spec.inventory, catalog)
    quants = tuple(dict.fromkeys(q.id for i, name in enumerate(s.quantization)
                                 if (q := check(catalog.weight_format, name, f"search.quantization[{i}]")))) \
        if s.quantization is not None else tuple(catalog.weight_formats.entries)
    kvs = tuple(dict.fromkeys(k.id for i, name in enumerate(s.kv_cache_dtype)
                              if (k := check(catalog.kv_dtype, name, f"search.kv_cache_dtype[{i}]")))) \
        if s.kv_cache_dtype is not None else tuple(catalog.kv_dtypes.entries)

    for key, table in (("inventory", spec.inventory), ("prices", spec.prices)):
        for gpu in table:
            check(catalog.gpu, gpu, f"{key}.{gpu}")
    problems += check_engine(spec.serving.engine, catalog)
    if spec.capacity_table is None:   # issue 14: searched layouts no workload model can run
        warnings += layout_warnings(s, {r.model: imported.get(r.model) or catalog.model(r.model)
                                        for r in resolved if r.model is not None})
    for i, w in enumerate(spec.constraints.redundancy):
        if w not in names:
            problems.append(f"constraints.redundancy[{i}]: unknown workload '{w}'{suggest(w, names)}")

    prices = {}
    gpu_ids = set(gpus)
    if spec.capacity_table is not None:
        for i, row in enumerate(spec.capacity_table):
            g = check(catalog.gpu, row.gpu, f"capacity_table[{i}].gpu")
            if g is not None:
                gpu_ids.add(g.id)
            for wname in row.capacity_per_s:
                if wname not in names:
                    problems.append(f"capacity_table[{i}].capacity_per_s.{wname}: unknown workload"
                                    f"{suggest(wname, names)}")
    for gpu in sorted(gpu_ids):
        override = {catalog.gpu(k).id: v for k, v in spec.prices.items() if check(catalog.gpu, k) is not None}
        price = override.get(gpu)
        if price is None:
            rows = [r for r in catalog.rental_prices(gpu) if r.offering == spec.price_offering]
            default = [r for r in rows if r.default]
            price = (default or rows or [None])[0]
            price = price.usd_per_gpu_hour if price is not None else None
        if price is not None:
            prices[gpu] = price
    calibration = None
    if spec.capacity_table is None:
        from planner import parameters

        cal_spec = spec.serving.calibration
        if cal_spec not in ("default", "none") and not Path(cal_spec).is_absolute():
            cal_spec = str(base / cal_spec)
        calibration = check(parameters.load, cal_spec)
    if problems:
        raise PlanningInputError(problems)
    # Problem and ResolvedWorkload hold values validated already (the spec, the catalog's
    # entries, ids the catalog resolved, floats computed from validated floats), so they are
    # constructed without a validation: it would change nothing and costs its validators'
    # construction, some 20 ms of each run's start (tests/test_problem_build.py checks that
    # a validation of the same fields gives equal values of the same types).
    return Problem.model_construct(
        spec=spec, path=str(path), workloads=tuple(resolved), gpus=gpus, quantization=quants, kv_cache_dtypes=kvs,
        prices_usd_per_gpu_hour=prices, catalog=catalog, imported_models=imported, calibration=calibration,
        warnings=tuple(warnings))


def load_problem(path: str | Path, catalog: Catalog | None = None) -> Problem:
    """Read, validate and resolve a problem YAML.

    Raises
    ------
    PlanningInputError
        One line per problem, each naming the file and the YAML path of the field.
    """
    from planner import limits

    catalog = catalog or load_catalog()
    spec = parse_file_cached(ProblemSpec, path, "problem-spec", str(path))
    try:
        beyond = limits.check_spec(spec)
        if beyond:
            raise PlanningInputError(beyond)
        problem = resolve_problem(spec, str(path), catalog)
        beyond = limits.check_problem(problem)
        if beyond:
            raise PlanningInputError(beyond)
        return problem
    except PlanningInputError as exc:
        raise PlanningInputError([f"{path}: {p}" for p in exc.problems]) from None
