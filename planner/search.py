"""Candidate search: the configuration grid, evaluated in one vectorized pass.

``enumerate_candidates(problem)`` returns one DataFrame, one row per configuration
(model x GPU x TP x PP x weight format x KV dtype x max batch, x expert-parallel size x
attention DP where the problem searches them), indexed by a stable
``candidate_id``, with the serving-model metrics, the capacity at SLO of every workload,
``feasible`` and the first ``infeasible_reason``. Rejected rows are kept for the report.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pandas as pd

from planner import dimensions, parameters
from planner.candidate_frame import Scattered, frame_of
from planner.configs import config_arrays
from planner.format_rules import REASONS as FORMAT_REASONS
from planner.format_rules import format_rejections
from planner.layout_rules import REASONS as LAYOUT_REASONS
from planner.layout_rules import exceeds_scale_up_domain, layout_rejections
from planner.margins import Margins
from planner.serving.arrays import ConfigArrays
from planner.problem import Problem
from planner.serving import memory
from planner.serving.evaluate import evaluate
from planner.serving.params import ServingParams
from planner.search_capacity import (_CAPACITY_KEYS, _live_capacity, _role_copy_capacities,  # noqa: F401
                                     _with_lengths, workload_arrays, workload_capacity)       # (re-exported)
from planner.search_params import problem_params, serving_overrides, serving_params  # noqa: F401 (re-exported)

#: Rejection reasons, in the order they are checked (the first that applies is reported).
REASONS = (
    "gpu_has_no_compute_figure",
    "quantization_unsupported_on_gpu",
    *FORMAT_REASONS,  # engine support (serving.engine) and published quality (quality: options)
    "tp_does_not_divide_attention_heads",
    *LAYOUT_REASONS,  # expert parallelism and attention DP (layout_rules)
    "tp_exceeds_scale_up_domain",
    "pp_exceeds_layers",
    "no_price_for_gpu",
    "weights_do_not_fit_memory",
    "max_batch_exceeds_kv_capacity",
    "slo_ttft_unreachable",
    "slo_tpot_unreachable",
)


def _grid(problem: Problem, model_id: str) -> tuple[pd.DataFrame, dict[str, dimensions.Coded]]:
    """One model's grid and its columns' :class:`planner.dimensions.Coded` forms (the text
    columns, model, GPU, ..., in these only: the search reads them by code)."""
    table, coded = dimensions.CandidateTable.coded_grid({"model": [model_id], **dimensions.search_values(problem)},
                                                        texts=False)
    return table.frame, coded


#: The dimensions no structural rejection (:func:`_structural`) reads.
_NOT_STRUCTURAL = ("max_batch", "role")


def _first_reason(masks: dict[str, np.ndarray], size: int) -> np.ndarray:
    """Per row of ``size``, the position in :data:`REASONS` of the first of ``masks`` (reason
    -> rows it rejects) that rejects it; len(REASONS) where none does."""
    which = np.full(size, len(REASONS))
    for i in range(len(REASONS) - 1, -1, -1):   # (the first reason written last)
        if REASONS[i] in masks:
            which[masks[REASONS[i]]] = i
    return which


def _structural_reasons(problem: Problem, frame: pd.DataFrame, coded: dict) -> np.ndarray:
    """:func:`_first_reason` of :func:`_structural` over the grid's rows. Speed (the same): its innermost
    dimensions of :data:`_NOT_STRUCTURAL` (``tail``) make runs of ``block`` rows that differ in
    those only, so the reasons of each run's first row are repeated."""
    names = list(coded) if all(c.inner is not None for c in coded.values()) else []   # (a coded_grid)
    tail = list(itertools.takewhile(lambda name: name in _NOT_STRUCTURAL, reversed(names)))
    block = math.prod(len(coded[name].distinct) for name in tail)
    firsts = {name: dimensions.Coded(c.distinct, c.index[::block]) for name, c in coded.items()}
    return np.repeat(_first_reason(_structural(problem, frame.iloc[::block], firsts), len(frame) // block), block)


def _structural(problem: Problem, frame: pd.DataFrame, coded: dict) -> dict[str, np.ndarray]:
    """The masks (reason -> rows) of what the configuration alone rules out, over grid
    ``frame``'s rows (``coded``: their Coded forms). Reads no dimension of :data:`_NOT_STRUCTURAL`."""
    cat = problem.catalog
    model_id = coded["model"].distinct.iat[0]   # (one model's grid)
    model = problem.imported_models.get(model_id) or cat.model(model_id)
    fmts = {q: cat.weight_format(q) for q in problem.quantization}
    # per distinct GPU and (GPU, format), then onto the rows by their codes (speed)
    g_codes, g_ids = coded["gpu"].factorize()
    q_codes, q_ids = coded["quantization"].factorize()
    gpus = [cat.gpu(x) for x in g_ids]

    def per_gpu(value, dtype):
        return np.array([value(spec) for spec in gpus], dtype=dtype)[g_codes]

    bad = np.array([[g in fmts[f].unsupported_gpus
                     or (fmts[f].fallback == "none" and x.peak_flops_per_s(fmts[f].math) is None)
                     for f in q_ids] for g, x in zip(g_ids, gpus)], dtype=bool).reshape(len(gpus), len(q_ids))
    tp = frame["tp"].to_numpy()
    domain = per_gpu(lambda x: x.max_gpus_per_scale_up_domain, np.int64)
    scale_out = per_gpu(lambda x: x.scale_out_bytes_per_s, float)
    priced = set(problem.prices_usd_per_gpu_hour)
    return {
        "gpu_has_no_compute_figure": per_gpu(lambda x: x.bf16_tflops is None, bool),
        "quantization_unsupported_on_gpu": bad[g_codes, q_codes],
        **format_rejections(problem, frame, coded),
        "tp_does_not_divide_attention_heads": (model.num_attention_heads % tp) != 0,
        **layout_rejections(model, frame),
        "tp_exceeds_scale_up_domain": exceeds_scale_up_domain(frame, domain, scale_out),
        "pp_exceeds_layers": frame["pp"].to_numpy() > model.num_layers,
        "no_price_for_gpu": ~np.array([x in priced for x in g_ids], dtype=bool)[g_codes],
    }


def enumerate_candidates(problem: Problem) -> pd.DataFrame:
    """Every configuration of the problem's search space, evaluated, with capacities.

    Returns
    -------
    DataFrame indexed by ``candidate_id`` (sorted), columns: the configuration, ``gpus``
    (per replica), ``usd_per_replica_hour``, memory and roofline metrics at the first
    workload's lengths, per workload ``capacity_per_s[<name>]``, ``ttft_p95_s[<name>]``,
    ``tpot_p95_s[<name>]``, and ``feasible`` / ``infeasible_reason``.
    """
    return candidates_and_params(problem)[0]


def candidates_and_params(problem: Problem) -> tuple[pd.DataFrame, parameters.ProblemParams]:
    """:func:`enumerate_candidates` and the serving parameters it resolved (those of every
    configuration it evaluated), to carry to the later stages."""
    columns, parts, positions, hashes = [], [], [], []
    for model_id in dict.fromkeys(w.model for w in problem.workloads):
        model_columns, params, evaluated, model_hashes = _evaluate_model(problem, model_id)
        columns.append(model_columns)
        parts.append(params)
        positions.append(evaluated)
        hashes.append(model_hashes)
    starts = np.cumsum([0] + [len(h) for h in hashes[:-1]])
    hashes = np.concatenate(hashes)
    # sorted by id: the ids are the hashes' top 48 bits in fixed-width hex (speed: no string
    # sort; two equal ids are two equal neighbours there). The ids are distinct (else the
    # error below), so any sort gives the one order: the unstable one is the fastest.
    top = hashes >> np.uint64(16)
    order = np.argsort(top)
    ranked = top[order]
    if (ranked[1:] == ranked[:-1]).any():  # 48-bit ids: ~1e-4 chance at 250k candidates
        raise RuntimeError("candidate id collision; please report this problem file")
    # the table built once, in id order (speed: no per-model frame, no take of a wide frame)
    index = pd.Index(dimensions.id_strings(hashes[order]).astype(object), dtype="str", copy=False, name="candidate_id")
    out = frame_of(columns, order, index)
    # each model's evaluated rows (positions in its grid), in the order of its parameters,
    # at their positions in the table
    rows = np.concatenate([start + at for start, at in zip(starts, positions)]).astype(int)
    place = np.empty(len(order), dtype=np.intp)
    place[order] = np.arange(len(order))
    sizes = [len(at) for at in positions]
    in_table = place[rows]
    return out, problem_params(problem, index[in_table], parameters.concat(parts, sizes),
                               _sorting_order(in_table, len(order)))


def _sorting_order(positions: np.ndarray, size: int) -> np.ndarray:
    """The permutation that sorts ``positions`` (distinct rows of a table of ``size`` rows)
    ascending: O(n), no sort."""
    mark = np.full(size, -1, dtype=np.intp)
    mark[positions] = np.arange(len(positions))
    return mark[mark >= 0]


def _evaluate_model(problem: Problem, model_id: str) -> tuple[dict, ServingParams, np.ndarray, np.ndarray]:
    """One model's grid, evaluated: its columns (name -> the grid's rows' values, in grid
    order: a :class:`planner.dimensions.Coded` column or an array; the table's columns in
    order, for :func:`planner.candidate_frame.frame_of`), the serving parameters of the
    configurations evaluated, their positions in the grid (ascending: the parameters'
    order) and the rows' :func:`planner.dimensions.candidate_hashes`."""
    frame, coded = _grid(problem, model_id)
    workloads = [w for w in problem.workloads if w.model == model_id]
    # the first reason that applies per row, as an index into REASONS (len(REASONS): none)
    which = _structural_reasons(problem, frame, coded)
    # the structurally possible rows are evaluated; the frame stays in grid order (the
    # candidate table is sorted by id at the end: one reordering of the rows)
    evaluated = np.flatnonzero(which == len(REASONS))
    n_ok = len(evaluated)

    first = workloads[0]
    copies = _role_copies(coded, evaluated)
    # the rows evaluated, one per configuration with role copies (the frame's rows at
    # ``at``; speed: no frame of every evaluated row then)
    at = evaluated if copies is None else evaluated[copies]
    rows = frame.take(at).reset_index(drop=True)
    if copies is None and "role" in coded:   # (the role of rows of their own: their capacities read it)
        rows["role"] = dimensions.values_at(coded["role"].distinct, coded["role"].index[at])
    arrays, config_params, fallback, metrics = _serving_rows(problem, rows, {k: v.take(at) for k, v in coded.items()},
                                                             first)
    spread = None if copies is None else np.repeat(np.arange(len(copies)), n_ok // len(copies))

    def per_row(values):
        """Values per configuration (arrays, parameters) at the evaluated rows."""
        if spread is None:
            return values
        return values.take(spread) if isinstance(values, (ConfigArrays, ServingParams)) else values[spread]

    params, fallback = per_row(config_params), per_row(fallback)
    metrics = {key: per_row(value) for key, value in metrics.items()}

    def padded(values, fill=np.nan, live_rows=None):
        """``values`` of the evaluated rows (``live_rows``: of those rows, as floats) at their
        rows of the frame, ``fill`` elsewhere: a float column as a :class:`planner.candidate_frame.
        Scattered` one (written to the table's rows at the end), another as an array."""
        values = np.asarray(values)
        rows = evaluated if live_rows is None else live_rows
        if live_rows is not None or values.dtype == np.float64:   # (its own copy: the zeroing below writes it)
            return Scattered(np.array(np.broadcast_to(values, rows.shape), dtype=float), rows, fill, len(frame))
        out = np.full(len(frame), fill, dtype=values.dtype)
        out[rows] = values
        return out

    columns: dict = dict(coded)   # the dimensions (in the grid's order), then the derived
    columns.update({name: np.asarray(derived(frame)) for name, derived in dimensions.DERIVED.items()})
    added: dict[str, np.ndarray] = {}   # the evaluated columns, in order
    # per distinct GPU, then onto the rows by their codes (speed: no per-row map)
    g_codes, g_ids = coded["gpu"].factorize()
    prices = problem.prices_usd_per_gpu_hour
    price = np.array([prices.get(g, np.nan) for g in g_ids] + [np.nan], dtype=float)[g_codes]
    added["usd_per_gpu_hour"] = price
    added["usd_per_replica_hour"] = price * columns["gpus"]
    added["math_fallback_to_bf16"] = padded(fallback.astype(float), np.nan)
    for key in _KEPT_METRICS:
        added[key] = padded(metrics[key])
    budget = metrics["kv_budget_bytes_per_gpu"]
    late = {"weights_do_not_fit_memory": budget <= 0}   # the evaluated rows' reasons

    fits = budget > 0
    kv_cap_ok = np.ones(n_ok, dtype=bool)
    warrays = {}
    for w in workloads:
        warr = arrays if w is first else _with_lengths(arrays, w)
        warrays[w.name] = warr
        # Every slot must hold a sequence at its full length (mean prompt + mean output).
        full = memory.max_concurrency(warr, config_params, w.prompt.mean + w.output.mean)
        kv_cap_ok &= per_row(full >= rows["max_batch"].to_numpy())   # (a configuration's rows: one max batch)
    # Capacity at SLO only where memory allows the configuration at all.
    live = np.flatnonzero(fits & kv_cap_ok)
    live_rows = evaluated[live]   # (one array for every capacity column: frame_of places it once)
    any_capacity = np.zeros(n_ok, dtype=bool)
    ttft_only = np.ones(n_ok, dtype=bool)
    if spread is not None:   # role copies: the live rows are whole groups (their values are per configuration)
        size = n_ok // len(copies)
        live_configs = np.flatnonzero((fits & kv_cap_ok)[::size])
        roles = tuple(dimensions.values_at(coded["role"].distinct, coded["role"].index[evaluated[:size]]))
    for w in workloads:
        if not live.size:   # no row to evaluate (with role copies, ``rows`` are configurations)
            cap = {key: np.zeros(0) for key in _CAPACITY_KEYS}
        elif spread is not None:
            cap = _role_copy_capacities(problem, w, warrays[w.name].take(live_configs),
                                        config_params.take(live_configs), roles,
                                        Margins.of(problem))
        else:           # (rows of their own: ``rows`` are the evaluated rows)
            cap = _live_capacity(problem, rows, w, per_row(warrays[w.name]), params, live)
        served = cap["central_rate_per_s"] > 0
        # the live rows' values at their rows of the frame (0 or NaN elsewhere), in one pass
        added[f"capacity_per_s[{w.name}]"] = padded(cap["max_rate_per_s"], 0.0, live_rows)
        added[f"central_capacity_per_s[{w.name}]"] = padded(cap["central_rate_per_s"], 0.0, live_rows)
        added[f"ttft_p95_s[{w.name}]"] = padded(np.where(served, cap["ttft_p95_s"], np.nan), np.nan, live_rows)
        added[f"tpot_p95_s[{w.name}]"] = padded(np.where(served, cap["tpot_p95_s"], np.nan), np.nan, live_rows)
        any_capacity[live] |= np.asarray(cap["max_rate_per_s"]) > 0     # (other rows: rate 0)
        ttft_first = np.zeros(n_ok, dtype=bool)                         # (other rows: no violated SLO)
        ttft_first[live] = np.asarray(cap["slo_violated_at_low_load"]) == "ttft"
        ttft_only &= ttft_first
    for other in problem.workloads:
        if other.model != model_id:
            added[f"capacity_per_s[{other.name}]"] = np.zeros(len(frame))
            added[f"central_capacity_per_s[{other.name}]"] = np.zeros(len(frame))
    late["max_batch_exceeds_kv_capacity"] = ~kv_cap_ok & fits
    no_slo = ~any_capacity & fits & kv_cap_ok
    late["slo_ttft_unreachable"] = no_slo & ttft_only
    late["slo_tpot_unreachable"] = no_slo & ~ttft_only
    which[evaluated] = _first_reason(late, n_ok)   # (no structural reason there)
    added["infeasible_reason"] = dimensions.Coded(_REASON_TEXTS, which)
    feasible = added["feasible"] = which == len(REASONS)
    for name, values in added.items():   # no capacity where the configuration is rejected
        if name.startswith(("capacity_per_s[", "central_capacity_per_s[")):
            if isinstance(values, Scattered):   # (its fill, elsewhere: 0)
                values.values[~feasible[values.rows]] = 0.0
            else:
                values[~feasible] = 0.0
    columns.update(added)
    return columns, params, evaluated, dimensions.candidate_hashes(frame, coded)


#: The ``infeasible_reason`` texts by their position in :data:`REASONS` ('' last: feasible),
#: as the column's distinct values (a str column, as a frame types a column of texts).
_REASON_TEXTS = pd.Series(pd.array([*REASONS, ""], dtype="str"))


#: The serving-model outputs of :func:`planner.serving.evaluate.evaluate` the search keeps.
_KEPT_METRICS = ("weights_bytes_per_gpu", "kv_budget_bytes_per_gpu", "tpot_s", "prefill_s",
                 "throughput_tokens_per_s")


def _role_copies(coded: dict, evaluated: np.ndarray) -> np.ndarray | None:
    """With several roles searched, the positions among the ``evaluated`` rows of one row per
    configuration (its first role), where the evaluated rows are whole role groups: the
    role is the grid's innermost dimension (:data:`planner.dimensions.NAMES`), so the R
    roles of a configuration are R consecutive grid rows equal in every other dimension,
    and the structural rejections do not read the role. None otherwise (one role, or a
    group cut)."""
    if "role" not in coded or list(coded)[-1] != "role":
        return None
    size = len(coded["role"].distinct)
    if size < 2 or len(evaluated) % size or len(evaluated) < 2 * size:
        return None
    groups = evaluated.reshape(-1, size)
    roles = coded["role"].index[groups]
    if (groups[:, 0] % size).any() or not ((groups - groups[:, :1]) == np.arange(size)).all() \
            or not (roles == roles[:1]).all():
        return None
    return np.arange(0, len(evaluated), size)


def _serving_rows(problem: Problem, rows: pd.DataFrame, coded: dict, workload):
    """Serving-model arrays (at ``workload``'s mean lengths), parameters, math fallback and
    :data:`_KEPT_METRICS` of configuration ``rows`` (``coded``: their columns'
    :class:`planner.dimensions.Coded` forms). With role copies (:func:`_role_copies`) the
    search passes one row per configuration: every value is per row and does not read the
    role (the same numbers for each of its roles' rows)."""
    cfg = rows.assign(batch=rows["max_batch"], prompt_tokens=workload.prompt.mean,
                      output_tokens=workload.output.mean, context_tokens=np.nan)
    arrays, fallback = config_arrays(problem.catalog, cfg, models=problem.imported_models, coded=coded)
    params = serving_params(problem, rows, coded)
    metrics = evaluate(arrays, params)
    return arrays, params, fallback, {key: metrics[key] for key in _KEPT_METRICS}


def rejection_counts(candidates: pd.DataFrame) -> dict[str, int]:
    """Rejected candidates per reason (reasons with no rejection omitted), in check order."""
    # a Counter of the column's values: half the time of pandas' value_counts on 10^5 strings
    counts = Counter(candidates["infeasible_reason"].to_numpy(object).tolist())
    return {r: counts[r] for r in REASONS if r in counts}
