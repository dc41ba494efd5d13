"""Engine launch settings (vLLM, SGLang, TensorRT-LLM) and Kubernetes manifests per deployment.

Every flag a generated command uses is in the engine's documented flag list kept under
``planner/outputs/engine_flags/`` (one flag per line, with the engine version and the
citation in the header); the tests check it.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd
import yaml

ENGINES = ("vllm", "sglang", "trtllm")
FLAG_DIR = Path(__file__).resolve().parent / "engine_flags"
#: max model length covers this quantile of prompt + output tokens of the served workloads.
MAX_LEN_QUANTILE = 0.999
#: ... rounded up to a multiple of this many tokens, and capped at the model's context.
MAX_LEN_STEP_TOKENS = 1024
SERVER_PORT = 8000
#: Weight formats an engine quantizes on the fly from a BF16/FP16 checkpoint; every other
#: quantized format needs a pre-quantized checkpoint (vLLM and SGLang docs: "--quantization
#: fp8 on a fp16 checkpoint"; TensorRT-LLM's PyTorch backend reads ModelOpt checkpoints only).
ONLINE_QUANTIZATION = {"vllm": frozenset({"fp8"}), "sglang": frozenset({"fp8"}), "trtllm": frozenset()}
#: Catalog KV-cache dtype -> the engine's value ("auto" = the model's dtype).
KV_CACHE_DTYPE = {
    "vllm": {"bf16": "auto", "fp16": "auto", "fp8": "fp8"},
    "sglang": {"bf16": "auto", "fp16": "auto", "fp8": "fp8_e4m3"},
    "trtllm": {"bf16": "auto", "fp16": "auto", "fp8": "fp8"},
}
#: Unquantized catalog weight formats -> the engines' --dtype value.
WEIGHT_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}
UNQUANTIZED = frozenset(WEIGHT_DTYPE)
#: Kubernetes extended resource of each GPU vendor (device plugins).
GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "intel": "habana.ai/gaudi"}
#: Container image of the vLLM server per vendor (pin the tag your cluster runs).
VLLM_IMAGE = {"nvidia": "vllm/vllm-openai:v0.11.0", "amd": "rocm/vllm:latest"}
#: GPUs of a typical server; a replica above it needs a multi-node launcher, not one pod.
GPUS_PER_NODE = 8


@cache
def flag_list(engine: str) -> frozenset[str]:
    """The documented flags of an engine (``engine_flags/<engine>.txt``)."""
    lines = (FLAG_DIR / f"{engine}.txt").read_text(encoding="utf-8").splitlines()
    return frozenset(s for s in (line.strip() for line in lines) if s.startswith("--"))


@cache
def flag_list_header(engine: str) -> tuple[str, ...]:
    """The header comment of an engine's flag list: version and citation lines."""
    lines = (FLAG_DIR / f"{engine}.txt").read_text(encoding="utf-8").splitlines()
    out = []
    for line in lines:
        if not line.startswith("#"):
            break
        out.append(line.lstrip("# ").rstrip())
    return tuple(out)


def engine_version(engine: str) -> str:
    """The ``Engine version:`` line of an engine's flag list."""
    for line in flag_list_header(engine):
        if line.startswith("Engine version:"):
            return line.removeprefix("Engine version:").strip()
    return "unknown"


def used_flags(script: str) -> list[str]:
    """Flags (``--name``) a generated script or command passes, comments excluded."""
    flags = []
    for line in script.splitlines():
        if line.lstrip().startswith("#"):
            continue
        tokens = shlex.split(line.rstrip().removesuffix("\\"), comments=True)
        flags += [t.split("=", 1)[0] for t in tokens if t.startswith("--")]
    return flags


@cache
def _hf_table() -> dict:
    return yaml.safe_load((FLAG_DIR / "hf_repos.yaml").read_text(encoding="utf-8")) or {}


