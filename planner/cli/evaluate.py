"""The ``planner eval`` command: one configuration, every quantity at once."""

from __future__ import annotations

from planner.cli.helpers import (EXIT_OK, add_config_args, add_efficiency_args, catalog_from, efficiency_overrides,
                                 emit, positive_int)


#: The subcommand and its line in ``planner --help``.
COMMAND = "eval"
HELP = "evaluate one configuration (the comprehensive playground)"


def add_parser(sub) -> None:
    """Register ``planner eval`` on the ``planner`` subparsers."""
    p = sub.add_parser(COMMAND, help=HELP)
    add_config_args(p)
    p.add_argument("--batch", type=positive_int, default=1, help="max batch B_max (decode batch b = min(U, B_max))")
    p.add_argument("--users", type=positive_int, help="concurrent users U (default: the batch)")
    p.add_argument("--prompt", type=positive_int, default=1024, help="prompt tokens p")
    p.add_argument("--output", type=positive_int, default=256, help="output tokens o")
    p.add_argument("--context", type=float, help="mean decode context c (default p + o/2)")
    p.add_argument("--price", type=float, help="USD per GPU-hour (default: the catalog's default price)")
    p.add_argument("--rate", type=float, help="Poisson request rate [1/s]: adds ttft_p95_s, tpot_p95_s")
    p.add_argument("--slo-ttft-p95", type=float, help="p95 TTFT SLO [s]: with --slo-tpot-p95 adds max_rate_per_s")
    p.add_argument("--slo-tpot-p95", type=float, help="p95 TPOT SLO [s]")
    p.add_argument("--ep", type=positive_int, default=1,
                   help="expert-parallel size inside the tp GPUs of a stage (MoE models; divides --tp and the "
                        "routed experts; default 1)")
    p.add_argument("--attention-dp", action="store_true",
                   help="attention data parallel over the tp GPUs (MoE models, --tp > 1)")
    p.add_argument("--role", choices=("both", "prefill", "decode"), default="both",
                   help="under load (--rate, SLOs): an aggregated replica (both, default) or one side of a "
                        "disaggregated prefill/decode pool")
    add_efficiency_args(p, calibration=True)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_eval)


def cmd_eval(args) -> int:
    from planner.calculators import eval_config

    result = eval_config(
        catalog_from(args), model=args.model, gpu=args.gpu, tp=args.tp, pp=args.pp,
        quant=args.quant, kv_dtype=args.kv_dtype, batch=args.batch, users=args.users,
        prompt=args.prompt, output=args.output, context=args.context, price=args.price,
        rate_per_s=args.rate, slo_ttft_p95_s=args.slo_ttft_p95, slo_tpot_p95_s=args.slo_tpot_p95,
        calibration=args.calibration, overrides=efficiency_overrides(args), engine=args.engine,
        ep=args.ep, attention_dp=args.attention_dp, role=args.role)
    emit(args, result)
    if not args.json and result.get("intervals"):  # prediction intervals (docs/accuracy.md)
        print("prediction intervals (from the calibration's out-of-fold errors, docs/accuracy.md):")
        for name, iv in result["intervals"].items():
            print(f"  {name}: " + ", ".join(f"{k} [{lo:.4g}, {hi:.4g}]" for k, (lo, hi) in iv.items()))
    return EXIT_OK
