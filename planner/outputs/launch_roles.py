"""Launch settings per role: expert parallelism, attention data parallelism, prefill/decode
roles and multi-node replicas, for vLLM, SGLang and TensorRT-LLM (docs/reports.md, "Launch
settings per role").

A deployment of the plan may carry these fields (the optimizer writes them; missing fields
take the defaults, and with the defaults every launch file of a one-node replica is what it
was before them):

- ``ep``: expert-parallel size (1: no expert parallelism); it divides ``tp``;
- ``attention_dp``: attention data parallelism over the ``tp`` ranks (``tp`` attention
  replicas, one per GPU, each with its own KV cache);
- ``role``: ``both`` (prefill and decode on the same GPUs), ``prefill`` or ``decode``;
- ``pool``: the id that links the prefill and decode deployments of one service.

A replica spans ``ceil(tp pp / gpus_per_node)`` nodes; ``gpus_per_node`` comes from the GPU
catalog entry where it has the field, else :data:`DEFAULT_GPUS_PER_NODE`. A replica over several
nodes gets its multi-node settings whatever its role fields (a dense one too): SGLang's
``--nnodes`` / ``--node-rank`` / ``--dist-init-addr``, TensorRT-LLM under MPI with
``trtllm-llmapi-launch``, vLLM on the head of a Ray cluster.

Every flag used here is in the engine's flag list under ``engine_flags/`` (cited there).
This module imports nothing from ``launch``; ``launch`` calls it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

ROLES = ("both", "prefill", "decode")
#: GPUs per node when the GPU catalog entry has no ``gpus_per_node`` (an 8-GPU server).
DEFAULT_GPUS_PER_NODE = 8
#: The pool id of prefill/decode deployments that name none.
DEFAULT_POOL = "pd"
#: SGLang MoE all-to-all backend for expert parallelism on NVIDIA GPUs (DeepEP; the
#: ``--moe-a2a-backend`` choices are none, deepep, mooncake, ascend_fuseep). Other vendors
#: keep SGLang's default (``none``).
SGLANG_MOE_A2A_BACKEND = {"nvidia": "deepep"}
#: SGLang KV transfer backend between prefill and decode servers (its default, explicit).
SGLANG_TRANSFER_BACKEND = "mooncake"
#: Bootstrap port of an SGLang prefill server (SGLang's default; the router is told it).
SGLANG_BOOTSTRAP_PORT = 8998
#: Port of the torch.distributed rendezvous on node 0 of a multi-node SGLang replica (as in
#: the LeaderWorkerSet SGLang example, docs/examples/sglang/lws.yaml of kubernetes-sigs/lws).
SGLANG_DIST_INIT_PORT = 20000
#: vLLM KV connector between prefill and decode instances, and its role per planner role
#: (docs/features/nixl_connector_usage.md: kv_producer for prefillers, kv_consumer for decoders).
VLLM_KV_CONNECTOR = "NixlConnector"
VLLM_KV_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer"}
#: TensorRT-LLM cache transceiver backend between context and generation servers.
TRTLLM_CACHE_BACKEND = "UCX"
#: TensorRT-LLM's launcher of a multi-node ``trtllm-serve`` under MPI (mpirun or srun, one rank
#: per GPU): tensorrt_llm/llmapi/trtllm-llmapi-launch, cited in engine_flags/trtllm.txt.
TRTLLM_MPI_LAUNCHER = "trtllm-llmapi-launch"


@dataclass(frozen=True)
class RoleSettings:
    """The per-role fields of one deployment (defaults: a dense aggregated replica)."""

    ep: int = 1
    attention_dp: bool = False
    role: str = "both"
    pool: str | None = None
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    #: The other part of the pool, where SGLang needs it and it differs from this server's own
    #: layout (set per pool by ``launch_pools``): decode TP / DP size on a prefill server,
    #: prefill PP size on a decode server.
    decode_tp: int | None = None
    decode_dp: int | None = None
    prefill_pp: int | None = None

    @property
    def active(self) -> bool:
        """Whether any field leaves its default (then the role settings are written)."""
        return self.ep != 1 or self.attention_dp or self.role != "both"

    @property
    def disaggregated(self) -> bool:
        return self.role != "both"

    @property
    def pool_id(self) -> str:
        return self.pool if self.pool is not None else DEFAULT_POOL


def _field(deployment, name: str, default):
    """A field of a deployment (pandas Series or mapping); missing or NaN -> ``default``."""
    value = deployment.get(name, default) if hasattr(deployment, "get") else default
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return default
    return value


def role_settings(deployment, gpu=None) -> RoleSettings:
    """The role settings of a plan deployment (its fields ``ep``, ``attention_dp``, ``role``,
    ``pool`` and ``tp``) on ``gpu`` (a catalog GPU; ``gpus_per_node`` where it has the field).

    Raises ValueError naming the field when a value is out of its domain.
    """
    tp = int(_field(deployment, "tp", 1))
    ep = _field(deployment, "ep", 1)
    if isinstance(ep, (bool, str)) or not float(ep).is_integer() or ep < 1:
        raise ValueError(f"deployment field 'ep' must be an integer >= 1, got {ep!r}")
    ep = int(ep)
    if tp % ep:
        raise ValueError(f"deployment field 'ep' ({ep}) must divide 'tp' ({tp}): the expert-parallel "
                         "group lies inside the tensor-parallel ranks of a replica")
    attention_dp = _field(deployment, "attention_dp", False)
    if not isinstance(attention_dp, bool) and attention_dp not in (0, 1):
        raise ValueError(f"deployment field 'attention_dp' must be true or false, got {attention_dp!r}")
    role = str(_field(deployment, "role", "both"))
    if role not in ROLES:
        raise ValueError(f"deployment field 'role' must be one of {', '.join(ROLES)}, got {role!r}")
    pool = _field(deployment, "pool", None)
    if isinstance(pool, float) and pool.is_integer():  # an integer id in a column with gaps
        pool = int(pool)
    per_node = getattr(gpu, "gpus_per_node", None) or DEFAULT_GPUS_PER_NODE
    return RoleSettings(ep=ep, attention_dp=bool(attention_dp), role=role,
                        pool=None if pool is None else str(pool), gpus_per_node=int(per_node))


def attention_dp_size(s) -> int:
    """Attention data-parallel ranks of a replica: ``tp`` with attention DP, else 1."""
    return s.tp if s.roles.attention_dp else 1


def pool_peers(members) -> dict[int, dict]:
    """Per member (position in ``members``, a pool's settings): the peer fields SGLang needs,
    where the pool's other part has one layout that differs from the member's own (several
    layouts: none, see :func:`pool_layouts`)."""
    decode = pool_layouts(members, "decode")
    prefill_pp = {s.pp for s in members if s.roles.role == "prefill"}
    out: dict[int, dict] = {}
    for k, s in enumerate(members):
        fields: dict = {}
        if s.roles.role == "prefill" and len(decode) == 1:
            tp, dp = next(iter(decode))
            if tp != s.tp:
                fields["decode_tp"] = tp
            if dp != attention_dp_size(s):
                fields["decode_dp"] = dp
        if s.roles.role == "decode" and len(prefill_pp) == 1 and next(iter(prefill_pp)) != 1:
            fields["prefill_pp"] = next(iter(prefill_pp))
        if fields:
            out[k] = fields
    return out


def pool_layouts(members, role: str) -> set[tuple[int, int]]:
    """The (tp, attention DP size) layouts of a pool's ``role`` deployments."""
    return {(s.tp, attention_dp_size(s)) for s in members if s.roles.role == role}


def nodes(s) -> int:
    """Nodes one replica spans: ceil(tp pp / gpus_per_node)."""
    return math.ceil(s.tp * s.pp / s.roles.gpus_per_node)


def unsupported_reason(s, engine: str) -> str | None:
    """Why an engine cannot express a deployment's role settings, or None."""
    r = s.roles
    if engine == "vllm" and r.ep > 1 and r.ep != s.tp:
        return (f"vLLM's expert-parallel group is all TP x DP ranks of a stage ({s.tp} GPUs); "
                f"ep {r.ep} is not expressible")
    return None


def vllm_kv_transfer_config(role: str) -> str:
    """vLLM ``--kv-transfer-config`` JSON of a prefill or decode instance."""
    return json.dumps({"kv_connector": VLLM_KV_CONNECTOR, "kv_role": VLLM_KV_ROLE[role]},
                      separators=(",", ":"))


def engine_role_args(s, engine: str, args: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """``args`` (an engine's base (flag, value) pairs) with the role settings applied: values
    replaced where a role changes them, role flags appended. Unchanged with the defaults."""
    r = s.roles
    if not r.active and not (engine == "sglang" and nodes(s) > 1):
        return args  # (a dense replica over several nodes: SGLang's --nnodes below)
    if engine == "vllm":
        extra: list[tuple[str, object]] = []
        if r.attention_dp:  # attention DP: tp DP ranks of TP 1 (EP/TP group = TP x DP = tp);
            # --max-num-seqs applies per DP rank (docs/serving/data_parallel_deployment.md)
            per_rank = {"--tensor-parallel-size": 1, "--max-num-seqs": math.ceil(s.max_num_seqs / s.tp)}
            args = [(f, per_rank.get(f, v)) for f, v in args]
            extra.append(("--data-parallel-size", s.tp))
            if nodes(s) > 1:  # one Ray-backed DP group over the nodes (the LWS / Ray cluster)
                extra += [("--data-parallel-size-local", min(s.tp, max(1, r.gpus_per_node // s.pp))),
                          ("--data-parallel-backend", "ray")]
        if r.ep > 1:
            extra.append(("--enable-expert-parallel", None))
        if r.disaggregated:
            extra.append(("--kv-transfer-config", vllm_kv_transfer_config(r.role)))
    elif engine == "sglang":
        extra = []
        if r.attention_dp:
            extra += [("--enable-dp-attention", None), ("--dp-size", s.tp)]
        if r.ep > 1:
            extra.append(("--ep-size", r.ep))
            if s.vendor in SGLANG_MOE_A2A_BACKEND:
                extra.append(("--moe-a2a-backend", SGLANG_MOE_A2A_BACKEND[s.vendor]))
        if r.disaggregated:
            extra += [("--disaggregation-mode", r.role),
                      ("--disaggregation-transfer-backend", SGLANG_TRANSFER_BACKEND)]
            if r.role == "prefill":
                extra.append(("--disaggregation-bootstrap-port", SGLANG_BOOTSTRAP_PORT))
            peers = [("--disaggregation-decode-tp", r.decode_tp), ("--disaggregation-decode-dp", r.decode_dp),
                     ("--disaggregation-prefill-pp", r.prefill_pp)]
            extra += [(f, v) for f, v in peers if v is not None]
        if nodes(s) > 1:
            extra.append(("--nnodes", nodes(s)))
    elif engine == "trtllm":
        return args  # TensorRT-LLM takes them in the LLM-API options (trtllm_role_options)
    else:
        raise ValueError(f"unknown engine '{engine}'")
    tail = [p for p in args if p[0] in ("--host", "--port")]
    return [p for p in args if p not in tail] + extra + tail


def node_args(s, engine: str, kubernetes: bool = False) -> list[tuple[str, str]]:
    """(flag, shell word) pairs that differ per node of a multi-node SGLang replica: bash
    variables in a script, LeaderWorkerSet variables (``$(LWS_...)``) in a manifest.
    Empty for one node and for vLLM/TensorRT-LLM (one command on the head, or under MPI)."""
    if engine != "sglang" or nodes(s) <= 1:
        return []
    if kubernetes:
        return [("--node-rank", "$(LWS_WORKER_INDEX)"),
                ("--dist-init-addr", f"$(LWS_LEADER_ADDRESS):{SGLANG_DIST_INIT_PORT}")]
    return [("--node-rank", '"$NODE_RANK"'), ("--dist-init-addr", '"$DIST_INIT_ADDR"')]


#: What sends requests to a prefill or decode server, per engine (the pool's folder holds it).
_FRONT_END = {
    "sglang": "# The SGLang router of pool {pool} (launch/pool-*/router.sh) sends requests to this server.",
    "trtllm": ("# The TensorRT-LLM disaggregated server of pool {pool} (launch/pool-*/trtllm-disagg.sh) "
               "sends requests to this server."),
    "vllm": ("# Put a prefill/decode proxy in front of the vLLM servers of pool {pool} (vLLM's example: "
             "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py)."),
}


def script_lines(s, engine: str) -> list[str]:
    """Extra lines of a launch script before the command: comments on the roles and the
    multi-node variables and launch it needs (empty for a dense replica on one node)."""
    r = s.roles
    n = nodes(s)
    if not r.active and n <= 1:
        return []
    if r.active:
        parts = [f"ep {r.ep}"] + (["attention DP"] if r.attention_dp else []) + [f"role {r.role}"]
        lines = [f"# Role settings: {', '.join(parts)}" + (f", pool {r.pool_id}" if r.disaggregated else "")
                 + f"; one replica spans {n} node(s) of {r.gpus_per_node} GPUs."]
    else:
        lines = [f"# One replica spans {n} nodes of {r.gpus_per_node} GPUs."]
    if r.disaggregated:
        lines.append(_FRONT_END[engine].format(pool=r.pool_id))
    if n > 1 and engine == "sglang":
        lines += [f"# Run this script on each of the {n} nodes of a replica, with NODE_RANK 0 to {n - 1}.",
                  f'NODE_RANK="${{NODE_RANK:?set NODE_RANK to the rank of this node, 0 to {n - 1}}}"',
                  'DIST_INIT_ADDR="${DIST_INIT_ADDR:?set DIST_INIT_ADDR to host:port of node 0}"']
    elif n > 1 and engine == "vllm":
        lines.append(f"# Start a Ray cluster over the {n} nodes first (vLLM multi-node-serving.sh) "
                     "and run this script on its head node.")
    elif n > 1 and engine == "trtllm":
        ranks, per_node = s.tp * s.pp, r.gpus_per_node
        lines += [f"# Run this script under MPI on all {n} nodes (this folder on each), one rank per GPU "
                  f"({ranks} ranks): {TRTLLM_MPI_LAUNCHER} serves on rank 0 and runs the other ranks as its "
                  "workers, e.g.",
                  f"#   mpirun -np {ranks} -H " + ",".join(f"node{k}:{per_node}" for k in range(n))
                  + " bash trtllm.sh   (add -x MODEL where you set MODEL)",
                  f"#   srun -N {n} --ntasks {ranks} --ntasks-per-node {per_node} --mpi=pmix bash trtllm.sh"]
    return lines


def mpi_launcher(s, engine: str) -> str:
    """The word before an engine's command in a launch script: TensorRT-LLM's
    ``trtllm-llmapi-launch`` (then a space) for a replica over several nodes (its MPI ranks:
    rank 0 runs ``trtllm-serve``, the others its workers), else ''."""
    return f"{TRTLLM_MPI_LAUNCHER} " if engine == "trtllm" and nodes(s) > 1 else ""


def trtllm_role_options(s) -> dict:
    """Entries of the TensorRT-LLM ``--extra_llm_api_options`` YAML for the role settings
    (BaseLlmArgs ``moe_expert_parallel_size``, ``enable_attention_dp``; the cache transceiver
    and, on context servers, no overlap scheduler for disaggregated serving)."""
    r = s.roles
    out: dict = {}
    if r.ep > 1:
        out["moe_expert_parallel_size"] = r.ep
    if r.attention_dp:
        out["enable_attention_dp"] = True
    if r.role == "prefill":
        out["disable_overlap_scheduler"] = True
    if r.disaggregated:
        out["cache_transceiver_config"] = {"backend": TRTLLM_CACHE_BACKEND}
    return out
