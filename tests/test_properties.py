"""Property tests (hypothesis) over the problem schema and the CLI flags (issue 17).

Whatever value lands in whatever field or flag: the exit code is 0, 2, 3 or 4; exit 2 names
the YAML path or the flag on every line; no traceback and no internal error; the JSON has
no NaN; nothing is written on an input error. A fixed number of examples and a
derandomized profile keep the run short and the same on every machine. Bounded time is
not asserted (the suite never times tests); the limits make every case finish in seconds.
"""

import json
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hardening_helpers import cli, tiny

PROFILE = dict(derandomize=True, deadline=None, database=None, print_blob=False,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

#: Every field of the tiny problem, plus optional sections and an unknown key.
PATHS = [
    ("name",), ("workloads", 0, "name"), ("workloads", 0, "model"), ("workloads", 0, "rate_per_s"),
    ("workloads", 0, "prompt_tokens"), ("workloads", 0, "output_tokens"), ("workloads", 0, "prompt_tokens", "mean"),
    ("workloads", 0, "output_tokens", "p95"), ("workloads", 0, "slo", "ttft_p95_s"), ("workloads", 0, "slo"),
    ("workloads", 0, "prefix_cache_hit_fraction"), ("workloads", 0, "requests_per_day"), ("workloads",),
    ("search", "gpus"), ("search", "quantization"), ("search", "kv_cache_dtype"), ("search", "tp"), ("search", "pp"),
    ("search", "max_batch"), ("search", "tp", 0), ("search", "max_batch", 1), ("budget_usd_per_hour",),
    ("inventory", "h100-sxm"), ("inventory",), ("prices", "l40s"), ("price_offering",),
    ("constraints", "max_distinct_configs"), ("constraints", "redundancy"), ("optimize", "slices_per_workload"),
    ("optimize", "top_k"), ("optimize", "time_limit_s"), ("optimize", "pareto_points"), ("optimize", "num_workers"),
    ("serving", "engine"), ("serving", "step_overhead_s"), ("serving", "workspace_bytes"),
    ("serving", "memory_efficiency"), ("serving", "calibration"), ("procurement",), ("zz_unknown",),
]
#: YAML paths an error line may name (a top-level key of the problem, or a line number).
TOP_KEYS = ("name", "workloads", "search", "budget_usd_per_hour", "inventory", "prices", "price_offering",
            "constraints", "optimize", "serving", "procurement", "zz_unknown", "line ", "(top level)")

NUMBERS = st.one_of(st.integers(-10**40, 10**40), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, -1, 1, 3, 1e-300, 1e300, 2**63, 10**18, 0.5, 1e15]))
VALUES = st.one_of(
    NUMBERS, st.none(), st.booleans(), st.text(max_size=12),
    st.sampled_from(["yes", "0x28", "1:20", "nan", "-.inf", "1e999", "$(touch x)", "a\nb", "h100-sxm", "fp8"]),
    st.lists(NUMBERS, max_size=4), st.dictionaries(st.sampled_from(["mean", "p95", "histogram", "x"]), NUMBERS,
                                                   max_size=2))


def _mutate(doc, path, value):
    """``doc`` with the value at ``path`` replaced (missing mappings created; paths into a
    value that is no longer a list or mapping are skipped)."""
    node = doc
    for key in path[:-1]:
        if isinstance(node, list) and isinstance(key, int) and node:
            node = node[min(key, len(node) - 1)]
        elif isinstance(node, dict) and not isinstance(key, int):
            if not isinstance(node.get(key), (dict, list)):
                node[key] = {}
            node = node[key]
        else:
            return doc
    last = path[-1]
    if isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = value
    elif isinstance(node, dict) and not isinstance(last, int):
        node[last] = value
    return doc


def _strict_json(text: str):
    def no_constant(name):
        raise AssertionError(f"{name} in the JSON output")

    return json.loads(text, parse_constant=no_constant)


