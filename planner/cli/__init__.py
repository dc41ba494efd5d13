"""The ``planner`` command line: argument parsing, printing and exit codes; nothing else.

This package module is the dispatcher: it builds the parser from the command modules (one per
command: :mod:`~planner.cli.evaluate` for ``eval``, :mod:`~planner.cli.solve`, ...), checks the
numeric flags (:mod:`~planner.cli.checks`), runs the command and turns errors into exit codes.
What the commands share is in :mod:`~planner.cli.helpers`; only this module imports the
command modules.
"""

from __future__ import annotations

import importlib
import os
import sys

from planner.cli import startup
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

#: The commands in the order of ``planner --help``: command name -> its module of
#: ``planner.cli``, which names it (``COMMAND``, ``HELP``) and registers it with its flags
#: (``add_parser(subparsers)``). A run imports only the module of its command (process start;
#: tests/test_cli_dispatch.py checks the names against the modules).
COMMAND_MODULES = {"eval": "evaluate", "knee": "knee", "sweep": "sweep", "train": "train", "catalog": "catalog",
                   "solve": "solve", "validate": "validate", "simulate": "simulate", "budget": "budget",
                   "accuracy": "accuracy", "calibrate": "calibrate", "import-bench": "import_bench"}


def command_module(name: str):
    """The module of ``planner.cli`` that registers command ``name`` (imported on first use)."""
    return importlib.import_module(f"{__name__}.{COMMAND_MODULES[name]}")


def build_parser(command: str | None = None, add_help: bool = True, help_lines: bool = True) -> Parser:
    """The ``planner`` parser: every command with its flags, or with ``command`` only that
    command's flags and the others by name and help line (``help_lines=False``: by name only).

    Building a command's flags imports what their help texts show (the serving parameters'
    seed values, the simulator's defaults), so :func:`main` builds only the flags of the
    command it runs (:func:`_command_of`); ``planner --help`` and errors before the command
    need none (``command=""``). The help lines of the other commands import their modules, so
    :func:`main` asks for them only when ``planner --help`` can print them.
    """
    parser = Parser(prog="planner", add_help=add_help, description="LLM deployment planner: which GPUs, "
                    "how many, in which configuration, how fast, at what cost per million tokens.")
    parser.add_argument("--catalog-dir", help="directory with gpus/models/quantization/prices YAML "
                        "(default: the shipped catalogs)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name in COMMAND_MODULES:
        if command is None or name == command:
            command_module(name).add_parser(sub)
        elif help_lines:
            sub.add_parser(name, help=command_module(name).HELP, add_help=False)
        else:
            sub.add_parser(name, add_help=False)
    for register in _EXTRA_COMMANDS:
        register(sub)
    return parser


def _command_of(argv) -> str:
    """The command ``argv`` runs, as argparse reads it (options, abbreviations), or "" when it
    names none (``planner --help``, a usage error: the full parse reports it).

    ``planner COMMAND ...`` (a command name first, the usual form) is that command without
    building the probe parser (process start: a parser with every subcommand costs some ms,
    mostly argparse's message lookups); anything else is parsed (:func:`_probed_command`)."""
    if argv and argv[0] in COMMAND_MODULES:
        return argv[0]
    return _probed_command(argv)


def _probed_command(argv) -> str:
    """:func:`_command_of` by a parse of ``argv`` with every command's name and no flags."""
    probe = build_parser(command="", add_help=False, help_lines=False)
    try:
        args, _ = probe.parse_known_args(argv)
    except UsageError:
        return ""
    return args.command or ""


def _may_print_help(argv) -> bool:
    """Whether ``argv`` may ask for help (``-h``, ``--help`` or an abbreviation of it), so
    that ``planner --help`` with a command after it still lists every command's help line."""
    return any(str(arg).startswith(("-h", "--h")) for arg in argv)


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

    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_of(argv), help_lines=_may_print_help(argv))
    try:
        args = parser.parse_args(argv)
        check_flags(parser, args)
        if not getattr(args.func, "resumes_gc", False):
            startup.resume()          # the collector runs while the command computes
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
    Likewise numpy's OpenBLAS gets one thread (``OPENBLAS_NUM_THREADS=1``) unless the
    environment sets it: the planner does no linear algebra (its numpy work is element-wise,
    and the serving kernel runs its own threads, :mod:`planner.serving.parallel`), and
    starting a thread per core when numpy is imported costs some 30 ms of CPU per run.
    Extension modules load with lazy symbol binding (:func:`planner.cli.startup.bind_lazily`;
    ``LD_BIND_NOW=1`` binds at load). The cyclic garbage collector is paused while the
    command's modules import and frozen before the exit, and the process ends without tearing
    its modules down (:mod:`planner.cli.startup`, :func:`planner.cli.startup.exit_now`).
    """
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    startup.bind_lazily()
    startup.pause()
    code = main()
    startup.freeze_for_exit()
    startup.exit_now(code)
