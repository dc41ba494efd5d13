"""The ``planner simulate`` command: argument parsing and printing around :mod:`planner.simulate`."""

from __future__ import annotations

import argparse
import math

from planner.cli.helpers import (EXIT_OK, UsageError, add_config_args, add_efficiency_args, catalog_from,
                                 efficiency_overrides, positive_int, print_json, print_table)
from planner.errors import PlanningInputError

#: Defaults of the seed's timeline mode (``--timeline``).
TIMELINE_DEFAULTS = {"requests": 40, "rate_per_step": 0.5, "max_batch": 8, "output_min": 10,
                     "output_max": 500}

#: Default slots of a simulated replica (vLLM ``max_num_seqs``-like).
DEFAULT_MAX_BATCH = 64

#: Columns of the ASCII timeline in text mode.
TIMELINE_WIDTH_CHARS = 96

#: Characters that mark requests in the ASCII timeline (request index modulo its length).
_REQUEST_MARKS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

#: Replica-mode flags: destination -> flag (for messages).
_REPLICA_FLAGS = {"model": "--model", "gpu": "--gpu", "rate": "--rate", "prompt": "--prompt",
                  "output": "--output", "scheduler": "--scheduler", "chunk_tokens": "--chunk-tokens",
                  "warmup_fraction": "--warmup-fraction", "tp": "--tp", "pp": "--pp", "quant": "--quant",
                  "kv_dtype": "--kv-dtype", "mem_eff": "--mem-eff", "compute_eff": "--compute-eff",
                  "engine": "--engine", "prefix_hit_fraction": "--prefix-hit-fraction"}
_TIMELINE_FLAGS = {"rate_per_step": "--rate-per-step", "output_min": "--output-min",
                   "output_max": "--output-max"}
_CHECK_FLAGS = {"rate_per_s": "--rate", "max_batch": "--max-batch", "requests": "--requests",
                "scheduler": "--scheduler", "prefill_chunk_tokens": "--chunk-tokens",
                "warmup_fraction": "--warmup-fraction", "prefix_hit_fraction": "--prefix-hit-fraction"}

_REPLICA_TABLE_KEYS = (
    "model", "gpu", "tp", "pp", "quantization", "kv_cache_dtype", "scheduler", "max_batch",
    "prompt", "output", "rate_per_s", "seed", "requests", "rejected_requests",
    "ttft_p50_s", "ttft_p95_s", "ttft_mean_s", "tpot_p50_s", "tpot_p95_s", "tpot_mean_s",
    "mean_wait_s", "throughput_tokens_per_s", "request_throughput_per_s", "mean_batch",
    "slot_utilization", "window_s", "iterations", "distinct_step_times",
)


