"""The problem's ``procurement:`` section: options, horizon, churn rule, scenario widths."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from planner.schema import PlanningInputError, Strict

MONTHS_PER_YEAR = 12
TERM_MONTHS = {"on-demand": None, "spot": None, "reserved-1y": 12, "reserved-3y": 36}
Offering = Literal["on-demand", "spot", "reserved-1y", "reserved-3y"]

#: Default of ``procurement.churn.min_saving_usd``: a GPU type enters the fleet after the
#: first period only when that saves more than this over the horizon. It stands for the
#: one-off work of a new GPU type (benchmarking, images, drivers, runbooks: about two
#: engineer-weeks at ~5,000 USD each); set 0 to let the cheapest fleet switch freely.
DEFAULT_SWITCH_MIN_SAVING_USD = 10_000.0

#: Default width of the growth sampling: sd of ln(traffic at the horizon / stated traffic at
#: the horizon). 0.3 puts the 10th-90th percentile band at x0.68 .. x1.47 of the stated growth.
DEFAULT_GROWTH_LOG_SD = 0.3
#: Default sd of ln(price factor), one factor for rental and one for purchase prices per
#: scenario; 0.15 is about the +-20% sensitivity rows at one standard deviation.
DEFAULT_PRICE_LOG_SD = 0.15
#: Default sd of ln(true capacity / predicted capacity) per GPU type: the serving model's
#: prediction error. Source: docs/accuracy.md, out-of-fold (leave-one-source-out) median
#: absolute percentage errors of the calibrated model are 10-20% on throughput and TPOT; a
#: median |error| of 13% is a log-sd of 0.13 / 0.674 = 0.2 for a normal error. Replace it with
#: the calibration's prediction intervals once they exist.
DEFAULT_PREDICTION_LOG_SD = 0.2


def _positive_values(v: dict) -> dict:
    bad = [k for k, x in v.items() if not x > 0]
    if bad:
        raise ValueError(f"must be > 0 ({', '.join(map(str, bad))})")
    return v


class RentOption(Strict):
    """Renting at one offering; prices per GPU type default to the price catalog."""

    offering: Offering
    name: str | None = None
    usd_per_gpu_hour: dict[str, float] = Field(default_factory=dict)

    _positive = field_validator("usd_per_gpu_hour")(_positive_values)

    @property
    def label(self) -> str:
        return self.name or f"rent {self.offering}"

    @property
    def term_months(self) -> int | None:
        return TERM_MONTHS[self.offering]


class BuyOption(Strict):
    """Buying GPUs (or whole servers) and hosting them."""

    name: str = "buy"
    purchase_unit: Literal["gpu", "server"] = "gpu"
    usd_per_gpu: dict[str, float] = Field(default_factory=dict)
    usd_per_server: dict[str, float] = Field(default_factory=dict)
    gpus_per_server: dict[str, int] = Field(default_factory=dict)
    power_watts_per_gpu: dict[str, float] = Field(default_factory=dict)
    power_usage_effectiveness: float = Field(default=1.3, ge=1.0)
    usd_per_kwh: float = Field(default=0.10, ge=0.0)
    usd_per_rack_month: float = Field(default=6000.0, ge=0.0)
    gpus_per_rack: int = Field(default=32, ge=1)
    amortization_years: float = Field(default=3.0, gt=0.0)
    lead_time_months: int = Field(default=0, ge=0, le=24)

    _positive = field_validator("usd_per_gpu", "usd_per_server", "gpus_per_server",
                                "power_watts_per_gpu")(_positive_values)


class Sensitivity(Strict):
    price_change_fraction: float = Field(default=0.2, ge=0.0, lt=1.0)
    growth_change_fraction: float = Field(default=0.5, ge=0.0)


class Churn(Strict):
    """The churn rule: a GPU type entering the fleet after period 1 must save this much."""

    min_saving_usd: float = Field(default=DEFAULT_SWITCH_MIN_SAVING_USD, ge=0.0)


class ScenarioWidths(Strict):
    """Widths of the scenario sampling of ``planner budget --scenarios N`` (log-normal sds)."""

    growth_log_sd: float = Field(default=DEFAULT_GROWTH_LOG_SD, ge=0.0, le=3.0)
    price_log_sd: float = Field(default=DEFAULT_PRICE_LOG_SD, ge=0.0, le=3.0)
    prediction_log_sd: float = Field(default=DEFAULT_PREDICTION_LOG_SD, ge=0.0, le=3.0)


def _default_rent() -> tuple[RentOption, ...]:
    return tuple(RentOption(offering=o) for o in ("on-demand", "reserved-1y", "reserved-3y"))


#: Label of the option that may combine every tier (own, reserve, rent).
MIX_OPTION = "mix"


class ProcurementSpec(Strict):
    """The problem's ``procurement:`` section (units in the key names)."""

    horizon_months: int = Field(default=24, gt=0, le=120)
    growth_per_month_fraction: float = Field(default=0.0, gt=-1.0, le=1.0)
    period_months: int = Field(default=3, ge=1, le=12)
    discount_rate_per_year_fraction: float = Field(default=0.0, ge=0.0, lt=1.0)
    rent: tuple[RentOption, ...] = Field(default_factory=_default_rent)
    buy: BuyOption | None = Field(default_factory=BuyOption)
    mix: bool = True
    churn: Churn = Churn()
    sensitivity: Sensitivity = Sensitivity()
    scenarios: ScenarioWidths = ScenarioWidths()

    @model_validator(mode="after")
    def _unique_labels(self):
        labels = self.labels
        if not labels:
            raise ValueError("give at least one option (rent or buy)")
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ValueError(f"option names must be unique (give rent[].name): {', '.join(dup)}")
        return self

    @property
    def labels(self) -> list[str]:
        """Option labels: every rent option, buy, then the mix (when on and >= 2 tiers)."""
        labels = [r.label for r in self.rent] + ([self.buy.name] if self.buy else [])
        if self.mix and len(labels) >= 2:
            labels.append(MIX_OPTION)
        return labels


