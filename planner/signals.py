"""Signals during a command: Ctrl-C, SIGTERM and SIGHUP raise :class:`KeyboardInterrupt` in
the main thread, so that cleanup (``finally`` blocks, temporary output directories) runs, and
the exit code is 128 + the signal number. CP-SAT solves keep these handlers
(:class:`planner.interrupt.InterruptibleSolver`).
"""

from __future__ import annotations

import contextlib
import signal
import threading

#: Signals turned into :class:`Interrupted` while the command line runs (SIGINT already is one).
CAUGHT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


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
