"""Scenario risk: sample growth, prices and the serving model's error; solve every scenario.

Sampling (numpy ``default_rng(seed)``, all draws made up front in the caller, so the
executor never changes a number):

- growth: ln(traffic factor at the horizon) ~ N(ln((1+g)^H), growth_log_sd^2), i.e. the
  horizon's traffic is log-normal around the stated growth; the scenario's monthly growth
  is that factor^(1/H) - 1;
- prices: one rental and one purchase price factor per scenario, each exp(N(0, price_log_sd^2));
- prediction error: per GPU type a capacity factor exp(N(0, prediction_log_sd^2)) on every
  candidate of that type (the default sd is documented in :mod:`planner.procurement.spec`).

Each scenario re-solves the fleet model of every option (the serving model is not re-run).
Per option the summary gives P10/P50/P90 and the mean of the total cost over the scenarios
where it has a plan, and the probability that it is the cheapest (ties go to the option
listed first). Executors: ``local`` (a process pool) or ``ray`` (optional extra
``[distributed]``, imported only when used).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: Scenarios per task sent to a worker (amortizes the inter-process overhead).
CHUNK_SCENARIOS = 8
#: Percentiles reported per option.
PERCENTILES = (10, 50, 90)


@dataclass(frozen=True)
class Scenario:
    index: int
    growth_per_month: float
    rent_factor: float
    buy_factor: float
    capacity_factor: tuple  # ((gpu, factor), ...)


def sample_scenarios(spec, gpus, n: int, seed: int, *, growth_log_sd: float | None = None) -> list[Scenario]:
    """``n`` scenarios drawn from ``seed`` (see the module docstring)."""
    widths = spec.scenarios
    sd_g = widths.growth_log_sd if growth_log_sd is None else growth_log_sd
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, 3 + len(gpus)))
    horizon = spec.horizon_months
    log_factor = horizon * math.log1p(spec.growth_per_month_fraction)
    out = []
    for i in range(n):
        growth = math.expm1((log_factor + sd_g * z[i, 0]) / horizon)
        out.append(Scenario(index=i, growth_per_month=float(growth),
                            rent_factor=float(math.exp(widths.price_log_sd * z[i, 1])),
                            buy_factor=float(math.exp(widths.price_log_sd * z[i, 2])),
                            capacity_factor=tuple((g, float(math.exp(widths.prediction_log_sd * z[i, 3 + k])))
                                                  for k, g in enumerate(gpus))))
    return out


_SETUP = None  # the BudgetSetup of a local worker process (set once by the pool initializer)


def _init_worker(setup) -> None:
    global _SETUP
    _SETUP = setup


def solve_chunk(setup, scenarios: list[Scenario]) -> list[list]:
    """Total cost per option (whole USD, None without a plan) of each scenario."""
    from planner.procurement.budget import solve_options

    rows = []
    for s in scenarios:
        plans = solve_options(setup, s.growth_per_month, s.rent_factor, s.buy_factor, dict(s.capacity_factor))
        rows.append([round(p.cost_usd) if p.ok else None for p in plans])
    return rows


def _local_chunk(scenarios):
    return solve_chunk(_SETUP, scenarios)


def _chunks(scenarios: list[Scenario]) -> list[list[Scenario]]:
    return [scenarios[i:i + CHUNK_SCENARIOS] for i in range(0, len(scenarios), CHUNK_SCENARIOS)]


def run_local(setup, scenarios: list[Scenario], workers: int | None = None) -> list[list]:
    """Solve the scenarios in a process pool (``workers`` processes, default: the CPU count)."""
    from concurrent.futures import ProcessPoolExecutor

    if workers == 1:
        return solve_chunk(setup, scenarios)
    with ProcessPoolExecutor(max_workers=workers, initializer=_init_worker, initargs=(setup,)) as pool:
        return [row for rows in pool.map(_local_chunk, _chunks(scenarios)) for row in rows]


def run_ray(setup, scenarios: list[Scenario], workers: int | None = None, address: str | None = None) -> list[list]:
    """Solve the scenarios as Ray tasks (``address``: an existing cluster; default: the running
    instance, else a local one). At most ``workers`` tasks run at once (default: no limit)."""
    from planner.schema import PlanningInputError

    try:
        import ray
    except ImportError:
        raise PlanningInputError("--executor ray: Ray is not installed "
                                 "(pip install 'llm-deployment-planner[distributed]')") from None
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_cpus=1)(solve_chunk)
    setup_ref = ray.put(setup)
    chunks = _chunks(scenarios)
    limit = workers or len(chunks)
    pending, results = {}, {}
    for i, chunk in enumerate(chunks):
        if len(pending) >= limit:
            done, _ = ray.wait(list(pending), num_returns=1)
            results[pending.pop(done[0])] = ray.get(done[0])
        pending[remote.remote(setup_ref, chunk)] = i
    for ref, i in pending.items():
        results[i] = ray.get(ref)
    return [row for i in range(len(chunks)) for row in results[i]]


def run_scenarios(setup, scenarios: list[Scenario], *, executor: str = "local", workers: int | None = None,
                  address: str | None = None) -> list[list]:
    if executor == "ray":
        return run_ray(setup, scenarios, workers, address)
    return run_local(setup, scenarios, workers)


def risk_tables(labels: list[str], scenarios: list[Scenario], costs: list[list]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-option summary, per-scenario table) from the scenario costs."""
    matrix = np.array([[np.nan if c is None else c for c in row] for row in costs], dtype=float).reshape(
        len(scenarios), len(labels))
    cheapest = np.full(len(scenarios), -1)
    for i, row in enumerate(matrix):
        if np.isfinite(row).any():
            cheapest[i] = int(np.nanargmin(row))  # first minimum: ties go to the option listed first
    rows = []
    for k, label in enumerate(labels):
        col = matrix[:, k][np.isfinite(matrix[:, k])]
        q = np.percentile(col, PERCENTILES) if col.size else [None] * len(PERCENTILES)
        rows.append({"option": label, "scenarios_priced": int(col.size),
                     **{f"p{p}_usd": (round(float(v)) if v is not None else None) for p, v in zip(PERCENTILES, q)},
                     "mean_usd": round(float(col.mean())) if col.size else None,
                     "probability_cheapest": float((cheapest == k).sum()) / len(scenarios)})
    table = pd.DataFrame([{"scenario": s.index, "growth_per_month_fraction": s.growth_per_month,
                           "rental_price_factor": s.rent_factor, "purchase_price_factor": s.buy_factor,
                           **{f"capacity_factor[{g}]": f for g, f in s.capacity_factor},
                           **{label: (None if np.isnan(v) else int(v)) for label, v in zip(labels, row)}}
                          for s, row in zip(scenarios, matrix)])
    return pd.DataFrame(rows), table


