"""Merge a partial run (``--only``) into the stored results.json, so that rerunning some
scenarios keeps every other scenario's measurements. Standard library only."""

from __future__ import annotations


def merge(stored: dict, new: dict, order: list[str]) -> dict:
    """``new``'s scenarios replace the stored ones with the same id, the others stay; scenarios
    follow ``order`` (run.scenarios() ids; unknown ids last). The stored environment and accuracy
    rows stay unless the new run measured them; ``runs`` records the environment of each
    partial run merged in. ``partial`` holds while some scenario of ``order`` is missing."""
    by_id = {r["scenario"]["id"]: r for r in stored.get("scenarios", [])}
    by_id.update({r["scenario"]["id"]: r for r in new["scenarios"]})
    rank = {sid: i for i, sid in enumerate(order)}
    scen = sorted(by_id.values(), key=lambda r: (rank.get(r["scenario"]["id"], len(rank)), r["scenario"]["id"]))
    acc = {a["id"]: a for a in stored.get("accuracy_rows", [])}
    acc.update({a["id"]: a for a in new.get("accuracy_rows", [])})
    merged_runs = stored.get("merged_runs", []) + [
        new["environment"] | {"scenarios": [r["scenario"]["id"] for r in new["scenarios"]]}
    ]
    return stored | {
        "scenarios": scen,
        "accuracy_rows": list(acc.values()),
        "prices_usd_per_gpu_hour": stored.get("prices_usd_per_gpu_hour", {}) | new["prices_usd_per_gpu_hour"],
        "merged_runs": merged_runs,
        "partial": not set(order) <= set(by_id),
        # the banner is about the stored full run; a partial run without aiconfigurator says so
        # in its own scenarios' aic.error
        "aic_unavailable": stored.get("aic_unavailable") if stored.get("scenarios") else new.get("aic_unavailable"),
    }
