"""The daily load profile in the solve report: the per-hour tables.

Its figure is :func:`planner.outputs.plots.daily_figure` (plots own every figure).
"""

from __future__ import annotations


def daily_blocks(doc: dict) -> list[tuple]:
    """Report blocks of ``doc["daily"]`` (none without a load profile)."""
    daily = doc.get("daily")
    if not daily:
        return []
    if daily.get("usd_per_day") is None:
        return [("h", 2, "Daily load profile: per-hour plan"),
                ("p", f"No per-hour plan ({daily['status']}: {daily.get('why', '')}).")]
    types = sorted(daily["usd_per_gpu_hour"])
    b: list[tuple] = [("h", 2, "Daily load profile: per-hour plan")]
    b.append(("p", (f"{daily['usd_per_day']:,.2f} USD/day with an always-on base "
                    f"({daily['base_offering']}) plus on-demand GPUs per hour, against "
                    f"{daily['peak_all_day_usd_per_day']:,.2f} USD/day for plan #1 (the peak) all day. "
                    f"Every GPU added at an hour is paid {daily['scale_up_lead_time_s']:.0f} s earlier "
                    "(scale-up lead time).")))
    price = daily["usd_per_gpu_hour"]
    b.append(("table", ["GPU", "base GPUs", "base USD/GPU-h", "on-demand USD/GPU-h"],
              [[g, daily["base_gpus"][g], "-" if price[g]["base"] is None else f"{price[g]['base']:.4g}",
                f"{price[g]['on_demand']:.4g}"] for g in types]))
    b.append(("img", "daily_profile", "GPUs needed per hour, capacity stacked by tier"))
    b.append(("table", ["hour", "load (x peak)", "GPUs in use", "base GPUs", "on-demand GPUs", "USD"],
              [[h["hour"], f"{max(h['multiplier'].values()):.2f}",
                ", ".join(f"{g}: {n}" for g, n in sorted(h["gpus"].items())) or "0",
                sum(h["base_gpus"].values()), sum(h["on_demand_gpus"].values()), f"{h['usd']:.2f}"]
               for h in daily["hours"]]))
    return b

