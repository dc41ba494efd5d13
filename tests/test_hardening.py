"""Hostile and malformed input: exit 2 naming the field, never exit 1, a traceback or a hang (issue 17)."""

import json

import pytest

from hardening_helpers import assert_input_error, cli, tiny, write
from planner import limits

BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8))


def _indent(text: str) -> str:
    return "  " + text.replace("\n", "\n  ")


def _tiny_yaml(tmp_path, extra: str = "") -> str:
    import yaml

    return yaml.safe_dump(tiny(), sort_keys=False) + extra


@pytest.mark.parametrize("where", ["top", "unknown", "procurement"])
def test_alias_bomb_rejected_fast(tmp_path, where):
    text = {"top": BOMB, "unknown": _tiny_yaml(tmp_path, "zz:\n" + _indent(BOMB)),
            "procurement": _tiny_yaml(tmp_path, "procurement:\n" + _indent(BOMB))}[where]
    for command in ("validate", "solve"):
        rc, out, err = cli(command, write(tmp_path, text), "--json")
        assert_input_error(rc, err, f"more than {limits.MAX_YAML_NODES:,} values")
        assert out == ""


@pytest.mark.parametrize("nested", ["[" * 1000 + "]" * 1000, "{a: " * 1000 + "1" + "}" * 1000, "&r [*r]",
                                    "&r {a: *r}"])
def test_deep_or_recursive_yaml_rejected(tmp_path, nested):
    rc, _, err = cli("validate", write(tmp_path, _tiny_yaml(tmp_path, f"procurement: {nested}\n")))
    assert_input_error(rc, err, "p.yaml")


def test_nesting_just_inside_the_limit_is_not_a_shape_error(tmp_path):
    from planner.yamlio import _shape_problem

    deep = current = []
    for _ in range(limits.MAX_YAML_DEPTH - 1):
        current.append([])
        current = current[0]
    assert _shape_problem(deep) is None
    current.append([])
    assert "deeper than" in _shape_problem(deep)
    shared = ["x"] * 100
    assert _shape_problem([shared] * 100) is None            # 10,101 values expanded
    assert "more than" in _shape_problem([[shared] * 100] * 20)  # 202,021 values expanded


@pytest.mark.parametrize("literal", ["true", "yes", "on", "0x28", "0o50", "1:20", "'40'", "010_0", "[40]"])
def test_rate_is_a_number_not_a_coercion(tmp_path, literal):
    text = _tiny_yaml(tmp_path).replace("rate_per_s: 4", f"rate_per_s: {literal}")
    rc, _, err = cli("validate", write(tmp_path, text))
    assert_input_error(rc, err, "workloads[0].rate_per_s")


def test_decimal_literals_still_parse(tmp_path):
    text = _tiny_yaml(tmp_path).replace("rate_per_s: 4", "rate_per_s: 4e0").replace("tp:\n  - 1", "tp:\n  - 01")
    rc, out, err = cli("validate", write(tmp_path, text), "--json")
    assert rc == 0, err
    assert json.loads(out)["valid"]


@pytest.mark.parametrize("change, needle", [
    ("rate_per_s: 4", "workloads[0].rate_per_s"),  # replaced below by a 5,000-digit integer
])
def test_huge_integer_literal(tmp_path, change, needle):
    text = _tiny_yaml(tmp_path).replace(change, "rate_per_s: " + "9" * 5000)
    rc, _, err = cli("validate", write(tmp_path, text))
    assert_input_error(rc, err, "line ", "5000 digits")


