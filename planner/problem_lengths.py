"""Token lengths of a workload in the problem YAML: a count, ``{mean, p95}`` (log-normal),
a histogram, or a trace CSV; parsed into :mod:`planner.traffic` distributions.

The forms are documented in ``docs/problem-format.md`` (``prompt_tokens``, ``output_tokens``,
``trace_csv``); :mod:`planner.problem` uses them for its workloads.
"""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

from pydantic import Field, model_validator

from planner.schema import PlanningInputError, Strict
from planner.traffic import Empirical, Fixed, LengthDistribution, LogNormal
from planner.yamlio import allowed_keys, unknown_key_message


class MeanP95(Strict):
    mean: float = Field(gt=0)
    p95: float = Field(gt=0)

    @model_validator(mode="after")
    def _fits_lognormal(self):
        why = LogNormal.check(self.mean, self.p95)
        if why:
            raise ValueError(why)
        return self


class Histogram(Strict):
    tokens: tuple[int, ...] = Field(min_length=1)
    weights: tuple[float, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _same_length(self):
        if len(self.tokens) != len(self.weights):
            raise ValueError("tokens and weights must have the same length")
        if min(self.tokens) < 1:
            raise ValueError("tokens must be >= 1")
        if min(self.weights) < 0 or sum(self.weights) <= 0:
            raise ValueError("weights must be >= 0 with a positive sum")
        return self


class HistogramSpec(Strict):
    histogram: Histogram


LengthSpec = int | MeanP95 | HistogramSpec


def parse_length_spec(value):
    """Pick the length form by shape, so errors speak of that form only."""
    from pydantic import ValidationError

    if isinstance(value, bool) or value is None:
        raise ValueError("expected a token count, {mean, p95} or {histogram: {tokens, weights}}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if float(value) != int(value) or value < 1:
            raise ValueError("must be a whole number of tokens >= 1")
        return int(value)
    if isinstance(value, dict):
        cls = HistogramSpec if "histogram" in value else MeanP95
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            err = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")  # a typo explains the rest
            where = ".".join(str(p) for p in err["loc"])
            msg = unknown_key_message(err["loc"][-1], allowed_keys(cls, err["loc"])) if err["type"] == "extra_forbidden" \
                else err["msg"].removeprefix("Value error, ")
            raise ValueError(f"{where}: {msg}" if where else msg) from None
    if isinstance(value, (MeanP95, HistogramSpec)):
        return value
    raise ValueError("expected a token count, {mean, p95} or {histogram: {tokens, weights}}")


def length_distribution(spec: LengthSpec | None) -> LengthDistribution | None:
    """The distribution of a length as written (None: not given)."""
    if spec is None:
        return None
    if isinstance(spec, int):
        return Fixed(spec)
    if isinstance(spec, MeanP95):
        return LogNormal(spec.mean, spec.p95)
    return Empirical(spec.histogram.tokens, spec.histogram.weights)


def read_trace(path: Path, where: str) -> tuple[Empirical, Empirical]:
    """Prompt and output lengths of a trace CSV (columns prompt_tokens, output_tokens), within
    :mod:`planner.limits`; ``PlanningInputError`` naming ``where`` otherwise."""
    from planner import limits

    try:
        if path.stat().st_size > limits.MAX_TRACE_FILE_BYTES:
            raise PlanningInputError(f"{where}: {path} is larger than {limits.MAX_TRACE_FILE_BYTES:,} bytes")
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(itertools.islice(csv.DictReader(fh), limits.MAX_TRACE_ROWS + 1))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise PlanningInputError(f"{where}: cannot read {path} as a UTF-8 CSV: {exc}"[:300]) from None
    if len(rows) > limits.MAX_TRACE_ROWS:
        raise PlanningInputError(f"{where}: {path} has more than {limits.MAX_TRACE_ROWS:,} rows")
    try:
        prompts = tuple(int(r["prompt_tokens"]) for r in rows)
        outputs = tuple(int(r["output_tokens"]) for r in rows)
    except (KeyError, ValueError, TypeError):
        raise PlanningInputError(f"{where}: {path} needs integer columns prompt_tokens,output_tokens") from None
    if not prompts or min(prompts) < 1 or min(outputs) < 1:
        raise PlanningInputError(f"{where}: {path} needs at least one row with tokens >= 1")
    if max(prompts + outputs) > limits.MAX_TOKENS:
        raise PlanningInputError(f"{where}: {path} has token counts above {limits.MAX_TOKENS:,}")
    ones = (1.0,) * len(prompts)
    return Empirical(prompts, ones, "trace"), Empirical(outputs, ones, "trace")
