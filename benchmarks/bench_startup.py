"""Process start of the ``planner`` command: whole-process wall and CPU time of a few commands.

    python benchmarks/bench_startup.py [--reps N] [--base TREE] [--solve PROBLEM.yaml] [--cold] [--only CMD]
                                       [--compile]

Runs ``planner --help``, ``planner validate problems/chat-70b.yaml`` and ``planner solve
PROBLEM --json --no-pareto`` (default PROBLEM: ``problems/chat-70b.yaml``) as fresh
processes from the repository root, ``--reps`` times each (default 5), and prints medians
of the wall time, the CPU time (user + sys of the child, ``resource.getrusage``) and, for
the solve, the CPU time outside :func:`planner.pipeline.plan` (interpreter start, imports,
catalog and problem loading, JSON output: what this benchmark is about) and the wall time
minus the solve's own ``timings_s.total``. Each run is ``python -P -c DRIVER ARGS``: the
driver runs ``planner.cli.run()`` (what the ``planner`` command runs) and times ``plan()``
with ``time.process_time``, wrapping it when the command imports :mod:`planner.pipeline`
(an import hook: the driver itself imports nothing of the planner's before ``run()``, so the
command's imports happen as in the ``planner`` command, under its start-up settings,
:mod:`planner.cli.startup`). ``--only COMMAND`` times one of them (``help``, ``validate`` or ``solve``).

``--base TREE`` (a source tree of another revision: ``git archive REV | tar -x -C TREE``)
runs every command with that tree's code too, alternating run by run with the working
tree's, so that both see the same machine load; each run gets ``PYTHONPATH`` pointing at its
tree (``-P``: the current directory is not on ``sys.path``). The parsed-catalog cache
(``PLANNER_CACHE_DIR``) is a fresh temporary directory per tree, warmed by one untimed run,
so the times are those of a repeated run; ``--cold`` turns it off (each run parses and
validates the catalogs). Nothing is asserted. On a shared machine compare the CPU times.

Bytecode: Python compiles a module from source at every import when no ``__pycache__`` file
holds it, which is what happens to the planner's own modules (an editable install) where
``PYTHONDONTWRITEBYTECODE`` is set: that costs a few tenths of a second of CPU per run on the
``solve`` path (the installed libraries come with their bytecode). The script says so when
that variable is set and a tree has no bytecode of ``planner/``; ``--compile`` writes it
first (``python -m compileall`` on each tree's ``planner/``), as a normal install or a first
run without that variable does.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: ``planner ARGS``; for ``solve``, :func:`planner.pipeline.plan` is timed in CPU seconds (on stderr).
DRIVER = """
import importlib.util, sys, time
inside = []

def wrap(pipeline):
    real = pipeline.plan
    def timed(*args, **kwargs):
        start = time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            inside.append(time.process_time() - start)
    pipeline.plan = timed

class WrapPlanOnImport:                   # the pipeline imports when the command imports it,
    def find_spec(self, name, path=None, target=None):    # as in the `planner` command
        if name != "planner.pipeline":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run_module = spec.loader.exec_module
        def exec_module(module):
            run_module(module)
            wrap(module)
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, WrapPlanOnImport())
from planner.cli import run             # the `planner` entry point
try:
    run()
finally:
    print(f"PLAN-CPU-S {sum(inside)!r}", file=sys.stderr)
"""


def _run(tree: Path, args: list[str], cache_dir: str) -> tuple[float, float, float, str]:
    """(wall s, user+sys CPU s, CPU s inside plan(), stdout) of one ``planner ARGS`` run with TREE's code."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PLANNER_CACHE_DIR": cache_dir}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-P", "-c", DRIVER, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 3):
        raise SystemExit(f"{tree}: planner {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    plan_cpu = float(proc.stderr.rsplit("PLAN-CPU-S ", 1)[1].split()[0])
    return wall, cpu, plan_cpu, proc.stdout


def _has_bytecode(tree: Path) -> bool:
    """Whether ``tree/planner`` holds this interpreter's bytecode of its package module."""
    return (tree / "planner" / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc").exists()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--base", type=Path, help="another source tree to time alternately")
    ap.add_argument("--solve", default="problems/chat-70b.yaml", help="problem of the timed solve")
    ap.add_argument("--cold", action="store_true", help="no parsed-catalog cache (PLANNER_CACHE_DIR=off)")
    ap.add_argument("--only", choices=("help", "validate", "solve"), help="time one command only")
    ap.add_argument("--compile", action="store_true",
                    help="write the bytecode of each tree's planner/ first (python -m compileall)")
    args = ap.parse_args(argv)
    warm = ["validate", "problems/chat-70b.yaml"]
    commands = {"help": ["--help"],
                "validate": warm,
                "solve": ["solve", str(Path(args.solve).resolve()), "--json", "--no-pareto"]}
    if args.only:
        commands = {args.only: commands[args.only]}
    trees = {"work": ROOT, **({"base": args.base.resolve()} if args.base else {})}
    for name, tree in trees.items():
        if args.compile:
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "planner")], check=True)
        elif os.environ.get("PYTHONDONTWRITEBYTECODE") and not _has_bytecode(tree):
            print(f"note: {name} tree {tree}: no bytecode of planner/ and PYTHONDONTWRITEBYTECODE is set: "
                  "every run compiles its modules from source; --compile writes it first", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        caches = {name: "off" if args.cold else str(Path(tmp) / name) for name in trees}
        for name, tree in trees.items():                     # warm each tree's catalog cache
            _run(tree, warm, caches[name])
        samples: dict = {}
        for label, cmd in commands.items():
            for _ in range(args.reps):
                for name, tree in trees.items():
                    wall, cpu, plan_cpu, out = _run(tree, cmd, caches[name])
                    row = samples.setdefault((label, name), {"wall": [], "cpu": [], "cpu_out": [], "wall_out": []})
                    row["wall"].append(wall)
                    row["cpu"].append(cpu)
                    if label == "solve":
                        row["cpu_out"].append(cpu - plan_cpu)
                        row["wall_out"].append(wall - json.loads(out)["timings_s"]["total"])
    print(f"{'command':<10} {'tree':<5} {'wall s':>8} {'cpu s':>8} {'cpu outside plan()':>19} "
          f"{'wall - timings_s.total':>23}   (medians of {args.reps})")
    for (label, name), row in samples.items():
        extra = (f" {statistics.median(row['cpu_out']):19.3f} {statistics.median(row['wall_out']):23.3f}"
                 if row["cpu_out"] else "")
        print(f"{label:<10} {name:<5} {statistics.median(row['wall']):8.3f} "
              f"{statistics.median(row['cpu']):8.3f}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
