"""Documented limits on user input, checked when a problem is validated.

``planner validate`` and ``planner solve`` run the same checks (:func:`check_spec` on the
parsed file, :func:`check_problem` after catalog resolution), so a file ``validate``
accepts never fails later on a size or magnitude. Every limit is far above any real
deployment; it exists so that hostile or mistyped input (a 5,000-digit integer, a rate of
1e15, 200,000 batch sizes, a YAML alias bomb) gets exit 2 naming the field instead of an
overflow, a MemoryError or a run of hours. docs/problem-format.md lists them.
"""

from __future__ import annotations

import re

from planner.units import SECONDS_PER_DAY

# ------------------------------------------------------------------ files
#: Largest problem YAML, catalog YAML or HuggingFace config.json read [bytes].
MAX_INPUT_FILE_BYTES = 16 * 2**20
#: Largest trace CSV read [bytes], and most rows in it.
MAX_TRACE_FILE_BYTES = 64 * 2**20
MAX_TRACE_ROWS = 1_000_000
#: Most values a YAML document may expand to (aliases counted as often as they are used).
MAX_YAML_NODES = 200_000
#: Deepest nesting of lists/mappings in a YAML document.
MAX_YAML_DEPTH = 64
#: Most digits of an integer literal (Python refuses above 4,300; nothing real needs 19).
MAX_INT_DIGITS = 30
#: Largest magnitude of any number in a YAML input (int64 holds 9.2e18).
MAX_ABS_NUMBER = 1e18

# ------------------------------------------------------------------ names
#: Workload, problem and capacity-row names, and imported model ids: letters, digits and
#: ``. _ - + @ ( ) [ ]`` and spaces, starting with a letter or digit, 1-128 characters.
#: They reach file names, report tables and comments of generated shell scripts, so no
#: quotes, ``$``, backticks, ``;``, ``|``, ``&``, ``<>``, ``\`` or control characters.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+@()\[\] -]{0,127}")
NAME_CHARACTERS = "letters, digits, spaces and . _ - + @ ( ) [ ], starting with a letter or digit, at most 128"

# ------------------------------------------------------------------ search space
#: Most values in each of search.tp, search.pp, search.max_batch.
MAX_SEARCH_VALUES = 256
#: Largest tensor/pipeline-parallel degree and GPUs per replica.
MAX_PARALLEL_DEGREE = 1024
#: Largest max batch (engines' max_num_seqs).
MAX_BATCH = 65_536
#: Most configurations the search grid may hold (models x GPUs x tp x pp x formats x KV x batch).
MAX_CANDIDATES = 500_000
#: Most workloads in a problem.
MAX_WORKLOADS = 200

# ------------------------------------------------------------------ traffic
#: Request rates of a workload [1/s] (also the bound on rates converted from per-day figures).
MIN_RATE_PER_S = 1e-6
MAX_RATE_PER_S = 1e6
#: Token lengths (fixed, histogram bins, lognormal mean and p95) [tokens].
MAX_TOKENS = 10_000_000
#: Most bins of a length histogram.
MAX_HISTOGRAM_BINS = 10_000
#: SLOs [s].
MAX_SLO_S = float(SECONDS_PER_DAY)

# ------------------------------------------------------------------ money and limits
MAX_PRICE_USD_PER_GPU_HOUR = 1e4
MAX_BUDGET_USD_PER_HOUR = 1e9
#: GPUs of one type in the inventory, and max_distinct_configs.
MAX_COUNT = 1_000_000
#: slices_per_workload: above it the solver's integer load rounding (one load unit per
#: slice, 1e6 units per replica) would add up to slices / 1e6 replica to every deployment.
MAX_SLICES_PER_WORKLOAD = 10_000
MAX_TOP_K = 100
#: optimize.equal_cost_plans (each is one more CP-SAT solve for rank 1).
MAX_EQUAL_COST_PLANS = 100
#: Points per Pareto front (each is a CP-SAT solve per front; the default is 10).
MAX_PARETO_POINTS = 25
MAX_NUM_WORKERS = 64
#: CP-SAT time limit per solve [s] (problem file and --time-limit).
MAX_TIME_LIMIT_S = float(SECONDS_PER_DAY)

