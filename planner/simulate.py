"""Discrete-event simulation of one serving replica under static and continuous batching.

The simulator is the referee of the analytic tail-latency model (DESIGN sections 5 and 9):
seeded Poisson arrivals with sampled prompt and output lengths run through an iteration-level
scheduler whose step times come from :func:`planner.serving.roofline.mixed_step_time_s`.
:func:`scheduler_timeline` is the seed's toy version (unit step cost, no prefill).

Pure Python and numpy; deterministic for a given seed.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, fields

import numpy as np

from planner.serving.arrays import ConfigArrays
from planner.serving.memory import kv_budget_bytes_per_gpu, kv_bytes_per_seq, kv_fraction_per_gpu
from planner.serving.params import ServingParams
from planner.serving.roofline import StepModel

#: Prompt tokens one continuous-batching iteration may prefill (chunked prefill budget;
#: vLLM's ``max_num_batched_tokens`` default with chunked prefill enabled).
DEFAULT_PREFILL_CHUNK_TOKENS = 2048

#: Fraction of the first arrivals left out of every statistic (the empty-system start-up).
DEFAULT_WARMUP_FRACTION = 0.05

#: Requests a full-replica simulation draws by default.
DEFAULT_REQUESTS = 20_000

#: Width of the context and prompt-length buckets of the step-time memo [tokens]: step
#: times are computed at the bucket centre, so a run's result does not depend on which
#: iteration filled the memo first.
LENGTH_BUCKET_TOKENS = 16

#: Scheduler names accepted by :func:`simulate_replica`.
SCHEDULERS = ("continuous", "static")

_INF = math.inf


# ------------------------------------------------------------------ validation

def check_simulation_inputs(*, rate_per_s: float, max_batch: int, requests: int,
                            scheduler: str = "continuous",
                            prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
                            warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
                            prefix_hit_fraction: float = 0.0) -> list[tuple[str, str]]:
    """Problems with the simulation settings, as ``(argument name, message)`` pairs.

    Parameters
    ----------
    rate_per_s, max_batch, requests, scheduler, prefill_chunk_tokens, warmup_fraction, prefix_hit_fraction
        As in :func:`simulate_replica`.

    Returns
    -------
    list of (str, str)
        Empty when every setting is valid. Callers map argument names onto their own
        vocabulary (CLI flags, YAML paths).
    """
    problems = []
    if not (isinstance(rate_per_s, (int, float)) and math.isfinite(rate_per_s) and rate_per_s > 0):
        problems.append(("rate_per_s", f"must be > 0, got {rate_per_s}"))
    if not max_batch >= 1:
        problems.append(("max_batch", f"must be >= 1, got {max_batch}"))
    if not requests >= 2:
        problems.append(("requests", f"must be >= 2, got {requests}"))
    if scheduler not in SCHEDULERS:
        problems.append(("scheduler", f"must be one of {', '.join(SCHEDULERS)}, got '{scheduler}'"))
    if not prefill_chunk_tokens >= 1:
        problems.append(("prefill_chunk_tokens", f"must be >= 1, got {prefill_chunk_tokens}"))
    if not 0.0 <= warmup_fraction < 1.0:
        problems.append(("warmup_fraction", f"must be in [0, 1), got {warmup_fraction}"))
    if not 0.0 <= prefix_hit_fraction < 1.0:
        problems.append(("prefix_hit_fraction", f"must be in [0, 1), got {prefix_hit_fraction}"))
    return problems


# ------------------------------------------------------------------ result

@dataclass(frozen=True)
class SimulationResult:
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
    requests: int
    rejected_requests: int
    ttft_p50_s: float
    ttft_p95_s: float
    ttft_mean_s: float
    tpot_p50_s: float
    tpot_p95_s: float
    tpot_mean_s: float
    mean_wait_s: float
    throughput_tokens_per_s: float
    request_throughput_per_s: float
    mean_batch: float
    slot_utilization: float
    window_s: float
    iterations: int
    distinct_step_times: int
    arrival_s: np.ndarray = field(repr=False, compare=False)
    admit_s: np.ndarray = field(repr=False, compare=False)
    first_token_s: np.ndarray = field(repr=False, compare=False)
    finish_s: np.ndarray = field(repr=False, compare=False)
    prompt_tokens: np.ndarray = field(repr=False, compare=False)
    output_tokens: np.ndarray = field(repr=False, compare=False)
    measured: np.ndarray = field(repr=False, compare=False)
    #: Fixed TTFT outside the GPU steps that the TTFT statistics include [s].
    request_overhead_s: float = 0.0

    _ARRAY_FIELDS = ("arrival_s", "admit_s", "first_token_s", "finish_s", "prompt_tokens",
                     "output_tokens", "measured")

    def to_dict(self) -> dict:
        """Scalar statistics keyed by name (no per-request arrays)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in self._ARRAY_FIELDS}

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


