"""The simulator's engine: one replica's state, its iterations and its two schedulers.

Continuous batching (iteration-level scheduling with chunked prefill, Orca / vLLM) and
static batching (request-level batches) run on :class:`Replica`; step times come from the
serving model's step model (:class:`planner.serving.roofline.StepModel`), memoized by
:class:`StepTimes`. :mod:`planner.simulate.replica` draws the requests and runs them;
:mod:`planner.simulate.stats` turns the finished run into statistics.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from planner.serving.arrays import ConfigArrays
from planner.serving.params import ServingParams
from planner.serving.roofline import StepModel

#: Width of the context and prompt-length buckets of the step-time memo [tokens]: step
#: times are computed at the bucket centre, so a run's result does not depend on which
#: iteration filled the memo first.
LENGTH_BUCKET_TOKENS = 16

_INF = math.inf


class StepTimes:
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


class Replica:
    """State of one replica during a run; times in seconds, KV in whole bytes per GPU.

    Decoding requests all advance one token per iteration, so the simulator keeps a global
    iteration counter ``g``: a request that starts decoding at ``g0`` with ``o`` output
    tokens finishes when ``g`` reaches ``g0 + o - 1``, and its context is
    ``prompt + 1 + g - g0``. The sum of the decoders' contexts is then
    ``ctx_offset_sum + n_decode * g`` (O(1) per iteration), and runs of pure-decode
    iterations between events are advanced in one go (one stretch per context bucket).
    """

    def __init__(self, steps: StepTimes, arrival_s, prompt, output, kv_bytes, budget_bytes: int,
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
