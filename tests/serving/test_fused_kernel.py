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


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("rows", [1, 16384, 16385, 20_000, 74_880, 200_000, 1_000_000, 10_000_000])
def test_block_rows_within_bounds_and_leaving_every_thread_the_same_rows(rows, threads):
    """Blocks of at most MAX_BLOCK_ROWS rows, a multiple of BLOCK_ALIGN_ROWS; one block where
    BLOCK_ROWS rows hold them all; otherwise a count of blocks that is a multiple of the
    threads (or of itself, where fewer), all of one size but the last, which is at most
    BLOCK_ALIGN_ROWS rows shorter per block: each thread gets the same rows, within 8 per block.
    Hand values: 74,880 rows on 2 threads -> 4 blocks of 18,720; 1,000,000 on 2 threads ->
    16 blocks of 62,504 (the last 62,440), where the bounds alone gave 15 of 65,536 and one
    of 16,960."""
    from planner.serving import evaluate as ev

    block = ev.block_rows(rows, threads)
    blocks = -(-rows // block)
    assert block <= ev.MAX_BLOCK_ROWS and block % ev.BLOCK_ALIGN_ROWS == 0
    if rows <= ev.BLOCK_ROWS:
        assert blocks == 1
    else:
        assert blocks > 1 and blocks % min(threads, blocks) == 0 and block >= ev.BLOCK_ROWS // 2
        last = rows - (blocks - 1) * block
        assert 0 <= block - last < blocks * ev.BLOCK_ALIGN_ROWS
        per_thread = [0] * min(threads, blocks)    # the shared iterator deals the blocks round the threads
        for i in range(blocks):
            per_thread[i % len(per_thread)] += block if i < blocks - 1 else last
        assert max(per_thread) - min(per_thread) <= blocks * ev.BLOCK_ALIGN_ROWS
    assert ev.block_rows(74_880, 2) == 18_720 and ev.block_rows(1_000_000, 2) == 62_504
