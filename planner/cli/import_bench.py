"""The ``planner import-bench`` command: vLLM/SGLang benchmark results to measurement rows."""

from __future__ import annotations

from pathlib import Path

from planner.cli.helpers import EXIT_OK, catalog_from, positive_int, print_json


#: The subcommand and its line in ``planner --help``.
COMMAND = "import-bench"
HELP = "convert vLLM/SGLang benchmark result JSON to measurement rows"


def add_parser(sub) -> None:
    """Register ``planner import-bench`` on the ``planner`` subparsers."""
    p = sub.add_parser(COMMAND, help=HELP)
    p.add_argument("file", help="result JSON (vLLM --save-result) or JSON lines (SGLang --output-file)")
    p.add_argument("--engine", required=True, choices=["vllm", "sglang"])
    p.add_argument("--gpu", required=True, help="catalog GPU id the benchmark ran on")
    p.add_argument("--model", help="catalog model id (default: the file's model id)")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel size of one engine instance")
    p.add_argument("--pp", type=positive_int, default=1, help="pipeline-parallel size")
    p.add_argument("--num-gpus", type=positive_int, help="GPUs of the whole deployment (default tp * pp)")
    p.add_argument("--weight-dtype", help="bf16, fp16, fp8, int8, int4, fp4 (default: not stated)")
    p.add_argument("--kv-dtype", help="KV cache dtype (default: not stated)")
    p.add_argument("--engine-version", help="engine version string")
    p.add_argument("--isl", type=float, help="input tokens per request (default: from the file)")
    p.add_argument("--osl", type=float, help="output tokens per request (default: from the file)")
    p.add_argument("--out", required=True, help="measurement CSV to write")
    p.add_argument("--append", action="store_true", help="add to --out instead of replacing it")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_import_bench)


def cmd_import_bench(args) -> int:
    import pandas as pd

    from planner.import_bench import BenchContext, import_results, resolve_ids

    catalog = catalog_from(args)
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
        print_json(summary)
    else:
        print(f"wrote {len(frame)} measurement rows to {out} "
              f"(models {', '.join(summary['models'])}; GPUs {', '.join(summary['gpus'])})")
    return EXIT_OK
