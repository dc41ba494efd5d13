"""The ``planner accuracy``, ``planner calibrate`` and ``planner import-bench`` commands."""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path

from planner import jsonio

EXIT_OK = 0


def _catalog(args):
    from planner.catalog import load_catalog

    return load_catalog(getattr(args, "catalog_dir", None))


def _print_rows(header: list[str], rows: list[list]) -> None:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(header)]
    print("  ".join(f"{h:<{w}}" for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(f"{str(v):<{w}}" for v, w in zip(r, widths)))


def _fmt(value, digits=4) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


# ---------------------------------------------------------------- accuracy


def cmd_accuracy(args) -> int:
    from planner.accuracy import accuracy_report, load_measurement_files, rows_table, score_rows
    from planner.calibration import load_calibration

    catalog = _catalog(args)
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
        print(jsonio.dumps(report))
        return EXIT_OK
    used = report["calibration"]
    print(f"{', '.join(args.file)}: {report['rows']} rows, {report['predicted']} predicted, "
          f"{sum(report['skipped'].values())} skipped; calibration: {used['calibration']}")
    print("\nper metric family (median / mean absolute percentage error):")
    _print_rows(["family", "n", "median_ape_%", "mean_ape_%"],
                [[f, s["n"], _fmt(s["median_ape_pct"]), _fmt(s["mean_ape_pct"])]
                 for f, s in sorted(report["by_family"].items())])
    print("\nper metric:")
    _print_rows(["metric", "n", "median_ape_%", "mean_ape_%"],
                [[m, s["n"], _fmt(s["median_ape_pct"]), _fmt(s["mean_ape_pct"])]
                 for m, s in sorted(report["by_metric"].items())])
    if report["skipped"]:
        print("\nskipped:")
        _print_rows(["reason", "rows"], [[k, v] for k, v in sorted(report["skipped"].items())])
    print(f"\n{len(report['worst'])} worst rows:")
    _print_rows(["id", "metric", "value", "prediction", "ape_%", "model", "gpu", "engine"],
                [[w["id"][:40], w["metric"], _fmt(w["value"]), _fmt(w["prediction"]), _fmt(w["ape_pct"], 3),
                  w["model"], w["gpu"], w["engine"]] for w in report["worst"]])
    return EXIT_OK


def calibration_provenance(files, measurements, rows, skipped, options, out, cv: int | None = None) -> dict:
    """The provenance block of a calibration YAML: source files (name, SHA-256, rows), the
    fitting command, objective and settings."""
    from planner.accuracy import load_measurement_files
    from planner.calibration import LEVEL_PARAMETERS, file_sha256

    return {
        "calibration_version": _dt.date.today().isoformat(),
        "source": {"files": [{"file": Path(f).name, "sha256": file_sha256(f),
                              "rows": int(len(load_measurement_files([f])))} for f in files],
                   "rows": int(len(measurements)), "rows_fitted": int(len(rows)),
                   "rows_skipped": int(len(skipped))},
        "fitted": {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
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


# ---------------------------------------------------------------- calibrate


def cmd_calibrate(args) -> int:
    from planner.accuracy import accuracy_report, load_measurement_files, prepare_rows
    from planner.calibration import write_calibration
    from planner.calibration_fit import FitOptions, fit_calibration
    from planner.schema import PlanningInputError

    catalog = _catalog(args)
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
        print(jsonio.dumps(summary))
    else:
        print(f"wrote {args.out}")
        _print_rows(["family", "seed_median_ape_%", "calibrated_median_ape_%"],
                    [[f, _fmt(v["seed"]), _fmt(v["calibrated"])]
                     for f, v in sorted(summary["median_ape_pct"].items())])
        if args.cv:
            _print_rows(["family", "in_fold_%", "out_of_fold_%"],
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


# ---------------------------------------------------------------- import-bench


def cmd_import_bench(args) -> int:
    import pandas as pd

    from planner.import_bench import BenchContext, import_results, resolve_ids

    catalog = _catalog(args)
    ctx = BenchContext(engine=args.engine, model=args.model, gpu=args.gpu, tp=args.tp, pp=args.pp,
                       num_gpus=args.num_gpus, weight_dtype=args.weight_dtype or "",
                       kv_dtype=args.kv_dtype or "", engine_version=args.engine_version or "",
                       isl=args.isl, osl=args.osl)
    frame = resolve_ids(import_results(args.file, ctx), catalog)
    out = Path(args.out)
    if args.append and out.is_file():
        frame = pd.concat([pd.read_csv(out, dtype={"id": str}), frame], ignore_index=True)
        frame = frame.drop_duplicates("id", keep="last")
    from planner.atomic import atomic_write_text

    atomic_write_text(out, frame.to_csv(index=False))
    summary = {"out": str(out), "rows": int(len(frame)), "metrics": sorted(frame["metric"].unique()),
               "models": sorted(frame["model"].astype(str).unique()),
               "gpus": sorted(frame["gpu"].astype(str).unique())}
    if args.json:
        print(jsonio.dumps(summary))
    else:
        print(f"wrote {len(frame)} measurement rows to {out} "
              f"(models {', '.join(summary['models'])}; GPUs {', '.join(summary['gpus'])})")
    return EXIT_OK


# ---------------------------------------------------------------- parsers


def add_accuracy_parsers(sub) -> None:
    """Register ``accuracy``, ``calibrate`` and ``import-bench`` on the ``planner`` subparsers."""
    from planner.cli import _positive_int

    p = sub.add_parser("accuracy", help="predict published measurements and report the errors")
    p.add_argument("file", nargs="+",
                   help="measurement CSV(s) (schema: benchmarks/data/README-measurements.md)")
    p.add_argument("--calibration", default="default",
                   help="'none' (the seeds' parameters), 'default' (catalogs/calibration.yaml) or a path")
    p.add_argument("--top", type=_positive_int, default=20, help="how many worst rows to list")
    p.add_argument("--rows-out", metavar="CSV",
                   help="also write every row with its prediction and APE (or why it was skipped)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_accuracy)

    p = sub.add_parser("calibrate", help="fit the serving-model efficiencies and overheads to measurements")
    p.add_argument("file", nargs="+", help="measurement CSV(s), fitted together")
    p.add_argument("--out", default="catalogs/calibration.yaml", help="calibration YAML to write")
    p.add_argument("--min-rows", type=_positive_int, default=20, help="rows a GPU/engine/model group needs")
    p.add_argument("--cv", type=_positive_int,
                   help="also run K-fold cross-validation grouped by (model, GPU) and store the "
                        "prediction intervals of its out-of-fold errors")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("import-bench", help="convert vLLM/SGLang benchmark result JSON to measurement rows")
    p.add_argument("file", help="result JSON (vLLM --save-result) or JSON lines (SGLang --output-file)")
    p.add_argument("--engine", required=True, choices=["vllm", "sglang"])
    p.add_argument("--gpu", required=True, help="catalog GPU id the benchmark ran on")
    p.add_argument("--model", help="catalog model id (default: the file's model id)")
    p.add_argument("--tp", type=_positive_int, default=1, help="tensor-parallel size of one engine instance")
    p.add_argument("--pp", type=_positive_int, default=1, help="pipeline-parallel size")
    p.add_argument("--num-gpus", type=_positive_int, help="GPUs of the whole deployment (default tp * pp)")
    p.add_argument("--weight-dtype", help="bf16, fp16, fp8, int8, int4, fp4 (default: not stated)")
    p.add_argument("--kv-dtype", help="KV cache dtype (default: not stated)")
    p.add_argument("--engine-version", help="engine version string")
    p.add_argument("--isl", type=float, help="input tokens per request (default: from the file)")
    p.add_argument("--osl", type=float, help="output tokens per request (default: from the file)")
    p.add_argument("--out", required=True, help="measurement CSV to write")
    p.add_argument("--append", action="store_true", help="add to --out instead of replacing it")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_import_bench)
