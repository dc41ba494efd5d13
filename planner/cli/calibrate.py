"""The ``planner calibrate`` command: fit the serving-model parameters to measurements."""

from __future__ import annotations

import datetime as _dt
import os
import sys
from pathlib import Path

from planner.cli.helpers import EXIT_OK, catalog_from, fmt, positive_int, print_json, print_rows


#: The subcommand and its line in ``planner --help``.
COMMAND = "calibrate"
HELP = "fit the serving-model efficiencies and overheads to measurements"


def add_parser(sub) -> None:
    """Register ``planner calibrate`` on the ``planner`` subparsers."""
    p = sub.add_parser(COMMAND, help=HELP)
    p.add_argument("file", nargs="+", help="measurement CSV(s), fitted together")
    p.add_argument("--out", default="catalogs/calibration.yaml", help="calibration YAML to write")
    p.add_argument("--min-rows", type=positive_int, default=20, help="rows a GPU/engine/model group needs")
    p.add_argument("--cv", type=positive_int,
                   help="also run K-fold cross-validation grouped by (model, GPU) and store the "
                        "prediction intervals of its out-of-fold errors")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_calibrate)


def fit_date() -> str:
    """The UTC date a fit records: ``SOURCE_DATE_EPOCH`` (seconds, the reproducible-builds
    convention) where set, else today. A date, not a time: a re-run of the same command on
    the same day writes the same bytes (``cmp`` checks a shipped calibration)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    when = (_dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc) if epoch.isdigit()
            else _dt.datetime.now(_dt.timezone.utc))
    return when.date().isoformat()


def calibration_provenance(files, measurements, rows, skipped, options, out, cv: int | None = None) -> dict:
    """The provenance block of a calibration YAML: source files (name, SHA-256, rows), the
    fitting command, objective and settings."""
    from planner.accuracy import load_measurement_files
    from planner.calibration import LEVEL_PARAMETERS, file_sha256

    return {
        "calibration_version": fit_date(),
        "source": {"files": [{"file": Path(f).name, "sha256": file_sha256(f),
                              "rows": int(len(load_measurement_files([f])))} for f in files],
                   "rows": int(len(measurements)), "rows_fitted": int(len(rows)),
                   "rows_skipped": int(len(skipped))},
        "fitted": {"date": fit_date(),
                   "command": f"planner calibrate {' '.join(map(str, files))} --out {out}"
                              + (f" --cv {cv}" if cv else ""),
                   "objective": "per group: weighted mean of min(|ln(pred/measured)|, "
                                f"{options.clip_log_error}) (metric families weigh the same) + prior "
                                f"(weight {options.prior_weight}) toward the parent values",
                   "min_rows": options.min_rows, "min_other": options.min_other,
                   "min_other_by_parameter": {f"{level}.{n}": spec.min_other
                                              for level, specs in LEVEL_PARAMETERS.items()
                                              for n, spec in specs.items() if spec.min_other is not None},
                   "rounds": options.rounds, "iterations": options.iterations},
    }


def cmd_calibrate(args) -> int:
    from planner.accuracy import accuracy_report, load_measurement_files, prepare_rows
    from planner.calibration import write_calibration
    from planner.calibration_fit import FitOptions, fit_calibration
    from planner.errors import PlanningInputError

    catalog = catalog_from(args)
    measurements = load_measurement_files(args.file)
    rows, skipped = prepare_rows(measurements, catalog)
    if len(rows) < 1:
        raise PlanningInputError(f"{', '.join(args.file)}: no row can be predicted (nothing to calibrate)")
    options = FitOptions(min_rows=args.min_rows)
    provenance = calibration_provenance(args.file, measurements, rows, skipped, options, args.out, args.cv)
    print(f"fitting {len(rows)} rows of {', '.join(args.file)} ...", file=sys.stderr)
    calibration = fit_calibration(catalog, rows, options=options, provenance=provenance)
    before = accuracy_report(catalog, measurements, None)["by_family"]
    after = accuracy_report(catalog, measurements, calibration)["by_family"]
    summary = {"out": args.out, "rows_fitted": int(len(rows)),
               "median_ape_pct": {f: {"seed": before.get(f, {}).get("median_ape_pct"),
                                      "calibrated": after[f]["median_ape_pct"]} for f in after}}
    if args.cv:
        calibration = with_cross_validation(catalog, rows, calibration, args.cv, options)
        summary["cross_validation"] = calibration.provenance["fitted"]["cross_validation"]
    write_calibration(calibration, args.out)
    summary["calibration"] = calibration.describe()
    if args.json:
        print_json(summary)
    else:
        print(f"wrote {args.out}")
        print_rows(["family", "seed_median_ape_%", "calibrated_median_ape_%"],
                    [[f, fmt(v["seed"]), fmt(v["calibrated"])]
                     for f, v in sorted(summary["median_ape_pct"].items())])
        if args.cv:
            print_rows(["family", "in_fold_%", "out_of_fold_%"],
                        [[f, v["in_fold_median_ape_pct"], v["out_of_fold_median_ape_pct"]]
                         for f, v in sorted(summary["cross_validation"]["by_family"].items())])
    return EXIT_OK


def with_cross_validation(catalog, rows, calibration, folds: int, options):
    """``calibration`` with its (model, GPU) K-fold cross-validation summary in the provenance
    and the prediction intervals of its out-of-fold errors (``intervals``)."""
    from dataclasses import replace

    from planner.accuracy import add_families
    from planner.calibration_cv import cross_validate
    from planner.calibration_intervals import fit_intervals

    rows = add_families(rows.reset_index(drop=True))
    cv = cross_validate(catalog, rows, folds, options)
    vendors = {g: catalog.gpu(g).vendor for g in sorted(catalog.gpus.entries)}
    intervals = fit_intervals(rows, rows["id"].map(cv["predictions"]).to_numpy(float), vendors,
                              f"{cv['folds']}-fold cross-validation grouped by (model, GPU)")
    fitted = {**calibration.provenance.get("fitted", {}),
              "cross_validation": {"folds": cv["folds"], "grouped_by": cv["grouped_by"],
                                   "by_family": cv["by_family"], "per_fold": cv["per_fold"]}}
    return replace(calibration, provenance={**calibration.provenance, "fitted": fitted}, intervals=intervals)
