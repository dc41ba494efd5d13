"""The seed's scheduler timeline: static vs continuous batching with unit step cost, no prefill."""

from __future__ import annotations

import heapq
import math

import numpy as np


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
