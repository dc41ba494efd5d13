"""Generated launch scripts run no injected command, whatever the names (issue 17).

Each script is executed by bash with stub engines (``vllm``, ``python``, ``trtllm-serve``)
first on PATH; a stub records the arguments it received. An injected command would create
a marker file in the working directory.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hardening_helpers import cli, tiny, write
from planner.outputs import launch
from planner.outputs.launch import LaunchSettings

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

HF_8B = Path(__file__).resolve().parent / "data" / "hf-configs" / "meta-llama--Meta-Llama-3.1-8B_config.json"
STUB = '#!/bin/sh\nprintf "%s\\0" "$(basename "$0")" "$@" > "$STUB_LOG"\n'
PAYLOADS = ("$(touch pwned-a)", "`touch pwned-b`", "'; touch pwned-c; '", '"; touch pwned-d; "',
            "\ntouch pwned-e\n", "${IFS}touch${IFS}pwned-f", "}; touch pwned-g; #")


def _stubs(tmp_path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("vllm", "python", "trtllm-serve"):
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _run(script: Path, bin_dir: Path, model: str | None) -> tuple[int, list[str], str]:
    log = script.parent / "stub.log"
    log.unlink(missing_ok=True)
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", "STUB_LOG": str(log)}
    if model is not None:
        env["MODEL"] = model
    proc = subprocess.run(["bash", str(script)], cwd=script.parent, env=env, capture_output=True, text=True,
                          timeout=30)
    return proc.returncode, (log.read_text().split("\0")[:-1] if log.exists() else []), proc.stderr


def _no_marker(root: Path) -> None:
    assert not [p for p in root.rglob("pwned*")], sorted(map(str, root.rglob("pwned*")))


def test_hostile_settings_are_inert(tmp_path):
    """Values that validation would reject still cannot run anything (quoting, not luck)."""
    bin_dir = _stubs(tmp_path)
    for i, payload in enumerate(PAYLOADS):
        s = LaunchSettings(
            name="x", model=f"m{payload}", hf_repo=f"org/r{payload}", gpu=f"h100{payload}", vendor="nvidia",
            tp=1, pp=1, quantization="bf16", quantization_names={}, kv_cache_dtype="bf16", max_num_seqs=8,
            max_model_len=4096, gpu_memory_utilization=0.9, kv_cache_free_memory_fraction=0.8,
            chunked_prefill_tokens=2048, replicas=1, workloads=(f"w{payload}", "chat"))
        for engine in launch.ENGINES:
            d = tmp_path / f"{i}-{engine}"
            d.mkdir()
            script = d / f"{engine}.sh"
            script.write_text(launch.shell_script(s, engine, f"context{payload}"))
            (d / "trtllm-extra.yaml").write_text(launch.trtllm_extra_options(s))
            rc, argv, err = _run(script, bin_dir, None)       # MODEL unset: the path the script suggests
            assert rc != 0 and "MODEL" in err and argv == [], (engine, payload, err)
            rc, argv, err = _run(script, bin_dir, "my/model")
            assert rc == 0, (engine, payload, err)
            assert "my/model" in argv
            if engine != "trtllm":
                assert argv[argv.index("--served-model-name") + 1] == s.model   # passed literally
    _no_marker(tmp_path)


def test_hostile_config_file_and_workload_names_end_to_end(tmp_path):
    """A solved problem whose imported configs are named like command substitutions: the
    launch tree of ``planner solve --out`` (:func:`launch.launch_files`) run with stubs."""
    from planner import load_problem, plan

    names = ["evil$(touch pwned-1)", "evil`touch pwned-2`", "a;touch pwned-3;b"]
    doc = tiny(search={**tiny()["search"], "gpus": ["h100-sxm"], "quantization": ["bf16"]})
    workloads = []
    for i, stem in enumerate(names):
        shutil.copy(HF_8B, tmp_path / f"{stem}.json")
        workloads.append({**doc["workloads"][0], "name": f"w{i} (x) [y] +z @q", "model": f"{stem}.json"})
    doc["workloads"] = workloads
    rc, _, err = cli("validate", write(tmp_path, doc))
    assert rc == 0, err
    result = plan(load_problem(tmp_path / "p.yaml"), top_k=1, pareto=False)
    out = tmp_path / "launch"
    for rel, text in launch.launch_files(result).items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    scripts = sorted(out.glob("*/*.sh"))
    assert len(scripts) >= 3
    bin_dir = _stubs(tmp_path)
    for script in scripts:
        text = script.read_text()
        assert "$(touch" not in text and "`touch" not in text and ";touch" not in text
        rc, argv, err = _run(script, bin_dir, None)
        assert rc != 0 and argv == [] and "MODEL" in err, (script, err)
        rc, argv, err = _run(script, bin_dir, "local/ckpt")
        assert rc == 0 and "local/ckpt" in argv, (script, err)
    _no_marker(tmp_path)
