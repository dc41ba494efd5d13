"""Capacity at SLO of the search's configurations, per workload (issue 19: out of
:mod:`planner.search`, which calls it once per workload of a model's evaluated rows).

:func:`workload_capacity` is the capacity of configuration rows for one workload, at its SLOs
and at those its margins make (:mod:`planner.margins`); rows with roles (disaggregated
prefill and decode) go to :func:`planner.disagg_roles.role_capacity`. The search's two
callers: :func:`_live_capacity` (rows of their own, once per distinct configuration) and
:func:`_role_copy_capacities` (each configuration once per role). :func:`workload_arrays`
gives the serving-model arrays of rows at a workload's mean lengths (the fronts, the
diagnosis and the verification read them too).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner import dimensions
from planner.configs import config_arrays, distinct_configs
from planner.margins import Margins
from planner.problem import Problem
from planner.serving.arrays import ConfigArrays
from planner.serving.params import ServingParams
from planner.serving.queueing import TrafficArrays, capacities_at_slos


def _live_capacity(problem: Problem, ok: pd.DataFrame, workload, arrays: ConfigArrays, params: ServingParams,
                   live: np.ndarray) -> dict:
    """:func:`workload_capacity` of the rows ``ok`` at positions ``live`` (``arrays``, ``params``:
    those of every row of ``ok``), per live row: once per distinct configuration (same arrays
    as the capacity reads them, parameters and role: same numbers)."""
    live_params, live_arrays = params.take(live), arrays.take(live)
    roles = ok["role"].to_numpy()[live] if "role" in ok.columns else None
    role_codes = () if roles is None else (pd.factorize(roles)[0].astype(float),)
    first, inverse = distinct_configs(live_arrays if roles is None else _role_key(roles, live_arrays),
                                      live_params, *role_codes)
    read = ok[["role"] if "role" in ok.columns else []]   # with arrays given: the rows' role only
    cap = workload_capacity(problem, read.iloc[live[first]], workload, live_params.take(first),
                            arrays=live_arrays.take(first), margins=Margins.of(problem))
    return {key: np.asarray(value)[inverse] for key, value in cap.items()}


def _role_copy_capacities(problem: Problem, workload, arrays: ConfigArrays, params: ServingParams,
                          roles: tuple, margins: Margins) -> dict:
    """:func:`workload_capacity` of rows that repeat each configuration of ``arrays`` /
    ``params`` once per role of ``roles`` (row R g + r: configuration g, role ``roles[r]``),
    per row. The same numbers as :func:`_live_capacity` of those rows: the same distinct
    rows per role (the prefill ones by :func:`planner.disagg_roles.capacity_key`), in the
    same order, without the R-fold rows' keys and takes."""
    from planner import disagg_roles

    traffic = TrafficArrays.from_distributions(workload.prompt, workload.output,
                                               workload.prefix_cache_hit_fraction)
    scale_out = disagg_roles.pool_scale_out_bytes_per_s(problem.catalog, problem.gpus)
    n, size = len(np.atleast_1d(arrays.tp)), len(roles)
    out: dict = {}
    distinct: dict = {}

    def rows_of(kind: bool) -> tuple:
        """The distinct rows of a kind (prefill: True) and their values, once per kind (both
        and decode: one). Speed (the same rows, in the same order): the prefill rows' are
        found among the others' (rows equal in every field are equal in their key)."""
        if kind not in distinct:
            top_first, top_inverse, top_params, top_arrays = (rows_of(False) if kind
                                                              else (None, None, params, arrays))
            key_arrays = disagg_roles.capacity_key("prefill", top_arrays) if kind else arrays
            first, inverse = distinct_configs(key_arrays, top_params)
            every = len(first) == len(np.atleast_1d(top_arrays.tp))   # each row its own: the rows as they are
            values = (top_params, top_arrays) if every else (top_params.take(first), top_arrays.take(first))
            distinct[kind] = ((top_first[first], inverse[top_inverse], *values) if kind
                              else (first, inverse, *values))
        return distinct[kind]

    for r, role in enumerate(roles):
        first, inverse, first_params, first_arrays = rows_of(role == "prefill")
        got = _role_capacity(problem, role, pd.DataFrame(index=pd.RangeIndex(len(first))), workload,
                             first_params, first_arrays, traffic, workload.slo.ttft_p95_s,
                             workload.slo.tpot_p95_s, margins, scale_out)
        per_row = {key: np.broadcast_to(np.asarray(got[key]), (len(first),))[inverse]
                   for key in _CAPACITY_KEYS}
        _place(out, per_row, np.arange(r, n * size, size), n * size)
    return out


def _role_key(roles, arrays: ConfigArrays) -> ConfigArrays:
    """:func:`planner.disagg_roles.capacity_key` (its module only for rows with roles)."""
    from planner import disagg_roles

    return disagg_roles.capacity_key(roles, arrays)


def _with_lengths(arrays: ConfigArrays, workload) -> ConfigArrays:
    """``arrays`` (of :func:`workload_arrays`' rows, another workload's lengths) at
    ``workload``'s mean lengths: what :func:`workload_arrays` returns, without looking the
    rows' catalog entries up again (the context as config_arrays makes it, p + o/2)."""
    n = np.shape(arrays.prompt_tokens)
    prompt, output = np.full(n, float(workload.prompt.mean)), np.full(n, float(workload.output.mean))
    return arrays.replace(prompt_tokens=prompt, output_tokens=output, context_tokens=prompt + output / 2.0)


