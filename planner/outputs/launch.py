"""Engine launch settings (vLLM, SGLang, TensorRT-LLM) and Kubernetes manifests per deployment.

Every flag a generated command uses is in the engine's documented flag list kept under
``planner/outputs/engine_flags/`` (one flag per line, with the engine version and the
citation in the header); the tests check it.
"""

from __future__ import annotations

import hashlib
import math
import re
import shlex
from dataclasses import dataclass, field
from functools import cache

import pandas as pd
import yaml

from planner import dimensions
from planner.outputs import launch_roles
from planner.outputs.flag_lists import (  # noqa: F401  (re-exported: launch.flag_list, ...)
    FLAG_DIR, engine_version, flag_list, flag_list_header, used_flags)

ENGINES = ("vllm", "sglang", "trtllm")
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
#: GPUs of a typical server where the GPU catalog gives none; a replica above a node's GPUs
#: runs as a LeaderWorkerSet of several pods (the node count: ``launch_roles.nodes``).
GPUS_PER_NODE = launch_roles.DEFAULT_GPUS_PER_NODE
#: Kubernetes object names: DNS-1123 labels of at most this many characters ...
K8S_NAME_MAX_CHARS = 63
#: ... and, when a name is truncated to fit, this many hex digits of its SHA-1 keep it unique.
K8S_NAME_HASH_CHARS = 8
#: Secret (name, key) holding a HuggingFace token (gated models such as Llama need one):
#: ``kubectl create secret generic hf-token --from-literal=token=hf_...``.
HF_TOKEN_SECRET = ("hf-token", "token")
#: PersistentVolumeClaim holding the HuggingFace cache (ReadWriteMany, shared by the replicas),
#: mounted where the vLLM image's HuggingFace cache lives.
MODEL_CACHE_CLAIM = "model-cache"
HF_CACHE_PATH = "/root/.cache/huggingface"
#: vLLM's multi-node helper inside the vllm/vllm-openai image (starts or joins a Ray cluster):
#: docs.vllm.ai/en/stable/examples/online_serving/multi-node-serving/ and the LeaderWorkerSet
#: example at docs.vllm.ai/en/latest/deployment/frameworks/lws.html.
MULTI_NODE_SCRIPT = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"


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


@cache
def _instruct_table() -> dict:
    return yaml.safe_load((FLAG_DIR / "instruct_repos.yaml").read_text(encoding="utf-8")) or {}


def serving_repo(catalog, model_id: str) -> str | None:
    """The checkpoint a launch serves by default: the model's instruct (chat) checkpoint where
    it has one (``engine_flags/instruct_repos.yaml``), else :func:`hf_repo`."""
    return _instruct_table().get(model_id) or hf_repo(catalog, model_id)


def k8s_name(text: str) -> str:
    """A DNS-1123 (and DNS-1035) label from ``text``: lower-case alphanumerics and '-', starting
    with a letter, at most :data:`K8S_NAME_MAX_CHARS`; a name cut to fit ends with a short hash
    of the full text, so two long texts that share their first 54 characters stay distinct."""
    slug = _slug(text, limit=10 ** 6)
    if not slug[:1].isalpha():
        slug = f"x-{slug}".rstrip("-")
    if len(slug) <= K8S_NAME_MAX_CHARS:
        return slug
    digest = hashlib.sha1(text.encode()).hexdigest()[:K8S_NAME_HASH_CHARS]
    return f"{slug[:K8S_NAME_MAX_CHARS - K8S_NAME_HASH_CHARS - 1].rstrip('-')}-{digest}"


