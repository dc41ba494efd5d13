"""The cyclic garbage collector and the symbol binding at a ``planner`` process's start and
exit (planner.cli.startup, issue 19).

In-process: the pause, its end (frozen, enabled again), no change without a pause, and the
dispatcher ending the pause before a command that does not end it itself. The real process
(``planner.cli.run``) is checked in tests/test_cli_dispatch.py.
"""

import gc
import os
import sys

import pytest

from planner import cli
from planner.cli import startup


@pytest.fixture
def collector():
    """Restore the collector's state after the test (enabled, nothing frozen by the test)."""
    was = gc.isenabled()
    frozen = gc.get_freeze_count()
    yield
    startup.resume()
    gc.unfreeze()
    if frozen:                     # whatever was frozen before the test stays frozen
        gc.freeze()
    (gc.enable if was else gc.disable)()


def test_pause_then_resume_freezes_what_is_alive_and_enables(collector):
    gc.unfreeze()
    startup.pause()
    assert not gc.isenabled()
    alive = [object() for _ in range(3)]           # noqa: F841 - alive at the resume
    startup.resume()
    assert gc.isenabled() and gc.get_freeze_count() > 0
    frozen = gc.get_freeze_count()
    startup.resume()                                # once only: no second freeze
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_without_a_pause_resume_changes_nothing(collector):
    gc.unfreeze()
    startup.resume()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()                                    # disabled by someone else: not the planner's to enable
    startup.pause()
    startup.resume()
    assert not gc.isenabled() and gc.get_freeze_count() == 0


def _register(sub):
    sub.add_parser("gc-probe").set_defaults(func=lambda args: print(gc.isenabled()) or 0)


def test_dispatcher_ends_the_pause_before_a_command_that_does_not(collector, monkeypatch, capsys):
    monkeypatch.setattr(cli, "_EXTRA_COMMANDS", [_register])
    startup.pause()
    assert cli.main(["gc-probe"]) == 0
    assert capsys.readouterr().out == "True\n"
    assert gc.isenabled()


def test_solve_and_validate_end_the_pause_themselves():
    assert cli.command_module("solve").cmd_solve.resumes_gc is True
    assert cli.command_module("validate").cmd_validate.resumes_gc is True


def test_exit_now_runs_the_exit_handlers_flushes_and_keeps_the_status(tmp_path):
    """A real process: the ``atexit`` handlers run, both streams' buffered text comes out
    whole, and the status is the one given; an error's exit status (2) through ``run()``."""
    import subprocess
    import sys

    driver = ("import atexit, sys\n"
              "from planner.cli import startup\n"
              "atexit.register(lambda: print('handler ran', file=sys.stderr))\n"
              "sys.stdout.write('x' * 200000)\n"
              "startup.exit_now(3)\n"
              "print('not reached')\n")
    proc = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True)
    assert proc.returncode == 3 and proc.stdout == "x" * 200000 and proc.stderr == "handler ran\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    proc = subprocess.run([sys.executable, "-c", "from planner.cli import run; run()", "validate", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "error:" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.skipif(not hasattr(sys, "setdlopenflags"), reason="no dlopen flags on this platform")
def test_bind_lazily_swaps_now_for_lazy_and_keeps_the_other_flags():
    before = sys.getdlopenflags()
    try:
        sys.setdlopenflags(os.RTLD_NOW | os.RTLD_GLOBAL)
        startup.bind_lazily()
        assert sys.getdlopenflags() == os.RTLD_LAZY | os.RTLD_GLOBAL
        startup.bind_lazily()                       # idempotent
        assert sys.getdlopenflags() == os.RTLD_LAZY | os.RTLD_GLOBAL
    finally:
        sys.setdlopenflags(before)