def hf_repo(catalog, model_id: str) -> str | None:
    """HuggingFace repo id of a catalog model (table first, else derived from ``hf_config``)."""
    if model_id in _hf_table():
        return _hf_table()[model_id]
    try:
        spec = catalog.models.entries[model_id]
    except KeyError:
        return None
    if spec.hf_config and "--" in spec.hf_config:
        return spec.hf_config.removesuffix(".json").removesuffix("_config").replace("--", "/", 1)
    return None


@dataclass(frozen=True)
class LaunchSettings:
    """Engine-neutral settings of one deployment (one replica = tp x pp GPUs)."""

    name: str
    model: str
    hf_repo: str | None
    gpu: str
    vendor: str
    tp: int
    pp: int
    quantization: str
    quantization_names: dict
    kv_cache_dtype: str
    max_num_seqs: int
    max_model_len: int
    gpu_memory_utilization: float
    kv_cache_free_memory_fraction: float
    chunked_prefill_tokens: int
    replicas: int
    workloads: tuple[str, ...]

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def quantized(self) -> bool:
        return self.quantization not in UNQUANTIZED


def _slug(text: str, limit: int = 63) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-")


def _max_model_len(problem, model_id: str, workloads: list[str]) -> int:
    spec = problem.imported_models.get(model_id) or problem.catalog.models.entries.get(model_id)
    tokens = max((w.prompt.quantile(MAX_LEN_QUANTILE) + w.output.quantile(MAX_LEN_QUANTILE)
                  for w in problem.workloads if w.name in workloads and w.prompt is not None),
                 default=float(MAX_LEN_STEP_TOKENS))
    length = int(math.ceil(tokens / MAX_LEN_STEP_TOKENS) * MAX_LEN_STEP_TOKENS)
    return min(length, spec.max_context_tokens) if spec is not None else length


def launch_settings(problem, candidates: pd.DataFrame, deployment: pd.Series, routing: pd.DataFrame,
                    index: int = 1) -> LaunchSettings:
    """Settings of one deployment of a plan.

    Parameters
    ----------
    problem : planner.problem.Problem
    candidates : DataFrame
        ``PlanResult.candidates`` (for the memory figures of the deployment's candidate).
    deployment : Series
        One row of ``RankedPlan.deployments``.
    routing : DataFrame
        ``RankedPlan.routing`` (which workloads the deployment serves).
    index : int
        Position of the deployment in its plan (names the files).

    Notes
    -----
    Memory fraction: vLLM ``--gpu-memory-utilization`` and SGLang ``--mem-fraction-static``
    get the serving model's ``gpu_memory_utilization`` u; TensorRT-LLM's
    ``--kv_cache_free_gpu_memory_fraction`` is a fraction of the memory left after weights
    and workspace, so it gets (u M - W - ws) / (M - W - ws), the same KV budget.
    """
    from planner.search import serving_params

    params = serving_params(problem)
    cid = deployment["candidate_id"]
    row = candidates.loc[cid]
    gpu = problem.catalog.gpu(deployment["gpu"])
    fmt = problem.catalog.weight_format(deployment["quantization"])
    served = sorted(routing.loc[routing["candidate_id"] == cid, "workload"].unique())
    memory_bytes = gpu.memory_bytes
    free = memory_bytes - float(row["weights_bytes_per_gpu"]) - params.workspace_bytes
    kv_fraction = float(row["kv_budget_bytes_per_gpu"]) / free if free > 0 else 0.0
    kv_fraction = min(max(math.floor(kv_fraction * 100) / 100, 0.05), 0.95)
    max_batch = int(deployment["max_batch"])
    return LaunchSettings(
        name=_slug(f"{problem.name}-{index}-{deployment['model']}-{gpu.id}"),
        model=deployment["model"], hf_repo=hf_repo(problem.catalog, deployment["model"]),
        gpu=gpu.id, vendor=gpu.vendor, tp=int(deployment["tp"]), pp=int(deployment["pp"]),
        quantization=fmt.id, quantization_names=dict(fmt.engines),
        kv_cache_dtype=deployment["kv_cache_dtype"], max_num_seqs=max_batch,
        max_model_len=_max_model_len(problem, deployment["model"], served),
        gpu_memory_utilization=float(params.gpu_memory_utilization),
        kv_cache_free_memory_fraction=kv_fraction,
        chunked_prefill_tokens=max(int(params.prefill_chunk_tokens), max_batch),
        replicas=int(deployment["replicas"]), workloads=tuple(served),
    )


