"""CP-SAT solves that keep the planner's signal handlers (Ctrl-C and termination end a solve cleanly).

CP-SAT installs its own SIGINT handler for the length of a solve and afterwards resets
SIGINT to the operating system's default, so a Ctrl-C after the first solve would kill
the process outright: no ``finally`` block, temporary output directories left behind, no
exit code 130. :class:`InterruptibleSolver` keeps CP-SAT away from the signal
(``catch_sigint_signal = False``) and runs the search in a worker thread, so the main
thread keeps the planner's own handlers: a signal stops the search (``stop_search``) and
raises :class:`KeyboardInterrupt` there. :func:`planner.signals.handling_signals` turns SIGTERM
and SIGHUP into the same exception, so cleanup runs for every signal that can be caught.
"""

from __future__ import annotations

import threading

from ortools.sat.python import cp_model

#: How often the main thread wakes while a solve runs [s] (it also wakes when the solve ends).
POLL_S = 0.2


class InterruptibleSolver(cp_model.CpSolver):
    """A CpSolver whose ``solve`` leaves signal handling to the planner (see the module docstring)."""

    def solve(self, model, solution_callback=None):
        self.parameters.catch_sigint_signal = False
        if threading.current_thread() is not threading.main_thread():
            return super().solve(model, solution_callback)
        outcome: dict = {}
        done = threading.Event()

        def work():
            try:
                outcome["status"] = cp_model.CpSolver.solve(self, model, solution_callback)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                outcome["error"] = exc
            finally:
                done.set()

        worker = threading.Thread(target=work, name="cp-sat", daemon=True)
        worker.start()
        try:
            while not done.wait(POLL_S):
                pass
        except BaseException:
            self.stop_search()
            worker.join()
            raise
        worker.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["status"]
