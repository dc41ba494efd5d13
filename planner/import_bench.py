"""Convert vLLM and SGLang serving-benchmark result JSON into measurement rows.

Reads the result files of vLLM's ``benchmarks/benchmark_serving.py`` / ``vllm bench serve``
(``--save-result``: one JSON object per run) and SGLang's ``python -m sglang.bench_serving``
(``--output-file``: one JSON object per line, appended per run) and writes rows of the
measurement schema (``benchmarks/data/README-measurements.md``), one number per row, so
that ``planner accuracy`` and ``planner calibrate`` run on a user's own fleet.

Key names (read from the tools' sources): vLLM ``vllm/benchmarks/serve.py`` /
``benchmarks/benchmark_serving.py`` write ``request_rate`` ("inf" or a number),
``max_concurrency``, ``num_prompts``, ``completed``, ``total_input_tokens``,
``total_output_tokens``, ``request_throughput``, ``output_throughput``,
``total_token_throughput`` and ``mean_/median_/std_/p<q>_`` + ``ttft``/``tpot``/``itl``/
``e2el`` + ``_ms``; SGLang ``python/sglang/bench_serving.py`` writes ``backend``,
``request_rate``, ``max_concurrency``, ``random_input_len``, ``random_output_len``,
``completed``, ``total_input_tokens``, ``total_output_tokens``, ``request_throughput``,
``input_throughput``, ``output_throughput``, ``mean_/median_/std_/p99_`` + ``ttft``/
``tpot``/``itl``/``e2e_latency`` + ``_ms`` and ``concurrency`` (the measured mean).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from planner.accuracy import MEASUREMENT_COLUMNS
from planner.dimensions import gpus_per_replica
from planner.schema import PlanningInputError

ENGINES = ("vllm", "sglang")
#: (statistic in the tool's key, statistic in the measurement metric name).
_STATS = (("mean", "mean"), ("median", "median"), ("p90", "p90"), ("p99", "p99"))
#: Measurement metrics the schema defines (others from the tools are not imported).
_SCHEMA_METRICS = {
    "ttft_ms_mean", "ttft_ms_median", "ttft_ms_p90", "ttft_ms_p99",
    "tpot_ms_mean", "tpot_ms_median", "tpot_ms_p99",
    "itl_ms_mean", "itl_ms_median", "itl_ms_p99",
    "e2e_ms_mean", "e2e_ms_median",
}
#: The tools' latency names -> the schema's.
_LATENCY_NAMES = {"vllm": {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"},
                  "sglang": {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e_latency": "e2e"}}


@dataclass(frozen=True)
class BenchContext:
    """What the result file does not say: the deployment that was measured.

    ``model`` and ``gpu`` are catalog ids (checked by the caller against the catalog);
    ``tp``/``pp`` describe one engine instance, ``num_gpus`` the whole deployment
    (default tp * pp); ``isl``/``osl`` override the lengths read from the file.
    """

    engine: str
    model: str | None = None
    gpu: str | None = None
    tp: int = 1
    pp: int = 1
    num_gpus: int | None = None
    weight_dtype: str = ""
    kv_dtype: str = ""
    engine_version: str = ""
    isl: float | None = None
    osl: float | None = None


def read_results(path: str | Path) -> list[dict]:
    """The run records of a result file: a JSON object, a JSON list, or JSON lines."""
    path = Path(path)
    if not path.is_file():
        raise PlanningInputError(f"{path}: no such benchmark result file")
    text = path.read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
        records = doc if isinstance(doc, list) else [doc]
    except json.JSONDecodeError:
        records = []
        for i, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise PlanningInputError(f"{path}:{i}: not JSON ({exc.msg})") from None
    records = [r for r in records if isinstance(r, dict)]
    if not records:
        raise PlanningInputError(f"{path}: no benchmark result records found")
    return records


def _number(value) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        if value.strip().lower() in ("inf", "infinity"):
            return math.inf
        try:
            value = float(value)
        except ValueError:
            return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if not math.isnan(value) else None


def _load(record: dict) -> tuple[str, float | None, str]:
    """(load_kind, load_value, note) of one run."""
    rate = _number(record.get("request_rate"))
    conc = _number(record.get("max_concurrency"))
    if conc is not None and conc > 0:
        note = "" if rate is None or math.isinf(rate) else f"; also rate-limited to {rate:g} req/s"
        return "concurrency", conc, f"closed loop, max_concurrency={conc:g}{note}"
    if rate is not None and math.isfinite(rate) and rate > 0:
        return "request_rate", rate, f"open loop, request_rate={rate:g} req/s"
    return "max_throughput", None, "request_rate=inf: all requests submitted at once"


def _lengths(record: dict, ctx: BenchContext) -> tuple[float | None, float | None, str]:
    """(isl, osl, note): the context's, the tool's fixed random lengths, or per-request means."""
    done = _number(record.get("completed"))
    isl, osl, notes = ctx.isl, ctx.osl, []
    fixed = not _number(record.get("random_range_ratio"))  # SGLang random lengths without spread
    if isl is None and fixed and _number(record.get("random_input_len")):
        isl = _number(record.get("random_input_len"))
    if osl is None and fixed and _number(record.get("random_output_len")):
        osl = _number(record.get("random_output_len"))
    if isl is None and done and _number(record.get("total_input_tokens")):
        isl = round(_number(record["total_input_tokens"]) / done, 1)
        notes.append("isl = total_input_tokens / completed (mean)")
    if osl is None and done and _number(record.get("total_output_tokens")):
        osl = round(_number(record["total_output_tokens"]) / done, 1)
        notes.append("osl = total_output_tokens / completed (mean)")
    return isl, osl, "; ".join(notes)


def _metrics(record: dict, engine: str) -> list[tuple[str, float, str, str]]:
    """(metric, value, unit, raw key) of one run, schema metrics only."""
    out = []
    for raw, name in _LATENCY_NAMES[engine].items():
        for key_stat, stat in _STATS:
            key = f"{key_stat}_{raw}_ms"
            metric = f"{name}_ms_{stat}"
            value = _number(record.get(key))
            if metric in _SCHEMA_METRICS and value is not None and value > 0:
                out.append((metric, value, "ms", key))
    throughput = {"output_tok_s_total": ("output_throughput", "tok/s"),
                  "request_per_s": ("request_throughput", "req/s")}
    for metric, (key, unit) in throughput.items():
        value = _number(record.get(key))
        if value is not None and value > 0:
            out.append((metric, value, unit, key))
    total = _number(record.get("total_token_throughput"))
    if total is None and engine == "sglang":
        parts = [_number(record.get("input_throughput")), _number(record.get("output_throughput"))]
        total = sum(parts) if None not in parts else None
        key = "input_throughput + output_throughput"
    else:
        key = "total_token_throughput"
    if total is not None and total > 0:
        out.append(("total_tok_s_total", total, "tok/s", key))
    return out


def import_results(path: str | Path, ctx: BenchContext) -> pd.DataFrame:
    """Measurement rows (the reference schema) of every run in a vLLM or SGLang result file.

    Raises
    ------
    PlanningInputError
        Unknown engine, unreadable file, or no model/GPU given where the file has none.
    """
    if ctx.engine not in ENGINES:
        raise PlanningInputError(f"--engine: expected one of {', '.join(ENGINES)}, got '{ctx.engine}'")
    path = Path(path)
    records = read_results(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:10]
    tool = "vllm bench serve / benchmark_serving.py" if ctx.engine == "vllm" else "sglang.bench_serving"
    rows = []
    for i, record in enumerate(records):
        model = ctx.model or record.get("model_id") or record.get("model")
        if not model:
            raise PlanningInputError(f"{path}: run {i} names no model; pass --model")
        if not ctx.gpu:
            raise PlanningInputError(f"{path}: benchmark results do not name the GPU; pass --gpu")
        kind, load, load_note = _load(record)
        isl, osl, len_note = _lengths(record, ctx)
        prompts = _number(record.get("num_prompts")) or _number(record.get("completed"))
        num_gpus = ctx.num_gpus or gpus_per_replica(ctx)
        base_note = "; ".join(n for n in (load_note, len_note,
                                          f"{int(prompts)} requests" if prompts else "") if n)
        for metric, value, unit, key in _metrics(record, ctx.engine):
            rows.append({
                "id": f"B{digest}-{i}-{metric}",
                "source": f"[user benchmark] {tool} {path.name} run {i}",
                "engine": ctx.engine,
                "engine_version": ctx.engine_version or record.get("engine_version", ""),
                "model": model, "gpu": ctx.gpu, "num_gpus": num_gpus, "tp": ctx.tp, "pp": ctx.pp, "ep": None,
                "weight_dtype": ctx.weight_dtype, "kv_dtype": ctx.kv_dtype, "mode": "agg",
                "isl": isl, "osl": osl, "load_kind": kind, "load_value": load,
                "metric": metric, "value": value, "unit": unit,
                "notes": f"{base_note} || raw: {key}={value}",
            })
    if not rows:
        raise PlanningInputError(f"{path}: no metric of the measurement schema found in "
                                 f"{len(records)} run(s)")
    return pd.DataFrame(rows, columns=list(MEASUREMENT_COLUMNS))


def resolve_ids(frame: pd.DataFrame, catalog) -> pd.DataFrame:
    """Map model and GPU names to catalog ids (a HuggingFace repo id by its last part);
    unknown names are kept as given (``planner accuracy`` then skips those rows)."""
    def model_id(name: str) -> str:
        for candidate in (name, name.split("/")[-1], name.split("/")[-1].lower().removesuffix("-instruct")):
            try:
                return catalog.model(candidate).id
            except PlanningInputError:
                continue
        return name

    def gpu_id(name: str) -> str:
        try:
            return catalog.gpu(name).id
        except PlanningInputError:
            return name

    models = {m: model_id(str(m)) for m in frame["model"].unique()}
    gpus = {g: gpu_id(str(g)) for g in frame["gpu"].unique()}
    return frame.assign(model=frame["model"].map(models), gpu=frame["gpu"].map(gpus))