# ------------------------------------------------------------------ engine

class _StepTimes:
    """Memo of :func:`mixed_step_time_s` on (decodes, chunk tokens, context and prompt buckets).

    Computes exactly what :func:`mixed_step_time_s` computes, from one step model per
    context bucket (building the model dominated the simulator's run time)."""

    def __init__(self, arrays: ConfigArrays, params: ServingParams):
        self._arrays = arrays
        self._params = params
        self.cache: dict[tuple[int, int, int, int], float] = {}
        #: One :class:`StepModel` per context bucket (what :func:`mixed_step_time_s` builds per call).
        self._models: dict[int, StepModel] = {}

    def __call__(self, n_decode: int, chunk_tokens: int, context_bucket: int, prompt_bucket: int) -> float:
        key = (n_decode, chunk_tokens, context_bucket, prompt_bucket)
        s = self.cache.get(key)
        if s is None:
            model = self._models.get(context_bucket)
            if model is None:
                model = self._models[context_bucket] = StepModel(
                    self._arrays, self._params, context_bucket * LENGTH_BUCKET_TOKENS)
            s = float(np.asarray(model.time(n_decode, chunk_tokens,
                                            prompt_bucket * LENGTH_BUCKET_TOKENS)).reshape(-1)[0])
            if not s > 0:
                raise ValueError(f"non-positive step time {s} for {key}")
            self.cache[key] = s
        return s


def _bucket(tokens: float) -> int:
    """Index of the length bucket holding ``tokens`` (nearest centre, halves up)."""
    return math.floor(tokens / LENGTH_BUCKET_TOKENS + 0.5)