def workload_arrays(problem: Problem, rows: pd.DataFrame, workload) -> ConfigArrays:
    """Serving-model arrays of configuration ``rows`` at a workload's mean lengths."""
    cfg = rows.assign(batch=rows["max_batch"], prompt_tokens=workload.prompt.mean,
                      output_tokens=workload.output.mean, context_tokens=np.nan)
    return config_arrays(problem.catalog, cfg, models=problem.imported_models)[0]


def workload_capacity(problem: Problem, rows: pd.DataFrame, workload, params: ServingParams,
                      tpot_cap_s: float | None = None, ttft_cap_s: float | None = None,
                      arrays=None, margins: Margins | None = None,
                      traffic: TrafficArrays | None = None) -> dict:
    """Capacity at SLO of configuration ``rows`` for one workload.

    ``tpot_cap_s`` / ``ttft_cap_s`` tighten the workload's SLOs (Pareto sweeps). Returns
    :func:`planner.serving.queueing.capacity_at_slo`'s arrays at the SLOs themselves (the
    central prediction), with ``max_rate_per_s`` replaced by the capacity the optimizer
    buys under ``margins`` (:meth:`planner.margins.Margins.planned_capacity`; none: the
    central one), ``central_rate_per_s`` the central capacity, and
    ``slo_violated_at_low_load`` judged at the margined SLOs. ``traffic``: the workload's
    :class:`TrafficArrays` when the caller has them.
    """
    arrays = arrays if arrays is not None else workload_arrays(problem, rows, workload)
    if traffic is None:
        traffic = TrafficArrays.from_distributions(workload.prompt, workload.output,
                                                   workload.prefix_cache_hit_fraction)
    tpot = workload.slo.tpot_p95_s if tpot_cap_s is None else min(workload.slo.tpot_p95_s, tpot_cap_s)
    ttft = workload.slo.ttft_p95_s if ttft_cap_s is None else min(workload.slo.ttft_p95_s, ttft_cap_s)
    roles = dimensions.value_of(rows, "role")
    if not np.all(np.asarray(roles) == "both"):
        return _by_role(problem, rows, workload, params, arrays, traffic, ttft, tpot, margins)
    margins = margins or Margins(confidence=0.5, max_load_fraction=1.0)
    # the central and the margined SLOs' capacities in one pass (their shared states once)
    pairs = list(dict.fromkeys([(ttft, tpot), margins.slos(ttft, tpot)]))
    results = dict(zip(pairs, capacities_at_slos(arrays, params, traffic, pairs)))

    def capacity(ttft_slo_s, tpot_slo_s):
        return results[ttft_slo_s, tpot_slo_s]["max_rate_per_s"]

    planned = margins.planned_capacity(capacity, ttft, tpot)
    out = dict(results[ttft, tpot])
    held = results.get(margins.slos(ttft, tpot), out)
    out.update(max_rate_per_s=planned, central_rate_per_s=out["max_rate_per_s"],
               slo_violated_at_low_load=held["slo_violated_at_low_load"])
    return out


def _by_role(problem: Problem, rows: pd.DataFrame, workload, params: ServingParams, arrays: ConfigArrays,
             traffic: TrafficArrays, ttft: float, tpot: float, margins: Margins | None) -> dict:
    """:func:`workload_capacity` of rows with roles: the aggregated rows as there, the
    prefill-role and decode-role rows by :func:`planner.disagg_roles.role_capacity`."""
    from planner import disagg_roles  # the disaggregated model only for rows with roles (process start)

    roles = np.asarray(rows["role"])
    out: dict = {}
    scale_out = disagg_roles.pool_scale_out_bytes_per_s(problem.catalog, problem.gpus)
    for role in ("both", "prefill", "decode"):
        pos = np.flatnonzero(roles == role)
        if not len(pos):
            continue
        got = _role_capacity(problem, role, rows.iloc[pos].drop(columns="role"), workload, params.take(pos),
                             arrays.take(pos), traffic, ttft, tpot, margins, scale_out)
        _place(out, got, pos, len(rows))
    return out


#: The keys of :func:`workload_capacity` that rows with roles get (the search reads these).
_CAPACITY_KEYS = ("max_rate_per_s", "central_rate_per_s", "ttft_p95_s", "tpot_p95_s",
                  "slo_violated_at_low_load")


def _role_capacity(problem: Problem, role: str, rows: pd.DataFrame, workload, params: ServingParams,
                   arrays: ConfigArrays, traffic: TrafficArrays, ttft: float, tpot: float,
                   margins: Margins | None, scale_out_bytes_per_s: float) -> dict:
    """:func:`workload_capacity` of rows that all have ``role``: the aggregated ones as there
    (``rows``: without their role; the capacities read their arrays only), the prefill-role
    and decode-role ones by :func:`planner.disagg_roles.role_capacity`."""
    if role == "both":
        return workload_capacity(problem, rows, workload, params, tpot, ttft, arrays=arrays, margins=margins,
                                 traffic=traffic)
    from planner import disagg_roles

    return disagg_roles.role_capacity(role, arrays, params, traffic, workload, ttft, tpot,
                                      margins or Margins(confidence=0.5, max_load_fraction=1.0),
                                      scale_out_bytes_per_s)


def _place(out: dict, got: dict, pos: np.ndarray, size: int) -> None:
    """Put :data:`_CAPACITY_KEYS` of ``got`` (one role's rows) at positions ``pos`` of ``out``'s
    arrays of ``size`` rows (made on first use: floats, the violated SLO as objects)."""
    for key in _CAPACITY_KEYS:
        value = np.broadcast_to(np.asarray(got[key]), (len(pos),))
        if key not in out:
            out[key] = np.empty(size, dtype=object if key == "slo_violated_at_low_load" else float)
        out[key][pos] = value
