"""Time the scenario risk of the procurement example on the local executor and on Ray.

Usage: python benchmarks/bench_procurement_risk.py [--scenarios 1000] [--seed 0]
                                                   [--executors local,ray1,ray2] [--local-workers 2]

``local`` is the process pool with ``--local-workers`` processes; ``rayN`` a local Ray
instance (``ray.init(num_cpus=N)``) running at most N tasks at once. Every run must give
the same ``risk`` (checked). The serving model runs once, outside the timing; each scenario
re-solves the fleet model of every option (5 options x 8 quarters).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

from planner.problem import load_problem
from planner.procurement import budget_setup, parse_procurement
from planner.procurement.risk import scenario_risk

EXAMPLE = Path(__file__).resolve().parent.parent / "problems" / "procurement-example.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--executors", default="local,ray1,ray2")
    ap.add_argument("--local-workers", type=int, default=2)
    args = ap.parse_args()

    problem = load_problem(EXAMPLE)
    spec = parse_procurement(problem)
    setup = budget_setup(problem, spec)
    results, reference = [], None
    for name in args.executors.split(","):
        if name == "local":
            kw, ray = {"executor": "local", "workers": args.local_workers}, None
        else:
            import ray

            workers = int(name[3:])
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
            kw = {"executor": "ray", "workers": workers}
        t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
        risk = scenario_risk(setup, spec, args.scenarios, args.seed, **kw)
        wall = time.perf_counter() - t0
        # CPU seconds of the pool's worker processes (local only: Ray's workers are not children).
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - c0 if ray is None else None
        if ray is not None:
            ray.shutdown()
        doc = risk.document()
        reference = reference or doc
        results.append({"executor": name, "scenarios": args.scenarios, "wall_s": round(wall, 1),
                        "s_per_scenario": round(wall / args.scenarios, 3),
                        "worker_cpu_s_per_scenario": round(cpu / args.scenarios, 3) if cpu else None,
                        "load_average_1min": round(os.getloadavg()[0], 1),
                        "same_risk": doc == reference})
        print(json.dumps(results[-1]), flush=True)
    print(json.dumps({"risk": reference}, indent=1))


if __name__ == "__main__":
    main()
