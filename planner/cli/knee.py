"""The ``planner knee`` command: the decode batch knee and the recommended ``max_num_seqs``."""

from __future__ import annotations

from planner.cli.helpers import EXIT_OK, add_config_args, catalog_from, emit


#: The subcommand and its line in ``planner --help``.
COMMAND = "knee"
HELP = "decode batch knee B_knee and recommended max_num_seqs"


def add_parser(sub) -> None:
    """Register ``planner knee`` on the ``planner`` subparsers."""
    p = sub.add_parser(COMMAND, help=HELP)
    add_config_args(p, gpu_required=False)
    p.add_argument("--context", type=float, required=True, help="mean context tokens per sequence")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_knee)


def cmd_knee(args) -> int:
    from planner.calculators import knee

    emit(args, knee(catalog_from(args), model=args.model, context=args.context,
                    quant=args.quant, kv_dtype=args.kv_dtype))
    return EXIT_OK
