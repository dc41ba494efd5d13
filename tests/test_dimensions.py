"""The configuration dimensions declared once (planner/dimensions.py): ids, labels, derived."""

import hashlib
from collections import namedtuple

import numpy as np
import pandas as pd
import pytest

from planner import dimensions
from planner.dimensions import CandidateTable, Dimension, candidate_ids, gpus_per_replica, label

CONFIG = {"model": "llama-3.1-70b", "gpu": "a100-sxm-80gb", "tp": 8, "pp": 2, "quantization": "bf16",
          "kv_cache_dtype": "fp8", "max_batch": 256}
#: The id of CONFIG in candidates.csv of problems/chat-70b.yaml (main e2ece06).
CONFIG_ID = "c0006629524ef"


def _hand_id(config: dict) -> str:
    """The id by its definition, in plain Python integers: per dimension in canonical order,
    h = ((h xor sha1_64(name=value)) * MIX mod 2^64), h ^= h >> 31; 'c' + first 12 hex digits."""
    mask, mix, h = (1 << 64) - 1, 0x9E3779B97F4A7C15, 0
    for name, value in config.items():
        v = int.from_bytes(hashlib.sha1(f"{name}={value}".encode()).digest()[:8], "little")
        h = ((h ^ v) * mix) & mask
        h ^= h >> 31
    return "c" + f"{h:016x}"[:12]


def test_the_declaration_is_todays_configuration_key():
    assert dimensions.NAMES == ("model", "gpu", "tp", "pp", "quantization", "kv_cache_dtype", "max_batch",
                                "ep", "attention_dp", "role")
    assert dimensions.SETTINGS == ("tp", "pp", "quantization", "kv_cache_dtype", "max_batch", "ep", "attention_dp",
                                   "role")
    assert dimensions.dimension("role").default == "both"  # today's configurations: aggregated
    assert dimensions.dimension("tp").dtype is int
    # issue 14's layout dimensions have defaults: the dense layout adds nothing to ids or labels
    assert (dimensions.dimension("ep").default, dimensions.dimension("attention_dp").default) == (1, False)
    with pytest.raises(KeyError, match="unknown configuration dimension 'epp'"):
        dimensions.dimension("epp")


def test_layout_dimensions_keep_ids_and_labels_at_their_defaults():
    plain = pd.DataFrame([CONFIG])
    dense = pd.DataFrame([{**CONFIG, "ep": 1, "attention_dp": False}])
    wide = pd.DataFrame([{**CONFIG, "ep": 8, "attention_dp": True}])
    assert candidate_ids(dense).iloc[0] == candidate_ids(plain).iloc[0] == CONFIG_ID
    assert candidate_ids(wide).iloc[0] == _hand_id({**CONFIG, "ep": 8, "attention_dp": True}) != CONFIG_ID
    assert dimensions.label(dense.iloc[0], "text") == dimensions.label(plain.iloc[0], "text")
    assert dimensions.label(wide.iloc[0], "text").endswith(" ep8 attention-dp")
    assert dimensions.label(wide.iloc[0], "pareto").endswith(" ep8 dpa")


def test_ids_are_stable_against_the_hand_computed_hash():
    frame = pd.DataFrame([CONFIG, {**CONFIG, "max_batch": 128}])
    ids = candidate_ids(frame)
    assert ids.iloc[0] == _hand_id(CONFIG) == CONFIG_ID
    assert ids.iloc[1] == _hand_id({**CONFIG, "max_batch": 128}) != CONFIG_ID
    # Column order in the frame does not matter, the declaration's order does.
    assert candidate_ids(frame[list(reversed(frame.columns))]).iloc[0] == CONFIG_ID
    with pytest.raises(KeyError, match="max_batch"):
        candidate_ids(frame.drop(columns="max_batch"))


def test_labels_of_every_style():
    assert label(CONFIG, "pareto") == "a100-sxm-80gb tp8 pp2 bf16/fp8 b256"
    assert label(CONFIG, "table") == "tp8 pp2 bf16/kv-fp8 b256"
    assert label(CONFIG, "text") == "tp8 pp2 bf16/kv-fp8 max_batch 256"
    assert label(CONFIG, "launch") == "llama-3.1-70b bf16/kv-fp8, max batch 256"
    row = namedtuple("Row", CONFIG)(**{**CONFIG, "max_batch": np.int64(256), "tp": np.float64(8.0)})
    assert label(row, "table") == "tp8 pp2 bf16/kv-fp8 b256"  # numpy / float values print as ints
    with pytest.raises(ValueError, match="unknown label style"):
        label(CONFIG, "html")
    with pytest.raises(KeyError, match="no 'max_batch'"):
        label({k: v for k, v in CONFIG.items() if k != "max_batch"}, "table")


