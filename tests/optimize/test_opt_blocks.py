"""Independent blocks: solved one by one, they give the whole model's canonical plan, and the
ranking by blocks finds the same plans in the same order as no-good cuts on the whole model."""

import numpy as np
import pandas as pd
import pytest
from opt_helpers import FAST

from planner.optimize import PlanningInstance, build_model
from planner.optimize import alternatives
from planner.optimize.alternatives import plan_alternatives
from planner.optimize.blocks import block_positions
from planner.optimize.solve import run_solver, solve_blocks


def multi_model_instance(seed: int, **options) -> PlanningInstance:
    """Two or three models, each with its own workloads and 2-4 candidates; prices from a
    short list (so equal-cost optima and equal summed tie-breaks occur)."""
    rng = np.random.default_rng(seed)
    rows, caps, rates = [], {}, {}
    for b in range(int(rng.integers(2, 4))):
        workloads = [f"m{b}w{k}" for k in range(int(rng.integers(1, 3)))]
        for w in workloads:
            rates[w] = float(rng.integers(2, 9))
        for i in range(int(rng.integers(2, 5))):
            cid = f"c{rng.integers(0, 10**6):06d}"
            rows.append((cid, str(rng.choice(["g1", "g2", "g3"])), int(rng.integers(1, 3)),
                         float(rng.choice([1.0, 2.0, 3.0]))))
            caps[cid] = {w: float(rng.integers(1, 5)) for w in workloads}
    ids = pd.Index([r[0] for r in rows], name="candidate_id")
    cands = pd.DataFrame({"gpu": [r[1] for r in rows], "gpus_per_replica": [r[2] for r in rows],
                          "usd_per_replica_hour": [r[3] for r in rows]}, index=ids)
    capacity = pd.DataFrame(caps).T.reindex(index=ids, columns=sorted(rates)).fillna(0.0)
    return PlanningInstance(cands, capacity, pd.Series(rates), **options)


def _plan_tables(found):
    return [(f.plan.deployments.to_dict("list"), f.plan.routing.to_dict("list"), f.optimal_cost, f.admissible,
             f.forced) for f in found]


def test_blocks_follow_the_models_and_the_coupling_rows():
    inst = multi_model_instance(3)
    models = {c[:2] for c in inst.capacity_per_s.columns}
    built = build_model(inst)
    blocks = block_positions(built)
    assert blocks is not None and len(blocks) == len(models)
    assert sorted(np.concatenate(blocks).tolist()) == list(range(len(built.replicas)))
    for limit in ({"budget_usd_per_hour": 1000.0}, {"max_distinct_configs": 5}):
        assert block_positions(build_model(multi_model_instance(3, **limit))) is None
    # an inventory limit on every GPU type joins every block that uses it
    gpus = sorted(set(inst.candidates["gpu"]))
    limited = multi_model_instance(3, inventory_gpus={g: 100 for g in gpus})
    assert block_positions(build_model(limited)) is None


@pytest.mark.parametrize("seed", range(6))
def test_blocks_give_the_whole_models_canonical_plan(seed):
    built = build_model(multi_model_instance(seed, redundancy_workloads=("m0w0",) if seed % 2 else ()))
    whole, parts = run_solver(built, FAST), solve_blocks(built, FAST)
    assert str(whole.status) == str(parts.status) == "optimal"
    assert whole.objective_usd_per_hour == parts.objective_usd_per_hour
    assert whole.best_bound_usd_per_hour == parts.best_bound_usd_per_hour and parts.gap == 0
    assert whole.replicas.equals(parts.replicas) and whole.traffic_units.equals(parts.traffic_units)
    assert parts.solver_params["blocks"] == len(block_positions(built))
    assert parts.solver_params["proven_unique"]


@pytest.mark.parametrize("seed, fraction", [(s, 0.05) for s in range(5)] + [(0, 0.97), (4, 0.97)])
def test_ranking_by_blocks_finds_the_whole_models_plans_in_order(seed, fraction, monkeypatch):
    """Default minimum load (equal-cost faces up to 6 sets, ties across blocks) and a
    minimum load few plans meet (the search goes on forced)."""
    inst = multi_model_instance(seed)
    assert block_positions(build_model(inst)) is not None
    by_blocks = plan_alternatives(inst, 4, FAST, face_limit=6, min_load_fraction=fraction)
    monkeypatch.setattr(alternatives, "split_model", lambda built: None)
    whole = plan_alternatives(inst, 4, FAST, face_limit=6, min_load_fraction=fraction)
    assert _plan_tables(by_blocks) == _plan_tables(whole)
    assert len(by_blocks) >= 2
    if fraction > 0.5:
        assert any(f.forced for f in by_blocks)