@pytest.mark.parametrize("extra, path", [
    ({"constraints": {"max_distinct_configs": 10**20}}, "constraints.max_distinct_configs"),
    ({"optimize": {"slices_per_workload": 10**9}}, "optimize.slices_per_workload"),
    ({"inventory": {"h100-sxm": 10**17}}, "inventory.h100-sxm"),
    ({"serving": {"step_overhead_s": 1e300}}, "serving.step_overhead_s"),
    ({"serving": {"engine": "ollama"}}, "serving.engine"),
    ({"budget_usd_per_hour": 1e300}, "budget_usd_per_hour"),
    ({"budget_usd_per_hour": 1e12}, "budget_usd_per_hour"),
    ({"prices": {"h100-sxm": 1e9}}, "prices.h100-sxm"),
    ({"procurement": {"sensitivity": {"price": 1e300}}}, "procurement.sensitivity.price"),
    ({"search": {**tiny()["search"], "max_batch": list(range(1, 2000))}}, "search.max_batch"),
    ({"search": {**tiny()["search"], "tp": [1, 10**6]}}, "search.tp"),
    ({"name": "a;rm -rf ~"}, "name"),
    ({"optimize": {"equal_cost_plans": 1000}}, "optimize.equal_cost_plans"),
    ({"optimize": {"pareto_points": 100}}, "optimize.pareto_points"),
    ({"serving": {"memory_efficiency": 1e-300}}, "serving.memory_efficiency"),
])
def test_limits_checked_by_validate_and_solve_alike(tmp_path, extra, path):
    path_file = write(tmp_path, tiny(**extra))
    for command in ("validate", "solve"):
        rc, out, err = cli(command, path_file, "--json", *(["--out", tmp_path / "out"] if command == "solve" else []))
        assert_input_error(rc, err, f"{path}:")
        assert out == "" and not (tmp_path / "out").exists()


@pytest.mark.parametrize("field, value", [("rate_per_s", 1e15), ("rate_per_s", 1e-9), ("requests_per_day", 1e13)])
def test_rates_beyond_the_optimizer_range_named_at_validation(tmp_path, field, value):
    doc = tiny()
    del doc["workloads"][0]["rate_per_s"]
    doc["workloads"][0][field] = value
    rc, _, err = cli("validate", write(tmp_path, doc))
    assert_input_error(rc, err, f"workloads[0].{field}")


@pytest.mark.parametrize("name", ["chat\ntouch /tmp/pwned", "$(id)", "a`b`", "x; y", "", "-flag", "é" * 3, "a" * 129])
def test_workload_names_have_a_character_set(tmp_path, name):
    doc = tiny()
    doc["workloads"][0]["name"] = name
    rc, _, err = cli("validate", write(tmp_path, doc))
    assert_input_error(rc, err, "workloads[0].name")


HF = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100,
      "intermediate_size": 128, "max_position_embeddings": 8192}


@pytest.mark.parametrize("content, needle", [
    ([1, 2], "JSON object"),
    ({**HF, "text_config": [1]}, "text_config"),
    ({**HF, "num_attention_heads": 0}, "num_attention_heads"),
    ({**HF, "num_attention_heads": "4"}, "num_attention_heads"),
    ({**HF, "num_hidden_layers": None}, "num_hidden_layers"),
    ({**HF, "hidden_size": 2**40}, "hidden_size"),
    ({**{k: v for k, v in HF.items() if k != "intermediate_size"}, "num_local_experts": 8,
      "num_experts_per_tok": 2}, "intermediate_size"),
    ({**HF, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "v_head_dim": 8}, "qk_rope_head_dim"),
    ({**HF, "layer_types": 5, "sliding_window": 4}, "malformed config"),
    ('{"num_hidden_layers": ' + "9" * 5000 + "}", "not a readable JSON"),
    ('{"num_hidden_layers": NaN, "hidden_size": 64, "num_attention_heads": 4}', "num_hidden_layers"),
])
def test_malformed_hf_config_exit_2(tmp_path, content, needle):
    path = tmp_path / "m_config.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    rc, _, err = cli("eval", "--model", path, "--gpu", "h100-sxm", "--json")
    assert_input_error(rc, err, "m_config.json", needle)
    doc = tiny()
    doc["workloads"][0]["model"] = path.name
    rc, _, err = cli("validate", write(tmp_path, doc))
    assert_input_error(rc, err, "workloads[0].model", needle)


@pytest.mark.parametrize("data", ["prompt_tokens,output_tokens\n10,20\ncaf\xe9,1\n".encode("latin-1"),
                                  b"\x00\xff\xfe\x89PNG\r\n\x1a\n" * 50,
                                  ("prompt_tokens,output_tokens\n" + "9" * 5000 + ",1\n").encode()])
def test_non_utf8_or_binary_trace_exit_2(tmp_path, data):
    (tmp_path / "trace.csv").write_bytes(data)
    doc = tiny()
    w = doc["workloads"][0]
    del w["prompt_tokens"], w["output_tokens"]
    w["trace_csv"] = "trace.csv"
    rc, _, err = cli("validate", write(tmp_path, doc))
    assert_input_error(rc, err, "workloads[0].trace_csv")