# ------------------------------------------------------------------ serving overrides
MAX_STEP_OVERHEAD_S = 10.0
#: Lowest memory/compute efficiency and MFU accepted (below it every step time overflows).
MIN_EFFICIENCY = 0.01
MAX_WORKSPACE_BYTES = 1e13

# ------------------------------------------------------------------ command line
#: planner simulate --requests.
MAX_SIMULATED_REQUESTS = 200_000
#: Random seeds (numpy accepts 0 .. 2**128 - 1; the planner documents 0 .. 2**32 - 1).
MAX_SEED = 2**32 - 1


def read_text_bounded(path, max_bytes: int = MAX_INPUT_FILE_BYTES) -> str:
    """A file's UTF-8 text, reading at most ``max_bytes`` + 1 bytes (so ``/dev/zero`` or a
    huge file is refused instead of filling memory).

    Raises
    ------
    ValueError
        Larger than ``max_bytes``, or not UTF-8 (:class:`UnicodeDecodeError`).
    OSError
        Missing or unreadable.
    """
    with open(path, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes:,} bytes, the limit for input files")
    return data.decode("utf-8")


def name_problem(name: str) -> str | None:
    """Why ``name`` is not an acceptable name, or None."""
    if NAME_PATTERN.fullmatch(name):
        return None
    return f"{name[:40]!r} is not a valid name ({NAME_CHARACTERS} characters)"


def bound(path: str, value, low: float | None, high: float) -> str | None:
    """``path: ...`` when ``value`` lies outside [low, high], else None."""
    if value is None:
        return None

    def text(x):
        return f"{x:,}" if isinstance(x, int) else f"{x:.6g}"

    if value > high:
        return f"{path}: {text(value)} is above the limit of {text(high)} (see docs/problem-format.md, Limits)"
    if low is not None and value < low:
        return f"{path}: {text(value)} is below the limit of {text(low)} (see docs/problem-format.md, Limits)"
    return None


def _length_problems(path: str, spec) -> list:
    if spec is None:
        return []
    if isinstance(spec, int):
        return [bound(path, spec, None, MAX_TOKENS)]
    if hasattr(spec, "histogram"):
        h = spec.histogram
        out = [bound(f"{path}.histogram.tokens", max(h.tokens), None, MAX_TOKENS)]
        if len(h.tokens) > MAX_HISTOGRAM_BINS:
            out.append(f"{path}.histogram.tokens: {len(h.tokens)} bins, at most {MAX_HISTOGRAM_BINS}")
        return out
    return [bound(f"{path}.mean", spec.mean, None, MAX_TOKENS), bound(f"{path}.p95", spec.p95, None, MAX_TOKENS)]


