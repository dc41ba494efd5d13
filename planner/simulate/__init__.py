"""Discrete-event simulation of one serving replica under static and continuous batching."""

from planner.simulate.engine import (  # noqa: F401 - the package's public names
    DEFAULT_PREFILL_CHUNK_TOKENS,
    DEFAULT_REQUESTS,
    DEFAULT_WARMUP_FRACTION,
    LENGTH_BUCKET_TOKENS,
    SCHEDULERS,
    SimulationResult,
    check_simulation_inputs,
    request_overhead_s,
    run_requests,
    scheduler_timeline,
    simulate_replica,
)
