"""The fused serving pass's shortcuts (planner/serving/fused.py) against the plain expressions."""

import numpy as np
import pytest

from planner.serving import fused

MISS = [0.0, 1e-310, 1e-300, 1e-20, 0.01, 0.5, 0.9, 1 - 1e-10, 1 - 2.0**-52, 1.0, 1.5, -0.5, np.inf, np.nan]
TOKENS = [0.0, 0.5, 1.0, 2.0, 7.3, 100.0, 1e4, 1e12, np.inf, np.nan, -3.0, -1e12]


def test_capped_expert_power_equals_the_plain_power_bit_for_bit():
    """1 - miss^min(tokens, cap) = 1 - miss^tokens on every pair, the degenerate ones included
    (all experts read, none, subnormal and NaN shares, negative or infinite token counts)."""
    miss, tokens = (np.array(v, dtype=float) for v in np.meshgrid(MISS, TOKENS))
    miss, tokens = miss.ravel(), tokens.ravel()
    with np.errstate(all="ignore"):
        plain = 1.0 - miss ** tokens
        cap = fused._token_cap(miss, np.empty_like(miss))
        got = fused._missed(miss, tokens, cap, np.empty_like(miss))
    assert got.tobytes() == plain.tobytes()
    assert (cap >= 1.0).all() and np.isposinf(cap[(miss == 1.0) | np.isnan(miss) | (miss < 0)]).all()
    capped = tokens > cap
    assert capped.sum() > 10 and (got[capped] == 1.0).all()     # the cap does bind on saturated rows
    with np.errstate(all="ignore"):
        assert (miss[capped] ** cap[capped] < 2.0**-54).all()   # and 1 - that rounds to 1.0


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 16, 23, 16389])
def test_pick_by_octets_equals_the_two_entry_take(n):
    mask = np.random.default_rng(n).random(n) < 0.4
    for table in (fused._BOUND_LABELS, np.array([5e-6, 1e-6]), np.array([-0.0, np.nan])):
        out = np.empty(n, table.dtype)
        assert fused._pick(table, fused._octets(table), mask, out) is out
        assert out.tobytes() == table.take(mask.view(np.uint8)).tobytes()


@pytest.mark.parametrize("threads", [1, 2, 8])
@pytest.mark.parametrize("rows", [1, 16384, 74_880, 200_000, 1_000_000, 10_000_000])
def test_block_rows_within_bounds_and_leaving_blocks_to_every_thread(rows, threads):
    """Blocks of [BLOCK_ROWS, MAX_BLOCK_ROWS] rows; between the bounds, exactly
    BLOCKS_PER_THREAD blocks per thread (hand values: 74,880 rows on 2 threads -> 18,720)."""
    from planner.serving import evaluate as ev

    block = ev.block_rows(rows, threads)
    assert ev.BLOCK_ROWS <= block <= ev.MAX_BLOCK_ROWS
    if ev.BLOCK_ROWS < block < ev.MAX_BLOCK_ROWS:
        assert -(-rows // block) == ev.BLOCKS_PER_THREAD * threads
    assert ev.block_rows(74_880, 2) == 18_720 and ev.block_rows(1_000_000, 2) == ev.MAX_BLOCK_ROWS