def check_spec(spec) -> list[str]:
    """Limit violations of a parsed :class:`planner.problem.ProblemSpec`, one line per field."""
    out: list = []
    for path, name in [("name", spec.name)] + [(f"workloads[{i}].name", w.name) for i, w in enumerate(spec.workloads)] \
            + [(f"capacity_table[{i}].name", r.name) for i, r in enumerate(spec.capacity_table or ())]:
        why = name_problem(name)
        out.append(f"{path}: {why}" if why else None)
    if len(spec.workloads) > MAX_WORKLOADS:
        out.append(f"workloads: {len(spec.workloads)} workloads, at most {MAX_WORKLOADS}")
    for i, w in enumerate(spec.workloads):
        where = f"workloads[{i}]"
        out.append(bound(f"{where}.rate_per_s", w.rate_per_s, MIN_RATE_PER_S, MAX_RATE_PER_S))
        out.append(bound(f"{where}.requests_per_day", w.requests_per_day, MIN_RATE_PER_S * SECONDS_PER_DAY,
                         MAX_RATE_PER_S * SECONDS_PER_DAY))
        out.append(bound(f"{where}.tokens_per_day", w.tokens_per_day, MIN_RATE_PER_S * SECONDS_PER_DAY,
                         MAX_RATE_PER_S * SECONDS_PER_DAY))
        out += _length_problems(f"{where}.prompt_tokens", w.prompt_tokens)
        out += _length_problems(f"{where}.output_tokens", w.output_tokens)
        if w.slo is not None:
            out.append(bound(f"{where}.slo.ttft_p95_s", w.slo.ttft_p95_s, None, MAX_SLO_S))
            out.append(bound(f"{where}.slo.tpot_p95_s", w.slo.tpot_p95_s, None, MAX_SLO_S))
    s = spec.search
    for key, high in (("tp", MAX_PARALLEL_DEGREE), ("pp", MAX_PARALLEL_DEGREE), ("ep", MAX_PARALLEL_DEGREE),
                      ("max_batch", MAX_BATCH)):
        values = getattr(s, key)
        if len(values) > MAX_SEARCH_VALUES:
            out.append(f"search.{key}: {len(values)} values, at most {MAX_SEARCH_VALUES}")
        out.append(bound(f"search.{key}", max(values), None, high))
    for i, row in enumerate(spec.capacity_table or ()):
        out.append(bound(f"capacity_table[{i}].gpus", row.gpus, None, MAX_PARALLEL_DEGREE))
        out.append(bound(f"capacity_table[{i}].usd_per_hour", row.usd_per_hour, None,
                         MAX_PRICE_USD_PER_GPU_HOUR * MAX_PARALLEL_DEGREE))
        out += [bound(f"capacity_table[{i}].capacity_per_s.{k}", v, None, MAX_RATE_PER_S)
                for k, v in row.capacity_per_s.items()]
    out += [bound(f"inventory.{k}", v, None, MAX_COUNT) for k, v in spec.inventory.items()]
    out += [bound(f"prices.{k}", v, None, MAX_PRICE_USD_PER_GPU_HOUR) for k, v in spec.prices.items()]
    out.append(bound("budget_usd_per_hour", spec.budget_usd_per_hour, None, MAX_BUDGET_USD_PER_HOUR))
    out.append(bound("constraints.max_distinct_configs", spec.constraints.max_distinct_configs, None, MAX_COUNT))
    o = spec.optimize
    out.append(bound("optimize.slices_per_workload", o.slices_per_workload, None, MAX_SLICES_PER_WORKLOAD))
    out.append(bound("optimize.top_k", o.top_k, None, MAX_TOP_K))
    out.append(bound("optimize.equal_cost_plans", getattr(o, "equal_cost_plans", None), None, MAX_EQUAL_COST_PLANS))
    out.append(bound("optimize.pareto_points", o.pareto_points, None, MAX_PARETO_POINTS))
    out.append(bound("optimize.num_workers", o.num_workers, None, MAX_NUM_WORKERS))
    out.append(bound("optimize.time_limit_s", o.time_limit_s, None, MAX_TIME_LIMIT_S))
    for key in ("memory_efficiency", "compute_efficiency"):
        out.append(bound(f"serving.{key}", getattr(spec.serving, key), MIN_EFFICIENCY, 1.0))
    out.append(bound("serving.step_overhead_s", spec.serving.step_overhead_s, None, MAX_STEP_OVERHEAD_S))
    out.append(bound("serving.workspace_bytes", spec.serving.workspace_bytes, None, MAX_WORKSPACE_BYTES))
    return [line for line in out if line]


def check_problem(problem) -> list[str]:
    """Limit violations that need the catalog: the size of the search grid, converted rates."""
    from planner.dimensions import grid_description  # pandas: not needed by the flag checks

    out = []
    if not problem.measured:
        grid, what = grid_description(problem, len({w.model for w in problem.workloads}))
        if grid > MAX_CANDIDATES:
            out.append(f"search: the grid holds {grid:,} configurations ({what}), at most "
                       f"{MAX_CANDIDATES:,}: narrow search.gpus, search.quantization or search.max_batch")
    for i, w in enumerate(problem.workloads):
        line = bound(f"workloads[{i}] (rate from tokens_per_day, requests/s)", w.rate_per_s, MIN_RATE_PER_S,
                     MAX_RATE_PER_S)
        if line:
            out.append(line)
    return out
