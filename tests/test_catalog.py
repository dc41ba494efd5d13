"""Catalogs: every entry loads and has a source; ids resolve; HF config import."""

import json

import pytest

from conftest import DATA, run_cli, run_json
from planner.hf_import import model_from_hf_config
from planner.schema import PlanningInputError

DESIGN_GPUS = ["a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-80gb", "h100-sxm", "h100-pcie", "h200-sxm",
               "h20", "b200", "gb200", "b300", "l40s", "l4", "a10g", "rtx-4090", "rtx-pro-6000", "mi300x",
               "mi325x", "mi355x", "gaudi3", "m2-ultra"]
DESIGN_MODELS = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-2-7b", "llama-2-70b", "mistral-7b",
                 "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-8b", "qwen3-32b",
                 "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-20b", "gpt-oss-120b",
                 "gemma-3-27b", "gpt-j-6b"]


def test_every_entry_loads_with_a_source(catalog):
    for table in (catalog.gpus, catalog.models, catalog.weight_formats, catalog.kv_dtypes):
        assert table.entries
        for entry in table.entries.values():
            assert entry.source.strip()
    for row in (*catalog.prices.rental, *catalog.prices.purchase):
        assert row.source.strip() and row.as_of


def test_design_ids_and_aliases_present(catalog):
    assert set(DESIGN_GPUS) <= set(catalog.gpus.entries)
    assert set(DESIGN_MODELS) <= set(catalog.models.entries)
    assert catalog.model("llama-3-8b").id == "llama-3.1-8b"
    assert catalog.model("llama-3.3-70b").id == "llama-3.1-70b"
    assert catalog.model("deepseek-r1").id == "deepseek-v3"
    for q in ("bf16", "fp16", "fp8", "int8", "int4-awq", "int4-gptq", "nvfp4", "mxfp4"):
        catalog.weight_format(q)
    assert catalog.weight_format("int4-awq").bits_per_weight == 4.125
    assert catalog.weight_format("nvfp4").bits_per_weight == 4.5
    assert catalog.weight_format("mxfp4").bits_per_weight == 4.25


def test_catalog_gpus_json_lists_all_with_sources():
    data = run_json("catalog", "gpus")
    ids = {g["id"]: g for g in data["gpus"]}
    assert set(DESIGN_GPUS) <= set(ids)
    assert all(g["source"] for g in ids.values())


@pytest.mark.parametrize("kind", ["models", "quantization", "prices"])
def test_catalog_listings(kind):
    assert run_json("catalog", kind)[kind]


def test_unknown_id_suggests(catalog):
    with pytest.raises(PlanningInputError, match="did you mean 'h100-sxm'"):
        catalog.gpu("h100-sx")


def test_seed_table_gpus_match_the_seed(catalog):
    seed = {"a100-sxm-80gb": (80, 2.0, 312), "h100-sxm": (80, 3.35, 989), "h200-sxm": (141, 4.8, 989),
            "b200": (180, 8.0, 2250), "rtx-4090": (24, 1.0, 165), "m2-ultra": (192, 0.8, 27)}
    for gpu, (mem, bw, flops) in seed.items():
        g = catalog.gpu(gpu)
        assert (g.memory_gb, g.memory_bandwidth_tb_per_s, g.bf16_tflops) == (mem, bw, flops)


@pytest.mark.parametrize("file, catalog_id", [
    ("meta-llama--Meta-Llama-3.1-8B_config.json", "llama-3.1-8b"),
    ("meta-llama--Meta-Llama-3.1-70B_config.json", "llama-3.1-70b"),
    ("mistralai--Mixtral-8x7B-v0.1_config.json", "mixtral-8x7b"),
    ("Qwen--Qwen3-30B-A3B_config.json", "qwen3-30b-a3b"),
    ("deepseek-ai--DeepSeek-V3_config.json", "deepseek-v3"),
    ("openai--gpt-oss-120b_config.json", "gpt-oss-120b"),
])
def test_hf_import_matches_catalog(catalog, file, catalog_id):
    imported = model_from_hf_config(DATA / "hf-configs" / file)
    ref = catalog.model(catalog_id)
    for key in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "num_experts",
                "experts_per_token", "attention", "sliding_window_layers"):
        assert getattr(imported, key) == getattr(ref, key), key
    assert imported.params_total == pytest.approx(ref.params_total, rel=0.03)
    assert imported.routed_expert_params == pytest.approx(ref.routed_expert_params, rel=0.03)


def test_hf_import_kv_matches_catalog_through_cli():
    path = DATA / "hf-configs" / "deepseek-ai--DeepSeek-V3_config.json"
    assert run_json("eval", "--model", path, "--gpu", "h200-sxm")["kv_bytes_per_token"] == 70_272


def test_hf_import_bad_file(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"hidden_size": 10}))
    with pytest.raises(PlanningInputError, match="missing field num_hidden_layers"):
        model_from_hf_config(bad)
    _, err = run_cli("eval", "--model", tmp_path / "nope.json", "--gpu", "h100-sxm", expect=2)
    assert "file not found" in err and "Traceback" not in err
