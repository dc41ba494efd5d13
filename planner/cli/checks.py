"""Checks every command's numeric flags against the documented limits, before the command runs.

One place for all commands: a NaN, an infinity or a value beyond :mod:`planner.limits`
is a usage error (exit 2) naming the flag, never a silent default, a null in the JSON,
a MemoryError or a nonsense answer.
"""

from __future__ import annotations

import argparse
import math

from planner import limits
from planner.cli.helpers import catalog_from
from planner.errors import PlanningInputError

#: Flag -> (lowest, highest) accepted value; None: no bound on that side beyond positivity
#: checks of the command itself. Flags not listed only need to be finite and within
#: limits.MAX_ABS_NUMBER.
FLAG_LIMITS = {
    "--tp": (1, limits.MAX_PARALLEL_DEGREE),
    "--pp": (1, limits.MAX_PARALLEL_DEGREE),
    "--ep": (1, limits.MAX_PARALLEL_DEGREE),
    "--batch": (1, limits.MAX_BATCH),
    "--max-batch": (1, limits.MAX_BATCH),
    "--batches": (1, limits.MAX_BATCH),
    "--users": (1, limits.MAX_COUNT),
    "--prompt": (1, limits.MAX_TOKENS),
    "--output": (1, limits.MAX_TOKENS),
    "--context": (0, limits.MAX_TOKENS),     # knee and sweep need >= 1 (planner.calculators)
    "--chunk-tokens": (1, limits.MAX_TOKENS),
    "--output-min": (1, limits.MAX_TOKENS),
    "--output-max": (1, limits.MAX_TOKENS),
    "--requests": (None, limits.MAX_SIMULATED_REQUESTS),
    "--seed": (0, limits.MAX_SEED),
    "--time-limit": (None, limits.MAX_TIME_LIMIT_S),
    "--top": (1, limits.MAX_TOP_K),
    "--gpus": (1, limits.MAX_COUNT),
    "--micro-batches": (1, limits.MAX_COUNT),
    "--price": (None, limits.MAX_PRICE_USD_PER_GPU_HOUR),
    "--rate": (None, limits.MAX_RATE_PER_S),
    "--slo-ttft-p95": (None, limits.MAX_SLO_S),
    "--slo-tpot-p95": (None, limits.MAX_SLO_S),
    "--mem-eff": (limits.MIN_EFFICIENCY, 1.0),
    "--compute-eff": (limits.MIN_EFFICIENCY, 1.0),
    "--mfu": (limits.MIN_EFFICIENCY, 1.0),
}
#: Flags that must be > 0 (checked here because nothing downstream would).
POSITIVE_FLAGS = ("--time-limit",)


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:  # noqa: SLF001 - argparse keeps subparsers only there
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return action.choices.get(command)
    return None


def flag_problems(flag: str, value) -> list[str]:
    """Problems of one flag's parsed value (a number or a list of numbers)."""
    values = value if isinstance(value, (list, tuple)) else [value]
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    out = []
    if flag == "--batches" and len(values) > limits.MAX_SEARCH_VALUES:
        out.append(f"{flag}: {len(values)} values, at most {limits.MAX_SEARCH_VALUES}")
    low, high = FLAG_LIMITS.get(flag, (None, limits.MAX_ABS_NUMBER))
    for v in numbers:
        if isinstance(v, float) and not math.isfinite(v):
            out.append(f"{flag}: must be a finite number, got {v}")
        elif flag in POSITIVE_FLAGS and not v > 0:
            out.append(f"{flag}: must be > 0, got {v}")
        elif (line := limits.bound(flag, v, low, min(high, limits.MAX_ABS_NUMBER))) is not None:
            out.append(line)
    return out[:1] if flag == "--batches" and out else out


def check_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Raise :class:`PlanningInputError` naming each flag whose value is out of range."""
    sub = _subparser(parser, getattr(args, "command", None))
    if sub is None:
        return
    problems = []
    for action in sub._actions:  # noqa: SLF001
        if not action.option_strings or action.dest in ("help",):
            continue
        value = getattr(args, action.dest, None)
        if value is None or isinstance(value, (bool, str)):
            continue
        problems += flag_problems(action.option_strings[-1] if action.option_strings[-1].startswith("--")
                                  else action.option_strings[0], value)
    if getattr(args, "engine", None) is not None:   # the engines of catalogs/engines.yaml
        from planner.problem_checks import check_engine

        problems += [line.replace("serving.engine", "--engine", 1)
                     for line in check_engine(args.engine, catalog_from(args))]
    if problems:
        raise PlanningInputError(problems)
