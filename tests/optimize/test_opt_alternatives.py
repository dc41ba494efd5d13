"""plan_alternatives: the equal-cost face whatever k is; the minimum-load rule and when it is forced."""

import pandas as pd
import pytest
from opt_helpers import FAST, tie_instance

from planner.optimize import PlanningInstance, check_plan
from planner.optimize.alternatives import plan_alternatives


def _sets(found):
    return [tuple(sorted(f.plan.deployments["candidate_id"])) for f in found]


def _instance(with_c: bool) -> PlanningInstance:
    """A: cheap, 1 replica in inventory, 10 req/s; B: 1000 req/s for 5 $/h; C: 100 req/s for 8 $/h.

    Rate 10.2: the optimum is one B at 1.02 % load. Any other plan holding B leaves it
    below 5 % (it would need >= 50 req/s); with C, {C} (10.2 %) and {A, C} qualify.
    """
    rows = [("A", "g1", 1.0, 10.0), ("B", "g2", 5.0, 1000.0)] + ([("C", "g3", 8.0, 100.0)] if with_c else [])
    ids = pd.Index([r[0] for r in rows], name="candidate_id")
    cands = pd.DataFrame({"gpu": [r[1] for r in rows], "gpus_per_replica": 1,
                          "usd_per_replica_hour": [r[2] for r in rows]}, index=ids)
    cap = pd.DataFrame({"w": [r[3] for r in rows]}, index=ids)
    return PlanningInstance(cands, cap, pd.Series({"w": 10.2}), inventory_gpus={"g1": 1},
                            slices_per_workload=1020)


def test_alternatives_meet_the_minimum_load_when_they_can():
    found = plan_alternatives(_instance(with_c=True), 3, FAST)
    assert _sets(found) == [("B",), ("C",), ("A", "C")]      # no need for the forced {A, B}
    assert found[0].min_load_fraction == pytest.approx(0.0102)   # the optimum is exempt
    assert [f.admissible for f in found] == [False, True, True]
    assert not any(f.forced for f in found)
    assert all(f.min_load_fraction >= 0.05 - 1e-9 for f in found[1:])
    # without the rule, the next plan is the optimum plus a near-idle B
    free = plan_alternatives(_instance(with_c=True), 2, FAST, min_load_fraction=0)
    assert _sets(free)[1] == ("A", "B")
    # asked for more plans than meet the rule, the forced {A, B} comes last
    more = plan_alternatives(_instance(with_c=True), 4, FAST)
    assert _sets(more) == [("B",), ("C",), ("A", "C"), ("A", "B")] and more[-1].forced


def test_inventory_forces_a_light_deployment():
    found = plan_alternatives(_instance(with_c=False), 2, FAST)
    assert _sets(found) == [("B",), ("A", "B")]
    assert found[1].forced and found[1].admissible and found[1].min_load_fraction < 0.05
    inst = _instance(with_c=False)
    assert all(check_plan(inst, f.plan) == [] for f in found)


def test_the_equal_cost_face_is_enumerated_whatever_k():
    one = plan_alternatives(tie_instance(), 1, FAST)
    five = plan_alternatives(tie_instance(), 5, FAST)
    face_one = [s for s, f in zip(_sets(one), one) if f.optimal_cost]
    face_five = [s for s, f in zip(_sets(five), five) if f.optimal_cost]
    assert len(face_one) > 1 and face_one == face_five[:len(face_one)]
    limited = plan_alternatives(tie_instance(), 1, FAST, face_limit=2)
    assert sum(f.optimal_cost for f in limited) == 2
    with pytest.raises(ValueError):
        plan_alternatives(tie_instance(), 0, FAST)


def test_spare_replicas_of_redundancy_do_not_count_against_the_rule():
    """N+1: one active replica at 6 % plus its spare shows load_fraction 3 %, and still qualifies."""
    ids = pd.Index(["A", "B"], name="candidate_id")
    cands = pd.DataFrame({"gpu": ["g1", "g2"], "gpus_per_replica": 1, "usd_per_replica_hour": [1.0, 1.5]},
                         index=ids)
    inst = PlanningInstance(cands, pd.DataFrame({"w": [100.0, 100.0]}, index=ids), pd.Series({"w": 6.0}),
                            redundancy_workloads=("w",), slices_per_workload=60)
    found = plan_alternatives(inst, 2, FAST)
    assert _sets(found) == [("A",), ("B",)]
    alt = found[1]
    assert alt.plan.deployments["replicas"].tolist() == [2]
    assert alt.plan.deployments["load_fraction"].tolist() == pytest.approx([0.03])
    assert alt.min_load_fraction == pytest.approx(0.06) and alt.admissible and not alt.forced
