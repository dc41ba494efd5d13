"""The search's speed-ups compute the same numbers (issue 19): configuration rows that are
equal in every serving-model input get their capacity at SLO once, and the table of
candidates is the one the row-by-row computation gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from planner import configs, search, search_capacity
from planner.problem import load_problem

ROOT = Path(__file__).resolve().parent.parent


def test_distinct_rows_by_hand():
    a = np.array([1.0, 2.0, 1.0, 2.0, 3.0, 1.0])
    b = np.array([0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    first, inverse = configs.distinct_rows([a, b])
    assert first.tolist() == [0, 1, 3, 4]            # in order of first appearance
    assert inverse.tolist() == [0, 1, 0, 2, 3, 0]


def test_distinct_rows_compare_bits():
    # -0.0 == 0.0 numerically but not bit for bit (1 / x differs): two rows; NaN rows of the
    # same bits are one
    first, inverse = configs.distinct_rows([np.array([0.0, -0.0, np.nan, np.nan])])
    assert first.tolist() == [0, 1, 2]
    assert inverse.tolist() == [0, 1, 2, 2]


def test_distinct_rows_hash_collision_falls_back(monkeypatch):
    rng = np.random.default_rng(0)
    cols = [rng.integers(0, 3, 200).astype(float) for _ in range(3)]
    want = configs.distinct_rows(cols)
    monkeypatch.setattr(configs, "_ROW_HASH_MULTIPLIER", np.uint64(0))   # every hash collides
    got = configs.distinct_rows(cols)
    assert [g.tolist() for g in got] == [w.tolist() for w in want]
    stacked = np.stack(cols, axis=1)
    assert np.array_equal(stacked[got[0]][got[1]], stacked)
    assert len(np.unique(stacked[got[0]], axis=0)) == len(got[0])     # each distinct row once


def _every_row(arrays, params, *extra):
    """distinct_configs that keeps every row (the computation without the sharing)."""
    n = len(np.atleast_1d(arrays.tp))
    return np.arange(n), np.arange(n)


#: Small problems whose grids repeat serving-model inputs: BF16 and FP16 (KV cache and
#: weights) are the same bytes and math; the second also has disaggregated roles.
SPECS = {
    "aggregated": {
        "name": "shared-aggregated",
        "workloads": [{"name": "chat", "model": "llama-3.1-8b", "rate_per_s": 20,
                       "prompt_tokens": {"mean": 1200, "p95": 3000}, "output_tokens": {"mean": 300, "p95": 800},
                       "slo": {"ttft_p95_s": 1.0, "tpot_p95_s": 0.05}},
                      {"name": "rag", "model": "llama-3.1-8b", "rate_per_s": 2, "prompt_tokens": 6000,
                       "output_tokens": 200, "slo": {"ttft_p95_s": 3.0, "tpot_p95_s": 0.08}}],
        "search": {"gpus": ["h100-sxm", "l40s"], "quantization": ["bf16", "fp16", "fp8"],
                   "kv_cache_dtype": ["bf16", "fp16"], "tp": [1, 2], "pp": [1], "max_batch": [16, 64]},
    },
    "disaggregated": {
        "name": "shared-disaggregated",
        "workloads": [{"name": "chat", "model": "qwen3-32b", "rate_per_s": 10, "prompt_tokens": 4000,
                       "output_tokens": 500, "slo": {"ttft_p95_s": 1.0, "tpot_p95_s": 0.02}}],
        "search": {"gpus": ["h200-sxm"], "quantization": ["bf16", "fp16"], "kv_cache_dtype": ["bf16", "fp16"],
                   "tp": [1, 2], "pp": [1], "max_batch": [32, 128], "disaggregation": [False, True]},
    },
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_shared_capacities_are_the_row_by_row_ones(monkeypatch, tmp_path, name):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(SPECS[name]))
    problem = load_problem(path)
    shared, _ = search.candidates_and_params(problem)
    first, inverse = configs.distinct_configs(*_live_arrays_and_params(problem))
    assert len(first) < len(inverse)                   # the problem has repeated rows to share
    assert shared["feasible"].any()
    monkeypatch.setattr(search_capacity, "distinct_configs", _every_row)
    alone, _ = search.candidates_and_params(problem)
    pd.testing.assert_frame_equal(shared, alone, check_exact=True)


def _live_arrays_and_params(problem):
    """The first model's evaluated rows' arrays and parameters (the rows the search shares)."""
    model = problem.workloads[0].model
    frame, coded = search._grid(problem, model)       # (its text columns as Coded forms only)
    bad = np.logical_or.reduce(list(search._structural(problem, frame, coded).values()))
    ok = frame[~bad].reset_index(drop=True)
    ok_coded = {name: column.take(np.flatnonzero(~bad)) for name, column in coded.items()}
    w = problem.workloads[0]
    cfg = ok.assign(batch=ok["max_batch"], prompt_tokens=w.prompt.mean, output_tokens=w.output.mean,
                    context_tokens=np.nan)
    arrays, _ = configs.config_arrays(problem.catalog, cfg, models=problem.imported_models, coded=ok_coded)
    return arrays, search.serving_params(problem, ok, ok_coded)


@pytest.mark.parametrize("metric", ["tpot_p95_s", "ttft_p95_s"])
def test_front_curves_and_capacities_shared_are_the_row_by_row_ones(monkeypatch, tmp_path, metric):
    from planner import front_capacity

    path = tmp_path / "fronts.yaml"
    path.write_text(yaml.safe_dump(SPECS["aggregated"]))
    problem = load_problem(path)
    candidates, params = search.candidates_and_params(problem)
    feasible = candidates[candidates["feasible"]]
    loosest = max(getattr(w.slo, metric) for w in problem.workloads)
    targets = loosest * np.array([0.3, 0.5, 0.7, 1.0])
    sizes = []

    def recorded(*args):
        first, inverse = configs.distinct_configs(*args)
        sizes.append((len(first), len(inverse)))
        return first, inverse

    def curves_and_capacities():
        curves = front_capacity.Curves(problem, feasible, params)
        n = len(curves.frame)
        at, positions = np.repeat(np.arange(len(targets)), n), np.tile(np.arange(n), len(targets))
        return curves.curves, front_capacity.Exact(curves, metric, targets)._compute(at, positions)

    monkeypatch.setattr(front_capacity, "distinct_configs", recorded)
    curves, shared = curves_and_capacities()
    assert any(d < n for d, n in sizes)                 # some rows shared
    monkeypatch.setattr(front_capacity, "distinct_configs", _every_row)
    curves_alone, alone = curves_and_capacities()
    assert sorted(curves) == sorted(curves_alone)
    for name, curve in curves.items():
        for key, value in curve.items():
            assert np.array_equal(value, curves_alone[name][key], equal_nan=True), (name, key)
    assert np.array_equal(shared, alone)
    assert (shared > 0).any() and (shared < alone.max()).any()     # targets bind somewhere


@pytest.mark.parametrize("columns", [1, 3, 6])
def test_front_patterns_are_numpy_unique_rows(columns):
    from planner.front_capacity import _patterns

    serves = np.random.default_rng(columns).random((400, columns)) < 0.4
    want_rows, want_group = np.unique(serves, axis=0, return_inverse=True)
    rows, group = _patterns(serves)
    assert np.array_equal(rows, want_rows) and np.array_equal(group.ravel(), want_group.ravel())
    assert np.array_equal(rows[group.ravel()], serves)


def test_coded_grid_columns_give_the_columns_codes_and_ids(tmp_path):
    from planner import dimensions

    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(SPECS["disaggregated"]))
    problem = load_problem(path)
    table, coded = dimensions.CandidateTable.coded_grid({"model": ["qwen3-32b"], **dimensions.search_values(problem)})
    assert table.frame.equals(dimensions.CandidateTable.grid({"model": ["qwen3-32b"],
                                                              **dimensions.search_values(problem)}).frame)
    rows = np.random.default_rng(0).permutation(len(table))[: len(table) // 2]   # reordered, a subset
    frame = table.frame.iloc[rows].reset_index(drop=True)
    coded = {name: column.take(rows) for name, column in coded.items()}
    for name, column in coded.items():
        codes, values = column.factorize()
        assert list(np.asarray(values, dtype=object)[codes]) == frame[name].tolist(), name
    assert np.array_equal(dimensions.candidate_hashes(frame, coded), dimensions.candidate_hashes(frame))


@pytest.mark.parametrize("engine", [None, "trtllm"])
def test_format_rejections_from_the_grid_codes_are_those_of_the_rows(tmp_path, engine):
    """The reasons of every combination of the grid's distinct (model, GPU, format, KV dtype)
    values, taken to the rows by their codes, are the reasons of the rows' own combinations
    (the plain path), for the whole grid and a reordered subset; the engine table and the
    quality gate reject rows for every reason they can give."""
    from planner import dimensions
    from planner.format_rules import REASONS, format_rejections

    spec = yaml.safe_load((ROOT / "problems" / "chat-70b.yaml").read_text())
    spec["quality"] = {"min_recovery": 0.999}       # fp8 below it, int4-awq unverified
    if engine:
        spec["serving"] = {"engine": engine}
    path = tmp_path / "formats.yaml"
    path.write_text(yaml.safe_dump(spec))
    problem = load_problem(path)
    table, coded = dimensions.CandidateTable.coded_grid({"model": ["llama-3.1-70b"],
                                                         **dimensions.search_values(problem)})
    rows = np.random.default_rng(1).permutation(len(table))[: len(table) // 3]
    subset = table.frame.iloc[rows].reset_index(drop=True), {n: c.take(rows) for n, c in coded.items()}
    for frame, codes in ((table.frame, coded), subset):
        fast, plain = format_rejections(problem, frame, codes), format_rejections(problem, frame)
        assert list(fast) == list(plain) == list(REASONS)
        for reason in REASONS:
            assert np.array_equal(fast[reason], plain[reason]), reason
    hit = {reason for reason, mask in format_rejections(problem, table.frame, coded).items() if mask.any()}
    assert hit == (set(REASONS) if engine else set(REASONS[2:]))


def test_first_reason_is_the_first_mask_in_reasons_order():
    """_first_reason: per row the position in REASONS of the first given mask that holds
    (masks of any subset of the reasons, given in any order), len(REASONS) where none does."""
    rng = np.random.default_rng(2)
    names = [search.REASONS[i] for i in rng.permutation(len(search.REASONS))[:6]]
    masks = {name: rng.random(300) < 0.2 for name in names}
    want = [min([search.REASONS.index(n) for n in names if masks[n][row]], default=len(search.REASONS))
            for row in range(300)]
    assert search._first_reason(masks, 300).tolist() == want


@pytest.mark.parametrize("name", sorted(SPECS))
def test_structural_reasons_by_block_are_those_of_every_row(tmp_path, name):
    """_structural_reasons (the reasons of each run of grid rows that differ only in max
    batch / role, repeated over the run) gives every row the first reason of _structural's
    masks over all rows, on grids that some structural rules reject parts of."""
    spec = dict(SPECS[name], search={**SPECS[name]["search"], "tp": [1, 2, 3], "pp": [1, 1000]})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    problem = load_problem(path)
    frame, coded = search._grid(problem, problem.workloads[0].model)
    got = search._structural_reasons(problem, frame, coded)
    want = search._first_reason(search._structural(problem, frame, coded), len(frame))
    assert np.array_equal(got, want)
    assert {search.REASONS[i] for i in set(want.tolist()) - {len(search.REASONS)}} == \
        {"tp_does_not_divide_attention_heads", "pp_exceeds_layers"}
    assert (want == len(search.REASONS)).any()
