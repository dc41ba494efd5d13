"""What the ``planner`` commands share: exit codes, the parser class, argument types,
common flags, the catalog of ``--catalog-dir`` and table printing.

Every command module (:mod:`planner.cli.solve`, ...) imports this module; this module imports
no command module and not :mod:`planner.cli` itself (no import cycle).
"""

from __future__ import annotations

import argparse
import sys

EXIT_OK, EXIT_INTERNAL, EXIT_INPUT, EXIT_INFEASIBLE = 0, 1, 2, 3
#: The solver's time limit ran out with no plan and no proof of infeasibility (status "unknown").
EXIT_UNKNOWN = 4


class UsageError(Exception):
    """A command-line usage problem (exit code 2)."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (:class:`UsageError`), with no usage dump."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


# ---------------------------------------------------------------- argument types

def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def positive_int_list(text: str) -> list[int]:
    """Comma-separated positive integers (``--batches 1,2,4``)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got '{text}'")
    return values


def number_in(low: float, high: float, *, low_open: bool = False, high_open: bool = False):
    """An argument type: a number in the interval from ``low`` to ``high`` (ends open or closed)."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number in {interval}, got '{text}'") from None
        above = low < value if low_open else low <= value
        below = value < high if high_open else value <= high
        if not (above and below):
            raise argparse.ArgumentTypeError(f"must be in {interval}, got {value}")
        return value

    return parse


#: A fraction in (0, 1] (``--mfu``, ``--max-load-fraction``, ...).
fraction = number_in(0, 1, low_open=True)
#: A confidence level in [0.5, 1) (``solve --confidence``).
confidence = number_in(0.5, 1, high_open=True)


# ---------------------------------------------------------------- common flags and inputs

def add_config_args(p, gpu_required=True, optional=False) -> None:
    """--model, --gpu, --tp, --pp, --quant, --kv-dtype (``gpu_required=False``: no --gpu/--tp/--pp).

    ``optional`` (``planner simulate``, whose --timeline mode takes none of them): nothing is
    required and every default is None, so that the command sees which flags were given; it
    applies the defaults (1, bf16) itself, as the help says.
    """
    required = {} if optional else {"required": True}
    one, bf16 = ({}, {}) if optional else ({"default": 1}, {"default": "bf16"})
    default_one = " (default 1)" if optional else ""
    p.add_argument("--model", **required,
                   help="catalog model id or alias, or a HuggingFace config.json path")
    if gpu_required or optional:
        p.add_argument("--gpu", **required, help="catalog GPU id or alias")
        p.add_argument("--tp", type=positive_int, **one, help="tensor-parallel degree N" + default_one)
        p.add_argument("--pp", type=positive_int, **one, help="pipeline-parallel stages S" + default_one)
    formats = (("(default bf16)", "(default bf16)") if optional
               else ("(bf16, fp8, int4-awq, ...)", "(bf16, fp8)"))
    p.add_argument("--quant", **bf16, help=f"weight format {formats[0]}")
    p.add_argument("--kv-dtype", **bf16, help=f"KV cache dtype {formats[1]}")


def add_efficiency_args(p, calibration: bool = False) -> None:
    from planner.serving.params import ServingParams

    seed = ServingParams()
    default = ("the GPU's calibrated value (--calibration), {} with --calibration none" if calibration
               else "{}")
    p.add_argument("--mem-eff", type=fraction, help="memory-bandwidth efficiency eta_m in (0, 1] "
                                                    f"(default: {default.format(seed.memory_efficiency)})")
    p.add_argument("--compute-eff", type=fraction, help="compute efficiency eta_c in (0, 1] "
                                                        f"(default: {default.format(seed.compute_efficiency)})")
    if calibration:
        p.add_argument("--calibration", default="default",
                       help="'default' (catalogs/calibration.yaml), 'none' (the seeds' constants) or a YAML "
                            "path; --mem-eff/--compute-eff win over it")
        p.add_argument("--engine", help="engine whose calibrated overheads apply (vllm, sglang, trtllm)")


def catalog_from(args):
    """The catalog of ``--catalog-dir`` (default: the shipped catalogs)."""
    from planner.catalog import load_catalog

    return load_catalog(getattr(args, "catalog_dir", None))


def efficiency_overrides(args) -> dict:
    """Explicit serving-parameter flags (they win over a calibration)."""
    values = {"memory_efficiency": getattr(args, "mem_eff", None),
              "compute_efficiency": getattr(args, "compute_eff", None)}
    return {k: v for k, v in values.items() if v is not None}


# ---------------------------------------------------------------- printing

def print_table(rows: list[tuple[str, object]]) -> None:
    """``key  value`` lines, keys padded to one width, floats to 6 significant digits."""
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        if isinstance(value, float):
            value = f"{value:.6g}"
        print(f"{key:<{width}}  {value}")


def print_json(result) -> None:
    """``result`` as the command's JSON document on stdout (:func:`planner.jsonio.dumps`)."""
    from planner import jsonio  # numpy: imported by the commands that print JSON, not by the parser

    print(jsonio.dumps(result))


def emit(args, result: dict, table_keys=None) -> None:
    """``result`` as JSON (``--json``) or as a table of its scalar entries."""
    if args.json:
        print_json(result)
        return
    keys = table_keys or sorted(k for k, v in result.items() if not isinstance(v, (dict, list)))
    print_table([(k, result[k]) for k in keys if k in result])


def print_rows(header: list[str], rows: list[list]) -> None:
    """Left-aligned columns under ``header``."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(header)]
    print("  ".join(f"{h:<{w}}" for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(f"{str(v):<{w}}" for v, w in zip(r, widths)))


def fmt(value, digits=4) -> str:
    """A float to ``digits`` significant digits; anything else as ``str``."""
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def print_warnings(problem) -> None:
    """The problem's warnings on stderr, each naming the file."""
    for line in problem.warnings:
        print(f"warning: {problem.path}: {line}", file=sys.stderr)
