"""Process start of the ``planner`` command: whole-process wall and CPU time of a few commands.

    python benchmarks/bench_startup.py [--reps N] [--base TREE] [--solve PROBLEM.yaml]

Runs ``python -m planner ...`` as fresh processes, from the repository root, for
``planner --help``, ``planner validate problems/chat-70b.yaml`` and ``planner solve PROBLEM
--json --no-pareto`` (default PROBLEM: ``problems/chat-70b.yaml``), ``--reps`` times each
(default 5), and prints the median wall time, the median CPU time (user + sys of the child,
from ``resource.getrusage``) and, for the solve, the median of the wall time outside the
solve's own timer (the wall time minus ``timings_s.total`` of its JSON: start, imports,
loading, output). ``--base TREE`` (a
source tree of another revision, e.g. from ``git archive REV | tar -x -C TREE``) runs each
command with that tree's code too, alternating run by run with the working tree's, so that
both see the same machine load. Each run gets ``PYTHONPATH`` pointing at its tree and ``python
-P`` (the current directory is not on ``sys.path``). The
parsed-catalog cache (``PLANNER_CACHE_DIR``) is a fresh temporary directory warmed by one
untimed run per tree, so the times are those of a repeated run (``--cold``: disabled, each
run parses and validates the catalogs). Nothing is asserted; the machine's load shows in the
wall times, compare the CPU times.
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


def _run(tree: Path, args: list[str], cache_dir: str) -> tuple[float, float, str]:
    """(wall s, user+sys CPU s, stdout) of one ``python -m planner ARGS`` run with TREE's code."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PLANNER_CACHE_DIR": cache_dir}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-P", "-m", "planner", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 3):
        raise SystemExit(f"{tree}: planner {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--base", type=Path, help="another source tree to time alternately")
    ap.add_argument("--solve", default="problems/chat-70b.yaml", help="problem of the timed solve")
    ap.add_argument("--cold", action="store_true", help="no parsed-catalog cache (PLANNER_CACHE_DIR=off)")
    args = ap.parse_args(argv)
    commands = {"--help": ["--help"],
                "validate": ["validate", "problems/chat-70b.yaml"],
                "solve": ["solve", str(Path(args.solve).resolve()), "--json", "--no-pareto"]}
    trees = {"work": ROOT, **({"base": args.base.resolve()} if args.base else {})}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        caches = {name: "off" if args.cold else str(Path(tmp) / name) for name in trees}
        for name, tree in trees.items():                     # warm each tree's catalog cache
            _run(tree, commands["validate"], caches[name])
        samples: dict = {}
        for label, cmd in commands.items():
            for _ in range(args.reps):
                for name, tree in trees.items():
                    wall, cpu, out = _run(tree, cmd, caches[name])
                    row = samples.setdefault((label, name), {"wall": [], "cpu": [], "outside": []})
                    row["wall"].append(wall)
                    row["cpu"].append(cpu)
                    if label == "solve":
                        row["outside"].append(wall - json.loads(out)["timings_s"]["total"])
    print(f"{'command':<10} {'tree':<5} {'wall s':>8} {'cpu s':>8} {'wall - timings_s.total':>23}"
          f"   (medians of {args.reps})")
    for (label, name), row in samples.items():
        outside = f"{statistics.median(row['outside']):23.3f}" if row["outside"] else ""
        print(f"{label:<10} {name:<5} {statistics.median(row['wall']):8.3f} "
              f"{statistics.median(row['cpu']):8.3f} {outside}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
