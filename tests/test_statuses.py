"""Honest statuses: unknown is not infeasible; infeasibility names its real cause; every exit 3
carries a verified relaxation or the reason none exists (issue 17)."""

import json

import pytest

from hardening_helpers import cli, tiny, write
from planner.cli import EXIT_INFEASIBLE, EXIT_UNKNOWN


def test_time_limit_without_decision_is_unknown_exit_4(tmp_path, monkeypatch):
    """CP-SAT stopped by its time limit with no plan and no proof: status unknown, exit 4."""
    from planner.optimize import cutseq as kbest     # the ranking's cost solves
    from planner.optimize.instance import SolveStatus
    from planner.optimize.solve import CostPhase

    def undecided(built, options, hint=None, greedy=None):
        return CostPhase(None, options, SolveStatus.UNKNOWN, {}, None, options.time_limit_s)

    monkeypatch.setattr(kbest, "cost_phase", undecided)
    rc, out, err = cli("solve", write(tmp_path, tiny()), "--json", "--time-limit", "0.5")
    assert rc == EXIT_UNKNOWN == 4, err
    doc = json.loads(out)
    assert doc["status"] == "unknown" and doc["solver"]["status"] == "unknown" and doc["plans"] == []
    [finding] = doc["diagnosis"]
    assert finding["constraint"] == "solver" and "not proven" in finding["message"]
    assert "--time-limit" in finding["message"]


def test_real_tiny_time_limit_is_never_called_infeasible(tmp_path):
    rc, out, err = cli("solve", write(tmp_path, tiny()), "--json", "--no-pareto", "--time-limit", "1e-9")
    doc = json.loads(out)
    assert (rc, doc["status"]) in ((0, "optimal"), (0, "feasible"), (EXIT_UNKNOWN, "unknown")), (rc, doc["status"])


def _search(**changes):
    return {**tiny()["search"], **changes}


STRUCTURAL = [
    ("tp", {"search": _search(tp=[3])}, "search.tp", "attention heads"),
    ("pp", {"search": _search(pp=[1000])}, "search.pp", "layers"),
    ("compute", {"search": _search(gpus=["rtx-6000-ada"])}, "search.gpus", "no compute figure"),
    ("no-fit", {"search": _search(quantization=["bf16"], tp=[1], gpus=["l40s"])}, None, "weights do not fit"),
]


@pytest.mark.parametrize("label, changes, key, cause", STRUCTURAL, ids=[s[0] for s in STRUCTURAL])
def test_structural_infeasibility_names_its_cause_and_a_verified_fix(tmp_path, label, changes, key, cause):
    doc = tiny(**changes)
    if label == "no-fit":
        doc["workloads"][0]["model"] = "llama-3.1-70b"
    rc, out, err = cli("solve", write(tmp_path, doc), "--json", "--no-pareto")
    assert rc == EXIT_INFEASIBLE, err
    findings = json.loads(out)["diagnosis"]
    verified = [f for f in findings if f["verified"]]
    assert verified, findings
    assert cause in " ".join(f["message"] for f in findings)
    if key is not None:
        assert key in verified[0]["relaxation"]
    if label != "tp":
        return
    # The proposal really works: re-solving the file with it applied is feasible.
    fixed = json.loads(json.dumps(doc))
    for dotted, value in verified[0]["relaxation"].items():
        section, field = dotted.split(".")
        if value is None:
            fixed[section].pop(field)
        else:
            fixed[section][field] = value
    rc, _, err = cli("solve", write(tmp_path, fixed, "fixed.yaml"), "--json", "--no-pareto")
    assert rc == 0, err


def test_weights_advice_not_given_when_weights_fit(tmp_path):
    rc, out, _ = cli("solve", write(tmp_path, tiny(search=_search(tp=[3]))), "--json", "--no-pareto")
    assert rc == EXIT_INFEASIBLE
    assert "weights do not fit" not in out


@pytest.mark.parametrize("changes", [
    {"budget_usd_per_hour": 0.5},
    {"inventory": {"h100-sxm": 1, "l40s": 0}, "workloads": [{**tiny()["workloads"][0], "rate_per_s": 100}]},
    {"workloads": [{**tiny()["workloads"][0], "slo": {"ttft_p95_s": 1e-4, "tpot_p95_s": 1e-6}}]},
], ids=["budget", "inventory", "slo"])
def test_every_exit_3_has_a_verified_relaxation_or_the_reason(tmp_path, changes):
    rc, out, err = cli("solve", write(tmp_path, tiny(**changes)), "--json", "--no-pareto")
    assert rc == EXIT_INFEASIBLE, err
    findings = json.loads(out)["diagnosis"]
    assert any(f["verified"] for f in findings) or (
        findings[-1]["constraint"] == "relaxation" and "no verified relaxation" in findings[-1]["message"]), findings


def test_no_relaxation_says_why(tmp_path):
    """A measured capacity table that serves a workload nowhere: nothing to relax, and it says so."""
    doc = {"name": "measured", "workloads": [{"name": "a", "rate_per_s": 1}, {"name": "b", "rate_per_s": 1}],
           "capacity_table": [{"name": "row", "gpu": "a10g", "usd_per_hour": 1.0,
                               "capacity_per_s": {"a": 2, "b": 0}}]}
    rc, out, _ = cli("solve", write(tmp_path, doc), "--json", "--no-pareto")
    assert rc == EXIT_INFEASIBLE
    findings = json.loads(out)["diagnosis"]
    assert not any(f["verified"] for f in findings)
    assert findings[-1]["constraint"] == "relaxation"
    assert "no verified relaxation" in findings[-1]["message"] and "capacity_table" in findings[-1]["message"]
