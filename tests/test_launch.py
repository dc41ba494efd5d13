"""Engine launch settings: only documented flags, the required ones set, valid manifests."""

import shutil
import subprocess

import pytest
import yaml

from planner.outputs import launch
from planner.outputs.launch import LaunchSettings, engine_args, flag_list, shell_script, used_flags

#: Flags every command must set (DESIGN/issue 6), per engine; quantization only when quantized.
REQUIRED = {
    "vllm": {"--tensor-parallel-size", "--pipeline-parallel-size", "--max-num-seqs", "--kv-cache-dtype",
             "--gpu-memory-utilization", "--max-model-len", "--max-num-batched-tokens"},
    "sglang": {"--tp-size", "--pp-size", "--max-running-requests", "--kv-cache-dtype", "--mem-fraction-static",
               "--context-length", "--chunked-prefill-size"},
    "trtllm": {"--tp_size", "--pp_size", "--max_batch_size", "--kv_cache_free_gpu_memory_fraction",
               "--max_seq_len", "--max_num_tokens", "--extra_llm_api_options"},
}
QUANT_FLAG = {"vllm": "--quantization", "sglang": "--quantization"}
ENGINE_QUANT = {"fp8": {"vllm": "fp8", "sglang": "fp8", "trtllm": "FP8"},
                "int4-awq": {"vllm": "awq", "sglang": "awq", "trtllm": "W4A16_AWQ"},
                "nvfp4": {"vllm": "modelopt_fp4", "sglang": "modelopt_fp4", "trtllm": "NVFP4"},
                "mxfp4": {"vllm": "mxfp4", "sglang": "mxfp4", "trtllm": None},
                "bf16": {"vllm": None, "sglang": None, "trtllm": None}}


def settings(**kw) -> LaunchSettings:
    base = {"name": "t-1-llama-3-1-70b-h100-sxm", "model": "llama-3.1-70b",
            "hf_repo": "meta-llama/Meta-Llama-3.1-70B", "gpu": "h100-sxm", "vendor": "nvidia", "tp": 4, "pp": 2,
            "quantization": "bf16", "quantization_names": ENGINE_QUANT["bf16"], "kv_cache_dtype": "bf16",
            "max_num_seqs": 128, "max_model_len": 8192, "gpu_memory_utilization": 0.9,
            "kv_cache_free_memory_fraction": 0.83, "chunked_prefill_tokens": 2048, "replicas": 3,
            "workloads": ("chat",)}
    base.update(kw)
    if "quantization" in kw:
        base["quantization_names"] = ENGINE_QUANT[kw["quantization"]]
    return LaunchSettings(**base)


CASES = [settings(), settings(quantization="fp8", kv_cache_dtype="fp8", tp=1, pp=1),
         settings(quantization="int4-awq", kv_cache_dtype="fp8"), settings(quantization="nvfp4", gpu="b200"),
         settings(quantization="mxfp4", kv_cache_dtype="fp8"), settings(vendor="amd", gpu="mi300x", tp=8, pp=1)]


def test_flag_lists_cite_their_source():
    for engine in launch.ENGINES:
        header = " ".join(launch.flag_list_header(engine))
        assert "Engine version:" in header and "Citation" in header and "commit" in header
        assert len(flag_list(engine)) > 20
        lines = [line for line in (launch.FLAG_DIR / f"{engine}.txt").read_text().splitlines()
                 if line.startswith("--")]
        assert len(lines) == len(set(lines)), "duplicate flags"
        assert REQUIRED[engine] <= flag_list(engine)
    assert "--quantization" in flag_list("vllm") and "--quantization" in flag_list("sglang")


@pytest.mark.parametrize("engine", launch.ENGINES)
@pytest.mark.parametrize("s", CASES, ids=lambda s: f"{s.gpu}-{s.quantization}-kv{s.kv_cache_dtype}")
def test_commands_use_only_listed_flags_and_set_the_required_ones(engine, s):
    script = shell_script(s, engine)
    reason = launch.unsupported_reason(s, engine)
    if reason:
        assert "exit 1" in script and not used_flags(script)
        assert engine == "trtllm"  # vLLM and SGLang run every case above
        return
    flags = used_flags(script)
    assert set(flags) <= flag_list(engine), set(flags) - flag_list(engine)
    assert REQUIRED[engine] <= set(flags)
    assert len(flags) == len(set(flags))
    args = dict(engine_args(s, engine))
    if engine in QUANT_FLAG:
        assert (QUANT_FLAG[engine] in flags) == s.quantized
        if s.quantized:
            assert args[QUANT_FLAG[engine]] == s.quantization_names[engine]
    elif s.quantized:  # TensorRT-LLM takes the method from a pre-quantized checkpoint
        assert s.quantization_names["trtllm"] in script and "MODEL:?" in script
    tp_flag = {"vllm": "--tensor-parallel-size", "sglang": "--tp-size", "trtllm": "--tp_size"}[engine]
    assert args[tp_flag] == str(s.tp)
    seqs = {"vllm": "--max-num-seqs", "sglang": "--max-running-requests", "trtllm": "--max_batch_size"}[engine]
    assert args[seqs] == str(s.max_num_seqs)