def _check_exit_2(err: str, problem: Path) -> None:
    lines = err.strip().splitlines()
    assert lines, "exit 2 without a message"
    for line in lines:
        assert line.startswith("error: "), err
        assert str(problem) in line and any(k in line for k in TOP_KEYS), line


def _check(rc: int, out: str, err: str, problem: Path, allowed=(0, 2)) -> None:
    assert rc in allowed, (rc, err)
    assert "Traceback" not in err and "internal error" not in err, err
    if rc == 2:
        assert out == ""
        _check_exit_2(err, problem)
    else:
        _strict_json(out)


@settings(max_examples=30, **PROFILE)
@given(mutations=st.lists(st.tuples(st.sampled_from(PATHS), VALUES), min_size=1, max_size=3))
def test_validate_any_field_any_value(mutations):
    doc = tiny()
    for path, value in mutations:
        doc = _mutate(doc, path, value)
    with tempfile.TemporaryDirectory() as d:
        problem = Path(d) / "p.yaml"
        problem.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
        rc, out, err = cli("validate", problem, "--json")
        _check(rc, out, err, problem)


@settings(max_examples=6, **PROFILE)
@given(mutations=st.lists(st.tuples(st.sampled_from(PATHS[3:12] + PATHS[21:30]), VALUES), min_size=1, max_size=2))
def test_solve_any_field_any_value_writes_nothing_on_error(mutations):
    doc = tiny()
    doc["optimize"] = {"pareto_points": 2}
    for path, value in mutations:
        doc = _mutate(doc, path, value)
    with tempfile.TemporaryDirectory() as d:
        problem, out_dir = Path(d) / "p.yaml", Path(d) / "out"
        problem.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        rc, out, err = cli("solve", problem, "--json", "--no-pareto", "--time-limit", "10")
        _check(rc, out, err, problem, allowed=(0, 2, 3, 4))
        assert not out_dir.exists()


FLAG_VALUES = st.sampled_from(["0", "-1", "1", "3", "8", "1.5", "1e-300", "1e300", "nan", "inf", "-inf", "abc", "",
                               "99999999999999999999", "hist=100:inf", "mean=100,p95=200", "fp8", "vllm", "ollama"])
COMMANDS = {
    "eval": (["eval", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--json"],
             ["--tp", "--pp", "--batch", "--users", "--prompt", "--output", "--context", "--price", "--rate",
              "--mem-eff", "--quant", "--engine"]),
    "knee": (["knee", "--model", "llama-3.1-8b", "--json"], ["--context", "--quant", "--kv-dtype"]),
    "sweep": (["sweep", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "1000", "--json"],
              ["--batches", "--tp", "--compute-eff", "--engine"]),
    "simulate": (["simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "2", "--prompt", "100",
                  "--output", "20", "--requests", "40", "--json"],
                 ["--seed", "--max-batch", "--chunk-tokens", "--warmup-fraction", "--tp", "--mem-eff"]),
    "train": (["train", "--params", "1e9", "--tokens", "1e12", "--gpu", "h100-sxm", "--gpus", "8", "--json"],
              ["--mfu", "--pp", "--micro-batches", "--params", "--gpus"]),
}


@settings(max_examples=30, **PROFILE)
@given(command=st.sampled_from(sorted(COMMANDS)), data=st.data())
def test_flags_any_value(command, data):
    base, flags = COMMANDS[command]
    chosen = data.draw(st.lists(st.tuples(st.sampled_from(flags), FLAG_VALUES), min_size=1, max_size=2,
                                unique_by=lambda fv: fv[0]))
    argv = list(base)
    for flag, value in chosen:
        argv += [f"{flag}={value}"]
    rc, out, err = cli(*argv)
    assert rc in (0, 2), (argv, rc, err)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    if rc == 2:
        assert out == "" and err.startswith("error: ") and "--" in err, (argv, err)
    else:
        _strict_json(out)
