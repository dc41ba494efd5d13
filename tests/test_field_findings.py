"""Issue 16 (items 3-7, 11, 13): what the first week of real use found, each through the CLI.

Kubernetes names, engine/hardware compatibility, context-length validation and warnings,
data-center GPUs by default, "did you mean" for unknown keys, published quantization quality,
and launch settings fit for a real cluster.
"""

import contextlib
import io
import json
import re
import shlex

import pytest
import yaml

from planner import cli
from planner.outputs import launch

DNS_1123 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def run(*args) -> tuple[int, str, str]:
    """``planner ARGS`` in process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def write(tmp_path, doc: dict, name="p.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def workload(name="chat", model="llama-3.1-8b", rate=2.0, prompt=800, output=200, ttft=2.0, tpot=0.1):
    return {"name": name, "model": model, "rate_per_s": rate, "prompt_tokens": prompt,
            "output_tokens": output, "slo": {"ttft_p95_s": ttft, "tpot_p95_s": tpot}}


def search(gpus, quant=("bf16",), kv=("bf16",), tp=(1,), pp=(1,), batch=(32,)):
    return {"gpus": list(gpus), "quantization": list(quant), "kv_cache_dtype": list(kv), "tp": list(tp),
            "pp": list(pp), "max_batch": list(batch)}


def solve_json(path, *extra):
    code, out, err = run("solve", path, "--json", "--no-pareto", *extra)
    return code, (json.loads(out) if out.strip() else None), err


# ---------------------------------------------------------------- item 3: Kubernetes names

def test_k8s_names_are_dns_labels_unique_and_short():
    prefix = "customer-support-assistant-for-the-european-production-cluster"
    a, b = (launch.k8s_name(f"{prefix}-{i}-llama-3.1-70b-h100-sxm") for i in (1, 2))
    assert a != b and len(a) <= 63 and len(b) <= 63
    assert DNS_1123.match(a) and DNS_1123.match(b)
    assert a == launch.k8s_name(f"{prefix}-1-llama-3.1-70b-h100-sxm")  # deterministic
    assert launch.k8s_name("Chat_70B") == "chat-70b"  # short names unchanged (no hash)
    assert DNS_1123.match(launch.k8s_name("70b chat"))  # starts with a letter (DNS-1035 for Services)
    assert launch._label_value("llama-3.1-70b") == "llama-3.1-70b"  # label values may hold dots
    assert len(launch._label_value("imported-model-" + "x" * 80)) <= 63


def test_long_problem_name_gives_distinct_manifests(tmp_path):
    name = "customer-support-assistant-for-the-european-production-cluster-2026"
    path = write(tmp_path, {"name": name,
                            "workloads": [workload("a", "llama-3.1-8b"), workload("b", "qwen3-8b")],
                            "search": search(["l40s"]), "optimize": {"top_k": 1}})
    code, _, err = run("solve", path, "--out", tmp_path / "out", "--no-pareto")
    assert code == 0, err
    manifests = sorted((tmp_path / "out" / "launch").glob("*/deployment.yaml"))
    assert len(manifests) == 2
    names, apps = set(), set()
    for m in manifests:
        workload_obj, service = yaml.safe_load_all(m.read_text())
        meta = workload_obj["metadata"]["name"]
        assert DNS_1123.match(meta) and len(meta) <= 63
        assert service["metadata"]["name"] == meta
        selector = workload_obj["spec"]["selector"]["matchLabels"]
        assert selector.items() <= workload_obj["spec"]["template"]["metadata"]["labels"].items()
        assert service["spec"]["selector"] == selector
        names.add(meta)
        apps.add(selector["app"])
    assert len(names) == 2 and len(apps) == 2


# ---------------------------------------------------------------- item 4: engine compatibility

def test_trtllm_never_plans_mi300x(tmp_path):
    spec = search(["mi300x", "h100-sxm"], quant=("bf16", "fp8"), tp=(1, 2), batch=(32, 64))
    path = write(tmp_path, {"name": "trt", "workloads": [workload()], "search": spec,
                            "serving": {"engine": "trtllm"}, "optimize": {"top_k": 2}})
    code, doc, err = solve_json(path)
    assert code == 0, err
    # 2 tp x 2 formats x 1 KV dtype x 2 batches = 8 MI300X rows, all rejected for the engine
    assert doc["candidates"]["rejected"]["engine_unsupported_on_gpu"] == 8
    assert {d["gpu"] for p in doc["plans"] for d in p["deployments"]} == {"h100-sxm"}
    path = write(tmp_path, {"name": "vllm", "workloads": [workload()], "search": spec,
                            "serving": {"engine": "vllm"}}, "v.yaml")
    code, doc, _ = solve_json(path)
    assert code == 0 and "engine_unsupported_on_gpu" not in doc["candidates"]["rejected"]


def test_unknown_engine_is_invalid_with_a_suggestion(tmp_path):
    path = write(tmp_path, {"name": "t", "workloads": [workload()], "serving": {"engine": "trtlm"}})
    code, _, err = run("validate", path)
    assert code == 2 and "serving.engine: unknown engine 'trtlm' (did you mean 'trtllm'?)" in err


DEEPSEEK = {"name": "deepseek-a100",
            "workloads": [workload("chat", "deepseek-v3", rate=0.2, prompt=1000, output=200, ttft=30, tpot=1.0)],
            "search": search(["a100-sxm-80gb"], quant=("fp8",), tp=(8,), pp=(2,), batch=(16,)),
            "optimize": {"top_k": 1}}


def test_deepseek_fp8_on_a100_is_no_trtllm_plan(tmp_path):
    path = write(tmp_path, {**DEEPSEEK, "serving": {"engine": "trtllm"}})
    code, doc, err = solve_json(path)
    assert code == 3, err  # TensorRT-LLM has no FP8 on Ampere: nothing is left
    assert doc["candidates"]["rejected"] == {"engine_unsupported_format": 1}
    fix = doc["diagnosis"][-1]  # dropping the engine is verified by re-solving
    assert fix["relaxation"] == {"serving.engine": None} and fix["verified"] is True


@pytest.fixture(scope="module")
def deepseek_launch(tmp_path_factory):
    """DeepSeek-V3 FP8 on 16 A100s per replica, no engine set: ``solve --out``."""
    tmp = tmp_path_factory.mktemp("deepseek")
    path = write(tmp, DEEPSEEK)
    code, doc, err = solve_json(path, "--out", tmp / "out")
    assert code == 0, err
    return doc, tmp / "out" / "launch"


def test_launch_settings_only_for_supported_engines(deepseek_launch):
    doc, root = deepseek_launch
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    files = {p.name for p in folder.iterdir()}
    assert {"vllm.sh", "sglang.sh", "deployment.yaml"} <= files
    assert "trtllm.sh" not in files and "trtllm-extra.yaml" not in files
    readme = (root / "README.md").read_text()
    assert "no `trtllm` settings: trtllm documents no fp8 weights with a bf16 KV cache on ampere" in readme
    assert doc["plans"][0]["deployments"][0]["quality"]["recovery"] == 1.0  # DeepSeek-V3 ships FP8


# ---------------------------------------------------------------- item 13: cluster-ready launch

def test_replica_beyond_one_node_is_a_leader_worker_set(deepseek_launch):
    _, root = deepseek_launch
    (manifest,) = root.glob("*/deployment.yaml")
    lws, service = yaml.safe_load_all(manifest.read_text())
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and lws["kind"] == "LeaderWorkerSet"
    group = lws["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2  # tp 8 x pp 2 = 16 GPUs = 2 nodes of 8
    leader = group["leaderTemplate"]["spec"]["containers"][0]
    worker = group["workerTemplate"]["spec"]["containers"][0]
    for pod in (leader, worker):
        assert pod["resources"]["limits"] == {"nvidia.com/gpu": 8}
    serve = leader["args"][0].split("&& exec ", 1)[1]
    flags = launch.used_flags(serve)
    assert set(flags) <= launch.flag_list("vllm")
    assert shlex.split(serve)[:2] == ["vllm", "serve"]
    assert "--tensor-parallel-size 8" in serve and "--pipeline-parallel-size 2" in serve
    assert "LWS_LEADER_ADDRESS" in worker["args"][0]
    assert service["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": lws["metadata"]["name"],
                                           "role": "leader"}
    assert group["leaderTemplate"]["metadata"]["labels"]["role"] == "leader"


def test_manifest_has_token_secret_cache_volume_service_and_instruct_checkpoint(tmp_path):
    path = write(tmp_path, {"name": "chat70", "optimize": {"top_k": 1},
                            "workloads": [workload(model="llama-3.1-70b", rate=4)],
                            "search": search(["h100-sxm"], quant=("fp8",), tp=(2,))})
    code, _, err = run("solve", path, "--out", tmp_path / "out", "--no-pareto")
    assert code == 0, err
    (folder,) = [p for p in (tmp_path / "out" / "launch").iterdir() if p.is_dir()]
    assert 'MODEL="${MODEL:-meta-llama/Llama-3.1-70B-Instruct}"' in (folder / "vllm.sh").read_text()
    deployment, service = yaml.safe_load_all((folder / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["MODEL"]["value"] == "meta-llama/Llama-3.1-70B-Instruct"
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == launch.HF_TOKEN_SECRET[0]
    claims = {v["name"]: v for v in pod["volumes"]}
    assert claims["model-cache"]["persistentVolumeClaim"]["claimName"] == launch.MODEL_CACHE_CLAIM
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["model-cache"] == env["HF_HOME"]["value"] == launch.HF_CACHE_PATH
    assert service["kind"] == "Service" and service["spec"]["ports"][0]["port"] == launch.SERVER_PORT
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_every_instruct_checkpoint_is_a_catalog_model(catalog):
    table = launch._instruct_table()
    assert set(table) <= set(catalog.models.entries)
    assert launch.serving_repo(catalog, "qwen3-8b") == launch.hf_repo(catalog, "qwen3-8b")  # already chat


# ---------------------------------------------------------------- item 5: context length

def test_p95_beyond_the_context_window_is_invalid(tmp_path):
    w = workload(model="qwen3-32b", prompt={"mean": 30000, "p95": 90000}, output={"mean": 500, "p95": 1500})
    path = write(tmp_path, {"name": "long", "workloads": [w]})
    code, _, err = run("validate", path)
    assert code == 2
    assert "workloads[0].prompt_tokens: p95 prompt + p95 output = 91500 tokens exceeds qwen3-32b's context " \
           "of 40960 tokens" in err


def test_tail_beyond_the_window_warns_in_json_and_stderr(tmp_path):
    from planner.traffic import LogNormal

    prompt, output = {"mean": 8000, "p95": 20000}, {"mean": 400, "p95": 1000}
    w = workload(model="qwen3-32b", rate=0.5, prompt=prompt, output=output, ttft=30, tpot=0.2)
    path = write(tmp_path, {"name": "tail", "workloads": [w],
                            "search": search(["h200-sxm"], tp=(1, 2), batch=(16,))})
    tail = LogNormal(8000, 20000).quantile(0.999) + LogNormal(400, 1000).quantile(0.999)
    assert LogNormal(8000, 20000).quantile(0.95) + 1000 < 40960 < tail  # valid, but the tail is beyond
    code, doc, err = solve_json(path)
    assert code == 0, err
    (line,) = doc["warnings"]
    assert line.startswith("workloads[0].prompt_tokens: the 99.9% quantile of prompt + output = "
                           f"{tail:.0f} tokens exceeds qwen3-32b's context of 40960 tokens")
    assert f"warning: {path}: {line}" in err
    code, out, err = run("validate", path, "--json")
    assert code == 0 and json.loads(out)["warnings"] == [line] and "warning:" in err
    fine = write(tmp_path, {"name": "fine", "workloads": [workload(model="qwen3-32b")]}, "f.yaml")
    code, out, _ = run("validate", fine, "--json")
    assert code == 0 and json.loads(out)["warnings"] == []


# ---------------------------------------------------------------- item 6: data-center GPUs by default

def test_default_search_is_data_center_gpus_only(tmp_path, catalog):
    datacenter = sorted(g for g, spec in catalog.gpus.entries.items() if spec.segment == "datacenter")
    others = {"rtx-4090", "rtx-6000-ada", "rtx-pro-6000", "m2-ultra"}
    assert others == set(catalog.gpus.entries) - set(datacenter)
    path = write(tmp_path, {"name": "d", "workloads": [workload()]})
    code, out, _ = run("validate", path, "--json")
    assert code == 0 and json.loads(out)["gpus"] == datacenter
    named = write(tmp_path, {"name": "n", "workloads": [workload()], "search": {"gpus": ["rtx-4090"]}}, "n.yaml")
    assert json.loads(run("validate", named, "--json")[1])["gpus"] == ["rtx-4090"]
    owned = write(tmp_path, {"name": "o", "workloads": [workload()], "inventory": {"rtx-4090": 2}}, "o.yaml")
    assert json.loads(run("validate", owned, "--json")[1])["gpus"] == sorted([*datacenter, "rtx-4090"])


def test_documented_default_gpu_list_matches_the_catalog(catalog):
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "problem-format.md").read_text()
    block = doc.split("<!-- default-gpus -->")[1]
    listed = sorted(re.findall(r"`([a-z0-9.-]+)`", block))
    assert listed == sorted(g for g, s in catalog.gpus.entries.items() if s.segment == "datacenter")


# ---------------------------------------------------------------- item 7: did you mean (keys)

def test_unknown_keys_suggest_the_allowed_key(tmp_path):
    w = workload()
    w["prefix_cache_hit_fration"] = 0.2
    w["slo"]["ttft_p99_s"] = 3
    w["prompt_tokens"] = {"mean": 600, "p59": 1800}
    path = write(tmp_path, {"name": "typo", "workloads": [w], "serch": {},
                            "search": {"quantizaton": ["fp8"]}, "optimize": {"top_kk": 2},
                            "quality": {"min_recover": 0.9},
                            "capacity_table": [{"name": "r", "gpu": "l4", "capacity_per_s": {"chat": 1},
                                                "usd_per_hr": 1}]})
    code, _, err = run("validate", path)
    assert code == 2
    for line in ["search.quantizaton: unknown key (did you mean 'quantization'?)",
                 "serch: unknown key (did you mean 'search'?)",
                 "workloads[0].prefix_cache_hit_fration: unknown key (did you mean 'prefix_cache_hit_fraction'?)",
                 "workloads[0].slo.ttft_p99_s: unknown key (did you mean 'ttft_p95_s'?)",
                 "workloads[0].prompt_tokens: p59: unknown key (did you mean 'p95'?)",
                 "optimize.top_kk: unknown key (did you mean 'top_k'?)",
                 "quality.min_recover: unknown key (did you mean 'min_recovery'?)",
                 "capacity_table[0].usd_per_hr: unknown key (did you mean 'usd_per_hour'?)"]:
        assert f"{path}: {line}" in err, line
    far = write(tmp_path, {"name": "x", "workloads": [workload()], "zzz": 1}, "x.yaml")
    assert "zzz: unknown key\n" in run("validate", far)[2]  # no near miss, no suggestion


# ---------------------------------------------------------------- item 11: quantization quality

def test_every_deployment_reports_its_published_quality(tmp_path):
    path = write(tmp_path, {"name": "q", "optimize": {"top_k": 3},
                            "workloads": [workload(model="llama-3.1-70b", rate=3)],
                            "search": search(["h100-sxm"], quant=("bf16", "fp8"), tp=(2, 4))})
    code, doc, err = solve_json(path)
    assert code == 0, err
    seen = set()
    for plan in doc["plans"]:
        for d in plan["deployments"]:
            q = d["quality"]
            expected = {"bf16": 1.0, "fp8": 84.29 / 84.40}[d["quantization"]]  # RedHatAI model card
            assert q["recovery"] == pytest.approx(expected, rel=1e-12) and q["source"]
            seen.add(d["quantization"])
            if d["quantization"] == "fp8":
                assert "huggingface.co/RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8" in q["source"]
    assert seen


def test_unverified_format_needs_the_opt_in(tmp_path):
    base = {"name": "awq", "workloads": [workload(model="llama-3.1-70b", rate=3)],
            "search": search(["h100-sxm"], quant=("int4-awq",), tp=(1, 2))}
    code, doc, _ = solve_json(write(tmp_path, base))
    assert code == 3 and doc["candidates"]["rejected"] == {"quality_unverified": 2}
    fix = doc["diagnosis"][-1]
    assert fix["relaxation"] == {"quality.allow_unverified_formats": True} and fix["verified"] is True
    code, doc, err = solve_json(write(tmp_path, {**base, "quality": {"allow_unverified_formats": True}}, "b.yaml"))
    assert code == 0, err
    q = doc["plans"][0]["deployments"][0]["quality"]
    assert q["recovery"] is None and q["source"].startswith("unverified")


def test_min_recovery_gate(tmp_path):
    # Llama 3.1 8B GPTQ INT4: 67.57 / 69.32 = 0.9748 on OpenLLM v1 (Neural Magic model card)
    base = {"name": "gptq", "workloads": [workload()], "search": search(["l40s"], quant=("int4-gptq",))}
    code, doc, _ = solve_json(write(tmp_path, base))
    assert code == 3 and doc["candidates"]["rejected"] == {"quality_below_min_recovery": 1}
    fix = doc["diagnosis"][-1]  # the published 0.9748, rounded down
    assert fix["relaxation"] == {"quality.min_recovery": 0.974} and fix["verified"] is True
    code, doc, err = solve_json(write(tmp_path, {**base, "quality": {"min_recovery": 0.97}}, "b.yaml"))
    assert code == 0, err
    assert doc["plans"][0]["deployments"][0]["quality"]["recovery"] == pytest.approx(67.57 / 69.32)


def test_quality_catalog_rows_cite_sources_and_known_ids(catalog):
    from planner.quality import quality_table

    table = quality_table(catalog)
    for row in table.doc.entries:
        assert row.source.startswith("https://") and 0.9 < row.recovery_fraction <= 1.01
    for fmt in table.doc.lossless_formats:
        assert table.recovery("llama-3.1-8b", fmt, "bf16").recovery == 1.0


def test_catalog_command_lists_engines_and_quality():
    code, out, _ = run("catalog", "quality", "--json")
    rows = {(r["model"], r["weight_format"]): r for r in json.loads(out)["quality"]}
    assert code == 0 and rows[("llama-3.1-70b", "int4-gptq")]["recovery"] == pytest.approx(78.54 / 78.67)
    assert rows[("deepseek-v3", "fp8")]["recovery"] == 1.0 and ("llama-3.1-70b", "int4-awq") not in rows
    code, out, _ = run("catalog", "engines", "--json")
    support = {(r["engine"], r["architecture"]): r for r in json.loads(out)["engines"]}
    assert ("trtllm", "cdna3") not in support and "fp8" not in support[("trtllm", "ampere")]["weight_formats"]
    assert all(r["source"].startswith("https://") for r in support.values())
