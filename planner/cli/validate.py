"""The ``planner validate`` command: check a problem YAML without solving it."""

from __future__ import annotations

from planner.cli import startup
from planner.cli.helpers import EXIT_OK, catalog_from, print_json, print_warnings


#: The subcommand and its line in ``planner --help``.
COMMAND = "validate"
HELP = "check a problem YAML without solving it"


def add_parser(sub) -> None:
    """Register ``planner validate`` on the ``planner`` subparsers."""
    p = sub.add_parser(COMMAND, help=HELP)
    p.add_argument("problem")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_validate)


@startup.resumes_itself
def cmd_validate(args) -> int:
    from planner.problem import load_problem

    problem = load_problem(args.problem, catalog_from(args))
    startup.resume()              # imported and loaded
    if problem.spec.procurement is not None:
        from planner.procurement.spec import parse_procurement

        parse_procurement(problem)  # the `procurement:` section is checked too (exit 2 naming the path)
    print_warnings(problem)
    summary = {"problem": problem.name, "valid": True, "workloads": [w.name for w in problem.workloads],
               "gpus": list(problem.gpus), "quantization": list(problem.quantization),
               "kv_cache_dtypes": list(problem.kv_cache_dtypes), "warnings": list(problem.warnings)}
    if args.json:
        print_json(summary)
    else:
        print(f"{args.problem}: valid ({len(problem.workloads)} workloads, {len(problem.gpus)} GPU types)")
    return EXIT_OK
