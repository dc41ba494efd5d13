"""The start and the exit of a ``planner`` process: symbol binding and the cyclic garbage
collector.

The console script loads extension modules with lazy symbol binding (:func:`bind_lazily`):
numpy, pandas and OR-Tools bring some hundred shared libraries with tens of thousands of
function symbols, of which a run calls a few; Python's default (``RTLD_NOW``) resolves every
one of them while the libraries load, about 96 M instructions (2.4 % of a whole
disaggregated catalog-wide solve, measured with callgrind); lazy binding resolves a symbol
at its first call. ``LD_BIND_NOW=1`` in the environment restores immediate
binding (the dynamic loader's own switch).

Importing numpy, pandas, OR-Tools, pydantic and the planner's modules creates some 300,000
objects that live as long as the process, and none of them is garbage. Python's cyclic
collector still walks them: a young collection every :func:`gc.get_threshold` allocations
until they settle in the oldest generation, with a full collection on the way (about 60 ms
of CPU of a ``planner solve`` start on the 2-core development machine), and the
interpreter's last collections at the exit walk everything alive again, the plan's tables
included (about 0.1 s). So the ``planner`` console script (:func:`planner.cli.run`; a
``main()`` called in-process changes nothing):

1. pauses the collector before anything is imported (:func:`pause`);
2. ends the pause once the command's modules are imported and its input is loaded
   (:func:`resume`): everything alive then is frozen (:func:`gc.freeze`, never collected,
   never walked again) and the collector runs as usual for the rest of the command.
   A command function marked :func:`resumes_itself` calls :func:`resume` itself after its
   imports and loading (``solve``, ``validate``); for every other command the dispatcher
   calls it right before the command runs, so that no command computes with the collector
   paused;
3. freezes what is alive once the command has returned, right before the exit
   (:func:`freeze_for_exit`): the exit's collections then have nothing to walk;
4. ends the process without the interpreter's teardown (:func:`exit_now`): the ``atexit``
   handlers run and the standard streams are flushed, then the process exits. Tearing
   down every module and freeing the plan's tables one object at a time costs some 20 ms
   of a ``planner solve`` that the operating system does at once.

Nothing of this changes a result: objects that reference counting frees are freed as
before, and the collector only ever frees unreachable cycles.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys


def bind_lazily() -> None:
    """Load the extension modules imported from now on with lazy symbol binding
    (``RTLD_LAZY`` in place of ``RTLD_NOW`` in :func:`sys.getdlopenflags`, the other flags
    kept); a no-op where the platform has no such flags."""
    if hasattr(sys, "setdlopenflags") and hasattr(os, "RTLD_LAZY") and hasattr(os, "RTLD_NOW"):
        sys.setdlopenflags((sys.getdlopenflags() & ~os.RTLD_NOW) | os.RTLD_LAZY)


_paused = False     # whether :func:`pause` disabled the collector and :func:`resume` has not run yet


def pause() -> None:
    """Disable the cyclic collector until :func:`resume` (a no-op when it is disabled already)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """End :func:`pause`: freeze everything alive (the start's modules and input), then
    enable the collector again. A no-op without a pause (``main()`` called in-process)."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()


def resumes_itself(command):
    """Mark a command function that calls :func:`resume` itself, after its imports and its
    input's loading; the dispatcher calls it before any other command."""
    command.resumes_gc = True
    return command


def freeze_for_exit() -> None:
    """Before the exit, once the command has returned and printed: freeze what is alive, so
    that the interpreter's collections at the exit do not walk it."""
    resume()
    gc.freeze()


def exit_now(code: int) -> None:
    """End the process with exit status ``code`` as :func:`sys.exit` would, less the
    interpreter's teardown: run the ``atexit`` handlers, flush stdout and stderr (a reader
    that has gone, as ``planner ... | head``, is not an error), then :func:`os._exit`. Only for
    the console script, once the command has returned: its files are closed and its worker
    threads have ended."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):   # reader gone / stream closed
            pass
    os._exit(code)
