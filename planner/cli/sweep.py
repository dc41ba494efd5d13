"""The ``planner sweep`` command: TPOT and throughput per batch size."""

from __future__ import annotations

from planner.cli.helpers import (EXIT_OK, add_config_args, add_efficiency_args, catalog_from,
                                 efficiency_overrides, positive_int_list, print_json)


#: The subcommand and its line in ``planner --help``.
COMMAND = "sweep"
HELP = "batch sweep: TPOT and throughput per batch size"


def add_parser(sub) -> None:
    """Register ``planner sweep`` on the ``planner`` subparsers."""
    p = sub.add_parser(COMMAND, help=HELP)
    add_config_args(p)
    p.add_argument("--context", type=float, required=True, help="mean context tokens per sequence")
    p.add_argument("--batches", type=positive_int_list, default=[1, 2, 4, 8, 16, 32, 64, 128, 256],
                   help="comma-separated batch sizes")
    add_efficiency_args(p, calibration=True)
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args) -> int:
    from planner.calculators import sweep

    table = sweep(catalog_from(args), model=args.model, gpu=args.gpu, context=args.context,
                  batches=args.batches, tp=args.tp, pp=args.pp, quant=args.quant,
                  kv_dtype=args.kv_dtype, calibration=args.calibration, overrides=efficiency_overrides(args),
                  engine=args.engine)
    if args.json:
        print_json({**table.attrs, "rows": table.to_dict(orient="records")})
    elif args.csv:
        from planner.outputs.tables import csv_text

        print(csv_text(table), end="")
    else:
        print(table.to_string(index=False))
    return EXIT_OK
