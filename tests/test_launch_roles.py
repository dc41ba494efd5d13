"""Launch settings per role: EP, attention DP, prefill/decode roles, multi-node replicas and
the router of a prefill/decode pool (launch_roles, k8s_roles, launch_pools)."""

import dataclasses
import shutil
import subprocess

import pandas as pd
import pytest
import yaml

from planner.outputs import k8s_roles, launch, launch_pools, launch_roles
from planner.outputs.launch import LaunchSettings, engine_args, flag_list, shell_script, used_flags
from planner.outputs.launch_roles import RoleSettings

DS_PROBLEM = """\
name: ds-pd
workloads:
  - {name: chat, model: deepseek-v3, rate_per_s: 2, prompt_tokens: 2000, output_tokens: 300,
     slo: {ttft_p95_s: 3.0, tpot_p95_s: 0.1}}
search: {gpus: [h200-sxm], quantization: [fp8], kv_cache_dtype: [fp8], tp: [8], pp: [1], max_batch: [64]}
optimize: {top_k: 1}
"""
#: The DeepSeek-V3 pair: prefill tp8 ep8 with attention DP on one node, decode ep16 over two.
PREFILL = {"tp": 8, "pp": 1, "ep": 8, "attention_dp": True, "role": "prefill", "pool": "ds", "replicas": 2}
DECODE = {"tp": 16, "pp": 1, "ep": 16, "attention_dp": False, "role": "decode", "pool": "ds", "replicas": 1}


def ds_settings(fields: dict, vendor: str = "nvidia") -> LaunchSettings:
    """LaunchSettings of a DeepSeek-V3 FP8 deployment on H200 with plan-shaped ``fields``."""
    return LaunchSettings(
        name=f"ds-pd-{fields['role']}-deepseek-v3-h200-sxm", model="deepseek-v3", hf_repo="deepseek-ai/DeepSeek-V3",
        gpu="h200-sxm", vendor=vendor, tp=fields["tp"], pp=fields["pp"], quantization="fp8",
        quantization_names={"vllm": "fp8", "sglang": "fp8", "trtllm": "FP8"}, kv_cache_dtype="fp8",
        max_num_seqs=64, max_model_len=8192, gpu_memory_utilization=0.9, kv_cache_free_memory_fraction=0.8,
        chunked_prefill_tokens=8192, replicas=fields["replicas"], workloads=("chat",),
        roles=launch_roles.role_settings(fields))


def flags_of(s, engine) -> dict:
    return dict(engine_args(s, engine))


def test_role_fields_defaults_and_errors():
    assert launch_roles.role_settings({"tp": 4}) == RoleSettings()
    assert not RoleSettings().active and RoleSettings().pool_id == launch_roles.DEFAULT_POOL
    nan_fields = pd.Series({"tp": 8, "ep": float("nan"), "role": None, "pool": float("nan")})
    assert launch_roles.role_settings(nan_fields) == RoleSettings()   # columns of a mixed plan
    assert launch_roles.role_settings(pd.Series({"tp": 8, "role": "decode", "pool": 3.0})).pool == "3"
    assert launch_roles.role_settings({"tp": 8}, gpu=type("G", (), {"gpus_per_node": 4})()).gpus_per_node == 4
    for fields, needle in [({"tp": 8, "ep": 3}, "'ep' (3) must divide 'tp' (8)"), ({"tp": 8, "ep": 0}, "'ep'"), ({"tp": 8, "ep": "8"}, "'ep'"), ({"tp": 8, "ep": 2.5}, "'ep'"),
                           ({"tp": 8, "role": "encode"}, "'role'"), ({"tp": 8, "attention_dp": "yes"}, "'attention_dp'")]:
        with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            launch_roles.role_settings(fields)


def test_sglang_flags_per_role():
    pre, dec = ds_settings(PREFILL), ds_settings(DECODE)
    a = flags_of(pre, "sglang")
    assert (a["--tp-size"], a["--dp-size"], a["--ep-size"]) == ("8", "8", "8")
    assert "--enable-dp-attention" in a and a["--enable-dp-attention"] is None
    assert a["--moe-a2a-backend"] == "deepep"
    assert (a["--disaggregation-mode"], a["--disaggregation-transfer-backend"]) == ("prefill", "mooncake")
    assert a["--disaggregation-bootstrap-port"] == "8998" and "--nnodes" not in a
    b = flags_of(dec, "sglang")
    assert (b["--tp-size"], b["--ep-size"], b["--disaggregation-mode"], b["--nnodes"]) == ("16", "16", "decode", "2")
    assert "--enable-dp-attention" not in b and "--dp-size" not in b and "--disaggregation-bootstrap-port" not in b
    script = shell_script(dec, "sglang")
    assert '--node-rank "$NODE_RANK"' in script and '--dist-init-addr "$DIST_INIT_ADDR"' in script
    assert 'NODE_RANK="${NODE_RANK:?' in script
    # AMD: no DeepEP, SGLang's default all-to-all backend
    assert "--moe-a2a-backend" not in flags_of(ds_settings(PREFILL, vendor="amd"), "sglang")


