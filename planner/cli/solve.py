"""The ``planner solve`` command: plan a deployment (minimum $/1M tokens under the SLOs)."""

from __future__ import annotations

import sys

from planner.cli import startup
from planner.cli.helpers import (EXIT_INFEASIBLE, EXIT_OK, EXIT_UNKNOWN, catalog_from, confidence, fraction,
                                 positive_int, print_json, print_warnings)
from planner.errors import PlanningInputError


#: The subcommand and its line in ``planner --help``.
COMMAND = "solve"
HELP = "plan a deployment: minimum $/1M tokens under the SLOs"


def add_parser(sub) -> None:
    """Register ``planner solve`` on the ``planner`` subparsers."""
    p = sub.add_parser(COMMAND, help=HELP)
    p.add_argument("problem", help="problem YAML file")
    p.add_argument("--top", type=positive_int, help="how many ranked plans (default: the problem's top_k, 5)")
    p.add_argument("--time-limit", type=float, help="CP-SAT time limit per solve [s]")
    p.add_argument("--no-pareto", action="store_true", help="skip the Pareto fronts (same as --fronts none)")
    p.add_argument("--fronts", choices=["none", "mixed", "used", "all"],
                   help="which Pareto fronts: none, mixed (all GPU types together; the default), used (mixed "
                        "plus each GPU type in some plan or mixed-front point), all (every GPU type)")
    p.add_argument("--confidence", type=confidence,
                   help="quantile of the serving model's error the capacities hold at, in [0.5, 1) "
                        "(default: the problem's optimize.confidence, 0.8; 0.5 = central prediction)")
    p.add_argument("--max-load-fraction", type=fraction,
                   help="most load per replica relative to its central capacity at SLO, in (0, 1] "
                        "(default: the problem's optimize.max_load_fraction, 0.9)")
    p.add_argument("--verify", action="store_true",
                   help="simulate one replica of every deployment with its routed traffic mix: adds "
                        "simulated_ttft_p95_s / simulated_tpot_p95_s per workload")
    p.add_argument("--out", help="directory for the report, CSVs, plots and launch settings")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_solve)


@startup.resumes_itself
def cmd_solve(args) -> int:
    from planner.outputs.result_json import result_text, result_to_dict
    from planner.pipeline import plan
    from planner.problem import load_problem

    problem = _with_margins(load_problem(args.problem, catalog_from(args)), args)
    startup.resume()              # imported and loaded: the collector runs during the solve
    if args.out:
        from planner.outputs.writer import check_out_dir

        check_out_dir(args.out)
    print_warnings(problem)
    print(f"solving {problem.name} ...", file=sys.stderr)
    fronts = "none" if args.no_pareto else args.fronts
    result = plan(problem, top_k=args.top, time_limit_s=args.time_limit, pareto=fronts != "none", fronts=fronts,
                  verify=args.verify)
    if args.out:
        from planner.outputs.writer import write_outputs

        try:
            write_outputs(result, args.out)
        except OSError as exc:  # disk full, permissions changed meanwhile: nothing was replaced
            raise PlanningInputError(f"--out {args.out}: cannot write: {exc}") from None
        print(f"wrote {args.out}", file=sys.stderr)
    if args.json:
        print_json(result_to_dict(result))
    else:
        print(result_text(result))
    if result.plans:
        return EXIT_OK
    return EXIT_UNKNOWN if result.status == "unknown" else EXIT_INFEASIBLE


def _with_margins(problem, args):
    """``problem`` with the ``--confidence`` / ``--max-load-fraction`` flags over its ``optimize:``."""
    changes = {k: v for k, v in (("confidence", args.confidence), ("max_load_fraction", args.max_load_fraction))
               if v is not None}
    if not changes:
        return problem
    spec = problem.spec.model_copy(update={"optimize": problem.spec.optimize.model_copy(update=changes)})
    return problem.model_copy(update={"spec": spec})
