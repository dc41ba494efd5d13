"""The ``launch/`` tree with disaggregated pools: :func:`planner.outputs.launch.launch_files`
plus, for the prefill/decode deployments of a plan, SGLang Kubernetes manifests per role and
one ``pool-<id>/`` folder per pool with its router (docs/reports.md, "Launch settings per
role"). Plans without prefill/decode deployments get exactly ``launch.launch_files``.
"""

from __future__ import annotations

import dataclasses

import yaml

from planner.outputs import k8s_roles, launch, launch_roles

#: Commands of a pool's front end (flags in engine_flags/sglang_router.txt and
#: engine_flags/trtllm_disaggregated.txt).
ROUTER_COMMAND = "exec python -m sglang_router.launch_router"
TRTLLM_DISAGG_COMMAND = "exec trtllm-serve disaggregated"


def _plan_roles(result):
    """(index, folder, LaunchSettings) of every deployment of plan #1, or [] without one."""
    plan = result.best
    if plan is None or "tp" not in plan.deployments.columns or "role" not in plan.deployments.columns:
        return []
    return [(i, launch.deployment_folder(i, dep),
             launch.launch_settings(result.problem, result.candidates, dep, plan.routing, index=i,
                                    params=result.params.base))
            for i, (_, dep) in enumerate(plan.deployments.iterrows(), start=1)]


def _with_peers(files: dict, members: list) -> list:
    """``members`` ((index, folder, settings) of one pool) with the SGLang peer fields set
    (:func:`launch_roles.pool_peers`); their ``sglang.sh`` is written again where they change."""
    peers = launch_roles.pool_peers([s for _, _, s in members])
    out = []
    for k, (i, sub, s) in enumerate(members):
        if k in peers:
            s = dataclasses.replace(s, roles=dataclasses.replace(s.roles, **peers[k]))
            if f"{sub}/sglang.sh" in files:
                files[f"{sub}/sglang.sh"] = launch.shell_script(s, "sglang", f"Plan #1, deployment {i}.")
        out.append((i, sub, s))
    return out


def router_script(pool: str, members) -> str:
    """``router.sh`` of a pool: the SGLang router over the pool's prefill and decode servers,
    whose URLs come from ``PREFILL_URLS`` and ``DECODE_URLS``."""
    count = {role: sum(s.replicas for _, s in members if s.roles.role == role) for role in ("prefill", "decode")}
    port = launch.SERVER_PORT
    lines = ["#!/usr/bin/env bash",
             f"# SGLang router of prefill/decode pool {pool}: {count['prefill']} prefill and "
             f"{count['decode']} decode server(s).",
             "# Flags checked against planner/outputs/engine_flags/sglang_router.txt.",
             "set -euo pipefail",
             'PREFILL_URLS="${PREFILL_URLS:?set PREFILL_URLS to the prefill servers, http://host:port, '
             'space-separated}"',
             'DECODE_URLS="${DECODE_URLS:?set DECODE_URLS to the decode servers, http://host:port, '
             'space-separated}"',
             "args=()",
             "for url in $PREFILL_URLS; do",
             f'  args+=( --prefill "$url" {launch_roles.SGLANG_BOOTSTRAP_PORT} )',
             "done",
             "for url in $DECODE_URLS; do",
             '  args+=( --decode "$url" )',
             "done",
             f'{ROUTER_COMMAND} --pd-disaggregation "${{args[@]}}" --host 0.0.0.0 --port {port}']
    lines = [launch._comment(line) if line.startswith("#") else line for line in lines]
    return "\n".join(lines) + "\n"


def trtllm_disagg_config(pool: str, members) -> str:
    """``trtllm-disagg.yaml`` of a pool: the ``trtllm-serve disaggregated`` configuration with
    one context server per prefill replica and one generation server per decode replica (URLs
    named after the deployments: replace them with the servers' host:port)."""
    def servers(role: str) -> dict:
        urls = [f"{s.name}-{k}:{launch.SERVER_PORT}" for _, s in members if s.roles.role == role
                for k in range(s.replicas)]
        return {"num_instances": len(urls), "urls": urls}

    body = {"hostname": "0.0.0.0", "port": launch.SERVER_PORT, "backend": "pytorch",
            "context_servers": servers("prefill"), "generation_servers": servers("decode")}
    head = [f"# trtllm-serve disaggregated configuration of pool {pool} (tensorrt_llm/llmapi/disagg_utils.py).",
            "# Start the context (prefill) and generation (decode) servers with their trtllm.sh, then replace",
            "# the host names below with their addresses."]
    return "\n".join(launch._comment(line) for line in head) + "\n" + yaml.safe_dump(body, sort_keys=False)


