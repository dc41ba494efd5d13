"""Beside: a call in a worker thread beside the main thread; an exception in the main thread
stops its solves and waits for it (the looked-ahead cost solve of planner.optimize.cutseq)."""

import threading

import pytest
from ortools.sat.python import cp_model

from planner.interrupt import Beside, InterruptibleSolver

LIMIT_S = 60.0


def test_value_and_error_come_back():
    assert Beside(lambda: 6 * 7).result() == 42

    def fails():
        raise ValueError("in the worker")

    with pytest.raises(ValueError, match="in the worker"):
        Beside(fails).result()


def test_an_exception_in_the_main_thread_stops_the_worker_solve():
    model = cp_model.CpModel()
    for i in range(40):
        model.new_bool_var(f"b{i}")         # 2**40 solutions: enumerating them outlasts any test

    class Count(cp_model.CpSolverSolutionCallback):
        def __init__(self):
            super().__init__()
            self.n = 0
            self.started = threading.Event()

        def on_solution_callback(self):
            self.n += 1
            self.started.set()

    solver, count = InterruptibleSolver(), Count()
    solver.parameters.max_time_in_seconds = LIMIT_S
    solver.parameters.enumerate_all_solutions = True
    solver.parameters.num_workers = 1
    job = None
    with pytest.raises(KeyboardInterrupt):
        with Beside(lambda: solver.solve(model, count)) as job:
            assert count.started.wait(LIMIT_S)
            raise KeyboardInterrupt
    assert not job._thread.is_alive()               # cancel waited for the call
    assert job.result() == cp_model.FEASIBLE         # stopped with solutions found, not at its limit
    assert 0 < count.n < 2**40 and solver.wall_time < LIMIT_S