def test_vllm_flags_per_role():
    a = flags_of(ds_settings(PREFILL), "vllm")
    assert (a["--tensor-parallel-size"], a["--data-parallel-size"]) == ("1", "8")   # attention DP: DP 8 x TP 1
    assert a["--max-num-seqs"] == "8"          # 64 sequences per replica = 8 per DP rank (vLLM counts per rank)
    assert flags_of(ds_settings(PREFILL), "sglang")["--max-running-requests"] == "64"
    assert "--enable-expert-parallel" in a and a["--enable-expert-parallel"] is None
    assert a["--kv-transfer-config"] == '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
    b = flags_of(ds_settings(DECODE), "vllm")
    assert b["--tensor-parallel-size"] == "16" and "--data-parallel-size" not in b
    assert b["--kv-transfer-config"] == '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
    # attention DP over two nodes: one Ray-backed DP group, 8 local ranks per node
    c = flags_of(ds_settings({**DECODE, "attention_dp": True}), "vllm")
    assert (c["--data-parallel-size"], c["--data-parallel-size-local"], c["--data-parallel-backend"]) == ("16", "8", "ray")
    # EP smaller than TP x DP cannot be said to vLLM; SGLang and TensorRT-LLM can
    half = ds_settings({**PREFILL, "ep": 4})
    assert "not expressible" in launch.unsupported_reason(half, "vllm")
    assert launch.unsupported_reason(half, "sglang") is None and flags_of(half, "sglang")["--ep-size"] == "4"


def test_trtllm_options_per_role():
    pre = yaml.safe_load(launch.trtllm_extra_options(ds_settings(PREFILL)))
    assert pre["moe_expert_parallel_size"] == 8 and pre["enable_attention_dp"] is True
    assert pre["disable_overlap_scheduler"] is True and pre["cache_transceiver_config"] == {"backend": "UCX"}
    dec = yaml.safe_load(launch.trtllm_extra_options(ds_settings(DECODE)))
    assert dec["moe_expert_parallel_size"] == 16 and "enable_attention_dp" not in dec
    assert "disable_overlap_scheduler" not in dec and dec["cache_transceiver_config"] == {"backend": "UCX"}
    assert flags_of(ds_settings(DECODE), "trtllm")["--tp_size"] == "16"


@pytest.mark.parametrize("engine", launch.ENGINES)
@pytest.mark.parametrize("fields", [PREFILL, DECODE, {**DECODE, "attention_dp": True}, {**PREFILL, "role": "both"}],
                         ids=["prefill", "decode", "decode-dpa", "both"])
def test_role_commands_use_only_listed_flags(engine, fields):
    script = shell_script(ds_settings(fields), engine)
    flags = used_flags(script)
    assert set(flags) <= flag_list(engine), set(flags) - flag_list(engine)
    assert len(flags) == len(set(flags))


