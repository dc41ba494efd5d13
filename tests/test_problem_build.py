"""``resolve_problem`` builds Problem and ResolvedWorkload from validated values without a
validation (``model_construct``, process start, issue 19): validating the same fields must
give equal values of the same types, so that nothing downstream sees a difference.

Covers every shipped problem and a problem with the other inputs a workload or the prices
can take (tokens_per_day, a trace CSV, an imported Hugging Face config, integer prices and
rates in the YAML), and the sections a problem file leaves out, built without a validation
too (``ProblemSpec``'s default factories).
"""

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.problem import Problem, ProblemSpec, ResolvedWorkload, ServingOverrides, Slo, load_problem

ROOT = Path(__file__).resolve().parent.parent
HF_8B = ROOT / "tests" / "data" / "hf-configs" / "meta-llama--Meta-Llama-3.1-8B_config.json"


def _same(a, b, where):
    assert type(a) is type(b), where
    if isinstance(a, np.ndarray):
        assert np.array_equal(a, b), where
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif hasattr(a, "__dataclass_fields__"):
        for name in a.__dataclass_fields__:
            _same(getattr(a, name), getattr(b, name), f"{where}.{name}")
    else:
        assert a == b or (a != a and b != b), where


def _check(problem):
    for i, w in enumerate(problem.workloads):
        validated = ResolvedWorkload(**{f: getattr(w, f) for f in ResolvedWorkload.model_fields})
        for f in ResolvedWorkload.model_fields:
            _same(getattr(w, f), getattr(validated, f), f"workloads[{i}].{f}")
    validated = Problem(**{f: getattr(problem, f) for f in Problem.model_fields})
    for f in Problem.model_fields:
        _same(getattr(problem, f), getattr(validated, f), f)


@pytest.mark.parametrize("path", sorted((ROOT / "problems").glob("*.yaml")), ids=lambda p: p.stem)
def test_a_shipped_problem_is_what_a_validation_would_build(path):
    _check(load_problem(path))


def test_every_kind_of_workload_and_price_is_what_a_validation_would_build(tmp_path):
    shutil.copy(HF_8B, tmp_path / "mine.json")
    (tmp_path / "trace.csv").write_text("prompt_tokens,output_tokens\n100,20\n300,40\n200,30\n")
    doc = yaml.safe_load((ROOT / "problems" / "chat-70b.yaml").read_text())
    chat = doc["workloads"][0]
    doc["workloads"] = [
        {**chat, "name": "a", "rate_per_s": 3},                                       # an int rate
        {**chat, "name": "b", "rate_per_s": None, "tokens_per_day": 10_000_000},
        {**{k: v for k, v in chat.items() if not k.endswith("_tokens")}, "name": "c", "trace_csv": "trace.csv"},
        {**chat, "name": "d", "model": "mine.json", "rate_per_s": 2.5},
    ]
    doc["prices"] = {"h100-sxm": 3}                                                  # an int price
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    problem = load_problem(path)
    assert [type(w.rate_per_s) for w in problem.workloads] == [float] * 4
    assert problem.imported_models and problem.prices_usd_per_gpu_hour["h100-sxm"] == 3.0
    _check(problem)


@pytest.mark.parametrize("section", ["search", "constraints", "optimize", "serving", "quality"])
def test_a_missing_section_is_what_a_validated_default_would_be(section):
    field = ProblemSpec.model_fields[section]
    built, validated = field.default_factory(), field.annotation()
    assert type(built) is type(validated) and built == validated
    for name in type(built).model_fields:
        _same(getattr(built, name), getattr(validated, name), f"{section}.{name}")


def test_an_slo_is_flat_so_its_json_is_its_fields():
    """planner/outputs/result_json.py writes ``dict(slo)`` (no serializer to build)."""
    slo = Slo(ttft_p95_s=1, tpot_p95_s=0.05)
    assert dict(slo) == slo.model_dump() and all(isinstance(v, float) for v in dict(slo).values())


@pytest.mark.parametrize("given", [{}, {"engine": "sglang", "memory_efficiency": 0.7, "workspace_bytes": 0}])
def test_the_serving_overrides_are_the_sections_dump_without_its_serializer(given):
    """planner/search.py serving_overrides iterates the flat section instead of model_dump()."""
    from planner.search import serving_overrides

    spec = ProblemSpec.model_construct(serving=ServingOverrides(**given))
    problem = Problem.model_construct(spec=spec)
    expected = spec.serving.model_dump(exclude_none=True, exclude={"calibration", "engine"})
    assert serving_overrides(problem) == expected and list(serving_overrides(problem)) == list(expected)
