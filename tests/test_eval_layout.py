"""`planner eval --ep / --attention-dp / --role` (issue 14): one configuration resolved exactly
as the search resolves it (the layout rules of planner/layout_rules.py, the expert-parallel
terms of planner/serving/moe.py, the role capacities of planner/disagg_roles.py)."""

import numpy as np
import pytest
import yaml

from conftest import run_cli, run_json
from planner.problem import load_problem
from planner.search import enumerate_candidates

SLO = {"ttft_p95_s": 2.0, "tpot_p95_s": 0.05}
CONFIG = ["--model", "deepseek-v3", "--gpu", "h200-sxm", "--tp", "8", "--quant", "fp8", "--kv-dtype", "bf16",
          "--batch", "64", "--prompt", "2000", "--output", "400"]


@pytest.fixture(scope="module")
def candidates(tmp_path_factory):
    """The search's rows of the same configuration: ep 1 / 8, attention DP off / on, every role."""
    spec = {"name": "eval-layout", "workloads": [{"name": "chat", "model": "deepseek-v3", "rate_per_s": 10,
                                                   "prompt_tokens": 2000, "output_tokens": 400, "slo": SLO}],
            "search": {"gpus": ["h200-sxm"], "quantization": ["fp8"], "kv_cache_dtype": ["bf16"], "tp": [8],
                       "pp": [1], "max_batch": [64], "ep": [1, 8], "attention_dp": [False, True],
                       "disaggregation": [False, True]}}
    path = tmp_path_factory.mktemp("eval") / "p.yaml"
    path.write_text(yaml.safe_dump(spec))
    return enumerate_candidates(load_problem(path))


@pytest.mark.parametrize("ep,dpa", [(1, False), (8, False), (8, True)])
@pytest.mark.parametrize("role", ["both", "prefill", "decode"])
def test_eval_layout_and_role_equal_the_search(candidates, ep, dpa, role):
    row = candidates[(candidates["ep"] == ep) & (candidates["attention_dp"] == dpa) & (candidates["role"] == role)]
    assert len(row) == 1
    row = row.iloc[0]
    flags = ["--ep", ep, "--role", role, "--slo-ttft-p95", SLO["ttft_p95_s"], "--slo-tpot-p95", SLO["tpot_p95_s"]]
    doc = run_json("eval", *CONFIG, *flags, *(["--attention-dp"] if dpa else []))
    assert (doc["ep"], doc["attention_dp"], doc["role"]) == (ep, dpa, role)
    assert doc["max_rate_per_s"] == pytest.approx(row["central_capacity_per_s[chat]"], rel=1e-9)
    assert doc["weights_bytes_per_gpu"] == pytest.approx(row["weights_bytes_per_gpu"], rel=1e-12)
    # at the capacity, the role's own metric is what the search reports (the other one is not its own)
    rate = doc["max_rate_per_s"]
    at = run_json("eval", *CONFIG, *flags, "--rate", rate, *(["--attention-dp"] if dpa else []))
    for metric in ("ttft", "tpot"):
        want = row[f"{metric}_p95_s[chat]"]
        if np.isnan(want):
            assert at[f"{metric}_p95_s"] is None
        else:
            assert at[f"{metric}_p95_s"] == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("flags,messages", [
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "8", "--ep", "8"],
     ["--ep: 8 needs a model with routed experts; llama-3.1-8b has none (ep_needs_moe_model)"]),
    (["--model", "deepseek-v3", "--gpu", "h200-sxm", "--tp", "8", "--quant", "fp8", "--ep", "3"],
     ["--ep: 3 does not divide deepseek-v3's 256 routed experts (ep_does_not_divide_experts)",
      "--ep: 3 does not divide --tp 8", "(ep_does_not_divide_tp)"]),
    (["--model", "deepseek-v3", "--gpu", "h200-sxm", "--quant", "fp8", "--attention-dp"],
     ["--attention-dp: needs --tp > 1", "(attention_dp_needs_tp)"]),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "2", "--attention-dp"],
     ["--attention-dp: needs a model with routed experts", "(attention_dp_needs_moe_model)"]),
    (["--model", "deepseek-v3", "--gpu", "h200-sxm", "--tp", "16", "--quant", "fp8", "--ep", "16"],
     ["--tp: 16 exceeds h200-sxm's scale-up domain of 8 GPUs", "(tp_exceeds_scale_up_domain)"]),
    (["--model", "deepseek-v3", "--gpu", "h200-sxm", "--tp", "8", "--role", "middle"], ["--role"]),
])
def test_eval_rejects_a_layout_as_the_search_does(flags, messages):
    out, err = run_cli("eval", *flags, "--json", expect=2)
    assert out == "" and "Traceback" not in err
    for message in messages:
        assert message in err, (message, err)


def test_a_stage_beyond_one_domain_needs_the_all_reduce_free_layout():
    """tp 16 on 8-GPU H200 domains: only attention DP with ep = tp (the search's rule), over
    the scale-out network; the text output names the layout."""
    doc = run_json("eval", *CONFIG[:5], "16", *CONFIG[6:], "--ep", "16", "--attention-dp")
    assert (doc["tp"], doc["ep"], doc["attention_dp"], doc["gpus"]) == (16, 16, True, 16)
    text, _ = run_cli("eval", *CONFIG[:5], "16", *CONFIG[6:], "--ep", "16", "--attention-dp")
    assert "ep                       16" in text and "attention_dp             True" in text


@pytest.mark.parametrize("command, flags, message", [
    ("eval", ["--gpu", "mi300x", "--engine", "trtllm"], "--engine: catalogs/engines.yaml lists no trtllm support "
                                                        "for mi300x (cdna3)"),
    ("eval", ["--gpu", "l4", "--quant", "mxfp4", "--engine", "trtllm"],
     "--engine: trtllm documents no mxfp4 weights with a bf16 KV cache on ada (l4)"),
    ("sweep", ["--gpu", "mi300x", "--engine", "trtllm", "--context", "1000", "--batches", "1"],
     "lists no trtllm support for mi300x"),
    ("simulate", ["--gpu", "mi300x", "--engine", "trtllm", "--rate", "1", "--prompt", "100", "--output", "10"],
     "lists no trtllm support for mi300x"),
])
def test_an_engine_that_does_not_run_the_configuration_is_rejected(command, flags, message):
    """catalogs/engines.yaml: TensorRT-LLM documents no AMD architecture, nor MXFP4 on Ada."""
    out, err = run_cli(command, "--model", "llama-3.1-8b", *flags, "--json", expect=2)
    assert out == "" and "Traceback" not in err and message in err, err
    ok, _ = run_cli("eval", "--model", "llama-3.1-8b", "--gpu", "mi300x", "--engine", "vllm", "--json")
    assert '"gpu": "mi300x"' in ok