def _label_value(text: str) -> str:
    """``text`` as a Kubernetes label value (<= 63 of [A-Za-z0-9_.-], alphanumeric at both ends)."""
    ok = re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?", text)
    return text if ok else k8s_name(text)


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
    #: engine -> why catalogs/engines.yaml has no support for this GPU, format and KV dtype.
    engine_unsupported: dict = field(default_factory=dict)
    #: ep, attention DP, role, pool and GPUs per node (``launch_roles``; defaults: none).
    roles: launch_roles.RoleSettings = field(default_factory=launch_roles.RoleSettings)

    @property
    def gpus_per_replica(self) -> int:
        return dimensions.gpus_per_replica(self)

    @property
    def gpus_per_node(self) -> int:
        return self.roles.gpus_per_node

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
                    index: int = 1, *, params) -> LaunchSettings:
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
    params : ServingParams
        The problem's base serving parameters (``PlanResult.params.base``).

    Notes
    -----
    Memory fraction: vLLM ``--gpu-memory-utilization`` and SGLang ``--mem-fraction-static``
    get the serving model's ``gpu_memory_utilization`` u; TensorRT-LLM's
    ``--kv_cache_free_gpu_memory_fraction`` is a fraction of the memory left after weights
    and workspace, so it gets (u M - W - ws) / (M - W - ws), the same KV budget.
    """
    from planner.compat import engine_table

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
    support = engine_table(problem.catalog)
    unsupported = {e: why for e in ENGINES
                   if (why := support.explain(e, gpu.id, fmt.id, deployment["kv_cache_dtype"]))}
    return LaunchSettings(
        name=k8s_name(f"{problem.name}-{index}-{deployment['model']}-{gpu.id}"),
        model=deployment["model"], hf_repo=serving_repo(problem.catalog, deployment["model"]),
        gpu=gpu.id, vendor=gpu.vendor, tp=int(deployment["tp"]), pp=int(deployment["pp"]),
        quantization=fmt.id, quantization_names=dict(fmt.engines),
        kv_cache_dtype=deployment["kv_cache_dtype"], max_num_seqs=max_batch,
        max_model_len=_max_model_len(problem, deployment["model"], served),
        gpu_memory_utilization=float(params.gpu_memory_utilization),
        kv_cache_free_memory_fraction=kv_fraction,
        chunked_prefill_tokens=max(int(params.prefill_chunk_tokens), max_batch),
        replicas=int(deployment["replicas"]), workloads=tuple(served), engine_unsupported=unsupported,
        roles=launch_roles.role_settings(deployment, gpu),
    )


def unsupported_reason(s: LaunchSettings, engine: str) -> str | None:
    """Why an engine cannot run a deployment, or None."""
    if engine in s.engine_unsupported:
        return s.engine_unsupported[engine]
    if engine == "trtllm" and s.vendor != "nvidia":
        return f"TensorRT-LLM runs on NVIDIA GPUs only ({s.gpu} is {s.vendor})"
    if s.quantized and not s.quantization_names.get(engine):
        return f"the catalog names no {engine} quantization method for {s.quantization}"
    if s.kv_cache_dtype not in KV_CACHE_DTYPE[engine]:
        return f"no {engine} KV-cache dtype for {s.kv_cache_dtype}"
    return launch_roles.unsupported_reason(s, engine)


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
    args = launch_roles.engine_role_args(s, engine, args)
    optional = ("--dtype", "--quantization")  # omitted when they have no value
    return [(f, None if v is None else str(v)) for f, v in args if not (v is None and f in optional)]


def trtllm_extra_options(s: LaunchSettings) -> str:
    """The ``--extra_llm_api_options`` YAML of TensorRT-LLM (KV-cache dtype and fraction)."""
    body = {"kv_cache_config": {"dtype": KV_CACHE_DTYPE["trtllm"][s.kv_cache_dtype],
                                "free_gpu_memory_fraction": s.kv_cache_free_memory_fraction},
            **launch_roles.trtllm_role_options(s)}
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
    head += [_comment(line) if line.startswith("#") else line for line in launch_roles.script_lines(s, engine)]
    head.append(_model_line(s, engine))
    if engine == "trtllm":
        head.append('cd "$(dirname "$0")"  # trtllm-extra.yaml sits next to this script')
    prefix = {"vllm": 'exec vllm serve "$MODEL"', "sglang": 'exec python -m sglang.launch_server '
              '--model-path "$MODEL"', "trtllm": f'exec {launch_roles.mpi_launcher(s, engine)}trtllm-serve "$MODEL"'}[engine]
    lines = [prefix] + [f"  {f}" + (f" {shlex.quote(v)}" if v is not None else "")
                        for f, v in engine_args(s, engine)]
    lines += [f"  {f} {word}" for f, word in launch_roles.node_args(s, engine)]
    return "\n".join(head) + "\n" + " \\\n".join(lines) + "\n"


def _vllm_container(s: LaunchSettings, name: str, command: list[str], args: list[str]) -> dict:
    """A vLLM container with the GPU limit, the model env, the HF token and the model cache."""
    resource = GPU_RESOURCE.get(s.vendor)
    limits = {resource: min(s.gpus_per_replica, s.gpus_per_node)} if resource else {}
    model = s.hf_repo if s.hf_repo and not needs_quantized_checkpoint(s, "vllm") else \
        f"REPLACE-WITH-{s.quantization}-CHECKPOINT-OF-{s.hf_repo or s.model}"
    secret, key = HF_TOKEN_SECRET
    return {
        "name": name, "image": VLLM_IMAGE.get(s.vendor, VLLM_IMAGE["nvidia"]),
        "command": command, "args": args,
        "env": [{"name": "MODEL", "value": model},
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": True}}},
                {"name": "HF_HOME", "value": HF_CACHE_PATH}],
        "ports": [{"containerPort": SERVER_PORT, "name": "http"}],
        "resources": {"limits": limits, "requests": dict(limits)},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "model-cache", "mountPath": HF_CACHE_PATH}],
    }


def _volumes() -> list[dict]:
    return [{"name": "dshm", "emptyDir": {"medium": "Memory"}},
            {"name": "model-cache", "persistentVolumeClaim": {"claimName": MODEL_CACHE_CLAIM}}]


def _vllm_args(s: LaunchSettings) -> list[str]:
    args = []
    for flag, value in engine_args(s, "vllm"):
        args += [flag] + ([value] if value is not None else [])
    return args


def k8s_objects(s: LaunchSettings) -> list[dict]:
    """The Kubernetes objects of a deployment: a Deployment (a replica within one node) or a
    LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``, one group of ceil(tp pp / 8) pods per
    replica, vLLM over Ray), then a Service in front of the serving pods."""
    labels = {"app": s.name, "planner/model": _label_value(s.model), "planner/gpu": _label_value(s.gpu)}
    probe = {"httpGet": {"path": "/health", "port": SERVER_PORT}, "periodSeconds": 10}
    if s.gpus_per_replica <= s.gpus_per_node:
        container = _vllm_container(s, "vllm", ["vllm"], ["serve", "$(MODEL)", *_vllm_args(s)])
        container["readinessProbe"] = probe
        workload = {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": s.name, "labels": dict(labels)},
            "spec": {"replicas": s.replicas, "selector": {"matchLabels": {"app": s.name}},
                     "template": {"metadata": {"labels": dict(labels)},
                                  "spec": {"containers": [container], "volumes": _volumes()}}},
        }
        selector = {"app": s.name}
    else:
        nodes = launch_roles.nodes(s)
        serve = " ".join(["vllm", "serve", '"$MODEL"', *(shlex.quote(a) for a in _vllm_args(s))])
        leader = _vllm_container(s, "vllm-leader", ["sh", "-c"], [
            f"bash {MULTI_NODE_SCRIPT} leader --ray_cluster_size=$(LWS_GROUP_SIZE) && exec {serve}"])
        leader["readinessProbe"] = probe
        worker = _vllm_container(s, "vllm-worker", ["sh", "-c"], [
            f"bash {MULTI_NODE_SCRIPT} worker --ray_address=$(LWS_LEADER_ADDRESS)"])
        del worker["ports"]
        workload = {
            "apiVersion": LWS_API_VERSION, "kind": "LeaderWorkerSet",
            "metadata": {"name": s.name, "labels": dict(labels)},
            "spec": {"replicas": s.replicas, "leaderWorkerTemplate": {
                "size": nodes, "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": {"labels": {**labels, "role": "leader"}},
                                   "spec": {"containers": [leader], "volumes": _volumes()}},
                "workerTemplate": {"metadata": {"labels": dict(labels)},
                                   "spec": {"containers": [worker], "volumes": _volumes()}}}},
        }
        selector = {"leaderworkerset.sigs.k8s.io/name": s.name, "role": "leader"}
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": s.name, "labels": dict(labels)},
               "spec": {"selector": selector,
                        "ports": [{"name": "http", "port": SERVER_PORT, "targetPort": "http"}]}}
    return [workload, service]


def k8s_manifest(s: LaunchSettings) -> str:
    """``deployment.yaml``: the objects of :func:`k8s_objects` as one multi-document YAML."""
    objects = k8s_objects(s)
    kind = objects[0]["kind"]
    notes = [(f"# Kubernetes {kind} + Service for {s.model} on {s.gpu}: {s.replicas} replica(s) x "
              f"{s.gpus_per_replica} GPU(s), command for {engine_version('vllm')}."),
             f"# Schedule the pods on {s.gpu} nodes: add the nodeSelector your cluster uses for them.",
             f"# Needs: Secret '{HF_TOKEN_SECRET[0]}' with key '{HF_TOKEN_SECRET[1]}' (a HuggingFace token; "
             f"optional for ungated models) and a ReadWriteMany PersistentVolumeClaim '{MODEL_CACHE_CLAIM}' "
             f"holding the HuggingFace cache (mounted at {HF_CACHE_PATH}).",
             f"# Service '{s.name}' exposes the OpenAI-compatible API on port {SERVER_PORT}."]
    if kind == "LeaderWorkerSet":
        notes.append(f"# One replica spans {s.gpus_per_replica} GPUs: a LeaderWorkerSet group of "
                     f"{objects[0]['spec']['leaderWorkerTemplate']['size']} pods x {s.gpus_per_node} GPUs, "
                     "vLLM over Ray (install the LeaderWorkerSet controller: github.com/kubernetes-sigs/lws).")
    if GPU_RESOURCE.get(s.vendor) is None:
        notes.append(f"# No known Kubernetes GPU resource for vendor '{s.vendor}': set resources.limits.")
    if needs_quantized_checkpoint(s, "vllm"):
        notes.append("# Set env MODEL to a pre-quantized checkpoint (see the value).")
    return "\n".join(notes) + "\n" + yaml.safe_dump_all(objects, sort_keys=False, width=1000)


def deployment_folder(index: int, deployment) -> str:
    """The ``launch/`` folder of a plan's deployment: ``NN-<model>-<gpu>-<candidate_id>``."""
    return f"{index:02d}-{_slug(deployment['model'])}-{deployment['gpu']}-{deployment['candidate_id']}"


