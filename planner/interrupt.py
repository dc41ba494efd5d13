"""Signals during a run: Ctrl-C and termination end the planner cleanly, CP-SAT solves included.

CP-SAT installs its own SIGINT handler for the length of a solve and afterwards resets
SIGINT to the operating system's default, so a Ctrl-C after the first solve would kill
the process outright: no ``finally`` block, temporary output directories left behind, no
exit code 130. :class:`InterruptibleSolver` keeps CP-SAT away from the signal
(``catch_sigint_signal = False``) and runs the search in a worker thread, so the main
thread keeps the planner's own handlers: a signal stops the search (``stop_search``) and
raises :class:`KeyboardInterrupt` there. :func:`handling_signals` turns SIGTERM and SIGHUP
into the same exception, so cleanup runs for every signal that can be caught.
"""

from __future__ import annotations

import contextlib
import signal
import threading

from ortools.sat.python import cp_model

#: Signals turned into :class:`Interrupted` while the command line runs (SIGINT already is one).
CAUGHT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
#: How often the main thread wakes while a solve runs [s] (it also wakes when the solve ends).
POLL_S = 0.2


class Interrupted(KeyboardInterrupt):
    """A caught signal; ``signum`` gives the exit code 128 + signum (130 for Ctrl-C)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def exit_code(exc: KeyboardInterrupt) -> int:
    """128 + the signal number (130 for SIGINT), the shells' convention."""
    return 128 + getattr(exc, "signum", int(signal.SIGINT))


def _raise(signum, _frame):
    raise Interrupted(signum)


@contextlib.contextmanager
def handling_signals():
    """While the block runs (in the main thread): SIGINT raises KeyboardInterrupt and SIGTERM
    and SIGHUP raise :class:`Interrupted`; the previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    try:
        if signal.getsignal(signal.SIGINT) in (signal.SIG_DFL, None):
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in CAUGHT_SIGNALS:
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                previous[sig] = signal.signal(sig, _raise)
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
