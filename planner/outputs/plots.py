"""Report plots (cost vs p95 latency fronts, plan costs, daily profile) as deterministic PNG/SVG bytes.

matplotlib is used through its object API with the Agg canvas (no pyplot, no global
backend switch); SVG ids use a fixed hash salt and neither format carries a date or a
software version, so the same result gives byte-identical files.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

#: Plot files written by :func:`render_plots` (each as .png and .svg).
PLOT_NAMES = ("pareto_tpot", "pareto_ttft", "plan_costs")
DPI = 110
SVG_HASH_SALT = "llm-deployment-planner"
RC = {"svg.hashsalt": SVG_HASH_SALT, "svg.fonttype": "path", "font.family": "DejaVu Sans",
      "font.size": 9.0, "axes.grid": True, "grid.alpha": 0.3}
METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}}
METRIC_LABEL = {"tpot_p95_s": "p95 TPOT target [ms]", "ttft_p95_s": "p95 TTFT target [ms]"}


def _figure(width_in: float = 7.0, height_in: float = 4.2):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig) -> dict[str, bytes]:
    import matplotlib

    out = {}
    with matplotlib.rc_context(RC):
        for fmt in ("png", "svg"):
            buf = io.BytesIO()
            fig.savefig(buf, format=fmt, metadata=METADATA[fmt])
            out[fmt] = buf.getvalue()
    return out


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def front_figure(pareto: pd.DataFrame, metric: str, title: str):
    """Cost [USD/h] vs latency target [ms]: the mixed front and one line per GPU type.

    Drawn as steps: a plan solved at target t also meets every looser target, so the cost
    at a target between two grid points is at most the cost of the tighter one.
    """
    import matplotlib
    from matplotlib.ticker import FuncFormatter

    with matplotlib.rc_context(RC):
        fig = _figure()
        ax = fig.add_subplot()
        part = pareto[pareto["metric"] == metric] if not pareto.empty else pareto
        ok = part[np.isfinite(part["usd_per_hour"].astype(float))] if not part.empty else part
        if ok.empty:
            _empty(ax, "no Pareto points (problem infeasible or fronts skipped)")
        else:
            fronts = ["mixed"] + sorted(f for f in ok["front"].unique() if f != "mixed")
            for i, front in enumerate(fronts):
                pts = ok[ok["front"] == front].sort_values("target_s")
                if pts.empty:
                    continue
                style = ({"color": "black", "lw": 2.2, "marker": "o", "zorder": 3} if front == "mixed" else
                         {"color": f"C{i % 10}", "lw": 1.2, "marker": ".", "ls": "--"})
                ax.plot(pts["target_s"] * 1e3, pts["usd_per_hour"], label=front, drawstyle="steps-post", **style)
            ax.set_yscale("log")
            plain_numbers = FuncFormatter(lambda v, _: f"{v:g}")
            ax.yaxis.set_major_formatter(plain_numbers)
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
            ax.set_xlabel(METRIC_LABEL[metric])
            ax.set_ylabel("plan cost [USD/h]")
            ax.legend(title="front", fontsize=8)
        ax.set_title(title)
    return fig


def plan_costs_figure(plans: list[dict]):
    """Stacked bars: each ranked plan's USD/h split by GPU type."""
    import matplotlib

    with matplotlib.rc_context(RC):
        fig = _figure()
        ax = fig.add_subplot()
        if not plans:
            _empty(ax, "no plan (problem infeasible)")
        else:
            cost = pd.DataFrame([{d["gpu"]: 0.0 for d in p["deployments"]} for p in plans]).fillna(0.0)
            for i, p in enumerate(plans):
                for d in p["deployments"]:
                    cost.loc[i, d["gpu"]] += d["usd_per_hour"]
            cost = cost[sorted(cost.columns)]
            labels = [f"#{p['rank']}" for p in plans]
            bottom = np.zeros(len(plans))
            for j, gpu in enumerate(cost.columns):
                ax.bar(labels, cost[gpu].to_numpy(), bottom=bottom, label=gpu, color=f"C{j % 10}")
                bottom += cost[gpu].to_numpy()
            for x, total in enumerate(bottom):
                ax.annotate(f"{total:.2f}", (x, total), ha="center", va="bottom", fontsize=8)
            ax.set_ylabel("cost [USD/h]")
            ax.set_xlabel("plan (rank)")
            ax.legend(title="GPU type", fontsize=8)
        ax.set_title("Cost of each ranked plan by GPU type")
    return fig


def daily_figure(daily: dict):
    """Stacked bars per hour (base, then on-demand, per GPU type; base bars are GPUs held, used or not) and the load curve."""
    import matplotlib

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


def render_plots(result, doc: dict) -> dict[str, bytes]:
    """``{"pareto_tpot.png": bytes, "pareto_tpot.svg": bytes, ...}`` for a solve.

    Parameters
    ----------
    result : planner.planning.PlanResult
    doc : dict
        ``result_to_dict(result)`` (plan costs are drawn from it).
    """
    figures = {
        "pareto_tpot": front_figure(result.pareto, "tpot_p95_s", "Cost vs p95 TPOT target (mixed and per GPU type)"),
        "pareto_ttft": front_figure(result.pareto, "ttft_p95_s", "Cost vs p95 TTFT target (mixed and per GPU type)"),
        "plan_costs": plan_costs_figure(doc["plans"]),
    }
    if doc.get("daily"):
        figures["daily_profile"] = daily_figure(doc["daily"])
    out = {}
    for name, fig in figures.items():
        for fmt, data in _save(fig).items():
            out[f"{name}.{fmt}"] = data
    return out
