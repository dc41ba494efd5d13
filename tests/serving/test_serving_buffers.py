"""The fused serving pass's buffers (planner/serving/buffers.py) and its rows treated apart."""

import numpy as np
import pandas as pd
import pytest

from planner.configs import config_arrays
from planner.serving import evaluate as ev
from planner.serving.buffers import FIRST_OFFSET_BYTES, PAGE_BYTES, STAGGER_BYTES, Scratch, staggered
from planner.serving.params import ServingParams


def _page_offset(a: np.ndarray) -> int:
    return a.ctypes.data % PAGE_BYTES


def test_staggered_arrays_start_at_their_slot_offset_within_a_page():
    arrays = [staggered(1000, slot) for slot in range(30)]
    offsets = [_page_offset(a) for a in arrays]
    assert offsets == [(FIRST_OFFSET_BYTES + slot * STAGGER_BYTES) % PAGE_BYTES for slot in range(30)]
    assert len(set(offsets[:PAGE_BYTES // STAGGER_BYTES])) == PAGE_BYTES // STAGGER_BYTES   # 25 distinct
    for a in arrays:
        assert a.shape == (1000,) and a.dtype == np.float64 and a.flags.c_contiguous and a.flags.writeable
        assert _page_offset(a) % 32 == 0          # AVX2 vectors never straddle a cache line
    words = staggered(5, 3, dtype=bool, zero=True)
    assert words.dtype == bool and not words.any()
    assert not staggered(4096, 2, zero=True).any()


def test_scratch_gives_one_buffer_per_name_reused_across_calls():
    scratch = Scratch(64)
    a = scratch("a", 64)
    a[:] = 7.0
    again = scratch("a", 10)                      # a ragged last block: the first rows
    assert again.shape == (10,) and again.ctypes.data == a.ctypes.data and (again == 7.0).all()
    b = scratch("b", 64)
    assert not np.shares_memory(a, b) and scratch("b", 64).ctypes.data == b.ctypes.data
    assert _page_offset(a) != _page_offset(b)     # staggered from each other


def test_scratch_stacks_rows_staggered_and_reused():
    scratch = Scratch(64)
    rows = scratch.stack("t", 3, 64)
    assert rows.shape == (3, 64) and all(r.flags.c_contiguous for r in rows)
    offsets = [_page_offset(r) for r in rows]
    assert [(b - a) % PAGE_BYTES for a, b in zip(offsets, offsets[1:])] == [(64 * 8 + STAGGER_BYTES) % PAGE_BYTES] * 2
    rows[:] = 5.0
    again = scratch.stack("t", 2, 10)            # fewer rows of a ragged block: the same memory
    assert again.shape == (2, 10) and again[0].ctypes.data == rows[0].ctypes.data and (again == 5.0).all()
    assert again[1].ctypes.data == rows[1].ctypes.data
    other = scratch.stack("u", 2, 64)
    assert not np.shares_memory(other, rows) and not np.shares_memory(scratch.new(64), rows)


@pytest.fixture(scope="module")
def edge_rows(catalog):
    """Rows of every kind the fused pass treats apart, several of each, shuffled."""
    kinds = [
        # model, gpu, tp, pp, batch, context: what it exercises
        ("mixtral-8x7b", "h100-sxm", 1, 4, 2, np.nan),     # MoE, b < S: the micro-batch is not b/S
        ("mixtral-8x7b", "h100-sxm", 2, 2, 300, np.nan),   # MoE, S > 1, saturated expert reads
        ("qwen3-30b-a3b", "h100-sxm", 4, 1, 8, np.nan),    # MoE, S = 1: one read for all token counts
        ("deepseek-v3", "h200", 8, 2, 64, np.nan),         # MLA latent replicated over TP, MoE
        ("gemma-3-27b", "a100-80gb", 2, 1, 16, np.nan),    # sliding-window layers
        ("gpt-oss-120b", "h100-sxm", 4, 2, 1, np.nan),     # windows and experts
        ("llama-3.1-8b", "m2-ultra", 1, 1, 4, np.nan),     # no scale-up link, one GPU
        ("llama-3.1-8b", "m2-ultra", 2, 2, 4, np.nan),     # no link with TP > 1 and PP > 1: infinite times
        ("llama-3.1-8b", "h100-sxm", 1, 1, 0, np.nan),     # no sequence
        ("llama-3.1-8b", "h100-sxm", 2, 1, 8, 0.0),        # no KV per sequence: unbounded concurrency
        ("deepseek-v3", "h100-sxm", 1, 1, 8, 0.0),         # the same without room: inf, not budget / 0 = -inf
    ]
    rows = [k for k in kinds for _ in range(3)]
    order = np.random.default_rng(3).permutation(len(rows))
    frame = pd.DataFrame([rows[i] for i in order], columns=["model", "gpu", "tp", "pp", "batch", "context_tokens"])
    frame = frame.assign(quantization="bf16", kv_cache_dtype="bf16", prompt_tokens=1500, output_tokens=200)
    arrays, _ = config_arrays(catalog, frame)
    return arrays


@pytest.mark.parametrize("block_rows, threads", [(7, 1), (4, 2), (ev.BLOCK_ROWS, 1)])
def test_fused_pass_equals_the_reference_bit_for_bit_on_edge_rows(edge_rows, block_rows, threads):
    n = edge_rows.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        ref = ev.evaluate_reference(edge_rows, ServingParams(), None, 2.0)
        got = ev.evaluate_rows(edge_rows, ServingParams(), None, 2.0, rows=n, block_rows=block_rows, threads=threads)
    assert list(got) == list(ref)
    for key in ref:
        a, b = np.asarray(got[key]), np.asarray(ref[key])
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert a.tobytes() == b.tobytes(), key
    # the rows are what they claim: each special case occurs
    unbounded = got["kv_bytes_per_seq"] == 0
    assert (got["kv_budget_bytes_per_gpu"][unbounded] < 0).any() and np.isposinf(got["max_concurrency"][unbounded]).all()
    assert np.isinf(got["tpot_s"]).any()
    fraction = got["expert_read_fraction"]
    assert (fraction == 1.0).any() and ((fraction > 0) & (fraction < 1)).any() and (fraction == 0).any()


def test_fused_pass_equals_the_reference_with_scalar_columns(edge_rows):
    """One model's columns (or the parallelism) as scalars, the rest per row: the pass's
    subsets (MoE rows, windows, ...) are then every row or none."""
    from planner.serving.arrays import MODEL_COLUMNS

    n = edge_rows.shape[0]
    moe_row = int(np.flatnonzero(edge_rows.num_experts > 0)[0])
    for columns in (MODEL_COLUMNS, ("tp", "pp", "batch")):
        c = edge_rows.replace(**{k: float(getattr(edge_rows, k)[moe_row]) for k in columns})
        with np.errstate(divide="ignore", invalid="ignore"):
            ref = ev.evaluate_reference(c, ServingParams(), np.full(n, 9.0), 2.0)
            got = ev.evaluate_rows(c, ServingParams(), np.full(n, 9.0), 2.0, rows=n, block_rows=5, threads=2)
        for key in ref:
            assert np.asarray(got[key]).tobytes() == np.broadcast_to(ref[key], (n,)).tobytes(), (columns[0], key)


def test_scratch_pool_lends_the_buffer_freed_last_first():
    scratch = Scratch(64)
    a, b = scratch.new(64), scratch.new(10)
    assert a.shape == (64,) and b.shape == (10,) and not np.shares_memory(a, b)
    assert _page_offset(a) != _page_offset(b)
    named = scratch("x", 64)                      # named buffers and the pool never share
    assert not np.shares_memory(named, a) and not np.shares_memory(named, b)
    scratch.free(a, b)
    again = scratch.new(5)                        # b was freed last
    assert again.ctypes.data == b.ctypes.data
    assert scratch.new(64).ctypes.data == a.ctypes.data
    with pytest.raises(KeyError):
        scratch.free(a)                           # a view not lent now
    c = scratch.new(64)                           # a third buffer, never freed
    scratch.reset()                               # a new block: every buffer back
    lent = {scratch.new(64).ctypes.data for _ in range(3)}
    assert lent == {a.ctypes.data, b.ctypes.data, c.ctypes.data}