#: The subcommand and its line in ``planner --help``.
COMMAND = "simulate"
HELP = "discrete-event simulation: one replica's p95s, or static vs continuous batching"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Create the ``simulate`` subcommand on ``subparsers`` (which builds ``planner.cli.helpers.Parser``s).

    Parameters
    ----------
    subparsers
        The ``add_subparsers`` object of the ``planner`` parser.

    Returns
    -------
    argparse.ArgumentParser
        The ``simulate`` parser, with ``func=cmd_simulate``.
    """
    # the simulator's defaults, for the help: imported when this command's flags are built only
    from planner.simulate import DEFAULT_PREFILL_CHUNK_TOKENS, DEFAULT_REQUESTS, DEFAULT_WARMUP_FRACTION, SCHEDULERS

    p = subparsers.add_parser(
        COMMAND, help=HELP,
        description="Simulate one replica under Poisson traffic (--model/--gpu/--rate/--prompt/--output), "
                    "or with --timeline the seed's static vs continuous scheduler timeline.")
    p.add_argument("--timeline", action="store_true",
                   help="the seed's toy timeline: unit step cost, no prefill, static vs continuous")
    add_config_args(p, optional=True)
    p.add_argument("--max-batch", type=positive_int,
                   help=f"slots: most running requests (default {DEFAULT_MAX_BATCH}; "
                        f"timeline {TIMELINE_DEFAULTS['max_batch']})")
    p.add_argument("--rate", type=float, help="Poisson arrival rate [requests/s]")
    p.add_argument("--prompt", help="prompt tokens: N | mean=M,p95=Q | hist=T:W,...")
    p.add_argument("--output", help="output tokens: N | mean=M,p95=Q | hist=T:W,...")
    p.add_argument("--requests", type=positive_int,
                   help=f"requests to simulate (default {DEFAULT_REQUESTS}; timeline "
                        f"{TIMELINE_DEFAULTS['requests']})")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--scheduler", choices=SCHEDULERS, help="continuous (default) or static batching")
    p.add_argument("--chunk-tokens", type=positive_int,
                   help=f"chunked-prefill tokens per iteration (default {DEFAULT_PREFILL_CHUNK_TOKENS})")
    p.add_argument("--warmup-fraction", type=float,
                   help="fraction of first arrivals left out of the statistics "
                        f"(default {DEFAULT_WARMUP_FRACTION})")
    p.add_argument("--prefix-hit-fraction", type=float,
                   help="share of every prompt served from the prefix cache, in [0, 1) (default 0; the "
                        "problem YAML's prefix_cache_hit_fraction)")
    add_efficiency_args(p, calibration=True)
    p.add_argument("--rate-per-step", type=float,
                   help=f"timeline: arrivals per decode step (default {TIMELINE_DEFAULTS['rate_per_step']})")
    p.add_argument("--output-min", type=positive_int,
                   help=f"timeline: shortest output (default {TIMELINE_DEFAULTS['output_min']})")
    p.add_argument("--output-max", type=positive_int,
                   help=f"timeline: longest output (default {TIMELINE_DEFAULTS['output_max']})")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_simulate)
    return p


def cmd_simulate(args) -> int:
    """Run ``planner simulate``; print the result; return the exit code (0).

    Raises
    ------
    planner.cli.helpers.UsageError
        Missing or conflicting flags.
    PlanningInputError
        Invalid values (one line per problem, each naming its flag).
    """
    other_flags = _REPLICA_FLAGS if args.timeline else _TIMELINE_FLAGS
    conflicting = [flag for dest, flag in other_flags.items() if getattr(args, dest, None) is not None]
    if args.timeline and args.calibration != "default":
        conflicting.append("--calibration")
    if conflicting:
        mode = "with --timeline" if args.timeline else "without --timeline"
        raise UsageError(f"planner simulate: {', '.join(conflicting)} not allowed {mode}")
    if args.timeline:
        result = _timeline(args)
        if args.json:
            print_json(result)
        else:
            _print_timeline(result)
        return EXIT_OK
    missing = [flag for dest, flag in _REPLICA_FLAGS.items()
               if dest in ("model", "gpu", "rate", "prompt", "output") and getattr(args, dest) is None]
    if missing:
        raise UsageError(f"planner simulate: the following arguments are required: {', '.join(missing)} "
                         "(or --timeline)")
    result = _replica(args)
    if args.json:
        print_json(result)
    else:
        print_table([(k, result[k]) for k in _REPLICA_TABLE_KEYS if k in result])
    return EXIT_OK


# ---------------------------------------------------------------- replica mode

def _replica(args) -> dict:
    from planner import parameters
    from planner.calculators import _check_engine_runs, _frame, _resolve, check_parallelism, config_params
    from planner.configs import config_arrays
    from planner.dimensions import gpus_per_replica
    from planner.serving import memory
    from planner.simulate import (DEFAULT_PREFILL_CHUNK_TOKENS, DEFAULT_REQUESTS, DEFAULT_WARMUP_FRACTION,
                                  check_simulation_inputs, simulate_replica)
    from planner.traffic import parse_length_spec

    problems = []
    lengths = {}
    for dest in ("prompt", "output"):
        try:
            lengths[dest] = parse_length_spec(getattr(args, dest))
        except ValueError as exc:
            problems.append(f"--{dest}: {exc}")
    settings = {
        "rate_per_s": args.rate,
        "max_batch": args.max_batch or DEFAULT_MAX_BATCH,
        "requests": args.requests or DEFAULT_REQUESTS,
        "scheduler": args.scheduler or "continuous",
        "prefill_chunk_tokens": args.chunk_tokens or DEFAULT_PREFILL_CHUNK_TOKENS,
        "warmup_fraction": DEFAULT_WARMUP_FRACTION if args.warmup_fraction is None else args.warmup_fraction,
        "prefix_hit_fraction": args.prefix_hit_fraction or 0.0,
    }
    problems += [f"{_CHECK_FLAGS[name]}: {msg}" for name, msg in check_simulation_inputs(**settings)]
    for dest in ("mem_eff", "compute_eff"):
        value = getattr(args, dest)
        if value is not None and not 0 < value <= 1:
            problems.append(f"{_REPLICA_FLAGS[dest]}: must be a fraction in (0, 1], got {value}")
    if problems:
        raise PlanningInputError(problems)

    catalog = catalog_from(args)
    tp, pp = args.tp or 1, args.pp or 1
    m, g, q, k = _resolve(catalog, args.model, args.gpu, args.quant or "bf16", args.kv_dtype or "bf16")
    check_parallelism(m, g, tp, pp)
    _check_engine_runs(catalog, args.engine, g, q, k)
    frame = _frame(m, g, q, k, tp, pp, [settings["max_batch"]], lengths["prompt"].mean,
                   lengths["output"].mean, None)
    arrays, fallback = config_arrays(catalog, frame, models={m.id: m})
    overrides = efficiency_overrides(args)
    cal, params = config_params(catalog, m, g, q, args.calibration, overrides, args.engine)
    budget = float(memory.kv_budget_bytes_per_gpu(arrays, params)[0])
    if not budget > 0:
        per_gpu = float(memory.weights_bytes_per_gpu(arrays)[0])
        raise PlanningInputError(
            f"--gpu: {m.id} ({q.id}) does not fit on {g.id} with tp={tp} pp={pp}: "
            f"{per_gpu / 1e9:.1f} GB of weights per GPU leave no KV cache room; "
            "raise --tp/--pp or use a smaller --quant")
    result = simulate_replica(arrays, params, prompt=lengths["prompt"], output=lengths["output"],
                              seed=args.seed, **settings)
    out = result.to_dict()
    out.update({
        "model": m.id, "gpu": g.id, "tp": tp, "pp": pp, "gpus": gpus_per_replica({"tp": tp, "pp": pp}),
        "quantization": q.id,
        "kv_cache_dtype": k.id, "prompt": lengths["prompt"].describe(),
        "output": lengths["output"].describe(),
        "prompt_mean_tokens": lengths["prompt"].mean, "output_mean_tokens": lengths["output"].mean,
        "warmup_fraction": settings["warmup_fraction"], "kv_budget_bytes_per_gpu": budget,
        "math_fallback_to_bf16": bool(fallback[0]), "parameters": parameters.scalars(params),
        "parameters_used": parameters.describe(cal, overrides, args.engine),
    })
    return out


# ---------------------------------------------------------------- timeline mode

def _timeline(args) -> dict:
    from planner.simulate import scheduler_timeline

    d = TIMELINE_DEFAULTS
    rate = d["rate_per_step"] if args.rate_per_step is None else args.rate_per_step
    out_min = args.output_min or d["output_min"]
    out_max = args.output_max or d["output_max"]
    problems = []
    if not (math.isfinite(rate) and rate > 0):
        problems.append(f"--rate-per-step: must be > 0, got {rate}")
    if out_min > out_max:
        problems.append(f"--output-min: must be <= --output-max ({out_max}), got {out_min}")
    if problems:
        raise PlanningInputError(problems)
    return scheduler_timeline(requests=args.requests or d["requests"], arrival_rate_per_step=rate,
                              max_batch=args.max_batch or d["max_batch"], output_min=out_min,
                              output_max=out_max, seed=args.seed)


def ascii_timeline(spans, max_batch: int, horizon_steps: int,
                   width_chars: int = TIMELINE_WIDTH_CHARS) -> list[str]:
    """One text row per slot: each column shows the request holding the slot at its midpoint.

    Parameters
    ----------
    spans : list of (slot, request, start, end)
        Occupancies [steps].
    max_batch : int
        Slots (rows).
    horizon_steps : int
        Steps the rows cover from step 0 (shared by the schedulers drawn together).
    width_chars : int
        Columns per row.

    Returns
    -------
    list of str
        ``slot k |...|`` rows; ``.`` marks an idle slot, requests cycle through 0-9A-Za-z.
    """
    step_per_char = max(horizon_steps, 1) / width_chars
    rows = []
    for slot in range(max_batch):
        cells = ["."] * width_chars
        for s, r, start, end in spans:
            if s != slot:
                continue
            first = math.ceil(start / step_per_char - 0.5)
            last = math.ceil(end / step_per_char - 0.5)
            for col in range(max(first, 0), min(last, width_chars)):
                cells[col] = _REQUEST_MARKS[r % len(_REQUEST_MARKS)]
        rows.append(f"slot {slot:>2} |{''.join(cells)}|")
    return rows


def _print_timeline(result: dict) -> None:
    names = ("static", "continuous")
    print(f"{result['requests']} requests, {result['arrival_rate_per_step']:g} arrivals/step, "
          f"max batch {result['max_batch']}, outputs {result['output_min']}-{result['output_max']} "
          f"steps, seed {result['seed']}; one step costs 1, prefill omitted")
    print(f"{'scheduler':<12}{'slot_utilization':>18}{'mean_wait_steps':>17}{'makespan_steps':>16}")
    for name in names:
        r = result[name]
        print(f"{name:<12}{r['slot_utilization']:>18.3f}{r['mean_wait_steps']:>17.1f}"
              f"{r['makespan_steps']:>16d}")
    horizon = max(e for name in names for _, _, _, e in result[name]["timeline"])
    for name in names:
        print(f"\n{name} (0 .. {horizon} steps, {horizon / TIMELINE_WIDTH_CHARS:.1f} steps per column)")
        for row in ascii_timeline(result[name]["timeline"], result["max_batch"], horizon):
            print(row)