def unsupported_reason(s: LaunchSettings, engine: str) -> str | None:
    """Why an engine cannot run a deployment, or None."""
    if engine == "trtllm" and s.vendor != "nvidia":
        return f"TensorRT-LLM runs on NVIDIA GPUs only ({s.gpu} is {s.vendor})"
    if s.quantized and not s.quantization_names.get(engine):
        return f"the catalog names no {engine} quantization method for {s.quantization}"
    if s.kv_cache_dtype not in KV_CACHE_DTYPE[engine]:
        return f"no {engine} KV-cache dtype for {s.kv_cache_dtype}"
    return None


def needs_quantized_checkpoint(s: LaunchSettings, engine: str) -> bool:
    return s.quantized and s.quantization not in ONLINE_QUANTIZATION[engine]


def engine_args(s: LaunchSettings, engine: str) -> list[tuple[str, str | None]]:
    """(flag, value) pairs of an engine's launch command, model argument excluded."""
    kv = KV_CACHE_DTYPE[engine][s.kv_cache_dtype]
    quant = s.quantization_names.get(engine) if s.quantized else None
    dtype = WEIGHT_DTYPE.get(s.quantization)
    if engine == "vllm":
        args = [("--served-model-name", s.model), ("--tensor-parallel-size", s.tp),
                ("--pipeline-parallel-size", s.pp), ("--dtype", dtype), ("--quantization", quant),
                ("--kv-cache-dtype", kv), ("--max-num-seqs", s.max_num_seqs),
                ("--max-model-len", s.max_model_len),
                ("--gpu-memory-utilization", s.gpu_memory_utilization),
                ("--enable-chunked-prefill", None), ("--max-num-batched-tokens", s.chunked_prefill_tokens),
                ("--host", "0.0.0.0"), ("--port", SERVER_PORT)]
    elif engine == "sglang":
        args = [("--served-model-name", s.model), ("--tp-size", s.tp), ("--pp-size", s.pp),
                ("--dtype", dtype), ("--quantization", quant), ("--kv-cache-dtype", kv),
                ("--max-running-requests", s.max_num_seqs), ("--context-length", s.max_model_len),
                ("--mem-fraction-static", s.gpu_memory_utilization),
                ("--chunked-prefill-size", s.chunked_prefill_tokens),
                ("--host", "0.0.0.0"), ("--port", SERVER_PORT)]
    elif engine == "trtllm":
        args = [("--backend", "pytorch"), ("--tp_size", s.tp), ("--pp_size", s.pp),
                ("--max_batch_size", s.max_num_seqs), ("--max_seq_len", s.max_model_len),
                ("--max_num_tokens", s.chunked_prefill_tokens), ("--enable_chunked_prefill", None),
                ("--kv_cache_free_gpu_memory_fraction", s.kv_cache_free_memory_fraction),
                ("--extra_llm_api_options", "trtllm-extra.yaml"),
                ("--host", "0.0.0.0"), ("--port", SERVER_PORT)]
    else:
        raise ValueError(f"unknown engine '{engine}'")
    optional = ("--dtype", "--quantization")  # omitted when they have no value
    return [(f, None if v is None else str(v)) for f, v in args if not (v is None and f in optional)]


def trtllm_extra_options(s: LaunchSettings) -> str:
    """The ``--extra_llm_api_options`` YAML of TensorRT-LLM (KV-cache dtype and fraction)."""
    body = {"kv_cache_config": {"dtype": KV_CACHE_DTYPE["trtllm"][s.kv_cache_dtype],
                                "free_gpu_memory_fraction": s.kv_cache_free_memory_fraction}}
    head = ("# TensorRT-LLM LLM-API options for trtllm-serve --extra_llm_api_options "
            "(tensorrt_llm/llmapi/llm_args.py KvCacheConfig).\n")
    return head + yaml.safe_dump(body, sort_keys=False)