def _record_proofs(cutseq, monkeypatch) -> list:
    """The ``one_support`` flag of every :func:`finish_solve` call of ``cutseq``, as it runs."""
    flags = []
    finish = cutseq.finish_solve

    def recording(built, phase, options, *, one_support=False):
        flags.append(one_support)
        return finish(built, phase, options, one_support=one_support)

    monkeypatch.setattr(cutseq, "finish_solve", recording)
    return flags


@pytest.mark.parametrize("seed, split", [(0, True), (2, True), (5, False), (1, False)])
def test_looked_ahead_proofs_give_the_plans_of_separate_proofs(seed, split, monkeypatch):
    """CutSequence takes each uniqueness proof's other-sets half from the next cost solve (on
    the whole model; the block lists look nothing ahead); the plans (by blocks and on the whole
    model) are those of full proofs per solve."""
    from planner.optimize import cutseq

    inst = multi_model_instance(seed, redundancy_workloads=("m0w0",) if seed % 2 else ())
    if not split:
        monkeypatch.setattr(alternatives, "split_model", lambda built: None)
    flags = _record_proofs(cutseq, monkeypatch)
    ahead = plan_alternatives(inst, 5, FAST, face_limit=6)
    assert any(flags) != split              # some proofs on one deployed set; blocks look nothing ahead
    solve = cutseq.CutSequence.solve
    monkeypatch.setattr(cutseq.CutSequence, "solve",
                        lambda self, options, look_ahead=True, ahead_options=None, last=None, beside=None:
                        solve(self, options, False))
    flags.clear()
    separate = plan_alternatives(inst, 5, FAST, face_limit=6)
    assert not any(flags)
    assert _plan_tables(ahead) == _plan_tables(separate) and len(ahead) >= 3
    from dataclasses import replace          # and without the floor rows of the later cost solves

    monkeypatch.setattr(cutseq.CutSequence, "_cost_phase", lambda self, model, options: cutseq.cost_phase(
        replace(self.built, model=model), options, greedy=self.greedy()))
    assert _plan_tables(plan_alternatives(inst, 5, FAST, face_limit=6)) == _plan_tables(ahead)


@pytest.mark.parametrize("seed, fraction", [(1, 0.05), (5, 0.05), (4, 0.97)])
def test_no_look_ahead_after_the_last_plan_and_the_same_plans(seed, fraction, monkeypatch):
    """The solve predicted to give the last plan looks nothing ahead (its proof is the full
    one); the plans are those of a search that always looks ahead."""
    from planner.optimize import cutseq

    inst = multi_model_instance(seed, redundancy_workloads=("m0w0",) if seed % 2 else ())
    monkeypatch.setattr(alternatives, "split_model", lambda built: None)
    flags = _record_proofs(cutseq, monkeypatch)
    found = plan_alternatives(inst, 3, FAST, face_limit=2, min_load_fraction=fraction)
    assert len(found) >= 2 and flags[-1] is False and flags[0] is False      # the first looks nothing ahead
    predicted = list(flags)
    solve = cutseq.CutSequence.solve
    monkeypatch.setattr(cutseq.CutSequence, "solve", lambda self, options, look_ahead=True, ahead_options=None,
                        last=None, beside=None: solve(self, options, look_ahead, ahead_options, beside=beside))
    flags.clear()
    always = plan_alternatives(inst, 3, FAST, face_limit=2, min_load_fraction=fraction)
    assert _plan_tables(always) == _plan_tables(found)
    assert flags[:-1] == predicted[:-1] and flags[-1] is True      # the look-ahead the prediction spared


@pytest.mark.parametrize("seed, fraction", [(1, 0.05), (4, 0.97)])
def test_solves_beside_the_proofs_give_the_plans_of_one_cpu(seed, fraction, monkeypatch):
    """With two CPUs the minimum-load model's first cost solve runs beside the first plan's
    proof, and each look-ahead beside its plan's; one CPU runs the same solves in turn. A
    speculation on another deployed set is dropped and solved again: the same plans."""
    import threading

    from planner.optimize import cutseq, nextplan

    inst = multi_model_instance(seed, redundancy_workloads=("m0w0",) if seed % 2 else ())
    monkeypatch.setattr(alternatives, "split_model", lambda built: None)
    threads = []
    real = cutseq.cost_phase

    def recording(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(cutseq, "cost_phase", recording)

    def run(cpus):
        monkeypatch.setattr(cutseq, "usable_cpus", lambda: cpus)
        threads.clear()
        return _plan_tables(plan_alternatives(inst, 3, FAST, face_limit=2, min_load_fraction=fraction))

    two = run(2)
    beside = list(threads)
    assert "beside" in beside and len(two) >= 2
    assert run(1) == two and len(threads) == len(beside) and "beside" not in threads
    ahead = nextplan.WholeModelSearch._loaded_ahead
    monkeypatch.setattr(nextplan.WholeModelSearch, "_loaded_ahead", lambda self, support: ahead(self, frozenset()))
    assert run(2) == two and len(threads) == len(beside) + 1
