"""Discrete-event simulation of one serving replica under static and continuous batching.

The simulator is the referee of the analytic tail-latency model (docs/serving-model.md
sections 9 and 11): seeded Poisson arrivals with sampled prompt and output lengths run through
an iteration-level scheduler whose step times come from the serving model's step
(:class:`planner.serving.roofline.StepModel`, as :func:`~planner.serving.roofline.mixed_step_time_s`).
:func:`scheduler_timeline` is the seed's toy version (unit step cost, no prefill).

Modules: :mod:`~planner.simulate.replica` (settings, checks, runs), :mod:`~planner.simulate.engine`
(replica state, iterations, the continuous and static schedulers),
:mod:`~planner.simulate.stats` (the result and its statistics), :mod:`~planner.simulate.timeline`
(the seed's timeline). Pure Python and numpy; deterministic for a given seed.
"""

from planner.simulate.engine import LENGTH_BUCKET_TOKENS
from planner.simulate.replica import (
    DEFAULT_PREFILL_CHUNK_TOKENS,
    DEFAULT_REQUESTS,
    DEFAULT_WARMUP_FRACTION,
    SCHEDULERS,
    check_simulation_inputs,
    draw_requests,
    run_requests,
    simulate_replica,
)
from planner.simulate.stats import SimulationResult, request_overhead_s
from planner.simulate.timeline import scheduler_timeline

__all__ = [
    "DEFAULT_PREFILL_CHUNK_TOKENS", "DEFAULT_REQUESTS", "DEFAULT_WARMUP_FRACTION", "LENGTH_BUCKET_TOKENS",
    "SCHEDULERS", "SimulationResult", "check_simulation_inputs", "draw_requests", "request_overhead_s",
    "run_requests",
    "scheduler_timeline", "simulate_replica",
]