class _Replica:
    """State of one replica during a run; times in seconds, KV in whole bytes per GPU.

    Decoding requests all advance one token per iteration, so the simulator keeps a global
    iteration counter ``g``: a request that starts decoding at ``g0`` with ``o`` output
    tokens finishes when ``g`` reaches ``g0 + o - 1``, and its context is
    ``prompt + 1 + g - g0``. The sum of the decoders' contexts is then
    ``ctx_offset_sum + n_decode * g`` (O(1) per iteration), and runs of pure-decode
    iterations between events are advanced in one go (one stretch per context bucket).
    """

    def __init__(self, steps: _StepTimes, arrival_s, prompt, output, kv_bytes, budget_bytes: int,
                 max_batch: int, window: tuple[float, float], prefill=None):
        self.steps = steps
        self.arrival = arrival_s
        self.prompt = prompt
        #: Prompt tokens each request computes in its prefill (the rest hit the prefix cache).
        self.prefill = prompt if prefill is None else prefill
        self.output = output
        self.kv = kv_bytes
        self.budget = budget_bytes
        self.max_batch = max_batch
        self.w0, self.w1 = window
        n = len(arrival_s)
        self.n = n
        self.admit_s = [math.nan] * n
        self.first_s = [math.nan] * n
        self.finish_s = [math.nan] * n
        self.rejected = [False] * n
        self.ctx_offset = [0] * n
        self.t = 0.0
        self.g = 0
        self.head = 0            # next request not yet admitted or rejected (FCFS)
        self.running = 0         # admitted, unfinished
        self.kv_used = 0
        self.n_decode = 0
        self.ctx_offset_sum = 0
        self.finishing: list[tuple[int, int]] = []  # heap of (finish iteration, request)
        self.iterations = 0
        self.decode_area = 0.0   # integral of n_decode dt over the window
        self.running_area = 0.0  # integral of running dt over the window
        self.tokens = 0.0        # output tokens generated in the window

    # -- bookkeeping
    def _integrate(self, ta: float, tb: float, tokens_per_s: float) -> None:
        overlap = min(tb, self.w1) - max(ta, self.w0)
        if overlap > 0.0:
            self.decode_area += self.n_decode * overlap
            self.running_area += self.running * overlap
            self.tokens += tokens_per_s * overlap

    def _try_admit(self) -> int | None:
        """Admit the head request if it has arrived and fits (slots, KV); reject oversized ones."""
        while self.head < self.n and self.arrival[self.head] <= self.t and self.running < self.max_batch:
            r = self.head
            if self.kv[r] > self.budget:
                self.rejected[r] = True
                self.head += 1
                continue
            if self.kv_used + self.kv[r] > self.budget:
                return None
            self.head += 1
            self.running += 1
            self.kv_used += self.kv[r]
            self.admit_s[r] = self.t
            return r
        return None

    def _start_decoding(self, r: int) -> None:
        """Request ``r`` produced its first token in the iteration that just ended."""
        self.first_s[r] = self.t
        if self.output[r] <= 1:
            self._finish(r)
            return
        self.n_decode += 1
        off = self.prompt[r] + 1 - self.g
        self.ctx_offset[r] = off
        self.ctx_offset_sum += off
        heapq.heappush(self.finishing, (self.g + self.output[r] - 1, r))

    def _finish(self, r: int) -> None:
        self.finish_s[r] = self.t
        self.running -= 1
        self.kv_used -= self.kv[r]

    def _pop_finished(self) -> None:
        heap = self.finishing
        while heap and heap[0][0] <= self.g:
            _, r = heapq.heappop(heap)
            self.n_decode -= 1
            self.ctx_offset_sum -= self.ctx_offset[r]
            self._finish(r)

    def _context_bucket(self) -> int:
        if self.n_decode == 0:
            return 0
        return _bucket((self.ctx_offset_sum + self.n_decode * self.g) / self.n_decode)

    # -- iterations
    def prefill_iteration(self, pending: list[int], remaining: list[int], chunk_budget: int) -> int:
        """One iteration prefilling up to ``chunk_budget`` tokens FCFS over ``pending``.

        ``remaining[i]`` are the prompt tokens still to prefill of ``pending[i]``; both lists
        are updated in place. Returns how many leading requests completed their prefill
        (they produced their first token and now decode).
        """
        left = chunk_budget
        chunk = weighted = done = 0
        for i, r in enumerate(pending):
            take = min(remaining[i], left)
            remaining[i] -= take
            chunk += take
            weighted += take * self.prompt[r]
            left -= take
            if remaining[i] == 0:
                done += 1
            if left == 0:
                break
        s = self.steps(self.n_decode, chunk, self._context_bucket(), _bucket(weighted / chunk))
        self._integrate(self.t, self.t + s, (self.n_decode + done) / s)
        self.t += s
        self.g += 1
        self.iterations += 1
        self._pop_finished()
        for r in pending[:done]:
            self._start_decoding(r)
        return done

    def decode_until_event(self, stop_s: float) -> None:
        """Pure-decode iterations until a request finishes or, once ``t >= stop_s``, an admission."""
        n = self.n_decode
        k_max = self.finishing[0][0] - self.g
        t, g, done_steps = self.t, self.g, 0
        width = LENGTH_BUCKET_TOKENS
        while done_steps < k_max:
            mean_ctx = (self.ctx_offset_sum + n * g) / n
            b = _bucket(mean_ctx)
            m = min(max(1, math.ceil(width * b + width / 2 - mean_ctx)), k_max - done_steps)
            s = self.steps(n, 0, b, 0)
            hit = False
            if stop_s < _INF:
                need = max(1, math.ceil((stop_s - t) / s))
                if need <= m:
                    m, hit = need, True
            self._integrate(t, t + m * s, n / s)
            t += m * s
            g += m
            done_steps += m
            if hit:
                break
        self.t, self.g = t, g
        self.iterations += done_steps
        self._pop_finished()

    # -- schedulers
    def run_continuous(self, chunk_budget: int) -> None:
        """Iteration-level scheduling with chunked prefill (Orca / vLLM)."""
        pending: list[int] = []     # admitted, prefill incomplete (FCFS)
        remaining: list[int] = []   # their prompt tokens still to prefill
        while True:
            while (r := self._try_admit()) is not None:
                if not self.prefill[r]:  # KV and first token came from a prefill pool (simulate_pd)
                    self._start_decoding(r)
                    continue
                pending.append(r)
                remaining.append(self.prefill[r])
            if self.running == 0:
                if self.head >= self.n:
                    return
                self.t = max(self.t, self.arrival[self.head])
                continue
            if pending:
                done = self.prefill_iteration(pending, remaining, chunk_budget)
                if done:
                    del pending[:done]
                    del remaining[:done]
                continue
            h = self.head
            can_admit = h < self.n and self.running < self.max_batch and (
                self.kv[h] > self.budget or self.kv_used + self.kv[h] <= self.budget)
            self.decode_until_event(self.arrival[h] if can_admit else _INF)

    def run_static(self) -> None:
        """Request-level batching: fill the idle replica, prefill once, decode to the longest."""
        while True:
            if self.head >= self.n:
                return
            self.t = max(self.t, self.arrival[self.head])
            batch = []
            while (r := self._try_admit()) is not None:
                batch.append(r)
            if not batch:
                continue
            tokens = sum(self.prefill[r] for r in batch)
            squares = sum(self.prefill[r] * self.prompt[r] for r in batch)
            s = self.steps(0, tokens, 0, _bucket(squares / tokens))
            self._integrate(self.t, self.t + s, len(batch) / s)
            self.t += s
            self.g += 1
            self.iterations += 1
            for r in batch:
                self._start_decoding(r)
            while self.finishing:
                self.decode_until_event(_INF)


