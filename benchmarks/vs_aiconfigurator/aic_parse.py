# ruff: noqa: E501  (Markdown prose and table rows are long string literals)
"""aiconfigurator's side of the benchmark: its `cli default` command line and the parsing of
its output (stdout and best_config_topn.csv) into each scenario's agg / disagg pick."""

from __future__ import annotations

import csv
import glob
import re
from pathlib import Path

from common import OSL, ISL

def aic_command(aic_bin: str, s: dict, save_dir: Path) -> list[str]:
    return [
        aic_bin,
        "cli",
        "default",
        "--model",
        s["aic_model"],
        "--total-gpus",
        str(s["gpus"]),
        "--system",
        s["aic_system"],
        "--isl",
        str(ISL),
        "--osl",
        str(OSL),
        "--ttft",
        f"{s['ttft_ms']:g}",
        "--tpot",
        f"{s['tpot_ms']:g}",
        "--save-dir",
        str(save_dir),
        "--no-color",
    ]


def _f(row: dict, key: str):
    v = row.get(key)
    try:
        return float(v) if v not in (None, "") else None
    except ValueError:
        return None


def _first_csv_row(save_dir: Path, mode: str) -> dict | None:
    paths = sorted(glob.glob(str(save_dir / "**" / mode / "best_config_topn.csv"), recursive=True))
    for path in paths:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        if rows:
            return rows[0]
    return None


def parse_aic(run: dict, save_dir: Path, s: dict) -> dict:
    text = run["stdout"] + "\n" + run["stderr"]
    out: dict = {"rc": run["rc"]}
    m = re.search(r"Best Experiment Chosen:\s*(\w+)\s+at\s+([\d,.]+)\s*tokens/s/gpu", text)
    out["chosen_mode"] = m.group(1) if m else None
    out["chosen_tokens_per_s_per_gpu_stdout"] = float(m.group(2).replace(",", "")) if m else None
    m = re.search(r"All experiments completed in\s+([\d.]+)\s+seconds", text)
    out["self_reported_search_s"] = float(m.group(1)) if m else None
    out["configs_evaluated"] = sum(
        int(x) for x in re.findall(r"Experiment \w+ completed with (\d+) results", text)
    )
    out["backend"] = (re.search(r"backend=(\w+)", text) or [None, None])[1]
    out["perf_db_version"] = (re.search(r"Perf-DB version:\s*(\S+)", text) or [None, None])[1]
    agg, disagg = _first_csv_row(save_dir, "agg"), _first_csv_row(save_dir, "disagg")
    out["agg"] = summarize_aic_row(agg, "agg", s) if agg else None
    out["disagg"] = summarize_aic_row(disagg, "disagg", s) if disagg else None
    mode = out["chosen_mode"]
    if mode not in ("agg", "disagg"):
        cands = [x for x in (out["agg"], out["disagg"]) if x]
        mode = max(cands, key=lambda x: x["tokens_per_s_per_gpu"])["mode"] if cands else None
    out["chosen"] = out.get(mode) if mode else None
    if run["rc"] != 0:
        out["error"] = (run["stderr"].strip().splitlines() or ["(no stderr)"])[-1][:400]
    elif out["chosen"] is None:
        out["error"] = "no configuration met the TTFT/TPOT limits"
    return out


def summarize_aic_row(row: dict, mode: str, s: dict) -> dict:
    n = s["gpus"]
    gpus_per_replica = int(_f(row, "num_total_gpus") or 0) or None
    replicas = n // gpus_per_replica if gpus_per_replica else None
    per_gpu = _f(row, "tokens/s/gpu_cluster") or _f(row, "tokens/s/gpu")
    if mode == "agg":
        config = (
            f"TP{int(_f(row, 'tp'))} PP{int(_f(row, 'pp'))} batch {int(_f(row, 'bs'))}, "
            f"{replicas} replica{'s' if replicas != 1 else ''} ({row.get('gemm')} GEMM, {row.get('kvcache')} KV)"
        )
        detail = {
            "tp": int(_f(row, "tp")),
            "pp": int(_f(row, "pp")),
            "batch": int(_f(row, "bs")),
            "gemm": row.get("gemm"),
            "kvcache": row.get("kvcache"),
            "dp": int(_f(row, "dp") or 1),  # attention data parallelism (MoE models)
            "parallel": row.get("parallel"),  # e.g. tp1pp1dp16etp1ep16: TP, PP, DP, MoE TP, EP
        }
        if detail["dp"] > 1:
            config = f"{row.get('parallel')} " + config
    else:

        def part(p):
            return (
                f"{int(_f(row, f'({p})workers'))}x TP{int(_f(row, f'({p})tp'))}"
                f"{'' if int(_f(row, f'({p})pp') or 1) == 1 else ' PP' + str(int(_f(row, f'({p})pp')))}"
                f" batch {int(_f(row, f'({p})bs'))}"
            )

        config = (
            f"disagg: prefill {part('p')} + decode {part('d')}, {replicas} replica{'s' if replicas != 1 else ''}"
            f" ({row.get('(d)gemm')} GEMM, {row.get('(d)kvcache')} KV)"
        )
        detail = {
            "prefill_workers": int(_f(row, "(p)workers")),
            "prefill_tp": int(_f(row, "(p)tp")),
            "decode_workers": int(_f(row, "(d)workers")),
            "decode_tp": int(_f(row, "(d)tp")),
            "decode_batch": int(_f(row, "(d)bs")),
            "gemm": row.get("(d)gemm"),
            "kvcache": row.get("(d)kvcache"),
        }
        for p, key in (("p", "prefill"), ("d", "decode")):  # GPUs of one worker: TP x PP x attention DP
            detail[f"{key}_gpus_per_worker"] = int(
                (_f(row, f"({p})tp") or 1) * (_f(row, f"({p})pp") or 1) * (_f(row, f"({p})dp") or 1)
            )
            detail[f"{key}_parallel"] = row.get(f"({p})parallel")
    return {
        "mode": mode,
        "config": config,
        "detail": detail,
        "gpus_per_replica": gpus_per_replica,
        "replicas": replicas,
        "gpus_used": (replicas or 0) * (gpus_per_replica or 0),
        "tokens_per_s_per_gpu": per_gpu,
        "ttft_ms": _f(row, "ttft"),
        "tpot_ms": _f(row, "tpot"),
        "request_rate_per_replica": _f(row, "request_rate"),
        "concurrency": _f(row, "concurrency"),
        "cluster_tokens_per_s": per_gpu * n if per_gpu else None,
        "cluster_rate_per_s": per_gpu * n / OSL if per_gpu else None,
    }
