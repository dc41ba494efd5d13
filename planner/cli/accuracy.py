"""The ``planner accuracy`` command: predict published measurements and report the errors."""

from __future__ import annotations

import sys

from planner.cli.helpers import EXIT_OK, catalog_from, fmt, positive_int, print_json, print_rows


#: The subcommand and its line in ``planner --help``.
COMMAND = "accuracy"
HELP = "predict published measurements and report the errors"


def add_parser(sub) -> None:
    """Register ``planner accuracy`` on the ``planner`` subparsers."""
    p = sub.add_parser(COMMAND, help=HELP)
    p.add_argument("file", nargs="+",
                   help="measurement CSV(s) (schema: benchmarks/data/README-measurements.md)")
    p.add_argument("--calibration", default="default",
                   help="'none' (the seeds' parameters), 'default' (catalogs/calibration.yaml) or a path")
    p.add_argument("--top", type=positive_int, default=20, help="how many worst rows to list")
    p.add_argument("--rows-out", metavar="CSV",
                   help="also write every row with its prediction and APE (or why it was skipped)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_accuracy)


def cmd_accuracy(args) -> int:
    from planner.accuracy import accuracy_report, load_measurement_files, rows_table, score_rows
    from planner.calibration import load_calibration

    catalog = catalog_from(args)
    measurements = load_measurement_files(args.file)
    calibration = load_calibration(args.calibration)
    if args.rows_out:
        from planner.atomic import atomic_write_text

        scored = score_rows(catalog, measurements, calibration)
        atomic_write_text(args.rows_out, rows_table(*scored).to_csv(index=False))
        print(f"wrote {args.rows_out}", file=sys.stderr)
    else:
        scored = None
    report = accuracy_report(catalog, measurements, calibration, worst=args.top, scored=scored)
    if args.json:
        print_json(report)
        return EXIT_OK
    used = report["calibration"]
    print(f"{', '.join(args.file)}: {report['rows']} rows, {report['predicted']} predicted, "
          f"{sum(report['skipped'].values())} skipped; calibration: {used['calibration']}")
    print("\nper metric family (median / mean absolute percentage error):")
    print_rows(["family", "n", "median_ape_%", "mean_ape_%"],
                [[f, s["n"], fmt(s["median_ape_pct"]), fmt(s["mean_ape_pct"])]
                 for f, s in sorted(report["by_family"].items())])
    print("\nper metric:")
    print_rows(["metric", "n", "median_ape_%", "mean_ape_%"],
                [[m, s["n"], fmt(s["median_ape_pct"]), fmt(s["mean_ape_pct"])]
                 for m, s in sorted(report["by_metric"].items())])
    if report["skipped"]:
        print("\nskipped:")
        print_rows(["reason", "rows"], [[k, v] for k, v in sorted(report["skipped"].items())])
    print(f"\n{len(report['worst'])} worst rows:")
    print_rows(["id", "metric", "value", "prediction", "ape_%", "model", "gpu", "engine"],
                [[w["id"][:40], w["metric"], fmt(w["value"]), fmt(w["prediction"]), fmt(w["ape_pct"], 3),
                  w["model"], w["gpu"], w["engine"]] for w in report["worst"]])
    return EXIT_OK