def test_measured_candidates_have_no_settings():
    assert dimensions.has_settings(CONFIG)
    assert not dimensions.has_settings({"candidate_id": "m1", "name": "m1", "gpu": "h100-sxm"})
    assert not dimensions.has_settings(pd.DataFrame(columns=["candidate_id", "gpu", "gpus"]))


def test_gpus_per_replica_is_tp_times_pp_for_scalars_columns_and_objects():
    assert gpus_per_replica(CONFIG) == 16
    frame = pd.DataFrame({"tp": [1, 2, 8], "pp": [1, 4, 2]})
    assert gpus_per_replica(frame).tolist() == [1, 8, 16]
    assert gpus_per_replica(namedtuple("S", "tp pp")(4, 2)) == 8
    assert set(dimensions.DERIVED) == {"gpus"}


def test_grid_is_the_product_in_canonical_order_and_take_selects_rows():
    values = {"max_batch": [32, 64], "model": ["m"], "gpu": ["g1", "g2"], "tp": [1, 2], "pp": [1],
              "quantization": ["bf16"], "kv_cache_dtype": ["bf16", "fp8"]}
    table = CandidateTable.grid(values)
    assert len(table) == 2 * 2 * 2 * 2
    # the layout and role dimensions (defaults) are left out when not searched
    assert tuple(table.frame.columns) == tuple(n for n in dimensions.NAMES if n not in ("ep", "attention_dp", "role"))
    assert table.frame.iloc[:3][["gpu", "tp", "kv_cache_dtype", "max_batch"]].values.tolist() == [
        ["g1", 1, "bf16", 32], ["g1", 1, "bf16", 64], ["g1", 1, "fp8", 32]]
    assert table.ids().is_unique
    part = table.take([5, 0])
    assert part.frame["max_batch"].tolist() == [64, 32]
    assert part.ids().tolist() == table.ids().iloc[[5, 0]].tolist()
    derived = table.with_derived().frame
    assert derived["gpus"].tolist() == (derived["tp"] * derived["pp"]).tolist()
    codes, uniques = table.factorize([n for n in dimensions.NAMES if n != "max_batch"])
    assert codes.tolist() == np.repeat(np.arange(8), 2).tolist()  # max batch is the fastest
    assert uniques.iloc[3].tolist() == ["m", "g1", 2, 1, "bf16", "fp8"]
    assert table.factorize(["tp"])[1]["tp"].tolist() == [1, 2]
    with pytest.raises(KeyError, match="missing \\['max_batch'\\]"):
        CandidateTable.grid({k: v for k, v in values.items() if k != "max_batch"})


def test_a_new_dimension_with_a_default_keeps_ids_and_labels(monkeypatch):
    """Adding a dimension is one entry; configurations at its default keep id and labels."""
    cp = Dimension("cp", int, {"pareto": " cp{}", "table": " cp{}", "text": " cp{}"}, "context parallelism",
                   searched=lambda p: getattr(p.spec.search, "cp", None), noun="cp", default=1)
    dims = list(dimensions.DIMENSIONS)
    dims.insert(dimensions.NAMES.index("pp") + 1, cp)
    monkeypatch.setattr(dimensions, "DIMENSIONS", tuple(dims))
    frame = pd.DataFrame([CONFIG])
    assert candidate_ids(frame).iloc[0] == CONFIG_ID  # column absent: the default
    wide = pd.DataFrame([{**CONFIG, "cp": 1}, {**CONFIG, "cp": 8}])
    ids = candidate_ids(wide)
    assert ids.iloc[0] == CONFIG_ID
    head, tail = ("model", "gpu", "tp", "pp"), ("quantization", "kv_cache_dtype", "max_batch")
    assert ids.iloc[1] == _hand_id({**{k: CONFIG[k] for k in head}, "cp": 8, **{k: CONFIG[k] for k in tail}})
    assert label({**CONFIG, "cp": 1}, "table") == "tp8 pp2 bf16/kv-fp8 b256"
    assert label({**CONFIG, "cp": 8}, "table") == "tp8 pp2 cp8 bf16/kv-fp8 b256"
    monkeypatch.setattr(dimensions, "_BY_NAME", {d.name: d for d in dims})
    assert label(pd.Series({**CONFIG, "cp": np.nan}), "text") == "tp8 pp2 bf16/kv-fp8 max_batch 256"
    assert dimensions.value_of(CONFIG, "cp") == 1  # absent: the default
    assert CandidateTable.grid({**{k: [v] for k, v in CONFIG.items()}}).ids().tolist() == [CONFIG_ID]
    dense = _problem(tp=(1,), pp=(1,), max_batch=(8,))
    assert "cp" not in dimensions.search_values(dense)  # not searched: no column, default
    assert dimensions.search_values(_problem(tp=(1,), pp=(1,), max_batch=(8,), cp=(1, 8)))["cp"] == (1, 8)