# ------------------------------------------------------------------ public API

def simulate_replica(arrays: ConfigArrays, params: ServingParams, *, rate_per_s: float, prompt, output,
                     max_batch: int, requests: int = DEFAULT_REQUESTS, seed: int = 0,
                     scheduler: str = "continuous",
                     prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
                     warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
                     prefix_hit_fraction: float = 0.0) -> SimulationResult:
    """Simulate one replica serving Poisson traffic; return latency and utilization statistics.

    Parameters
    ----------
    arrays : ConfigArrays
        One configuration (every field of size 1): model, GPU, TP/PP, formats.
    params : ServingParams
        Efficiencies and overheads of the step-time model.
    rate_per_s : float
        Poisson arrival rate [requests/s].
    prompt, output : LengthDistribution
        Prompt and output length distributions (:mod:`planner.traffic`) [tokens].
    max_batch : int
        Slots: most requests running at once (vLLM ``max_num_seqs``).
    requests : int
        Requests to draw (>= 2).
    seed : int
        Seed of the numpy Generator (arrivals, then prompts, then outputs).
    scheduler : {"continuous", "static"}
        Iteration-level scheduling with chunked prefill, or request-level static batches.
    prefill_chunk_tokens : int
        Prompt tokens one continuous iteration may prefill [tokens].
    warmup_fraction : float
        Fraction of the first arrivals left out of the statistics, in [0, 1).
    prefix_hit_fraction : float
        Share of every prompt served from the prefix cache, in [0, 1): a request prefills
        round((1 - h) p) tokens (at least 1), attending over its whole prompt p, as in the
        analytic model (problem YAML ``prefix_cache_hit_fraction``); its KV is the whole p.

    Returns
    -------
    SimulationResult

    Raises
    ------
    ValueError
        Invalid settings (see :func:`check_simulation_inputs`), more than one configuration,
        or weights that leave no KV budget.

    Notes
    -----
    Continuous: every iteration first admits arrived requests FCFS while fewer than
    ``max_batch`` run and their KV for prompt + output (reserved at admission, per GPU:
    ``kv_bytes_per_seq * kv_fraction_per_gpu``) fits ``kv_budget_bytes_per_gpu``; then
    prefills up to ``prefill_chunk_tokens`` prompt tokens FCFS over admitted requests still
    in prefill, while every prefilled request decodes one token. Step time =
    ``mixed_step_time_s(n_decode, chunk, mean decode context, p)`` with p the
    token-weighted prompt length of the chunk's requests (the chunked request's prompt when
    it is alone), memoized on 16-token buckets of context and p. The iteration completing a
    prefill produces the first token; output - 1 decode iterations follow. An idle replica
    jumps to the next arrival.

    Static: an idle replica takes up to ``max_batch`` arrived requests (KV permitting), runs
    one prefill step over all their prompt tokens (p = sum p_i^2 / sum p_i makes the
    attention FLOPs exact), then decodes until the longest finishes; finished requests leave
    their slots empty, and the step time uses the requests still decoding.

    Requests whose KV alone exceeds the budget are rejected (counted, never admitted).
    """
    problems = check_simulation_inputs(rate_per_s=rate_per_s, max_batch=max_batch, requests=requests,
                                       scheduler=scheduler, prefill_chunk_tokens=prefill_chunk_tokens,
                                       warmup_fraction=warmup_fraction,
                                       prefix_hit_fraction=prefix_hit_fraction)
    if problems:
        raise ValueError("; ".join(f"{name}: {msg}" for name, msg in problems))
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.standard_exponential(requests)) / rate_per_s
    prompt_tokens = np.asarray(prompt.sample(rng, requests), dtype=np.int64)
    output_tokens = np.asarray(output.sample(rng, requests), dtype=np.int64)
    return run_requests(arrays, params, arrival, prompt_tokens, output_tokens, max_batch=max_batch,
                        rate_per_s=float(rate_per_s), seed=int(seed), scheduler=scheduler,
                        prefill_chunk_tokens=prefill_chunk_tokens, warmup_fraction=warmup_fraction,
                        prefix_hit_fraction=prefix_hit_fraction)