def trtllm_disagg_script(pool: str) -> str:
    """``trtllm-disagg.sh`` of a pool: the TensorRT-LLM disaggregated front end."""
    return "\n".join([
        "#!/usr/bin/env bash",
        launch._comment(f"# TensorRT-LLM disaggregated server of pool {pool}; flags checked against "
                        "planner/outputs/engine_flags/trtllm_disaggregated.txt."),
        "set -euo pipefail",
        'cd "$(dirname "$0")"  # trtllm-disagg.yaml sits next to this script',
        f"{TRTLLM_DISAGG_COMMAND} --config_file trtllm-disagg.yaml", ""])


def pool_files(problem_name: str, pool: str, members) -> tuple[dict[str, str], list[str]]:
    """Files of one pool's folder and its README lines. ``members``: (folder, settings) of the
    pool's prefill and decode deployments."""
    folder = f"pool-{launch._slug(pool) or 'pd'}"
    roles = {s.roles.role for _, s in members}
    readme = [f"- `{folder}/`: prefill/decode pool {pool}: "
              + ", ".join(f"`{sub}/` ({s.roles.role})" for sub, s in members)]
    if roles != {"prefill", "decode"}:
        missing = ({"prefill", "decode"} - roles).pop()
        return {}, readme + [f"  - no router: the pool has no {missing} deployment"]
    settings = [s for _, s in members]
    if len(launch_roles.pool_layouts(settings, "decode")) > 1:
        readme.append("  - decode deployments of several TP/DP layouts: the SGLang prefill servers are not told "
                      "one (`--disaggregation-decode-tp/-dp`); check that your SGLang version negotiates it")
    files: dict[str, str] = {}
    engines = {e for e in ("sglang", "trtllm") if all(not launch.unsupported_reason(s, e) for _, s in members)}
    if "sglang" in engines:
        files[f"{folder}/router.sh"] = router_script(pool, members)
        name = launch.k8s_name(f"{problem_name}-{pool}-router")
        files[f"{folder}/router.yaml"] = k8s_roles.router_manifest(name, pool)
        readme.append(f"  - `router.sh`, `router.yaml`: the SGLang router (Service `{name}`, port "
                      f"{launch.SERVER_PORT}) in front of the SGLang servers of the pool")
    if "trtllm" in engines:
        files[f"{folder}/trtllm-disagg.yaml"] = trtllm_disagg_config(pool, members)
        files[f"{folder}/trtllm-disagg.sh"] = trtllm_disagg_script(pool)
        readme.append("  - `trtllm-disagg.sh`, `trtllm-disagg.yaml`: the TensorRT-LLM disaggregated server")
    readme.append("  - vLLM servers of the pool (NixlConnector) need a prefill/decode proxy in front of them")
    return files, readme


def launch_files(result) -> dict[str, str]:
    """The ``launch/`` tree of the best plan: :func:`launch.launch_files`, with SGLang
    ``deployment.yaml`` for prefill/decode deployments and one folder per pool."""
    files = launch.launch_files(result)
    pools: dict[str, list] = {}
    for i, sub, s in _plan_roles(result):
        if s.roles.disaggregated:
            pools.setdefault(s.roles.pool_id, []).append((i, sub, s))
    if not pools:
        return files
    for pool in pools:
        pools[pool] = [(sub, s) for _, sub, s in _with_peers(files, pools[pool])]
        for sub, s in pools[pool]:
            if not launch.unsupported_reason(s, "sglang"):
                files[f"{sub}/deployment.yaml"] = k8s_roles.sglang_manifest(s)
    readme = ["", "## Prefill/decode pools", "",
              "Prefill and decode deployments run SGLang in their `deployment.yaml` (with "
              "`--disaggregation-mode`); each pool has a folder with its router:", ""]
    for pool in sorted(pools):
        pool_tree, lines = pool_files(result.problem.name, pool, pools[pool])
        files.update(pool_tree)
        readme += lines
    files["README.md"] = files["README.md"] + "\n".join(readme) + "\n"
    return files