def test_sglang_manifest_of_a_two_node_decode_replica():
    dec = ds_settings(DECODE)
    lws, service = yaml.safe_load_all(k8s_roles.sglang_manifest(dec))
    assert lws["kind"] == "LeaderWorkerSet" and lws["spec"]["replicas"] == 1
    group = lws["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2
    leader, worker = group["leaderTemplate"], group["workerTemplate"]
    assert leader["metadata"]["labels"]["planner/pool"] == "ds"
    assert leader["metadata"]["labels"]["planner/role"] == "decode"
    assert "planner/role" not in worker["metadata"]["labels"]      # the router talks to leaders only
    for template in (leader, worker):
        c = template["spec"]["containers"][0]
        assert c["command"] == ["python3", "-m", "sglang.launch_server"]
        args = c["args"]
        assert args[args.index("--nnodes") + 1] == "2"
        assert args[args.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
        assert args[args.index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):20000"
        assert set(used_flags(" ".join(args))) <= flag_list("sglang")
        assert c["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert service["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": dec.name, "role": "leader"}
    pre, _ = yaml.safe_load_all(k8s_roles.sglang_manifest(ds_settings(PREFILL)))
    assert pre["kind"] == "Deployment" and pre["spec"]["replicas"] == 2
    pod = pre["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"sglang.ai/bootstrap-port": "8998"}
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8}


def test_pool_peers():
    pre, dec = ds_settings(PREFILL), ds_settings(DECODE)
    assert launch_roles.pool_peers([pre, dec]) == {0: {"decode_tp": 16, "decode_dp": 1}}
    same = ds_settings({**DECODE, "tp": 8, "ep": 8, "attention_dp": True})   # the prefill's own layout
    assert launch_roles.pool_peers([pre, same]) == {}
    pp2 = ds_settings({**PREFILL, "tp": 4, "pp": 2, "ep": 4})
    assert launch_roles.pool_peers([pp2, same])[1] == {"prefill_pp": 2}
    other = ds_settings({**DECODE, "tp": 8, "ep": 8})
    assert 0 not in launch_roles.pool_peers([pre, dec, other])    # two decode layouts: not told
    flags = flags_of(dataclasses.replace(dec, roles=dataclasses.replace(dec.roles, prefill_pp=2)), "sglang")
    assert flags["--disaggregation-prefill-pp"] == "2"


def test_router_arguments():
    assert k8s_roles.router_args("ds") == [
        "--pd-disaggregation", "--service-discovery",
        "--prefill-selector", "planner/pool=ds", "planner/role=prefill",
        "--decode-selector", "planner/pool=ds", "planner/role=decode",
        "--service-discovery-port", "8000", "--service-discovery-namespace", "$(POD_NAMESPACE)",
        "--host", "0.0.0.0", "--port", "8000"]
    assert set(used_flags(" ".join(k8s_roles.router_args("ds")))) <= flag_list("sglang_router")
    kinds = [o["kind"] for o in yaml.safe_load_all(k8s_roles.router_manifest("ds-router", "ds"))]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"]
    members = [("01", ds_settings(PREFILL)), ("02", ds_settings(DECODE))]
    script = launch_pools.router_script("ds", members)
    assert "2 prefill and 1 decode server(s)" in script
    assert 'args+=( --prefill "$url" 8998 )' in script and 'args+=( --decode "$url" )' in script
    assert set(used_flags(script)) == {"--prefill", "--decode", "--pd-disaggregation", "--host", "--port"}
    assert set(used_flags(script)) <= flag_list("sglang_router")
    config = yaml.safe_load(launch_pools.trtllm_disagg_config("ds", members))
    assert config["context_servers"]["num_instances"] == 2 and config["generation_servers"]["num_instances"] == 1
    assert config["generation_servers"]["urls"] == [f"{members[1][1].name}-0:8000"]
    assert set(used_flags(launch_pools.trtllm_disagg_script("ds"))) <= flag_list("trtllm_disaggregated")


def test_new_flag_lists_cite_their_source():
    for name in ("sglang_router", "trtllm_disaggregated"):
        header = " ".join(launch.flag_list_header(name))
        assert "Engine version:" in header and "Citation" in header and "commit" in header
        assert len(flag_list(name)) >= 6


@pytest.fixture(scope="module")
def ds_result(tmp_path_factory):
    from planner import load_problem, plan

    path = tmp_path_factory.mktemp("ds") / "p.yaml"
    path.write_text(DS_PROBLEM)
    return plan(load_problem(path), pareto=False)


def _with_deployments(result, rows: list[dict]):
    base = result.best.deployments.iloc[0].to_dict()
    deployments = pd.DataFrame([{**base, **row, "gpus_per_replica": row["tp"] * row["pp"]} for row in rows])
    best = dataclasses.replace(result.best, deployments=deployments)
    return dataclasses.replace(result, plans=[best, *result.plans[1:]])


def test_defaults_in_a_solved_plan_give_todays_tree(ds_result):
    today = launch.launch_files(ds_result)
    assert launch_pools.launch_files(ds_result) == today
    row = ds_result.best.deployments.iloc[0]
    defaults = _with_deployments(ds_result, [{"tp": int(row["tp"]), "pp": int(row["pp"]), "ep": 1,
                                              "attention_dp": False, "role": "both", "pool": None}])
    assert launch_pools.launch_files(defaults) == today


def test_disaggregated_plan_tree(ds_result, tmp_path):
    result = _with_deployments(ds_result, [PREFILL, DECODE])
    files = launch_pools.launch_files(result)
    pre, dec = sorted({p.split("/")[0] for p in files if p.startswith("0")})
    assert pre.startswith("01-deepseek-v3-h200-sxm") and dec.startswith("02-deepseek-v3-h200-sxm")
    assert "--disaggregation-mode prefill" in files[f"{pre}/sglang.sh"]
    # the prefill servers are told the decode layout (TP 16, no attention DP) where it differs
    assert "--disaggregation-decode-tp 16" in files[f"{pre}/sglang.sh"]
    assert "--disaggregation-decode-dp 1" in files[f"{pre}/sglang.sh"]
    args = next(yaml.safe_load_all(files[f"{pre}/deployment.yaml"]))["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--disaggregation-decode-tp") + 1] == "16"
    assert "--disaggregation-prefill-pp" not in files[f"{dec}/sglang.sh"]
    assert "--disaggregation-mode decode" in files[f"{dec}/sglang.sh"]
    assert set(files) >= {"pool-ds/router.sh", "pool-ds/router.yaml", "pool-ds/trtllm-disagg.yaml",
                          "pool-ds/trtllm-disagg.sh"}
    lws = next(yaml.safe_load_all(files[f"{dec}/deployment.yaml"]))
    assert lws["kind"] == "LeaderWorkerSet" and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert next(yaml.safe_load_all(files[f"{pre}/deployment.yaml"]))["kind"] == "Deployment"
    assert "## Prefill/decode pools" in files["README.md"] and "`pool-ds/`" in files["README.md"]
    if shutil.which("bash"):
        for rel, text in files.items():
            if rel.endswith(".sh"):
                path = tmp_path / rel.replace("/", "-")
                path.write_text(text)
                subprocess.run(["bash", "-n", str(path)], check=True)
    # a pool with a prefill part only has no router
    lonely = launch_pools.launch_files(_with_deployments(ds_result, [PREFILL]))
    assert not any(p.startswith("pool-ds/") for p in lonely) and "no router" in lonely["README.md"]


def test_solve_out_writes_the_pools(ds_result):
    """``planner solve --out`` writes its launch tree through launch_pools (writer.solve_files)."""
    from planner.outputs.writer import solve_files

    files, _ = solve_files(_with_deployments(ds_result, [PREFILL, DECODE]))
    assert {"launch/pool-ds/router.yaml", "launch/pool-ds/router.sh"} <= set(files)
    assert "## Prefill/decode pools" in files["launch/README.md"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_multi_node_and_router_scripts_run(tmp_path):
    """The decode script (2 nodes) and the router script, run by bash with stub engines."""
    from test_launch_injection import STUB

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(STUB)
    (bin_dir / "python").chmod(0o755)

    def run(text: str, **env) -> tuple[int, list[str], str]:
        script, log = tmp_path / "s.sh", tmp_path / "stub.log"
        script.write_text(text)
        log.unlink(missing_ok=True)
        proc = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=30,
                              env={"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB_LOG": str(log), **env})
        return proc.returncode, (log.read_text().split("\0")[:-1] if log.exists() else []), proc.stderr

    decode = shell_script(ds_settings(DECODE), "sglang")
    rc, argv, err = run(decode, MODEL="m")
    assert rc != 0 and argv == [] and "NODE_RANK" in err
    rc, argv, err = run(decode, MODEL="m", NODE_RANK="1", DIST_INIT_ADDR="node0:20000")
    assert rc == 0, err
    assert argv[argv.index("--node-rank") + 1] == "1" and argv[argv.index("--dist-init-addr") + 1] == "node0:20000"
    assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--disaggregation-mode") + 1] == "decode"
    router = launch_pools.router_script("ds", [("01", ds_settings(PREFILL)), ("02", ds_settings(DECODE))])
    rc, argv, err = run(router, PREFILL_URLS="http://p0:8000 http://p1:8000", DECODE_URLS="http://d0:8000")
    assert rc == 0, err
    assert argv == ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation",
                    "--prefill", "http://p0:8000", "8998", "--prefill", "http://p1:8000", "8998",
                    "--decode", "http://d0:8000", "--host", "0.0.0.0", "--port", "8000"]
    assert run(router, PREFILL_URLS="http://p0:8000")[0] != 0       # no decode servers: refuses
