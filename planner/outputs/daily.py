"""The daily load profile in the solve report: the per-hour table and the capacity curve."""

from __future__ import annotations

import numpy as np


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


def daily_figure(daily: dict):
    """Stacked bars per hour (base, then on-demand, per GPU type; base bars are GPUs held, used or not) and the load curve."""
    import matplotlib

    from planner.outputs.plots import RC, _empty, _figure

    with matplotlib.rc_context(RC):
        fig = _figure()
        ax = fig.add_subplot()
        if not daily["hours"]:
            _empty(ax, "no per-hour plan")
            return fig
        hours = np.arange(len(daily["hours"]))
        bottom = np.zeros(len(hours))
        types = sorted(daily["usd_per_gpu_hour"])
        for tier, key, hatch in (("base", "base_gpus", None), ("on-demand", "on_demand_gpus", "//")):
            for j, g in enumerate(types):
                n = np.array([h[key].get(g, 0) for h in daily["hours"]], dtype=float)
                if n.any():
                    ax.bar(hours, n, bottom=bottom, color=f"C{j % 10}", hatch=hatch, edgecolor="white",
                           label=f"{g} {tier}")
                    bottom += n
        ax.set_xlabel("hour of day")
        ax.set_ylabel("GPUs")
        ax.set_xticks(hours[::2])
        twin = ax.twinx()
        twin.plot(hours, [max(h["multiplier"].values()) for h in daily["hours"]], color="black",
                  marker="o", markersize=3, label="load (x peak)")
        twin.set_ylim(0, 1.1)
        twin.set_ylabel("load (x peak rate)")
        ax.legend(fontsize=7, loc="upper left")
        ax.set_title("Per-hour plan: GPUs in use by tier, and the daily load curve")
    return fig