def _problem(**search):
    """A stand-in for a loaded Problem: the attributes the declaration reads."""
    from types import SimpleNamespace

    spec = SimpleNamespace(search=SimpleNamespace(**{"ep": (1,), "attention_dp": (False,), **search}))
    return SimpleNamespace(gpus=("h100-sxm", "l40s"), quantization=("bf16", "fp8"), kv_cache_dtypes=("bf16",),
                           spec=spec, measured=False, workloads=[SimpleNamespace(model="m", rate_per_s=1.0)])


def test_search_values_and_the_grid_size_message():
    p = _problem(tp=(1, 2, 4), pp=(1,), max_batch=(8, 16, 32, 64))
    assert dimensions.search_values(p) == {"gpu": p.gpus, "tp": (1, 2, 4), "pp": (1,),
                                           "quantization": p.quantization, "kv_cache_dtype": ("bf16",),
                                           "max_batch": (8, 16, 32, 64)}
    size, text = dimensions.grid_description(p, models=2)
    assert size == 2 * 2 * 3 * 1 * 2 * 1 * 4 == 96
    assert text == "2 model(s) x 2 GPUs x 3 tp x 1 pp x 2 formats x 1 KV dtypes x 4 batch sizes"
    assert len(CandidateTable.grid({"model": ["m"], **dimensions.search_values(p)})) == 48


def test_limits_names_every_dimension_of_an_oversized_grid():
    from planner import limits

    p = _problem(tp=(1, 2), pp=(1, 2), max_batch=tuple(range(1, 40_001)))
    assert limits.check_problem(p) == [
        "search: the grid holds 640,000 configurations (1 model(s) x 2 GPUs x 2 tp x 2 pp x 2 formats x "
        "1 KV dtypes x 40000 batch sizes), at most 500,000: narrow search.gpus, search.quantization or "
        "search.max_batch"]


def test_fast_grid_ids_and_factorize_equal_their_plain_definitions():
    """The column-wise grid equals the DataFrame of the product's rows (dtypes included); the
    ids of typed columns equal those of the same values in object columns (the astype(str)
    path); the mixed-radix factorize equals the MultiIndex one (codes and uniques)."""
    import itertools

    values = {"model": ["m-a", "m-b"], "gpu": ["h100-sxm", "a10"], "tp": [1, 2, 4], "pp": [1],
              "quantization": ["bf16", "fp8"], "kv_cache_dtype": ["bf16"], "max_batch": [8, 64],
              "ep": [1, 8], "attention_dp": [False, True]}
    grid = dimensions.CandidateTable.grid(values).frame
    names = [n for n in dimensions.NAMES if n in values]
    plain = pd.DataFrame(list(itertools.product(*(values[n] for n in names))), columns=names)
    pd.testing.assert_frame_equal(grid, plain, check_exact=True)
    ids = dimensions.candidate_ids(grid)
    pd.testing.assert_series_equal(ids, dimensions.candidate_ids(grid.astype(object)), check_exact=True)
    assert ids.is_unique and list(ids.sort_values()) == list(dimensions.id_strings(np.sort(
        dimensions.candidate_hashes(grid) >> np.uint64(16) << np.uint64(16))))
    mixed = pd.concat([grid.drop(columns=["ep", "attention_dp"]), grid.iloc[::5]], ignore_index=True)
    for frame in (grid, grid.iloc[::-3], mixed):
        for keys in (["model", "gpu", "quantization", "kv_cache_dtype"], ["model", "tp", "ep", "attention_dp"]):
            codes, uniques = dimensions.CandidateTable(frame).factorize(keys)
            present = [k for k in keys if k in frame.columns]
            ref_codes, ref = pd.factorize(pd.MultiIndex.from_frame(frame[present]))
            assert np.array_equal(codes, ref_codes)
            pd.testing.assert_frame_equal(uniques, pd.DataFrame(ref.tolist(), columns=present), check_exact=True)