def test_kv_cache_dtype_and_memory_values():
    fp8 = settings(quantization="fp8", kv_cache_dtype="fp8")
    assert dict(engine_args(fp8, "vllm"))["--kv-cache-dtype"] == "fp8"
    assert dict(engine_args(fp8, "sglang"))["--kv-cache-dtype"] == "fp8_e4m3"
    assert dict(engine_args(settings(), "vllm"))["--kv-cache-dtype"] == "auto"
    assert dict(engine_args(settings(), "vllm"))["--dtype"] == "bfloat16"
    extra = yaml.safe_load(launch.trtllm_extra_options(fp8))
    assert extra["kv_cache_config"] == {"dtype": "fp8", "free_gpu_memory_fraction": 0.83}
    assert dict(engine_args(fp8, "trtllm"))["--kv_cache_free_gpu_memory_fraction"] == "0.83"
    assert dict(engine_args(fp8, "sglang"))["--mem-fraction-static"] == "0.9"


def test_checkpoint_rule():
    # vLLM and SGLang quantize FP8 on the fly; AWQ needs an AWQ checkpoint.
    assert 'MODEL="${MODEL:-meta-llama/Meta-Llama-3.1-70B}"' in shell_script(settings(quantization="fp8"), "vllm")
    awq = shell_script(settings(quantization="int4-awq"), "vllm")
    assert "MODEL:?" in awq and "awq" in awq


@pytest.mark.parametrize("vendor,resource", [("nvidia", "nvidia.com/gpu"), ("amd", "amd.com/gpu")])
def test_kubernetes_manifest(vendor, resource):
    s = settings(vendor=vendor)
    doc, service = yaml.safe_load_all(launch.k8s_manifest(s))
    assert doc["kind"] == "Deployment" and doc["apiVersion"] == "apps/v1"
    assert service["kind"] == "Service" and service["spec"]["selector"] == {"app": s.name}
    assert doc["spec"]["replicas"] == s.replicas
    pod = doc["spec"]["template"]["spec"]["containers"][0]
    assert pod["resources"]["limits"] == {resource: s.tp * s.pp}
    assert doc["spec"]["selector"]["matchLabels"].items() <= doc["spec"]["template"]["metadata"]["labels"].items()
    command = " ".join(pod["command"] + pod["args"])
    assert set(used_flags(command)) <= flag_list("vllm")
    assert REQUIRED["vllm"] <= set(used_flags(command))
    assert len(doc["metadata"]["name"]) <= 63


def test_hf_repo_mapping(catalog):
    assert launch.hf_repo(catalog, "llama-3.1-8b") == "meta-llama/Meta-Llama-3.1-8B"
    assert launch.hf_repo(catalog, "llama-2-7b") == "meta-llama/Llama-2-7b-hf"
    assert all(launch.hf_repo(catalog, m) for m in catalog.models.entries)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_scripts_are_valid_bash(tmp_path):
    for i, s in enumerate(CASES):
        for engine in launch.ENGINES:
            path = tmp_path / f"{i}-{engine}.sh"
            path.write_text(shell_script(s, engine))
            subprocess.run(["bash", "-n", str(path)], check=True)


def test_launch_files_of_a_solved_plan(tmp_path):
    from planner.pipeline import plan
    from planner.problem import load_problem

    (tmp_path / "p.yaml").write_text("""\
name: launch-e2e
workloads:
  - {name: chat, model: llama-3.1-8b, rate_per_s: 30, prompt_tokens: 800, output_tokens: 200,
     slo: {ttft_p95_s: 1.0, tpot_p95_s: 0.05}}
search: {gpus: [l40s, mi300x], quantization: [bf16, fp8], kv_cache_dtype: [bf16, fp8], tp: [1, 2], pp: [1],
         max_batch: [64]}
optimize: {top_k: 1}
""")
    result = plan(load_problem(tmp_path / "p.yaml"), pareto=False)
    files = launch.launch_files(result)
    deployments = result.best.deployments
    assert sum(path.endswith("/vllm.sh") for path in files) == len(deployments)
    for path, text in files.items():
        engine = path.rsplit("/", 1)[-1].removesuffix(".sh")
        if engine in launch.ENGINES and "exit 1" not in text:
            assert set(used_flags(text)) <= flag_list(engine)
            assert REQUIRED[engine] <= set(used_flags(text))
        if path.endswith("deployment.yaml"):
            doc = next(yaml.safe_load_all(text))
            dep = deployments[deployments["candidate_id"] == path.split("/")[0].rsplit("-", 1)[-1]].iloc[0]
            assert doc["spec"]["replicas"] == dep["replicas"]
            limits = doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
            assert list(limits.values()) == [dep["tp"] * dep["pp"]]
