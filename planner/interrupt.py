"""CP-SAT solves that keep the planner's signal handlers (Ctrl-C and termination end a solve cleanly).

CP-SAT installs its own SIGINT handler for the length of a solve and afterwards resets
SIGINT to the operating system's default, so a Ctrl-C after the first solve would kill
the process outright: no ``finally`` block, temporary output directories left behind, no
exit code 130. :class:`InterruptibleSolver` keeps CP-SAT away from the signal
(``catch_sigint_signal = False``) and runs the search in a worker thread, so the main
thread keeps the planner's own handlers: a signal stops the search (``stop_search``) and
raises :class:`KeyboardInterrupt` there. :func:`planner.signals.handling_signals` turns SIGTERM
and SIGHUP into the same exception, so cleanup runs for every signal that can be caught.

:class:`Beside` runs a call (a solve) in a worker thread while the main thread does other
work; a signal or error in the main thread stops the solves of that call and waits for it.
"""

from __future__ import annotations

import threading

from ortools.sat.python import cp_model

#: How often the main thread wakes while a solve runs [s] (it also wakes when the solve ends).
POLL_S = 0.2
#: How often :meth:`Beside.cancel` stops the solves of its call again until the call ends [s].
CANCEL_POLL_S = 0.02

# The InterruptibleSolvers solving in each worker thread (by thread id), for Beside.cancel.
_SOLVING: dict[int, set] = {}
_LOCK = threading.Lock()


class InterruptibleSolver(cp_model.CpSolver):
    """A CpSolver whose ``solve`` leaves signal handling to the planner (see the module docstring)."""

    def solve(self, model, solution_callback=None):
        self.parameters.catch_sigint_signal = False
        if threading.current_thread() is not threading.main_thread():
            me = threading.get_ident()
            with _LOCK:
                _SOLVING.setdefault(me, set()).add(self)
            try:
                return super().solve(model, solution_callback)
            finally:
                with _LOCK:
                    _SOLVING[me].discard(self)
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


class Beside:
    """``fn()`` run in a worker thread, started at once; :meth:`result` waits for its value.

    Its solves (:class:`InterruptibleSolver` in that thread) leave signals to the main
    thread; if the main thread leaves the ``with`` block by an exception (a signal, an
    error), :meth:`cancel` stops them and waits for the call to end.
    """

    def __init__(self, fn):
        self._outcome: dict = {}
        self._thread = threading.Thread(target=self._run, args=(fn,), name="beside", daemon=True)
        self._thread.start()

    def _run(self, fn) -> None:
        try:
            self._outcome["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised by result()
            self._outcome["error"] = exc
        finally:
            with _LOCK:
                _SOLVING.pop(threading.get_ident(), None)

    def result(self):
        """The call's value (its exception re-raised); cancels it if the wait is interrupted."""
        try:
            while self._thread.is_alive():
                self._thread.join(POLL_S)
        except BaseException:
            self.cancel()
            raise
        if "error" in self._outcome:
            raise self._outcome["error"]
        return self._outcome["value"]

    def cancel(self) -> None:
        """Stop the call's solves (again, until it ends) and wait for it."""
        ident = self._thread.ident
        while self._thread.is_alive():
            with _LOCK:
                solvers = list(_SOLVING.get(ident, ()))
            for solver in solvers:
                solver.stop_search()
            self._thread.join(CANCEL_POLL_S)

    def __enter__(self) -> "Beside":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is not None:
            self.cancel()
