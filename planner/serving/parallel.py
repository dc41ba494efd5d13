"""Threads for the serving model's element-wise passes (speed; issue 19).

numpy releases the GIL inside large ufunc loops, so independent row blocks evaluated in
a few threads run on several cores at once. The numbers do not change: every row gets
the same float64 operations whichever thread computes it, and each block writes its own
slice of preallocated outputs.

``PLANNER_THREADS`` sets the thread count (1: no threads); the default is the CPUs this
process may run on, at most :data:`MAX_DEFAULT_THREADS`. The threads live for one call
only (none is left running, so a later ``fork`` of the process is safe).
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Sequence

import numpy as np

from planner.errors import PlanningInputError

#: The environment variable that sets the thread count of the serving model's passes.
THREADS_ENV = "PLANNER_THREADS"
#: Most threads used by default: past a few, the GIL-held Python between numpy calls
#: serializes the blocks (2 on the 2-core reference machine).
MAX_DEFAULT_THREADS = 4


def thread_count() -> int:
    """Threads for one pass: ``$PLANNER_THREADS`` if set (an integer >= 1), else the CPUs
    available to the process, at most :data:`MAX_DEFAULT_THREADS`."""
    configured = os.environ.get(THREADS_ENV, "").strip()
    if configured:
        try:
            value = int(configured)
        except ValueError:
            value = 0
        if value < 1:
            raise PlanningInputError(f"{THREADS_ENV}: must be an integer >= 1, got '{configured}'")
        return value
    return max(1, min(MAX_DEFAULT_THREADS, usable_cpus()))


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def run_in_threads(work: Callable[[], None], threads: int) -> None:
    """``work()`` in ``threads`` threads at once (this one included), until all return.

    ``work`` takes its items from a shared iterator (CPython's ``next`` on a built-in
    iterator is atomic); each thread runs under the caller's numpy error handling (a
    per-thread setting); the first exception raised in any thread is raised here.
    """
    if threads <= 1:
        work()
        return
    errors: list[BaseException] = []
    handling = np.geterr()

    def guarded():
        try:
            with np.errstate(**handling):
                work()
        except BaseException as exc:   # noqa: BLE001 - re-raised in the calling thread
            errors.append(exc)

    helpers = [threading.Thread(target=guarded, daemon=True) for _ in range(threads - 1)]
    for t in helpers:
        t.start()
    guarded()
    for t in helpers:
        t.join()
    if errors:
        raise errors[0]


def row_ranges(rows: int, threads: int, min_rows: int) -> list[slice]:
    """``rows`` rows cut into at most ``threads`` contiguous ranges of at least ``min_rows``
    rows each (one range, all rows, when they are too few to share)."""
    parts = max(1, min(threads, rows // max(min_rows, 1)))
    bounds = [rows * i // parts for i in range(parts + 1)]
    return [slice(lo, hi) for lo, hi in zip(bounds, bounds[1:])]


def map_in_threads(fn: Callable, items: Sequence, threads: int) -> list:
    """``[fn(item) for item in items]``, computed by up to ``threads`` threads (in order)."""
    results: list = [None] * len(items)
    pending = iter(range(len(items)))

    def work():
        for i in pending:
            results[i] = fn(items[i])

    run_in_threads(work, min(threads, len(items)))
    return results