#: Characters a value may hold to be written inside a double-quoted ``${MODEL:-...}`` /
#: ``${MODEL:?...}`` expansion: no ``$``, backtick, quote, backslash, ``}`` or control character,
#: so nothing in it is expanded or run by bash.
_EXPANSION_SAFE = re.compile(r"[A-Za-z0-9 ._/(),:+@=\[\]-]*")


def _expansion_word(text: str) -> str:
    """``text`` with every character outside :data:`_EXPANSION_SAFE` replaced by ``_``."""
    return "".join(c if _EXPANSION_SAFE.fullmatch(c) else "_" for c in text)


def _comment(line: str) -> str:
    """A comment line with control characters (a newline would end the comment) made spaces."""
    return "".join(" " if ord(c) < 32 or ord(c) == 127 else c for c in line)


def _model_line(s: LaunchSettings, engine: str) -> str:
    if s.hf_repo and not needs_quantized_checkpoint(s, engine) and _EXPANSION_SAFE.fullmatch(s.hf_repo):
        return f'MODEL="${{MODEL:-{s.hf_repo}}}"'
    what = (f"a pre-quantized {s.quantization} ({s.quantization_names.get(engine)}) checkpoint of "
            f"{s.hf_repo or s.model}" if needs_quantized_checkpoint(s, engine)
            else f"the HuggingFace repo or local path of {s.hf_repo or s.model}")
    return f'MODEL="${{MODEL:?set MODEL to {_expansion_word(what)}}}"'


def shell_script(s: LaunchSettings, engine: str, context: str = "") -> str:
    """A bash script that launches one replica of the deployment with an engine."""
    head = ["#!/usr/bin/env bash",
            (f"# {engine} launch settings: {s.model} on {s.gpu}, tp {s.tp} x pp {s.pp} "
             f"({s.gpus_per_replica} GPU(s) per replica), {s.quantization} weights, "
             f"{s.kv_cache_dtype} KV cache, max batch {s.max_num_seqs}."),
            f"# Run {s.replicas} replica(s), each on {s.gpus_per_replica} GPU(s). {context}".rstrip(),
            f"# Flags checked against {engine_version(engine)}: planner/outputs/engine_flags/{engine}.txt",
            f"# Serves workloads: {', '.join(s.workloads) or '-'}.",
            "set -euo pipefail"]
    head = [_comment(line) if line.startswith("#") else line for line in head]
    reason = unsupported_reason(s, engine)
    if reason:
        return "\n".join(head + [f"echo {shlex.quote('not supported: ' + reason)} >&2", "exit 1", ""])
    if needs_quantized_checkpoint(s, engine):
        head.append(_comment(f"# Quantization {s.quantization} needs a pre-quantized checkpoint"
                             + (" (TensorRT-LLM reads the method from its hf_quant_config.json)."
                                if engine == "trtllm" else ".")))
    head.append(_model_line(s, engine))
    if engine == "trtllm":
        head.append('cd "$(dirname "$0")"  # trtllm-extra.yaml sits next to this script')
    prefix = {"vllm": 'exec vllm serve "$MODEL"', "sglang": 'exec python -m sglang.launch_server '
              '--model-path "$MODEL"', "trtllm": 'exec trtllm-serve "$MODEL"'}[engine]
    lines = [prefix] + [f"  {f}" + (f" {shlex.quote(v)}" if v is not None else "")
                        for f, v in engine_args(s, engine)]
    return "\n".join(head) + "\n" + " \\\n".join(lines) + "\n"


