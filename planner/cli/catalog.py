"""The ``planner catalog`` command: catalog entries with their sources."""

from __future__ import annotations

from planner.cli.helpers import EXIT_OK, catalog_from, print_json


#: The subcommand and its line in ``planner --help``.
COMMAND = "catalog"
HELP = "list catalog entries with their sources"


def add_parser(sub) -> None:
    """Register ``planner catalog`` on the ``planner`` subparsers."""
    p = sub.add_parser(COMMAND, help=HELP)
    p.add_argument("kind", choices=["gpus", "models", "quantization", "prices", "engines", "quality"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_catalog)


def cmd_catalog(args) -> int:
    from planner.catalog_views import catalog_table

    table = catalog_table(catalog_from(args), args.kind)
    if args.json:
        print_json({args.kind: table.to_dict(orient="records")})
    else:
        import pandas as pd

        with pd.option_context("display.max_rows", None, "display.max_columns", None,
                               "display.width", 200, "display.max_colwidth", 40):
            print(table.drop(columns=[c for c in ("source", "notes") if c in table]).to_string(index=False))
    return EXIT_OK
