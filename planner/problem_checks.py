"""Problem rules that need the catalog beyond id resolution: the GPUs searched by default,
the context window of each workload's model, and the serving engine's name."""

from __future__ import annotations

from planner.catalog import Catalog, suggest
from planner.compat import engine_table
from planner.schema import PlanningInputError
from planner.traffic import LengthDistribution

#: GPU segments (gpus.yaml ``segment``) searched when ``search.gpus`` is omitted; GPUs of
#: other segments (workstation, consumer, apple) come in only when named.
DEFAULT_GPU_SEGMENTS = ("datacenter",)
#: Length quantile of prompt + output that must fit the model's context window (else invalid).
CONTEXT_REJECT_QUANTILE = 0.95
#: Tail quantile of prompt + output checked against the window for a warning.
CONTEXT_WARN_QUANTILE = 0.999


def default_gpus(inventory: dict, catalog: Catalog) -> tuple[str, ...]:
    """GPUs searched without ``search.gpus``: the :data:`DEFAULT_GPU_SEGMENTS` ones, plus any
    GPU the problem names in ``inventory`` (owned hardware is always a candidate)."""
    owned = set()
    for name in inventory:
        try:
            owned.add(catalog.gpu(name).id)
        except PlanningInputError:
            pass  # reported under inventory.<name>
    return tuple(sorted(g for g, gpu in catalog.gpus.entries.items()
                        if gpu.segment in DEFAULT_GPU_SEGMENTS or g in owned))


def check_context(where: str, model_id: str, window: int, prompt: LengthDistribution,
                   output: LengthDistribution, problems: list[str], warnings: list[str]) -> None:
    """p95 prompt + p95 output beyond the context window is invalid; a tail beyond it warns."""
    p95 = prompt.quantile(CONTEXT_REJECT_QUANTILE) + output.quantile(CONTEXT_REJECT_QUANTILE)
    mean = prompt.mean + output.mean
    if mean > window:
        problems.append(f"{where}.prompt_tokens: mean prompt + mean output = {mean:.0f} tokens exceeds "
                        f"{model_id}'s context of {window} tokens")
    elif p95 > window:
        problems.append(f"{where}.prompt_tokens: p95 prompt + p95 output = {p95:.0f} tokens exceeds "
                        f"{model_id}'s context of {window} tokens")
    else:
        q = CONTEXT_WARN_QUANTILE
        tail = prompt.quantile(q) + output.quantile(q)
        if tail > window:
            warnings.append(f"{where}.prompt_tokens: the {q:.1%} quantile of prompt + output = {tail:.0f} tokens "
                            f"exceeds {model_id}'s context of {window} tokens: the longest requests will be "
                            f"rejected by the engine (the launch settings cap the length at the window)")


def check_engine_runs(engine: str | None, catalog: Catalog, gpu_id: str, weight_format: str,
                      kv_cache_dtype: str) -> list[str]:
    """A known ``engine`` must document the GPU's architecture and the formats
    (catalogs/engines.yaml) for a single configuration (the
    ``--engine`` of ``planner eval``, ``sweep`` and ``simulate``): lines naming the flag, [] if
    fine or without an engine."""
    if engine is None or check_engine(engine, catalog):
        return []
    from planner.compat import engine_table

    why = engine_table(catalog).explain(engine, gpu_id, weight_format, kv_cache_dtype)
    return [] if why is None else [f"--engine: {why}"]


def check_engine(engine: str | None, catalog: Catalog) -> list[str]:
    """``serving.engine`` must be an engine of catalogs/engines.yaml (problem lines, [] if fine)."""
    if engine is None:
        return []
    engines = sorted({row.engine for row in engine_table(catalog).support})
    if engine in engines:
        return []
    return [f"serving.engine: unknown engine '{engine}'{suggest(engine, engines)} (one of {', '.join(engines)})"]
