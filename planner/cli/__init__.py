"""The ``planner`` command line: argument parsing, printing and exit codes; nothing else."""

from __future__ import annotations

import argparse
import os
import sys


from planner import jsonio
from planner.schema import PlanningInputError

EXIT_OK, EXIT_INTERNAL, EXIT_INPUT, EXIT_INFEASIBLE = 0, 1, 2, 3
#: The solver's time limit ran out with no plan and no proof of infeasibility (status "unknown").
EXIT_UNKNOWN = 4


class UsageError(Exception):
    """A command-line usage problem (exit code 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        raise UsageError(f"{self.prog}: {message}")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got '{text}'")
    return values


def _catalog(args):
    from planner.catalog import load_catalog

    return load_catalog(getattr(args, "catalog_dir", None))


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got '{text}'") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {value}")
    return value


def _overrides(args) -> dict:
    """Explicit serving-parameter flags (they win over a calibration)."""
    values = {"memory_efficiency": getattr(args, "mem_eff", None),
              "compute_efficiency": getattr(args, "compute_eff", None)}
    return {k: v for k, v in values.items() if v is not None}


def _print_table(rows: list[tuple[str, object]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        if isinstance(value, float):
            value = f"{value:.6g}"
        print(f"{key:<{width}}  {value}")


def _emit(args, result: dict, table_keys=None) -> None:
    if args.json:
        print(jsonio.dumps(result))
        return
    keys = table_keys or sorted(k for k, v in result.items() if not isinstance(v, (dict, list)))
    _print_table([(k, result[k]) for k in keys if k in result])


# ---------------------------------------------------------------- commands

def cmd_eval(args) -> int:
    from planner.calculators import eval_config

    result = eval_config(
        _catalog(args), model=args.model, gpu=args.gpu, tp=args.tp, pp=args.pp,
        quant=args.quant, kv_dtype=args.kv_dtype, batch=args.batch, users=args.users,
        prompt=args.prompt, output=args.output, context=args.context, price=args.price,
        rate_per_s=args.rate, slo_ttft_p95_s=args.slo_ttft_p95, slo_tpot_p95_s=args.slo_tpot_p95,
        calibration=args.calibration, overrides=_overrides(args), engine=args.engine)
    _emit(args, result)
    if not args.json and result.get("intervals"):  # prediction intervals (docs/accuracy.md)
        print("prediction intervals (from the calibration's out-of-fold errors, docs/accuracy.md):")
        for name, iv in result["intervals"].items():
            print(f"  {name}: " + ", ".join(f"{k} [{lo:.4g}, {hi:.4g}]" for k, (lo, hi) in iv.items()))
    return EXIT_OK


def cmd_knee(args) -> int:
    from planner.calculators import knee

    _emit(args, knee(_catalog(args), model=args.model, context=args.context,
                     quant=args.quant, kv_dtype=args.kv_dtype))
    return EXIT_OK


def cmd_sweep(args) -> int:
    from planner.calculators import sweep

    table = sweep(_catalog(args), model=args.model, gpu=args.gpu, context=args.context,
                  batches=args.batches, tp=args.tp, pp=args.pp, quant=args.quant,
                  kv_dtype=args.kv_dtype, calibration=args.calibration, overrides=_overrides(args),
                  engine=args.engine)
    if args.json:
        print(jsonio.dumps({**table.attrs, "rows": table.to_dict(orient="records")}))
    elif args.csv:
        from planner.outputs.tables import csv_text

        print(csv_text(table), end="")
    else:
        print(table.to_string(index=False))
    return EXIT_OK


def cmd_train(args) -> int:
    from planner.calculators import train

    _emit(args, train(_catalog(args), params=args.params, tokens=args.tokens, gpu=args.gpu,
                      gpus=args.gpus, mfu=args.mfu, pp=args.pp, micro_batches=args.micro_batches))
    return EXIT_OK


def cmd_catalog(args) -> int:
    from planner.catalog_views import catalog_table

    table = catalog_table(_catalog(args), args.kind)
    if args.json:
        print(jsonio.dumps({args.kind: table.to_dict(orient="records")}))
    else:
        import pandas as pd

        with pd.option_context("display.max_rows", None, "display.max_columns", None,
                               "display.width", 200, "display.max_colwidth", 40):
            print(table.drop(columns=[c for c in ("source", "notes") if c in table]).to_string(index=False))
    return EXIT_OK


def cmd_validate(args) -> int:
    from planner.problem import load_problem

    problem = load_problem(args.problem, _catalog(args))
    if problem.spec.procurement is not None:
        from planner.procurement.spec import parse_procurement

        parse_procurement(problem)  # the `procurement:` section is checked too (exit 2 naming the path)
    _print_warnings(problem)
    summary = {"problem": problem.name, "valid": True, "workloads": [w.name for w in problem.workloads],
               "gpus": list(problem.gpus), "quantization": list(problem.quantization),
               "kv_cache_dtypes": list(problem.kv_cache_dtypes), "warnings": list(problem.warnings)}
    if args.json:
        print(jsonio.dumps(summary))
    else:
        print(f"{args.problem}: valid ({len(problem.workloads)} workloads, {len(problem.gpus)} GPU types)")
    return EXIT_OK


def _print_warnings(problem) -> None:
    for line in problem.warnings:
        print(f"warning: {problem.path}: {line}", file=sys.stderr)


def cmd_solve(args) -> int:
    from planner.outputs.result_json import result_text, result_to_dict
    from planner.pipeline import plan
    from planner.problem import load_problem

    problem = _with_margins(load_problem(args.problem, _catalog(args)), args)
    if args.out:
        from planner.outputs.writer import check_out_dir

        check_out_dir(args.out)
    _print_warnings(problem)
    print(f"solving {problem.name} ...", file=sys.stderr)
    fronts = "none" if args.no_pareto else args.fronts
    result = plan(problem, top_k=args.top, time_limit_s=args.time_limit, pareto=fronts != "none", fronts=fronts,
                  verify=args.verify)
    if args.out:
        from planner.outputs.writer import write_outputs

        try:
            write_outputs(result, args.out)
        except OSError as exc:  # disk full, permissions changed meanwhile: nothing was replaced
            raise PlanningInputError(f"--out {args.out}: cannot write: {exc}") from None
        print(f"wrote {args.out}", file=sys.stderr)
    if args.json:
        print(jsonio.dumps(result_to_dict(result)))
    else:
        print(result_text(result))
    if result.plans:
        return EXIT_OK
    return EXIT_UNKNOWN if result.status == "unknown" else EXIT_INFEASIBLE


def _with_margins(problem, args):
    """``problem`` with the ``--confidence`` / ``--max-load-fraction`` flags over its ``optimize:``."""
    changes = {k: v for k, v in (("confidence", args.confidence), ("max_load_fraction", args.max_load_fraction))
               if v is not None}
    if not changes:
        return problem
    spec = problem.spec.model_copy(update={"optimize": problem.spec.optimize.model_copy(update=changes)})
    return problem.model_copy(update={"spec": spec})


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0.5, 1), got '{text}'") from None
    if not 0.5 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0.5, 1), got {value}")
    return value


# ---------------------------------------------------------------- parser

def _add_config_args(p, gpu_required=True) -> None:
    p.add_argument("--model", required=True, help="catalog model id or alias, or a HuggingFace config.json path")
    if gpu_required:
        p.add_argument("--gpu", required=True, help="catalog GPU id or alias")
        p.add_argument("--tp", type=_positive_int, default=1, help="tensor-parallel degree N")
        p.add_argument("--pp", type=_positive_int, default=1, help="pipeline-parallel stages S")
    p.add_argument("--quant", default="bf16", help="weight format (bf16, fp8, int4-awq, ...)")
    p.add_argument("--kv-dtype", default="bf16", help="KV cache dtype (bf16, fp8)")


def _add_efficiency_args(p, calibration: bool = False) -> None:
    from planner.serving.params import ServingParams

    seed = ServingParams()
    default = ("the GPU's calibrated value (--calibration), {} with --calibration none" if calibration
               else "{}")
    p.add_argument("--mem-eff", type=_fraction, help="memory-bandwidth efficiency eta_m in (0, 1] "
                                                     f"(default: {default.format(seed.memory_efficiency)})")
    p.add_argument("--compute-eff", type=_fraction, help="compute efficiency eta_c in (0, 1] "
                                                         f"(default: {default.format(seed.compute_efficiency)})")
    if calibration:
        p.add_argument("--calibration", default="default",
                       help="'default' (catalogs/calibration.yaml), 'none' (the seeds' constants) or a YAML "
                            "path; --mem-eff/--compute-eff win over it")
        p.add_argument("--engine", help="engine whose calibrated overheads apply (vllm, sglang, trtllm)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="planner", description="LLM deployment planner: which GPUs, how many, "
                     "in which configuration, how fast, at what cost per million tokens.")
    parser.add_argument("--catalog-dir", help="directory with gpus/models/quantization/prices YAML "
                        "(default: the shipped catalogs)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("eval", help="evaluate one configuration (the comprehensive playground)")
    _add_config_args(p)
    p.add_argument("--batch", type=_positive_int, default=1, help="max batch B_max (decode batch b = min(U, B_max))")
    p.add_argument("--users", type=_positive_int, help="concurrent users U (default: the batch)")
    p.add_argument("--prompt", type=_positive_int, default=1024, help="prompt tokens p")
    p.add_argument("--output", type=_positive_int, default=256, help="output tokens o")
    p.add_argument("--context", type=float, help="mean decode context c (default p + o/2)")
    p.add_argument("--price", type=float, help="USD per GPU-hour (default: the catalog's default price)")
    p.add_argument("--rate", type=float, help="Poisson request rate [1/s]: adds ttft_p95_s, tpot_p95_s")
    p.add_argument("--slo-ttft-p95", type=float, help="p95 TTFT SLO [s]: with --slo-tpot-p95 adds max_rate_per_s")
    p.add_argument("--slo-tpot-p95", type=float, help="p95 TPOT SLO [s]")
    _add_efficiency_args(p, calibration=True)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("knee", help="decode batch knee B_knee and recommended max_num_seqs")
    _add_config_args(p, gpu_required=False)
    p.add_argument("--context", type=float, required=True, help="mean context tokens per sequence")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_knee)

    p = sub.add_parser("sweep", help="batch sweep: TPOT and throughput per batch size")
    _add_config_args(p)
    p.add_argument("--context", type=float, required=True, help="mean context tokens per sequence")
    p.add_argument("--batches", type=_int_list, default=[1, 2, 4, 8, 16, 32, 64, 128, 256],
                   help="comma-separated batch sizes")
    _add_efficiency_args(p, calibration=True)
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("train", help="training compute C = 6ND, duration, optimizer memory")
    p.add_argument("--params", type=float, required=True, help="parameters N (e.g. 405e9)")
    p.add_argument("--tokens", type=float, required=True, help="training tokens D (e.g. 15.6e12)")
    p.add_argument("--gpu", required=True)
    p.add_argument("--gpus", type=_positive_int, required=True)
    p.add_argument("--mfu", type=float, default=0.4, help="model FLOPs utilization in (0, 1]")
    p.add_argument("--pp", type=_positive_int, default=1, help="pipeline stages, for the bubble")
    p.add_argument("--micro-batches", type=_positive_int, help="micro-batches per step (default: pp)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("catalog", help="list catalog entries with their sources")
    p.add_argument("kind", choices=["gpus", "models", "quantization", "prices", "engines", "quality"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_catalog)

    p = sub.add_parser("solve", help="plan a deployment: minimum $/1M tokens under the SLOs")
    p.add_argument("problem", help="problem YAML file")
    p.add_argument("--top", type=_positive_int, help="how many ranked plans (default: the problem's top_k, 5)")
    p.add_argument("--time-limit", type=float, help="CP-SAT time limit per solve [s]")
    p.add_argument("--no-pareto", action="store_true", help="skip the Pareto fronts (same as --fronts none)")
    p.add_argument("--fronts", choices=["none", "mixed", "used", "all"],
                   help="which Pareto fronts: none, mixed (all GPU types together), used (default: mixed plus "
                        "each GPU type in some plan or mixed-front point), all (every GPU type)")
    p.add_argument("--confidence", type=_confidence,
                   help="quantile of the serving model's error the capacities hold at, in [0.5, 1) "
                        "(default: the problem's optimize.confidence, 0.8; 0.5 = central prediction)")
    p.add_argument("--max-load-fraction", type=_fraction,
                   help="most load per replica relative to its central capacity at SLO, in (0, 1] "
                        "(default: the problem's optimize.max_load_fraction, 0.9)")
    p.add_argument("--verify", action="store_true",
                   help="simulate one replica of every deployment with its routed traffic mix: adds "
                        "simulated_ttft_p95_s / simulated_tpot_p95_s per workload")
    p.add_argument("--out", help="directory for the report, CSVs, plots and launch settings")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_solve)

    p = sub.add_parser("validate", help="check a problem YAML without solving it")
    p.add_argument("problem")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_validate)

    for register in _extra_commands():
        register(sub)
    return parser


def _extra_commands() -> list:
    """Registration hooks of the commands defined in their own CLI modules."""
    from planner.cli.accuracy import add_accuracy_parsers
    from planner.cli.budget import add_budget_parser
    from planner.cli.simulate import add_simulate_parser

    return [add_simulate_parser, add_budget_parser, add_accuracy_parsers, *_EXTRA_COMMANDS]


#: Registration hooks added at run time (tests, plugins).
_EXTRA_COMMANDS: list = []


def main(argv=None) -> int:
    from planner.interrupt import exit_code, handling_signals

    try:
        with handling_signals():
            return _run(argv)
    except KeyboardInterrupt as exc:  # a signal between the handlers' install and _run
        return exit_code(exc)


def _run(argv) -> int:
    from planner.cli.checks import check_flags
    from planner.interrupt import exit_code

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
    sys.exit(main())
