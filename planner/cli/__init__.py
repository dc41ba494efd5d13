"""The ``planner`` command line: argument parsing, printing and exit codes; nothing else.

This package module is the dispatcher: it builds the parser from the command modules (one per
command: :mod:`~planner.cli.evaluate` for ``eval``, :mod:`~planner.cli.solve`, ...), checks the
numeric flags (:mod:`~planner.cli.checks`), runs the command and turns errors into exit codes.
What the commands share is in :mod:`~planner.cli.helpers`; only this module imports the
command modules.
"""

from __future__ import annotations

import os
import sys

from planner.cli import (
    accuracy,
    budget,
    calibrate,
    catalog,
    evaluate,
    import_bench,
    knee,
    simulate,
    solve,
    sweep,
    train,
    validate,
)
from planner.cli.helpers import (  # noqa: F401 - the exit codes are part of this module's interface
    EXIT_INFEASIBLE,
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_UNKNOWN,
    Parser,
    UsageError,
)
from planner.errors import PlanningInputError

#: The command modules, in the order of ``planner --help``; each registers its subcommand
#: with ``add_parser(subparsers)``.
COMMANDS = (evaluate, knee, sweep, train, catalog, solve, validate, simulate, budget, accuracy, calibrate,
            import_bench)


def build_parser() -> Parser:
    parser = Parser(prog="planner", description="LLM deployment planner: which GPUs, how many, "
                    "in which configuration, how fast, at what cost per million tokens.")
    parser.add_argument("--catalog-dir", help="directory with gpus/models/quantization/prices YAML "
                        "(default: the shipped catalogs)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMANDS:
        module.add_parser(sub)
    for register in _EXTRA_COMMANDS:
        register(sub)
    return parser


#: Registration hooks added at run time (tests, plugins).
_EXTRA_COMMANDS: list = []


def main(argv=None) -> int:
    from planner.signals import exit_code, handling_signals

    try:
        with handling_signals():
            return _run(argv)
    except KeyboardInterrupt as exc:  # a signal between the handlers' install and _run
        return exit_code(exc)


def _run(argv) -> int:
    from planner.cli.checks import check_flags
    from planner.signals import exit_code

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        check_flags(parser, args)
        return args.func(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except PlanningInputError as exc:
        for line in exc.problems:
            print(f"error: {line}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt as exc:  # Ctrl-C (130), SIGTERM (143), SIGHUP (129): cleanup has run
        print("interrupted", file=sys.stderr)
        return exit_code(exc)
    except BrokenPipeError:  # output piped into `head`: not an error
        sys.stderr.close()
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the one place that turns crashes into exit 1
        if os.environ.get("PLANNER_DEBUG"):
            raise
        print(f"internal error: {type(exc).__name__}: {exc} (set PLANNER_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL


def run() -> None:
    """The ``planner`` / ``python -m planner`` entry point.

    It turns pydantic's plugins off unless the environment says otherwise: the planner uses
    none, and looking them up reads the metadata of every installed package at the first
    validation (tens of ms per run); ``PYDANTIC_DISABLE_PLUGINS=`` (empty) looks them up.
    """
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    sys.exit(main())
