"""Kubernetes objects of disaggregated (prefill/decode) deployments: SGLang servers per role
(a Deployment, or a LeaderWorkerSet when a replica spans nodes) and the SGLang router in
front of a pool (docs/reports.md, "Launch settings per role").

The workload structure (Deployment or LeaderWorkerSet of ``launch_roles.nodes`` pods, the
Service, volumes, GPU limits, model env) is :func:`planner.outputs.launch.k8s_objects`';
this module swaps the containers for SGLang ones and labels the serving pods for the
router's Kubernetes service discovery (``--service-discovery --prefill-selector ...
--decode-selector ...``; ``engine_flags/sglang_router.txt``).
"""

from __future__ import annotations

import yaml

from planner.outputs import launch, launch_roles

#: Container image of the SGLang server and router (pin the tag your cluster runs; the
#: image ships ``sglang`` and ``sglang_router``).
SGLANG_IMAGE = "lmsysorg/sglang:latest"
SGLANG_SERVER = ["python3", "-m", "sglang.launch_server"]
SGLANG_ROUTER = ["python3", "-m", "sglang_router.launch_router"]
#: Labels of the serving pods (Deployment pods, LeaderWorkerSet leaders) of a pool; the
#: router selects prefill and decode servers by them.
POOL_LABEL = "planner/pool"
ROLE_LABEL = "planner/role"
#: Pod annotation the router reads for a prefill server's bootstrap port (router_args.py,
#: ``bootstrap_port_annotation``).
BOOTSTRAP_PORT_ANNOTATION = "sglang.ai/bootstrap-port"
RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"


def _words(pairs) -> list[str]:
    out: list[str] = []
    for flag, value in pairs:
        out += [flag] + ([str(value)] if value is not None else [])
    return out


def _pool_labels(s) -> dict:
    return {POOL_LABEL: launch._label_value(s.roles.pool_id), ROLE_LABEL: s.roles.role}


def sglang_objects(s) -> list[dict]:
    """The Kubernetes objects of one prefill or decode deployment, served by SGLang: the
    workload of :func:`launch.k8s_objects` with SGLang containers (leader and workers of a
    LeaderWorkerSet pass ``--node-rank $(LWS_WORKER_INDEX) --dist-init-addr
    $(LWS_LEADER_ADDRESS):port``), then the Service."""
    objects = launch.k8s_objects(s)
    workload = objects[0]
    args = ["--model-path", "$(MODEL)", *_words(launch.engine_args(s, "sglang")),
            *_words(launch_roles.node_args(s, "sglang", kubernetes=True))]
    if workload["kind"] == "Deployment":
        templates = [("sglang", workload["spec"]["template"], True)]
    else:
        group = workload["spec"]["leaderWorkerTemplate"]
        templates = [("sglang-leader", group["leaderTemplate"], True),
                     ("sglang-worker", group["workerTemplate"], False)]
    for name, template, serving in templates:
        container = template["spec"]["containers"][0]
        container.update(name=name, image=SGLANG_IMAGE, command=list(SGLANG_SERVER), args=list(args))
        if serving:
            template["metadata"]["labels"].update(_pool_labels(s))
            if s.roles.role == "prefill":
                template["metadata"]["annotations"] = {
                    BOOTSTRAP_PORT_ANNOTATION: str(launch_roles.SGLANG_BOOTSTRAP_PORT)}
    return objects


def sglang_manifest(s) -> str:
    """``deployment.yaml`` of a prefill or decode deployment (SGLang)."""
    objects = sglang_objects(s)
    kind = objects[0]["kind"]
    r = s.roles
    notes = [(f"# Kubernetes {kind} + Service for the {r.role} servers of pool {r.pool_id}: {s.model} on "
              f"{s.gpu}, {s.replicas} replica(s) x {s.gpus_per_replica} GPU(s), command for "
              f"{launch.engine_version('sglang')}."),
             f"# The router of pool {r.pool_id} (launch/pool-*/router.yaml) finds these pods by their labels "
             f"{POOL_LABEL} and {ROLE_LABEL}.",
             f"# Schedule the pods on {s.gpu} nodes: add the nodeSelector your cluster uses for them.",
             f"# Needs: Secret '{launch.HF_TOKEN_SECRET[0]}' (key '{launch.HF_TOKEN_SECRET[1]}', optional) and the "
             f"ReadWriteMany PersistentVolumeClaim '{launch.MODEL_CACHE_CLAIM}' (mounted at {launch.HF_CACHE_PATH})."]
    if kind == "LeaderWorkerSet":
        notes.append(f"# One replica spans {launch_roles.nodes(s)} nodes: a LeaderWorkerSet group of "
                     f"{objects[0]['spec']['leaderWorkerTemplate']['size']} pods x {s.gpus_per_node} GPUs "
                     "(install the LeaderWorkerSet controller: github.com/kubernetes-sigs/lws).")
    notes = [launch._comment(line) for line in notes]
    return "\n".join(notes) + "\n" + yaml.safe_dump_all(objects, sort_keys=False, width=1000)


def router_args(pool: str) -> list[str]:
    """Arguments of the SGLang router of a pool on Kubernetes: prefill/decode mode, pods found
    by label in the router's namespace, served on :data:`launch.SERVER_PORT`."""
    value = launch._label_value(pool)
    port = str(launch.SERVER_PORT)
    return ["--pd-disaggregation", "--service-discovery",
            "--prefill-selector", f"{POOL_LABEL}={value}", f"{ROLE_LABEL}=prefill",
            "--decode-selector", f"{POOL_LABEL}={value}", f"{ROLE_LABEL}=decode",
            "--service-discovery-port", port, "--service-discovery-namespace", "$(POD_NAMESPACE)",
            "--host", "0.0.0.0", "--port", port]


def router_objects(name: str, pool: str) -> list[dict]:
    """The router of a pool: ServiceAccount, Role and RoleBinding (read pods, for service
    discovery), a Deployment of one router pod and its Service on port 8000."""
    labels = {"app": name, POOL_LABEL: launch._label_value(pool), ROLE_LABEL: "router"}
    meta = {"name": name, "labels": dict(labels)}
    port = launch.SERVER_PORT
    container = {
        "name": "router", "image": SGLANG_IMAGE, "command": list(SGLANG_ROUTER), "args": router_args(pool),
        "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "ports": [{"containerPort": port, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": port}, "periodSeconds": 10},
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {"apiVersion": RBAC_API_VERSION, "kind": "Role", "metadata": dict(meta),
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": RBAC_API_VERSION, "kind": "RoleBinding", "metadata": dict(meta),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name}]},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": dict(meta),
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                  "template": {"metadata": {"labels": dict(labels)},
                               "spec": {"serviceAccountName": name, "containers": [container]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": dict(meta),
         "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": port, "targetPort": "http"}]}},
    ]


def router_manifest(name: str, pool: str) -> str:
    """``router.yaml`` of a pool."""
    notes = [f"# SGLang router of prefill/decode pool {pool}: sends each request to a prefill server, then "
             "to a decode server (sglang_router.launch_router --pd-disaggregation).",
             f"# It finds the pool's servers by the pod labels {POOL_LABEL}/{ROLE_LABEL} in its namespace "
             "(Kubernetes service discovery; the Role lets it read pods).",
             f"# Service '{name}' exposes the OpenAI-compatible API of the pool on port {launch.SERVER_PORT}."]
    notes = [launch._comment(line) for line in notes]
    return "\n".join(notes) + "\n" + yaml.safe_dump_all(router_objects(name, pool), sort_keys=False, width=1000)
