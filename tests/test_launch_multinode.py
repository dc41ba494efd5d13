"""Launch settings of a replica over several nodes, dense ones included (issue 14): SGLang's
--nnodes / --node-rank / --dist-init-addr on every node, TensorRT-LLM under MPI with
trtllm-llmapi-launch, vLLM on the head of a Ray cluster; every flag in the engines' lists."""

import shutil
import subprocess

import pytest
import yaml

from conftest import ROOT
from planner.outputs import launch
from planner.outputs.launch import flag_list, shell_script, used_flags
from test_launch_injection import STUB, _run
from test_launch_roles import ds_settings

#: A dense (no EP, no attention DP, aggregated) DeepSeek-V3 replica of tp 8 x pp 2 = 16 GPUs.
DENSE_2_NODES = {"tp": 8, "pp": 2, "role": "both", "replicas": 1}
DENSE_1_NODE = {"tp": 8, "pp": 1, "role": "both", "replicas": 1}


@pytest.mark.parametrize("engine", launch.ENGINES)
def test_a_dense_replica_over_two_nodes_gets_multi_node_settings(engine):
    s = ds_settings(DENSE_2_NODES)
    assert not s.roles.active and s.gpus_per_replica == 16
    script = shell_script(s, engine)
    flags = used_flags(script)
    assert set(flags) <= flag_list(engine), set(flags) - flag_list(engine)
    assert len(flags) == len(set(flags))
    assert "# One replica spans 2 nodes of 8 GPUs." in script
    one = shell_script(ds_settings(DENSE_1_NODE), engine)   # one node: no multi-node line at all
    assert "spans" not in one and "--nnodes" not in one and "llmapi-launch" not in one
    if engine == "sglang":
        assert "  --nnodes 2 \\\n" in script
        assert script.endswith('  --node-rank "$NODE_RANK" \\\n  --dist-init-addr "$DIST_INIT_ADDR"\n')
    elif engine == "trtllm":
        assert 'exec trtllm-llmapi-launch trtllm-serve "$MODEL" \\\n' in script
        assert "#   mpirun -np 16 -H node0:8,node1:8 bash trtllm.sh" in script
        assert "#   srun -N 2 --ntasks 16 --ntasks-per-node 8 --mpi=pmix bash trtllm.sh" in script
        assert 'exec trtllm-serve "$MODEL"' in one
    else:
        assert "Start a Ray cluster over the 2 nodes first" in script


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_multi_node_scripts_run(tmp_path):
    """Run by bash with stub engines: SGLang on node 1 gets its rank and node 0's address;
    TensorRT-LLM's command is trtllm-llmapi-launch running trtllm-serve (as every MPI rank does)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python", "trtllm-llmapi-launch"):
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(0o755)
    s = ds_settings(DENSE_2_NODES)
    sglang = tmp_path / "sglang.sh"
    sglang.write_text(shell_script(s, "sglang"))
    rc, argv, err = _run(sglang, bin_dir, "m")
    assert rc != 0 and argv == [] and "NODE_RANK" in err   # refuses without its node rank
    log = tmp_path / "stub.log"
    proc = subprocess.run(["bash", str(sglang)], cwd=tmp_path, capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB_LOG": str(log), "MODEL": "m",
                               "NODE_RANK": "1", "DIST_INIT_ADDR": "node0:20000"})
    assert proc.returncode == 0, proc.stderr
    argv = log.read_text().split("\0")[:-1]
    assert argv[:4] == ["python", "-m", "sglang.launch_server", "--model-path"]
    assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--node-rank") + 1] == "1"
    assert argv[argv.index("--dist-init-addr") + 1] == "node0:20000" and argv[argv.index("--pp-size") + 1] == "2"
    trtllm = tmp_path / "trtllm.sh"
    trtllm.write_text(shell_script(s, "trtllm"))
    (tmp_path / "trtllm-extra.yaml").write_text(launch.trtllm_extra_options(s))
    rc, argv, err = _run(trtllm, bin_dir, "m")
    assert rc == 0, err
    assert argv[:3] == ["trtllm-llmapi-launch", "trtllm-serve", "m"]
    assert argv[argv.index("--tp_size") + 1] == "8" and argv[argv.index("--pp_size") + 1] == "2"


def test_rag_long_context_launch_files():
    """problems/rag-long-context.yaml: plan #1's MI300X tp8 pp2 replica spans two nodes; its
    sglang.sh runs on each node (--nnodes 2 --node-rank --dist-init-addr), its vllm.sh on the
    head of a Ray cluster; the plan's one-node replica's files have no multi-node settings."""
    from planner import load_problem, plan
    from planner.outputs import launch_pools

    result = plan(load_problem(ROOT / "problems" / "rag-long-context.yaml"), pareto=False, top_k=1)
    files = launch_pools.launch_files(result)
    folders = {path.split("/")[0] for path in files if "/" in path}
    two = next(f for f in folders if "-mi300x-" in f and "--nnodes 2" in files[f"{f}/sglang.sh"])
    one = next(f for f in folders if f != two)
    sglang = files[f"{two}/sglang.sh"]
    assert "--tp-size 8" in sglang and "--pp-size 2" in sglang and "--nnodes 2" in sglang
    assert '--node-rank "$NODE_RANK"' in sglang and '--dist-init-addr "$DIST_INIT_ADDR"' in sglang
    assert "Start a Ray cluster over the 2 nodes first" in files[f"{two}/vllm.sh"]
    assert f"{two}/trtllm.sh" not in files                   # TensorRT-LLM: NVIDIA GPUs only
    assert next(yaml.safe_load_all(files[f"{two}/deployment.yaml"]))["kind"] == "LeaderWorkerSet"
    for name in ("sglang.sh", "vllm.sh", "trtllm.sh"):
        if f"{one}/{name}" not in files:                      # trtllm.sh: NVIDIA GPUs only
            continue
        text = files[f"{one}/{name}"]
        assert "--nnodes" not in text and "spans" not in text and "llmapi-launch" not in text
