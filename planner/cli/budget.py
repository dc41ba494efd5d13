"""The ``planner budget`` command and the budget proposal's Markdown, CSV and XLSX renderings."""

from __future__ import annotations

import argparse
import io
import sys

from planner.cli.helpers import catalog_from

#: Files of ``planner budget --out DIR`` besides ``run.json``.
BUDGET_CSV = {"budget_periods.csv": "periods", "budget_actions.csv": "actions",
              "budget_options.csv": "options", "budget_breakeven.csv": "breakeven",
              "budget_sensitivity.csv": "sensitivity", "budget_assumptions.csv": "assumptions"}
SHEETS = {"Options": "options", "Periods": "periods", "Actions": "actions", "BreakEven": "breakeven",
          "Sensitivity": "sensitivity", "Assumptions": "assumptions"}


#: The subcommand and its line in ``planner --help``.
COMMAND = "budget"
HELP = "budget proposal: plan per quarter under growth, rent vs buy"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``planner budget PROBLEM.yaml [--out DIR] [--json]``."""
    p = subparsers.add_parser(COMMAND, help=HELP)
    p.add_argument("problem", help="problem YAML with a procurement: section")
    p.add_argument("--out", help="directory for budget.md, the CSVs and budget.xlsx")
    p.add_argument("--time-limit", type=float, help="wall-clock limit per fleet solve [s] (default: a "
                   "deterministic limit only)")
    p.add_argument("--scenarios", type=int, default=0, metavar="N",
                   help="sample N scenarios (growth, prices, prediction error) and report their risk")
    p.add_argument("--seed", type=int, default=0, help="seed of the scenario sampling (default 0)")
    p.add_argument("--growth-width", type=float, metavar="SD",
                   help="sd of ln(horizon traffic) of the growth sampling (default procurement.scenarios)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: a process pool; ray: Ray tasks (extra [distributed])")
    p.add_argument("--workers", type=int, help="processes (local) or concurrent tasks (ray); default: all CPUs")
    p.add_argument("--ray-address", help="address of an existing Ray cluster (e.g. ray://head:10001 or auto)")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=cmd_budget)
    return p


def _missing(v) -> bool:
    """None, NaN, NaT or NA (``pandas.isna`` of a scalar)."""
    import pandas as pd  # here, not at the top: the parser imports this module for every command

    return v is None or pd.isna(v)


def _usd(v) -> str:
    return "-" if _missing(v) else f"{v:,.0f}"


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and _missing(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v).replace("|", "\\|")


def _table(frame: pd.DataFrame, usd_cols=()) -> list[str]:
    from planner.outputs.report import plain

    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(_usd(row[c]) if c in usd_cols else plain(_cell(row[c]))
                                       for c in frame.columns) + " |")
    return lines


def budget_markdown(result) -> str:
    """The proposal for procurement: totals first, then when to buy or rent, then why."""
    from planner.procurement.budget import USD_COLUMNS

    spec, problem = result.spec, result.problem
    opts = result.options.sort_values(["rank", "option"])
    md = [f"# Budget proposal: {problem.name}", "",
          f"Horizon {spec.horizon_months} months in periods of {spec.period_months} months; traffic "
          f"grows {spec.growth_per_month_fraction:.1%} per month (each period is sized for its peak). "
          f"Status: **{result.status}**." + (f" Cheapest option: **{result.best_option}**." if result.best_option
                                             else ""), "",
          ("Each option is one fleet plan over the whole horizon (one CP-SAT model over all periods): "
           "owned GPUs are bought with a lead time and kept, reservations are held for their term, "
           "on-demand GPUs are rented per period; `mix` may combine every tier. A GPU type enters the "
           f"fleet after the first period only if that saves more than {spec.churn.min_saving_usd:,.0f} USD "
           f"(churn rule); costs are discounted at {spec.discount_rate_per_year_fraction:.1%} per year in "
           "`present_value_usd`."), "",
          *_profile_note(problem),
          "## Total cost of each option over the horizon (USD)", "",
          ("`cost_usd` is the cost attributable to the horizon (rent paid; for buying: depreciation inside "
           "the horizon + power + hosting); `cash_usd` is the money paid inside it; "
           "`committed_after_horizon_usd` is reserved capacity still owed after it."), ""]
    md += _table(opts[["rank", "option", "kind", "cost_usd", "present_value_usd", "cash_usd",
                       "capex_usd", "power_usd", "hosting_usd", "committed_after_horizon_usd",
                       "residual_value_usd", "usd_per_gpu_hour_paid", "gpu_type_switches", "status", "missing"]],
                 usd_cols=USD_COLUMNS)
    md += ["", "## Fleet of each option per period", "",
           "GPUs in use at the period's peak by type; `held`: GPUs held per tier.", ""]
    md += _table(result.periods, usd_cols=())
    md += ["", "## What to buy, reserve, rent and release, and when", "",
           "GPUs added (or released) at the start of each period, per option.", ""]
    md += _table(result.actions) if not result.actions.empty else ["(nothing to procure)"]
    md += ["", "## Break-even utilization of buying vs renting", "",
           ("Owning costs `own_usd_per_gpu_hour` every hour; at utilization u it costs own/u per hour used, so "
            "buying beats a pay-per-use price above `breakeven_utilization` = own / price (above 1: never). "
            "Reserved hours are paid used or not: buying is cheaper when own < reserved price."), ""]
    md += _table(result.breakeven)
    md += ["", "## Sensitivity (total cost_usd per option)", ""]
    usd = [c for c in result.sensitivity.columns if c in set(result.options["option"])]
    md += _table(result.sensitivity, usd_cols=usd)
    if result.risk is not None:
        md += risk_markdown(result.risk)
    md += ["", "## Assumptions", ""]
    md += _table(result.assumptions)
    return "\n".join(md) + "\n"


def _profile_note(problem) -> list[str]:
    from planner.procurement.profile import budget_levels

    levels = budget_levels(problem)
    if len(levels) == 1:
        return []
    return [(f"Daily load profile: pay-per-use GPUs follow {len(levels)} hour levels (fraction of the peak "
             "fleet: share of the day) " + ", ".join(f"{r:.2f}: {w:.0%}" for r, w in levels)
             + "; owned and reserved GPUs are held all day."), ""]


def risk_markdown(risk) -> list[str]:
    w = risk.widths
    md = ["", f"## Risk over {risk.scenarios} scenarios (seed {risk.seed})", "",
          (f"Sampled: traffic at the horizon log-normal around the stated growth (sd of the log "
           f"{w['growth_log_sd']:g}), rental and purchase price factors (sd {w['price_log_sd']:g}) and the "
           f"serving model's capacity error per GPU type (sd {w['prediction_log_sd']:g}); every scenario "
           "re-solves each option's fleet. See `budget_risk.png`."), ""]
    return md + _table(risk.summary, usd_cols=("p10_usd", "p50_usd", "p90_usd", "mean_usd"))


def _excel_value(v):
    if v is None or (not isinstance(v, (str, bool)) and _missing(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def budget_xlsx(result) -> bytes:
    """The workbook: one sheet per table (Options first), same numbers as the Markdown."""
    from openpyxl import Workbook
    from openpyxl.styles import Font

    from planner.procurement.budget import USD_COLUMNS

    wb = Workbook()
    wb.remove(wb.active)
    sheets = dict(SHEETS) | ({"Risk": "risk"} if result.risk is not None else {})
    for sheet, attr in sheets.items():
        frame = getattr(result, attr) if attr != "risk" else result.risk.summary
        if sheet == "Options":      # in rank order, as in budget.md (unpriced options last)
            frame = frame.sort_values(["rank", "option"], na_position="last")
        ws = wb.create_sheet(sheet)
        ws.append(list(frame.columns))
        for cell in ws[1]:
            cell.font = Font(bold=True)
        for row in frame.itertuples(index=False):
            ws.append([_excel_value(v) for v in row])
        for col in ws.columns:
            width = max(len(str(c.value)) if c.value is not None else 0 for c in col)
            ws.column_dimensions[col[0].column_letter].width = min(max(10, width + 2), 60)
        if sheet == "Options":
            for row in ws.iter_rows(min_row=2):
                for c in row:
                    if ws.cell(1, c.column).value in USD_COLUMNS:
                        c.number_format = "#,##0"
    wb.properties.creator = "llm-deployment-planner"
    buf = io.BytesIO()
    wb.save(buf)
    return _deterministic_zip(buf.getvalue())


#: Timestamp written into the workbook (zip entries and document properties) so that the
#: same input gives the same bytes; openpyxl would write the time of saving.
FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
FIXED_DOC_TIME = "1980-01-01T00:00:00Z"


def _deterministic_zip(data: bytes) -> bytes:
    """Rewrite an XLSX (zip) with fixed entry times and fixed created/modified properties."""
    import re
    import zipfile

    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info.filename)
            if info.filename == "docProps/core.xml":
                body = re.sub(rb"(<dcterms:(created|modified)[^>]*>)[^<]*(</dcterms:)",
                              rb"\g<1>" + FIXED_DOC_TIME.encode() + rb"\g<3>", body)
            dst.writestr(zipfile.ZipInfo(info.filename, date_time=FIXED_ZIP_TIME), body,
                         compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()


def budget_document(result) -> dict:
    """The ``--json`` document."""
    def records(frame):
        return frame.astype(object).where(frame.notna(), None).to_dict(orient="records")

    doc = {"problem": result.problem.name, "status": result.status, "best_option": result.best_option,
           "procurement": result.spec.model_dump(),
           **{attr: records(getattr(result, attr)) for attr in SHEETS.values()}}
    if result.risk is not None:
        doc["risk"] = result.risk.document()
    return doc


def budget_files(result) -> dict[str, bytes | str]:
    files: dict[str, bytes | str] = {"budget.md": budget_markdown(result), "budget.xlsx": budget_xlsx(result)}
    from planner.outputs.tables import csv_text

    files.update({name: csv_text(getattr(result, attr)) for name, attr in BUDGET_CSV.items()})
    if result.risk is not None:
        from planner.outputs.plots import _save

        files["budget_risk.csv"] = csv_text(result.risk.summary)
        files["budget_scenarios.csv"] = csv_text(result.risk.table)
        for fmt, data in _save(risk_figure(result.risk)).items():
            files[f"budget_risk.{fmt}"] = data
    return files


def risk_figure(risk):
    """P10-P90 bar with the P50 mark per option, and the probability of being cheapest."""
    import matplotlib

    from planner.outputs.plots import RC, _figure

    with matplotlib.rc_context(RC):
        fig = _figure()
        ax = fig.add_subplot()
        s = risk.summary.dropna(subset=["p50_usd"])
        y = range(len(s))
        ax.barh(list(y), (s["p90_usd"] - s["p10_usd"]).to_numpy(float), left=s["p10_usd"].to_numpy(float),
                color="C0", alpha=0.5, label="P10-P90")
        ax.scatter(s["p50_usd"].to_numpy(float), list(y), color="black", zorder=3, label="P50")
        ax.set_yticks(list(y), [f"{o} ({p:.0%} cheapest)" for o, p in zip(s["option"], s["probability_cheapest"])])
        ax.set_xlabel("total cost over the horizon [USD]")
        ax.legend(fontsize=8)
        ax.set_title(f"Total cost per option over {risk.scenarios} scenarios (seed {risk.seed})")
    return fig


def cmd_budget(args) -> int:
    """Run ``planner budget``; exit 0, or 3 when some period has no plan."""
    from planner import jsonio
    from planner.outputs.writer import check_out_dir, file_sha256, write_files
    from planner.problem import load_problem
    from planner.procurement import budget, parse_procurement
    from planner.errors import PlanningInputError

    bad = [f"--{k.replace('_', '-')}: must be >= {lo}" for k, lo in (("scenarios", 0), ("workers", 1))
           if getattr(args, k) is not None and getattr(args, k) < lo]
    if args.growth_width is not None and not 0 <= args.growth_width <= 3:
        bad.append("--growth-width: must be in [0, 3]")
    if args.ray_address and args.executor != "ray":
        bad.append("--ray-address: needs --executor ray")
    if bad:
        raise PlanningInputError(bad)
    problem = load_problem(args.problem, catalog_from(args))
    spec = parse_procurement(problem)
    if args.out:
        check_out_dir(args.out)
    progress = lambda line: print(f"budget: {line}", file=sys.stderr)  # noqa: E731
    result = budget(problem, spec, time_limit_s=args.time_limit, progress=progress)
    if args.scenarios:
        import dataclasses

        from planner.procurement.risk import scenario_risk

        progress(f"{args.scenarios} scenarios on {args.executor}")
        risk = scenario_risk(result.setup, spec, args.scenarios,
                             args.seed, growth_log_sd=args.growth_width, executor=args.executor,
                             workers=args.workers, address=args.ray_address)
        result = dataclasses.replace(result, risk=risk)
    if args.out:
        record = {"command": "budget", "problem": problem.name,
                  "input": {"path": problem.path, "sha256": file_sha256(problem.path)},
                  "catalog_versions": dict(sorted(problem.catalog.versions.items())), "status": result.status}
        write_files(args.out, budget_files(result), record)
        print(f"wrote {args.out}", file=sys.stderr)
    print(jsonio.dumps(budget_document(result)) if args.json else budget_markdown(result).rstrip("\n"))
    return 0 if result.status == "ok" else 3
