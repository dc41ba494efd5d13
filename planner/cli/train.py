"""The ``planner train`` command: training compute C = 6ND, duration, optimizer memory."""

from __future__ import annotations

from planner.cli.helpers import EXIT_OK, catalog_from, emit, positive_int


#: The subcommand and its line in ``planner --help``.
COMMAND = "train"
HELP = "training compute C = 6ND, duration, optimizer memory"


def add_parser(sub) -> None:
    """Register ``planner train`` on the ``planner`` subparsers."""
    p = sub.add_parser(COMMAND, help=HELP)
    p.add_argument("--params", type=float, required=True, help="parameters N (e.g. 405e9)")
    p.add_argument("--tokens", type=float, required=True, help="training tokens D (e.g. 15.6e12)")
    p.add_argument("--gpu", required=True)
    p.add_argument("--gpus", type=positive_int, required=True)
    p.add_argument("--mfu", type=float, default=0.4, help="model FLOPs utilization in (0, 1]")
    p.add_argument("--pp", type=positive_int, default=1, help="pipeline stages, for the bubble")
    p.add_argument("--micro-batches", type=positive_int, help="micro-batches per step (default: pp)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_train)


def cmd_train(args) -> int:
    from planner.calculators import train

    emit(args, train(catalog_from(args), params=args.params, tokens=args.tokens, gpu=args.gpu,
                     gpus=args.gpus, mfu=args.mfu, pp=args.pp, micro_batches=args.micro_batches))
    return EXIT_OK