def run_requests(arrays: ConfigArrays, params: ServingParams, arrival_s, prompt_tokens, output_tokens, *,
                 max_batch: int, rate_per_s: float, seed: int, scheduler: str = "continuous",
                 prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
                 warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
                 prefix_hit_fraction=0.0, prefilled: bool = False) -> SimulationResult:
    """Run given requests (sorted arrival times [s], prompt and output tokens) through one replica.

    :func:`simulate_replica` draws them from one traffic class; :mod:`planner.verify` from a
    routed mix of classes. ``rate_per_s`` and ``seed`` are recorded in the result;
    ``prefix_hit_fraction`` (a number, or one per request) as in :func:`simulate_replica`;
    ``prefilled``: the requests arrive with their KV and first token (a disaggregated decode
    replica, :mod:`planner.simulate_pd`): no prefill, admission starts o - 1 decodes. Raises
    ``ValueError`` for more than one configuration or weights that leave no KV budget.
    """
    if np.size(arrays.tp) != 1:
        raise ValueError(f"simulate_replica takes one configuration, got {np.size(arrays.tp)}")
    budget = float(np.asarray(kv_budget_bytes_per_gpu(arrays, params)).reshape(-1)[0])
    if not budget > 0:
        raise ValueError(f"no KV budget: the weights leave {budget:.3g} bytes per GPU")
    arrival = np.asarray(arrival_s, dtype=float)
    prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
    output_tokens = np.asarray(output_tokens, dtype=np.int64)
    requests = len(arrival)
    kv_per_gpu = kv_bytes_per_seq(arrays, prompt_tokens + output_tokens) * kv_fraction_per_gpu(arrays)
    kv_bytes = np.ceil(np.broadcast_to(kv_per_gpu, (requests,))).astype(np.int64)

    first_measured = int(math.floor(warmup_fraction * requests))
    window = (float(arrival[first_measured]), float(arrival[-1]))
    steps = _StepTimes(arrays, params)
    missed = 1.0 - np.asarray(prefix_hit_fraction, dtype=float)
    computed = np.maximum(np.floor(missed * prompt_tokens + 0.5), 1) * (not prefilled)
    sim = _Replica(steps, arrival.tolist(), prompt_tokens.tolist(), output_tokens.tolist(),
                   kv_bytes.tolist(), int(math.floor(budget)), int(max_batch), window,
                   prefill=np.broadcast_to(computed, (requests,)).astype(np.int64).tolist())
    if scheduler == "continuous":
        sim.run_continuous(int(prefill_chunk_tokens))
    else:
        sim.run_static()
    return _summarize(sim, scheduler=scheduler, rate_per_s=float(rate_per_s), seed=int(seed),
                      max_batch=int(max_batch), prefill_chunk_tokens=int(prefill_chunk_tokens),
                      first_measured=first_measured, arrival=arrival, prompt_tokens=prompt_tokens,
                      output_tokens=output_tokens, request_overhead_s=request_overhead_s(params))


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


def _summarize(sim: _Replica, *, scheduler, rate_per_s, seed, max_batch, prefill_chunk_tokens,
               first_measured, arrival, prompt_tokens, output_tokens,
               request_overhead_s: float = 0.0) -> SimulationResult:
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


# ------------------------------------------------------------------ the seed's timeline