def launch_files(result) -> dict[str, str]:
    """The ``launch/`` tree of the best plan: ``{relative path: text}`` (README.md first).

    One folder per deployment with ``vllm.sh``, ``sglang.sh``, ``trtllm.sh`` (+
    ``trtllm-extra.yaml``) that start ONE replica, and ``deployment.yaml`` (all replicas);
    an engine's files only where it supports the deployment (:func:`unsupported_reason`).
    """
    plan = result.best
    readme = ["# Launch settings", ""]
    files: dict[str, str] = {}
    if plan is None or not dimensions.has_settings(plan.deployments):
        why = "the problem has no plan" if plan is None else "the plan comes from a measured capacity table"
        readme.append(f"No launch settings: {why}.")
    else:
        readme += [(f"One folder per deployment of plan #1 ({plan.usd_per_hour:.2f} USD/h). Each holds "
                    "`vllm.sh`, `sglang.sh`, `trtllm.sh` (+ `trtllm-extra.yaml`) to start ONE replica, "
                    "and `deployment.yaml`, the Kubernetes objects of all replicas (vLLM): a Deployment, "
                    "or a LeaderWorkerSet when a replica spans more than one node, and a Service. "
                    "An engine's files are written only where catalogs/engines.yaml documents it for the "
                    "deployment's GPU, weight format and KV dtype; the list says why one is missing."), ""]
        for i, (_, dep) in enumerate(plan.deployments.iterrows(), start=1):
            s = launch_settings(result.problem, result.candidates, dep, plan.routing, index=i,
                                params=result.params.base)
            sub = deployment_folder(i, dep)
            skipped = {e: why for e in ENGINES if (why := unsupported_reason(s, e))}
            for engine in ENGINES:
                if engine not in skipped:  # launch settings only for supported combinations
                    files[f"{sub}/{engine}.sh"] = shell_script(s, engine, f"Plan #1, deployment {i}.")
            if "trtllm" not in skipped:
                files[f"{sub}/trtllm-extra.yaml"] = trtllm_extra_options(s)
            if "vllm" not in skipped:
                files[f"{sub}/deployment.yaml"] = k8s_manifest(s)
            readme.append(f"- `{sub}/`: {s.replicas} x {s.gpu} ({s.gpus_per_replica} GPU(s) each), "
                          f"{dimensions.label(dep, 'launch')}, "
                          f"max model length {s.max_model_len}, checkpoint {s.hf_repo or s.model}")
            readme += [f"  - no `{e}` settings: {why}" for e, why in skipped.items()]
    return {"README.md": "\n".join(readme) + "\n", **files}
