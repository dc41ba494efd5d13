"""The command dispatcher imports only what the command it runs needs (process start, issue 19).

``planner.cli.COMMAND_MODULES`` names every command's module without importing it; a run
imports only its command's module, and ``planner solve --json`` without fronts of an
aggregated problem imports neither the simulator, the fronts, the diagnosis nor the
disaggregated serving model. ``planner --help`` still lists every
command with its help line, also with a command after ``--help``.
"""

import importlib
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_cli

#: Modules that ``planner solve P --json --no-pareto`` of a feasible problem must not import.
NOT_ON_THE_SOLVE_PATH = ("planner.verify", "planner.simulate", "planner.pareto", "planner.front_capacity",
                         "planner.diagnosis", "planner.outputs.writer", "planner.outputs.plots",
                         "planner.disagg_roles", "planner.serving.disagg",
                         "planner.cli.budget", "planner.cli.simulate", "planner.cli.accuracy",
                         "planner.cli.calibrate", "planner.cli.evaluate", "matplotlib",
                         "planner.optimize.brute", "planner.optimize.check", "planner.optimize.diagnose",
                         "planner.optimize.kbest")


def test_every_command_module_is_named_by_its_command():
    from planner import cli

    files = sorted(p.stem for p in (ROOT / "planner" / "cli").glob("*.py"))
    registering = [f for f in files if hasattr(importlib.import_module(f"planner.cli.{f}"), "add_parser")]
    assert sorted(cli.COMMAND_MODULES.values()) == registering
    for name, module in cli.COMMAND_MODULES.items():
        assert cli.command_module(name).COMMAND == name, module


@pytest.mark.parametrize("argv", [["--help"], ["--help", "solve"], ["--he", "validate", "x.yaml"]])
def test_top_level_help_lists_every_command_with_its_help_line(argv):
    from planner import cli

    out, _ = run_cli(*argv)
    words = " ".join(out.split())                      # argparse wraps the help lines
    for name in cli.COMMAND_MODULES:
        assert f" {name} {' '.join(cli.command_module(name).HELP.split())} " in words, name


def test_solve_json_imports_only_what_it_uses():
    """One real process (``planner.cli.run``, as the ``planner`` command): the JSON document
    is complete, none of :data:`NOT_ON_THE_SOLVE_PATH` was imported, and the solve ran with
    the cyclic garbage collector enabled, the start's objects frozen (planner.cli.startup),
    OpenBLAS's thread count set to 1 where the environment does not set it, and extension
    modules loading with lazy symbol binding. With the parsed-input cache warm (catalogs, the problem, the quality table) PyYAML is not imported."""
    driver = ("import atexit, gc, json, os, sys\n"
              "import planner.pipeline as pipeline\n"
              "real, seen = pipeline.plan, []\n"
              "def plan(*a, **k):\n"
              "    seen.append((gc.isenabled(), gc.get_freeze_count() > 0, os.environ['OPENBLAS_NUM_THREADS'],\n"
              "                 sys.getdlopenflags() & (os.RTLD_LAZY | os.RTLD_NOW) == os.RTLD_LAZY))\n"
              "    return real(*a, **k)\n"
              "pipeline.plan = plan\n"
              "from planner.cli import run\n"
              "sys.argv = ['planner', 'solve', 'problems/chat-70b.yaml', '--json', '--no-pareto']\n"
              "report = lambda: print(json.dumps({'modules': sorted(sys.modules), 'gc': seen}), file=sys.stderr)\n"
              "atexit.register(report)   # run() ends the process itself (startup.exit_now)\n"
              "run()\n")
    from planner import catalog, compat, parameters, quality
    from planner.problem import load_problem

    for memo in (catalog._load_cached, compat._load, quality._load, parameters.load):
        memo.cache_clear()           # loaded from (or into) this suite's parsed-input cache below
    shipped = load_problem(ROOT / "problems" / "chat-70b.yaml").catalog
    quality.quality_table(shipped), compat.engine_table(shipped)
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, cwd=ROOT, env=env)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr
    # the solve runs with the collector on, the start's objects frozen, OpenBLAS on one
    # thread, lazy symbol binding
    assert report["gc"] == [[True, True, "1", True]]
    doc = json.loads(proc.stdout)
    assert doc["status"] == "optimal" and doc["plans"] and doc["pareto"] == [] and "verification" not in doc
    loaded = set(report["modules"])
    assert "planner.cli.solve" in loaded and "ortools" in loaded        # the driver's check can fail
    imported = sorted(m for m in loaded if m.split(".")[0] in ("planner", "matplotlib")
                      and any(m == n or m.startswith(n + ".") for n in NOT_ON_THE_SOLVE_PATH))
    assert imported == []
    assert "yaml" not in loaded            # every input came from the parsed-input cache


@pytest.mark.parametrize("argv", [[name, "x.yaml", "--json"] for name in
                                  ("eval", "knee", "sweep", "train", "catalog", "solve", "validate", "simulate",
                                   "budget", "accuracy", "calibrate", "import-bench")]
                         + [["--catalog-dir", "catalogs", "solve", "x.yaml"], ["--catalog-dir=catalogs", "validate"],
                            ["sol", "x.yaml"], ["--help"], ["nonsense"], []])
def test_command_of_a_run_is_the_one_argparse_reads(argv):
    """The shortcut for a command name first gives what the probe parser reads."""
    from planner import cli

    assert cli._command_of(argv) == cli._probed_command(argv)
    if argv and argv[0] in cli.COMMAND_MODULES:
        assert cli._command_of(argv) == argv[0]