E = ["eval", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--json"]
SIM = ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "1", "--output", "10", "--json"]


@pytest.mark.parametrize("argv, flag", [
    (E + ["--tp", "3"], "--tp"), (E + ["--tp", "1000000"], "--tp"), (E + ["--pp", "1000"], "--pp"),
    (E + ["--tp", "16"], "--tp"),                      # beyond the H100's 8-GPU NVLink domain
    (E + ["--context", "nan"], "--context"), (E + ["--rate", "inf"], "--rate"), (E + ["--price", "inf"], "--price"),
    (E + ["--rate", "1e300"], "--rate"), (E + ["--engine", "ollama"], "--engine"),
    (["knee", "--model", "llama-3.1-8b", "--context", "1e-300"], "--context"),
    (["knee", "--model", "llama-3.1-8b", "--context", "nan"], "--context"),
    (["sweep", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "inf"], "--context"),
    (SIM + ["--prompt", "100", "--seed", "-1"], "--seed"),
    (SIM + ["--prompt", "hist=100:inf"], "--prompt"), (SIM + ["--prompt", "hist=100:nan"], "--prompt"),
    (SIM + ["--prompt", "mean=1e300,p95=2e300"], "--prompt"),
    (SIM + ["--prompt", "100", "--requests", "100000000"], "--requests"),
    (SIM + ["--prompt", "100", "--tp", "3"], "--tp"),
    (["train", "--params", "1e9", "--tokens", "1e12", "--gpu", "rtx-6000-ada", "--gpus", "8"], "--gpu"),
    (["solve", "problems/chat-70b.yaml", "--time-limit", "nan"], "--time-limit"),
    (["solve", "problems/chat-70b.yaml", "--time-limit", "-1"], "--time-limit"),
])
def test_flags_out_of_range_exit_2(argv, flag):
    rc, out, err = cli(*argv)
    assert_input_error(rc, err, flag)
    assert out == ""


def test_out_under_a_file_or_unwritable(tmp_path):
    problem = write(tmp_path, tiny())
    (tmp_path / "afile").write_text("x")
    rc, _, err = cli("solve", problem, "--no-pareto", "--out", tmp_path / "afile" / "out")
    assert_input_error(rc, err, "--out", "not a directory")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    import os

    if os.access(locked, os.W_OK):  # running as root: permissions are not enforced
        return
    rc, _, err = cli("solve", problem, "--no-pareto", "--out", locked / "out")
    assert_input_error(rc, err, "--out", "permission denied")


def _no_plots(monkeypatch):
    """Skip rendering the PNGs (seconds of matplotlib); the files written are otherwise the same."""
    from planner.outputs import plots

    monkeypatch.setattr(plots, "render_plots", lambda result, doc: {f"{n}.png": b"" for n in plots.PLOT_NAMES})


def test_out_keeps_a_users_file_in_a_planner_directory(tmp_path, monkeypatch):
    _no_plots(monkeypatch)
    problem, out = write(tmp_path, tiny()), tmp_path / "out"
    rc, _, err = cli("solve", problem, "--no-pareto", "--out", out)
    assert rc == 0, err
    (out / "notes.txt").write_text("mine")
    (out / "launch" / "extra.sh").write_text("mine too")
    rc, _, err = cli("solve", problem, "--no-pareto", "--out", out)
    assert_input_error(rc, err, "--out", "notes.txt", "launch/extra.sh")
    assert (out / "notes.txt").read_text() == "mine"


def test_interrupted_write_leaves_no_temporary(tmp_path, monkeypatch):
    from planner.outputs import writer

    real = writer._write_file
    calls = []

    def interrupted(root, rel, data):
        calls.append(rel)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(root, rel, data)

    monkeypatch.setattr(writer, "_write_file", interrupted)
    _no_plots(monkeypatch)
    rc, _, _ = cli("solve", write(tmp_path, tiny()), "--no-pareto", "--out", tmp_path / "out")
    assert rc == 130 and len(calls) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]


def test_pareto_timing_zero_without_fronts(tmp_path):
    rc, out, err = cli("solve", write(tmp_path, tiny()), "--no-pareto", "--json")
    assert rc == 0, err
    timings = json.loads(out)["timings_s"]
    assert timings["pareto"] == 0.0 and timings["total"] >= timings["search"] + timings["solve"]