def parse_procurement(problem) -> ProcurementSpec:
    """Validate the problem's ``procurement:`` section, GPU ids included.

    Raises
    ------
    PlanningInputError
        One line per problem, each naming the YAML path (``procurement.horizon_months: ...``).
    """
    from planner.yamlio import validation_problems

    raw = problem.spec.procurement
    if raw is None:
        raise PlanningInputError(f"{problem.path}: procurement: required key is missing "
                                 "(`planner budget` reads it; see docs/reports.md)")
    try:
        spec = ProcurementSpec.model_validate(raw)
    except ValidationError as exc:
        raise PlanningInputError([f"{problem.path}: {p}" for p in
                                  validation_problems(exc, root="procurement")]) from None
    problems = []
    tables = [(f"procurement.rent[{i}].usd_per_gpu_hour", r.usd_per_gpu_hour) for i, r in enumerate(spec.rent)]
    if spec.buy:
        tables += [(f"procurement.buy.{k}", getattr(spec.buy, k)) for k in
                   ("usd_per_gpu", "usd_per_server", "gpus_per_server", "power_watts_per_gpu")]
    for where, table in tables:
        for gpu in table:
            try:
                problem.catalog.gpu(gpu, f"{where}.{gpu}")
            except PlanningInputError as exc:
                problems += [f"{problem.path}: {p}" for p in exc.problems]
    if problems:
        raise PlanningInputError(problems)
    return spec


def periods(spec: ProcurementSpec) -> list[tuple[int, int]]:
    """(start_month, end_month) of each period; the last one may be shorter."""
    return [(m, min(m + spec.period_months, spec.horizon_months))
            for m in range(0, spec.horizon_months, spec.period_months)]


def traffic_scale(growth_per_month: float, start_month: int, end_month: int) -> float:
    """Traffic factor a period is sized for: its peak, (1+g)^end (or ^start when shrinking)."""
    return max((1 + growth_per_month) ** start_month, (1 + growth_per_month) ** end_month)