def _timeline_static(arrival: np.ndarray, output: np.ndarray, max_batch: int) -> list[tuple]:
    spans, t, i, n = [], 0, 0, len(arrival)
    while i < n:
        t = max(t, math.ceil(arrival[i]))
        batch = []
        while i < n and len(batch) < max_batch and arrival[i] <= t:
            batch.append(i)
            i += 1
        for slot, r in enumerate(batch):
            spans.append((slot, r, t, t + int(output[r])))
        t += max(int(output[r]) for r in batch)
    return spans


def _timeline_continuous(arrival: np.ndarray, output: np.ndarray, max_batch: int) -> list[tuple]:
    spans, t = [], 0
    free = list(range(max_batch))
    busy: list[tuple[int, int]] = []  # heap of (end step, slot)
    for r in range(len(arrival)):
        t = max(t, math.ceil(arrival[r]))
        if not free and busy[0][0] > t:
            t = busy[0][0]  # every slot busy: wait for the first to free up
        while busy and busy[0][0] <= t:
            heapq.heappush(free, heapq.heappop(busy)[1])
        slot = heapq.heappop(free)
        end = t + int(output[r])
        heapq.heappush(busy, (end, slot))
        spans.append((slot, r, t, end))
    return sorted(spans, key=lambda s: (s[0], s[2]))


def _timeline_summary(spans: list[tuple], arrival: np.ndarray, max_batch: int) -> dict:
    start = {r: s for _, r, s, _ in spans}
    first = min(s for _, _, s, _ in spans)
    last = max(e for _, _, _, e in spans)
    busy = sum(e - s for _, _, s, e in spans)
    makespan = last - first
    waits = [start[r] - float(arrival[r]) for r in range(len(arrival))]
    return {
        "slot_utilization": busy / (max_batch * makespan) if makespan > 0 else math.nan,
        "mean_wait_steps": float(np.mean(waits)),
        "makespan_steps": int(makespan),
        "busy_slot_steps": int(busy),
        "timeline": [(int(slot), int(r), int(s), int(e)) for slot, r, s, e in spans],
    }


def scheduler_timeline(*, requests: int = 40, arrival_rate_per_step: float = 0.5, max_batch: int = 8,
                       output_min: int = 10, output_max: int = 500, seed: int = 0) -> dict:
    """The seed's scheduler timeline: static vs continuous batching on the same requests.

    Parameters
    ----------
    requests : int
        Requests to draw.
    arrival_rate_per_step : float
        Poisson arrival rate [requests per decode step].
    max_batch : int
        Slots.
    output_min, output_max : int
        Output lengths are uniform integers in [output_min, output_max] [tokens = steps].
    seed : int
        Seed of the numpy Generator (arrivals, then outputs).

    Returns
    -------
    dict
        ``arrival_steps``, ``output_tokens`` and the settings, and for ``"static"`` and
        ``"continuous"``: ``slot_utilization`` (busy slot-steps / (max_batch * makespan)),
        ``mean_wait_steps`` (arrival -> start), ``makespan_steps`` (first start -> last
        finish), ``busy_slot_steps`` and ``timeline``, a list of (slot, request, start step,
        end step) occupancies.

    Raises
    ------
    ValueError
        Non-positive counts or rate, or output_min > output_max.

    Notes
    -----
    Time unit = one decode step; every step costs 1 whatever the batch (memory-bound
    decode) and prefill is omitted, as in the seed. A request arriving at time a may start
    at the first step boundary >= a. Static: an idle replica takes up to ``max_batch``
    arrived requests and runs until the longest finishes; others wait. Continuous: at every
    boundary, finished requests free their slots and waiting requests fill them FCFS
    (lowest free slot first).
    """
    if requests < 1 or max_batch < 1 or not arrival_rate_per_step > 0 or output_min < 1 \
            or output_max < output_min:
        raise ValueError("requests, max_batch, arrival_rate_per_step and output_min must be positive "
                         "and output_min <= output_max")
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.standard_exponential(requests)) / arrival_rate_per_step
    output = rng.integers(output_min, output_max, size=requests, endpoint=True)
    out = {
        "requests": int(requests), "arrival_rate_per_step": float(arrival_rate_per_step),
        "max_batch": int(max_batch), "output_min": int(output_min), "output_max": int(output_max),
        "seed": int(seed), "arrival_steps": arrival.tolist(), "output_tokens": output.tolist(),
    }
    for name, policy in (("static", _timeline_static), ("continuous", _timeline_continuous)):
        out[name] = _timeline_summary(policy(arrival, output, max_batch), arrival, max_batch)
    return out