@dataclass(frozen=True, eq=False)
class Risk:
    """The ``risk`` of a budget: sampling settings, per-option summary, per-scenario costs."""

    scenarios: int
    seed: int
    widths: dict
    summary: pd.DataFrame
    table: pd.DataFrame

    def document(self) -> dict:
        from planner.procurement.spec import DEFAULT_PREDICTION_LOG_SD

        records = self.summary.astype(object).where(self.summary.notna(), None).to_dict(orient="records")
        return {"scenarios": self.scenarios, "seed": self.seed, "widths": self.widths,
                "prediction_error_source": ("docs/accuracy.md out-of-fold errors" if
                                            self.widths["prediction_log_sd"] == DEFAULT_PREDICTION_LOG_SD
                                            else "procurement.scenarios.prediction_log_sd"),
                "options": records}


def scenario_risk(setup, spec, n: int, seed: int = 0, *, growth_log_sd: float | None = None,
                  executor: str = "local", workers: int | None = None, address: str | None = None) -> Risk:
    """Sample ``n`` scenarios, solve them on the executor, and summarize per option."""
    gpus = list(setup.inputs.gpus) if setup.inputs is not None else []
    scenarios = sample_scenarios(spec, gpus, n, seed, growth_log_sd=growth_log_sd)
    labels = [o.label for o in setup.options]
    costs = (run_scenarios(setup, scenarios, executor=executor, workers=workers, address=address)
             if setup.inputs is not None else [[None] * len(labels) for _ in scenarios])
    summary, table = risk_tables(labels, scenarios, costs)
    widths = spec.scenarios.model_dump()
    if growth_log_sd is not None:
        widths["growth_log_sd"] = growth_log_sd
    return Risk(scenarios=n, seed=seed, widths=widths, summary=summary, table=table)
