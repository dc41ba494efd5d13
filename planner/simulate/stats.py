"""Statistics of a simulated replica: the result type and the summary of a finished run."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

import numpy as np

from planner.serving.params import ServingParams

if TYPE_CHECKING:
    from planner.simulate.engine import Replica


def per_request():
    """A per-request array field of a result: left out of its repr, equality and ``to_dict``."""
    return field(repr=False, compare=False, metadata={"per_request": True})


@dataclass(frozen=True)
class RunRecord:
    """What every simulated run reports: the per-request record (arrays in arrival order,
    times in seconds from the first arrival; ``measured`` marks the requests the statistics
    count, after the warm-up) and the latency statistics of the measured requests.
    The base of :class:`SimulationResult` and of the P/D simulator's result."""

    arrival_s: np.ndarray = per_request()
    first_token_s: np.ndarray = per_request()
    finish_s: np.ndarray = per_request()
    prompt_tokens: np.ndarray = per_request()
    output_tokens: np.ndarray = per_request()
    measured: np.ndarray = per_request()
    requests: int
    rejected_requests: int
    ttft_p50_s: float
    ttft_p95_s: float
    ttft_mean_s: float
    tpot_p50_s: float
    tpot_p95_s: float
    tpot_mean_s: float

    @classmethod
    def array_fields(cls) -> tuple[str, ...]:
        """Names of the per-request array fields."""
        return tuple(f.name for f in fields(cls) if f.metadata.get("per_request"))

    def to_dict(self) -> dict:
        """Scalar statistics keyed by name (no per-request arrays)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.metadata.get("per_request")}


@dataclass(frozen=True)
class SimulationResult(RunRecord):
    """Statistics of one simulated replica (SI units), plus the per-request record.

    Latency statistics cover the measured requests (arrivals after the warm-up, not
    rejected); time-weighted statistics cover the measured window, from the first measured
    arrival to the last arrival (idle time included).

    Attributes
    ----------
    scheduler : str
        ``"continuous"`` or ``"static"``.
    rate_per_s : float
        Poisson arrival rate [requests/s].
    seed : int
        Seed of the numpy Generator that drew arrivals and lengths.
    max_batch : int
        Slots of the replica (max running requests).
    prefill_chunk_tokens : int
        Chunked-prefill budget per iteration (continuous only).
    requests : int
        Measured requests.
    rejected_requests : int
        Requests whose KV (prompt + output) exceeds the whole KV budget; never admitted.
    ttft_p50_s, ttft_p95_s, ttft_mean_s : float
        Time to first token: end of the iteration that completes the prefill - arrival, plus
        the parameters' ``request_overhead_s`` (API server, tokenizer, streaming: outside the
        GPU steps, as in the analytic model; 0 with the seeds' parameters) [s].
    tpot_p50_s, tpot_p95_s, tpot_mean_s : float
        Time per output token after the first: (finish - first token) / (output - 1) [s];
        requests with one output token are left out.
    mean_wait_s : float
        Mean arrival -> admission time [s].
    throughput_tokens_per_s : float
        Output tokens generated in the window / window length.
    request_throughput_per_s : float
        Requests finished in the window / window length.
    mean_batch : float
        Time-weighted mean number of decoding requests.
    slot_utilization : float
        Time-weighted mean of running (admitted, unfinished) requests / max_batch.
    window_s : float
        Length of the measured window [s].
    iterations : int
        Scheduler iterations (engine steps) simulated.
    distinct_step_times : int
        Step times computed with the roofline model (size of the memo).
    arrival_s, admit_s, first_token_s, finish_s : numpy.ndarray
        Per-request times [s] (NaN for rejected requests); not part of :meth:`to_dict`.
    prompt_tokens, output_tokens : numpy.ndarray
        Per-request sampled lengths [tokens].
    measured : numpy.ndarray
        Bool mask of the requests the latency statistics cover.
    """

    scheduler: str
    rate_per_s: float
    seed: int
    max_batch: int
    prefill_chunk_tokens: int
    mean_wait_s: float
    throughput_tokens_per_s: float
    request_throughput_per_s: float
    mean_batch: float
    slot_utilization: float
    window_s: float
    iterations: int
    distinct_step_times: int
    admit_s: np.ndarray = per_request()
    #: Fixed TTFT outside the GPU steps that the TTFT statistics include [s].
    request_overhead_s: float = 0.0

    def latencies_s(self, mask=None) -> tuple[np.ndarray, np.ndarray]:
        """TTFT and TPOT [s] of the measured requests (within ``mask``, a bool per request);
        TPOT covers the requests with more than one output token."""
        keep = self.measured if mask is None else self.measured & np.asarray(mask, dtype=bool)
        return _latencies(self.arrival_s, self.first_token_s, self.finish_s, self.output_tokens, keep,
                          self.request_overhead_s)

    def decode_time_s(self) -> np.ndarray:
        """Per measured request: finish - first token [s] (time spent decoding)."""
        m = self.measured
        return self.finish_s[m] - self.first_token_s[m]


def request_overhead_s(params: ServingParams) -> float:
    """The fixed TTFT a request adds outside the GPU steps (one configuration's value) [s]."""
    return float(np.asarray(params.request_overhead_s, dtype=float).reshape(-1)[0])


def _stat(values: np.ndarray, q: float | None) -> float:
    if values.size == 0:
        return math.nan
    return float(np.mean(values)) if q is None else float(np.percentile(values, q))


def _latencies(arrival, first, finish, output_tokens, measured, request_overhead_s):
    ttft = (first - arrival)[measured] + request_overhead_s
    multi = measured & (output_tokens > 1)
    return ttft, (finish - first)[multi] / (output_tokens[multi] - 1)


def summarize(sim: Replica, *, scheduler, rate_per_s, seed, max_batch, prefill_chunk_tokens,
              first_measured, arrival, prompt_tokens, output_tokens,
              request_overhead_s: float = 0.0) -> SimulationResult:
    """The statistics of the finished run ``sim`` (the first ``first_measured`` arrivals are warm-up)."""
    admit = np.array(sim.admit_s)
    first = np.array(sim.first_s)
    finish = np.array(sim.finish_s)
    rejected = np.array(sim.rejected)
    measured = ~rejected
    measured[:first_measured] = False
    ttft, tpot = _latencies(arrival, first, finish, output_tokens, measured, request_overhead_s)
    wait = (admit - arrival)[measured]
    window_s = sim.w1 - sim.w0
    if window_s > 0:
        done_in_window = int(np.count_nonzero((finish >= sim.w0) & (finish <= sim.w1)))
        per_s = (sim.tokens / window_s, done_in_window / window_s, sim.decode_area / window_s,
                 sim.running_area / (max_batch * window_s))
    else:
        per_s = (math.nan,) * 4
    return SimulationResult(
        scheduler=scheduler, rate_per_s=rate_per_s, seed=seed, max_batch=max_batch,
        prefill_chunk_tokens=prefill_chunk_tokens,
        requests=int(np.count_nonzero(measured)), rejected_requests=int(np.count_nonzero(rejected)),
        ttft_p50_s=_stat(ttft, 50), ttft_p95_s=_stat(ttft, 95), ttft_mean_s=_stat(ttft, None),
        tpot_p50_s=_stat(tpot, 50), tpot_p95_s=_stat(tpot, 95), tpot_mean_s=_stat(tpot, None),
        mean_wait_s=_stat(wait, None),
        throughput_tokens_per_s=per_s[0], request_throughput_per_s=per_s[1],
        mean_batch=per_s[2], slot_utilization=per_s[3], window_s=window_s,
        iterations=sim.iterations, distinct_step_times=len(sim.steps.cache),
        arrival_s=arrival, admit_s=admit, first_token_s=first, finish_s=finish,
        prompt_tokens=prompt_tokens, output_tokens=output_tokens, measured=measured,
        request_overhead_s=float(request_overhead_s),
    )