def k8s_manifest(s: LaunchSettings) -> str:
    """A Kubernetes Deployment running the vLLM command, ``replicas`` pods of tp x pp GPUs."""
    resource = GPU_RESOURCE.get(s.vendor)
    args = ["serve", "$(MODEL)"]
    for flag, value in engine_args(s, "vllm"):
        args += [flag] + ([value] if value is not None else [])
    limits = {resource: s.gpus_per_replica} if resource else {}
    model = s.hf_repo if s.hf_repo and not needs_quantized_checkpoint(s, "vllm") else \
        f"REPLACE-WITH-{s.quantization}-CHECKPOINT-OF-{s.hf_repo or s.model}"
    labels = {"app": s.name, "planner/model": s.model, "planner/gpu": s.gpu}
    body = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": s.name, "labels": dict(labels)},
        "spec": {
            "replicas": s.replicas,
            "selector": {"matchLabels": {"app": s.name}},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "containers": [{
                        "name": "vllm", "image": VLLM_IMAGE.get(s.vendor, VLLM_IMAGE["nvidia"]),
                        "command": ["vllm"], "args": args,
                        "env": [{"name": "MODEL", "value": model}],
                        "ports": [{"containerPort": SERVER_PORT, "name": "http"}],
                        "resources": {"limits": limits, "requests": dict(limits)},
                        "readinessProbe": {"httpGet": {"path": "/health", "port": SERVER_PORT},
                                           "periodSeconds": 10},
                        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                    }],
                    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                },
            },
        },
    }
    notes = [(f"# Kubernetes Deployment for {s.model} on {s.gpu}: {s.replicas} replica(s) x "
              f"{s.gpus_per_replica} GPU(s), command for {engine_version('vllm')}."),
             f"# Schedule the pods on {s.gpu} nodes: add the nodeSelector your cluster uses for them."]
    if s.gpus_per_replica > GPUS_PER_NODE:
        notes.append(f"# One replica spans {s.gpus_per_replica} GPUs (more than one {GPUS_PER_NODE}-GPU node): "
                     "run it with a multi-node launcher (e.g. LeaderWorkerSet with Ray), not this single pod.")
    if resource is None:
        notes.append(f"# No known Kubernetes GPU resource for vendor '{s.vendor}': set resources.limits.")
    if needs_quantized_checkpoint(s, "vllm"):
        notes.append("# Set env MODEL to a pre-quantized checkpoint (see the value).")
    return "\n".join(notes) + "\n" + yaml.safe_dump(body, sort_keys=False, width=1000)


def launch_files(result) -> dict[str, str]:
    """The ``launch/`` tree of the best plan: ``{relative path: text}`` (README.md first).

    One folder per deployment with ``vllm.sh``, ``sglang.sh``, ``trtllm.sh`` (+
    ``trtllm-extra.yaml``) that start ONE replica, and ``deployment.yaml`` (all replicas).
    """
    plan = result.best
    readme = ["# Launch settings", ""]
    files: dict[str, str] = {}
    if plan is None or "tp" not in plan.deployments.columns:
        why = "the problem has no plan" if plan is None else "the plan comes from a measured capacity table"
        readme.append(f"No launch settings: {why}.")
    else:
        readme += [(f"One folder per deployment of plan #1 ({plan.usd_per_hour:.2f} USD/h). Each holds "
                    "`vllm.sh`, `sglang.sh`, `trtllm.sh` (+ `trtllm-extra.yaml`) to start ONE replica, "
                    "and `deployment.yaml`, a Kubernetes Deployment of all replicas (vLLM)."), ""]
        for i, (_, dep) in enumerate(plan.deployments.iterrows(), start=1):
            s = launch_settings(result.problem, result.candidates, dep, plan.routing, index=i)
            sub = f"{i:02d}-{_slug(dep['model'])}-{dep['gpu']}-{dep['candidate_id']}"
            for engine in ENGINES:
                files[f"{sub}/{engine}.sh"] = shell_script(s, engine, f"Plan #1, deployment {i}.")
            files[f"{sub}/trtllm-extra.yaml"] = trtllm_extra_options(s)
            files[f"{sub}/deployment.yaml"] = k8s_manifest(s)
            readme.append(f"- `{sub}/`: {s.replicas} x {s.gpu} ({s.gpus_per_replica} GPU(s) each), "
                          f"{s.model} {s.quantization}/kv-{s.kv_cache_dtype}, max batch {s.max_num_seqs}, "
                          f"max model length {s.max_model_len}")
    return {"README.md": "\n".join(readme) + "\n", **files}