def test_id_strings_are_c_and_the_hashes_top_hex_digits():
    """Two hex digits per byte of the hash, top byte first: the text of "c" + "%016x" % h cut
    to ID_HEX_DIGITS digits, at the extremes and for random hashes; none for no hash."""
    ends = np.array([0, 1, 2**64 - 1, 0x0123456789ABCDEF, 0xFEDCBA9876543210], dtype=np.uint64)
    assert dimensions.id_strings(ends).tolist() == ["c000000000000", "c000000000000", "cffffffffffff",
                                                    "c0123456789ab", "cfedcba987654"]
    rng = np.random.default_rng(3)
    hashes = rng.integers(0, 2**63, 500, dtype=np.int64).astype(np.uint64) * np.uint64(2) + np.uint64(1)
    assert dimensions.id_strings(hashes).tolist() == [
        "c" + ("%016x" % int(h))[:dimensions.ID_HEX_DIGITS] for h in hashes]
    assert dimensions.id_strings(np.array([], dtype=np.uint64)).tolist() == []


def test_grid_hashes_by_the_product_equal_the_row_by_row_hashes():
    """A whole grid's hashes are computed per prefix of the product (speed, issue 19): the
    same bits as row by row (dimensions at their default skipped, a value listed twice);
    rows of a grid (a take: no product) hash row by row, as before."""
    values = {"model": ["m-a"], "gpu": ["h100-sxm", "a10", "h100-sxm"], "tp": [1, 2, 4], "pp": [1, 2],
              "quantization": ["bf16", "fp8"], "kv_cache_dtype": ["bf16"], "max_batch": [8, 64],
              "ep": [1, 8], "attention_dp": [False, True], "role": ["both", "prefill", "decode"]}
    table, coded = dimensions.CandidateTable.coded_grid(values)
    assert all(c.inner is not None for c in coded.values()) and coded["role"].inner == 1
    by_product = dimensions.candidate_hashes(table.frame, coded)
    row_by_row = dimensions.candidate_hashes(table.frame)           # no Coded: the per-row path
    assert by_product.dtype == np.uint64 and np.array_equal(by_product, row_by_row)
    at_defaults = (table.frame["ep"] == 1) & ~table.frame["attention_dp"] & (table.frame["role"] == "both")
    plain = table.frame.loc[at_defaults, list(CONFIG)].astype(object)   # defaults: the dense key's hash
    assert list(dimensions.id_strings(by_product[at_defaults.to_numpy()])) == \
        [_hand_id(dict(zip(CONFIG, row))) for row in plain.itertuples(index=False)]
    # the text columns as Coded forms only (the search's grid): the same hashes, row by row too
    numbers, same = dimensions.CandidateTable.coded_grid(values, texts=False)
    assert list(numbers.frame.columns) == ["tp", "pp", "max_batch", "ep", "attention_dp"] and list(same) == list(coded)
    pd.testing.assert_frame_equal(numbers.frame, table.frame[list(numbers.frame.columns)], check_exact=True)
    assert np.array_equal(dimensions.candidate_hashes(numbers.frame, same), row_by_row)
    assert np.array_equal(dimensions.candidate_hashes(numbers.frame, {k: c.take(np.arange(len(table)))
                                                                      for k, c in same.items()}), row_by_row)
    rows = np.arange(len(table))[::-7]
    taken = {k: c.take(rows) for k, c in coded.items()}
    assert all(c.inner is None for c in taken.values())
    assert np.array_equal(dimensions.candidate_hashes(table.frame.iloc[rows], taken), row_by_row[rows])
