"""The analytic serving model of the seeds: pure, vectorized numpy over configurations."""

from planner.serving.params import SEED_PARAMS, ServingParams

__all__ = ["SEED_PARAMS", "ServingParams"]
