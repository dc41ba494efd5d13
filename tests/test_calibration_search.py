"""The calibration fit's compass search (:func:`planner.calibration_fit.pattern_search`): it
predicts only the rows of the groups that move and tracks additive parameters, and must
give the result of the plain search that predicts every row in every trial; and the
leave-one-group-out cross-validation (one group per fold, per-group in-fold errors)."""

import numpy as np
import pandas as pd
import pytest

from conftest import DATA
from planner import accuracy as A
from planner import calibration_cv as CV
from planner import calibration_fit as F
from planner.calibration import ParamSpec

SPECS = [ParamSpec(0.2, 0.92, log=True, step=0.2), ParamSpec(0.0, 1.0, scale=1e-2, step=2.0),
         ParamSpec(0.5, 2.0, log=True, step=0.2)]


def _synthetic(n_groups=7, per_group=30, seed=3):
    """Rows of ``n_groups`` groups; prediction = a / eta^0.8 * f^g + 1000 * overhead on the
    'online' rows only (the overhead is additive, zero slope elsewhere)."""
    rng = np.random.default_rng(seed)
    codes = np.repeat(np.arange(n_groups), per_group)
    a = rng.uniform(1.0, 50.0, codes.size)
    online = rng.random(codes.size) < 0.5
    g = rng.uniform(-1.0, 1.0, codes.size)
    truth = np.column_stack([rng.uniform(0.3, 0.95, n_groups), rng.uniform(0.0, 0.5, n_groups),
                             rng.uniform(0.45, 2.2, n_groups)])   # some beyond the bounds

    def model(x, index):
        return a[index] / x[:, 0] ** 0.8 * x[:, 2] ** g[index] + 1000.0 * x[:, 1] * online[index]

    value = model(truth[codes], np.arange(codes.size)) * rng.lognormal(0.0, 0.05, codes.size)

    def predict(u, index):
        x = np.column_stack([s.from_u(u[:, i]) for i, s in enumerate(SPECS)])
        return model(x, index)
    return predict, value, codes, n_groups


def _plain_search(predict, value, weights, codes, n_groups, prior_u, specs, options):
    """The compass search as it was before: every row predicted in every trial."""
    u = prior_u.copy()
    steps = np.tile(np.array([s.step for s in specs]), (n_groups, 1))
    n_rows = np.maximum(np.bincount(codes, minlength=n_groups), 1)
    wsum = np.maximum(np.bincount(codes, weights=weights, minlength=n_groups), 1e-300)
    scale = 2.0 * np.array([s.step for s in specs])
    lo, hi = (np.array([s.to_u(getattr(s, b)) for s in specs]) for b in ("lower", "upper"))
    every = np.arange(len(codes))

    def loss(uu):
        err = F._log_errors(predict(uu[codes], every), value, options.clip_log_error)
        return (np.bincount(codes, weights=weights * err, minlength=n_groups) / wsum
                + options.prior_weight / n_rows * (((uu - prior_u) / scale) ** 2).sum(axis=1))

    best = loss(u)
    for _ in range(options.iterations):
        for k in range(len(specs)):
            improved = np.zeros(n_groups, bool)
            for sign in (1.0, -1.0):
                trial = u.copy()
                trial[:, k] = np.clip(np.where(improved, u[:, k], u[:, k] + sign * steps[:, k]), lo[k], hi[k])
                trial_loss = loss(trial)
                better = (trial_loss < best - 1e-9) & ~improved
                u[better, k] = trial[better, k]
                best = np.where(better, trial_loss, best)
                improved |= better
            steps[~improved, k] *= 0.5
    return u


def test_search_predicting_moving_groups_only_equals_the_plain_search():
    predict, value, codes, n = _synthetic()
    weights = np.ones(codes.size)
    prior = np.tile([s.to_u(x) for s, x in zip(SPECS, (0.8, 0.05, 1.0))], (n, 1))
    options = F.FitOptions(iterations=6)
    calls = []

    def counting(u, index):
        calls.append(len(index))
        return predict(u, index)

    fast = F.pattern_search(counting, value, weights, codes, n, prior, SPECS, options, additive=[1])
    plain = _plain_search(predict, value, weights, codes, n, prior, SPECS, options)
    np.testing.assert_allclose(fast, plain, rtol=0, atol=1e-12)
    assert not np.array_equal(fast, prior)                        # it moved
    assert (fast[:, 2] <= SPECS[2].to_u(2.0) + 1e-15).all()       # within the bounds
    # fewer rows predicted than the plain search's 2 x 3 x 6 full passes (+1)
    assert sum(calls) < (2 * 3 * 6 + 1) * codes.size


def test_a_parameter_declared_additive_that_is_not_fails_loudly():
    predict, value, codes, n = _synthetic()
    prior = np.tile([s.to_u(x) for s, x in zip(SPECS, (0.8, 0.05, 1.0))], (n, 1))
    with pytest.raises(RuntimeError, match="additively"):
        F.pattern_search(predict, value, np.ones(codes.size), codes, n, prior, SPECS, F.FitOptions(iterations=3),
                         additive=[0])   # eta enters as a power, not a sum


def test_leave_one_gpu_out_holds_each_gpu_out_alone_with_its_in_fold_error(catalog):
    rows, _ = A.prepare_rows(A.load_measurements(DATA / "measurements-sample.csv"), catalog)
    rows = A.add_families(rows).reset_index(drop=True)
    n = CV.group_count(rows, "gpu")
    assert n == rows["gpu"].nunique() >= 3
    options = F.FitOptions(iterations=1, rounds=1, min_rows=8, levels=("gpu",))
    part = CV.run_folds(catalog, rows, n, options, scheme="gpu", full_schedule=True)
    assert part["schedule"] == {"iterations": 1, "rounds": 1}
    cv = CV.summarize(rows, [part])
    assert sorted(g for f in cv["per_fold"] for g in f["held_out"]) == sorted(rows["gpu"].unique())
    for f in cv["per_fold"]:
        (gpu,) = f["held_out"]
        test = rows[rows["gpu"] == gpu]
        # the held-out rows as training rows of the other folds' fits, pooled
        others = [p["train"] for k, p in part["parts"].items() if int(k) != f["fold"]]
        pred = np.concatenate([test["id"].map(train).to_numpy(float) for train in others])
        measured = np.tile(test["value"].to_numpy(float), len(others))
        pooled = pd.concat([test] * len(others), ignore_index=True)
        assert f["held_out_in_fold_median_ape_pct"] == CV.family_medians(pooled, np.abs(pred - measured) / measured * 100)
        assert f["out_of_fold_median_ape_pct"] == CV.family_medians(
            test, np.abs(test["id"].map(cv["predictions"]).to_numpy(float) - test["value"]) / test["value"] * 100)
