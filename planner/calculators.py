"""The seeds' calculators for one configuration: eval, knee, batch sweep, training."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd

from planner import layout_rules, parameters
from planner.catalog import Catalog
from planner.configs import config_arrays
from planner.dimensions import gpus_per_replica
from planner.schema import PlanningInputError
from planner.serving import economics, memory
from planner.serving.evaluate import evaluate
from planner.serving.params import ServingParams
from planner.serving.roofline import pipeline_bubble_fraction


def _resolve(catalog: Catalog, model: str, gpu: str | None, quant: str, kv_dtype: str):
    m = catalog.model(model, "--model")
    g = catalog.gpu(gpu, "--gpu") if gpu is not None else None
    q = catalog.weight_format(quant, "--quant")
    k = catalog.kv_dtype(kv_dtype, "--kv-dtype")
    if g is not None and g.bf16_tflops is None:
        raise PlanningInputError(f"--gpu: {g.id} has no BF16 TFLOPS figure in the catalog "
                                 "(unknown compute); add one with a source to use it")
    if g is not None and g.id in q.unsupported_gpus:
        raise PlanningInputError(f"--quant: {q.id} is not supported on {g.id}")
    return m, g, q, k


def _layout_messages(model, tp: int, ep: int) -> dict[str, str]:
    """The problem of each :data:`planner.layout_rules.REASONS` reason, for the eval flags."""
    return {
        layout_rules.EP_NEEDS_MOE: f"--ep: {ep} needs a model with routed experts; {model.id} has none",
        layout_rules.EP_NOT_DIVIDING_EXPERTS:
            f"--ep: {ep} does not divide {model.id}'s {model.num_experts} routed experts",
        layout_rules.EP_NOT_DIVIDING_TP: f"--ep: {ep} does not divide --tp {tp} (the expert-parallel group "
                                         "lies inside the tp GPUs of a stage)",
        layout_rules.ATTENTION_DP_NEEDS_MOE: f"--attention-dp: needs a model with routed experts; {model.id} has none",
        layout_rules.ATTENTION_DP_NEEDS_TP: "--attention-dp: needs --tp > 1 (one attention rank per GPU of a stage)",
    }


def check_parallelism(model, gpu, tp: int, pp: int, ep: int = 1, attention_dp: bool = False) -> None:
    """The rules the planner's search applies (``planner.search.REASONS``), for one configuration:
    tp divides the attention heads and fits the GPU's scale-up domain (except the layout with
    no all-reduce across GPUs, :func:`planner.layout_rules.exceeds_scale_up_domain`), pp <= layers,
    and the expert-parallel / attention-DP rules of :mod:`planner.layout_rules` (each message
    ends with the search's rejection reason)."""
    layout = pd.DataFrame({"tp": [tp], "ep": [ep], "attention_dp": [attention_dp]})
    problems = []
    if model.num_attention_heads % tp:
        problems.append(f"--tp: {tp} does not divide {model.id}'s {model.num_attention_heads} attention heads")
    if gpu is not None and layout_rules.exceeds_scale_up_domain(
            layout, np.array([gpu.max_gpus_per_scale_up_domain]), np.array([gpu.scale_out_bytes_per_s]))[0]:
        spans = " (only --attention-dp with --ep = --tp may span domains)" if gpu.scale_out_bytes_per_s > 0 else ""
        problems.append(f"--tp: {tp} exceeds {gpu.id}'s scale-up domain of {gpu.max_gpus_per_scale_up_domain} GPUs"
                        f"{spans} (tp_exceeds_scale_up_domain)")
    messages = _layout_messages(model, tp, ep)
    for reason, rejected in layout_rules.layout_rejections(model, layout).items():
        if rejected[0]:
            problems.append(f"{messages[reason]} ({reason})")
    if pp > model.num_layers:
        problems.append(f"--pp: {pp} exceeds {model.id}'s {model.num_layers} layers")
    if problems:
        raise PlanningInputError(problems)


def config_params(catalog: Catalog, model, gpu, quant, calibration: str | None = "none",
                  overrides: dict | None = None, engine: str | None = None):
    """``(calibration, ServingParams)`` of one configuration, resolved as every command does.

    ``calibration`` is 'none', 'default' or a YAML path (:func:`planner.parameters.load`);
    the calibration's GPU, engine, model and math levels apply, then ``overrides`` (explicit
    flags) on top. ``model``, ``gpu`` and ``quant`` are catalog entries (:func:`_resolve`).
    """
    cal = parameters.load(calibration)
    return cal, parameters.for_configs(catalog, cal, overrides, engine, [gpu.id], [quant.id], [model.id],
                                       models={model.id: model})


def _frame(model, gpu, quant, kv, tp, pp, batches, prompt, output, context, **layout) -> pd.DataFrame:
    """One configuration per batch size; ``layout``: ``ep`` / ``attention_dp`` columns (the
    dense layout without them)."""
    n = len(batches)
    return pd.DataFrame({
        "model": [model.id] * n, "gpu": [gpu.id] * n, "quantization": [quant.id] * n,
        "kv_cache_dtype": [kv.id] * n, "tp": tp, "pp": pp, "batch": batches,
        "prompt_tokens": prompt, "output_tokens": output,
        "context_tokens": np.nan if context is None else context, **layout,
    })


def _check_positive(**values) -> None:
    problems = [f"--{k.replace('_', '-')}: must be > 0, got {v}" for k, v in values.items()
                if v is not None and not v > 0]
    if problems:
        raise PlanningInputError(problems)


#: Shortest mean context of ``knee`` and ``sweep`` [tokens] (B_knee divides by the KV bytes of it).
MIN_CONTEXT_TOKENS = 1


def _check_context(context: float) -> None:
    if not context >= MIN_CONTEXT_TOKENS:
        raise PlanningInputError(f"--context: must be >= {MIN_CONTEXT_TOKENS} token, got {context}")


def _check_engine_runs(catalog: Catalog, engine: str | None, g, q, k) -> None:
    """``--engine`` must run the configuration's GPU and formats (catalogs/engines.yaml)."""
    from planner.problem_checks import check_engine_runs

    problems = check_engine_runs(engine, catalog, g.id, q.id, k.id)
    if problems:
        raise PlanningInputError(problems)


def eval_config(catalog: Catalog, *, model: str, gpu: str, tp: int = 1, pp: int = 1,
                quant: str = "bf16", kv_dtype: str = "bf16", batch: int = 1,
                users: int | None = None, prompt: int = 1024, output: int = 256,
                context: float | None = None, price: float | None = None,
                params: ServingParams | None = None, rate_per_s: float | None = None,
                slo_ttft_p95_s: float | None = None, slo_tpot_p95_s: float | None = None,
                calibration: str | None = "none", overrides: dict | None = None,
                engine: str | None = None, ep: int = 1, attention_dp: bool = False,
                role: str = "both") -> dict:
    """Every quantity of the comprehensive playground for one configuration (SI units).

    With ``rate_per_s`` adds p95 TTFT/TPOT under Poisson load; with both SLOs adds the
    capacity at SLO ``max_rate_per_s`` (see :func:`eval_under_load`). Parameters: ``params``
    when given, else the ``calibration`` ('none', 'default' or a path) for this GPU with
    ``overrides`` on top. ``ep`` / ``attention_dp``: the expert-parallel size and attention
    DP of the search (``search.ep`` / ``search.attention_dp``, checked by its rules);
    ``role`` (``both``, ``prefill``, ``decode``): under load, the p95s and the capacity of a
    disaggregated pool's replica as the search computes them (:func:`eval_role_under_load`).
    """
    _check_positive(tp=tp, pp=pp, batch=batch, users=users, prompt=prompt, output=output, price=price, ep=ep)
    if context is not None and context < 0:
        raise PlanningInputError(f"--context: must be >= 0, got {context}")
    if role not in ROLES:
        raise PlanningInputError(f"--role: must be one of {', '.join(ROLES)}, got {role!r}")
    m, g, q, k = _resolve(catalog, model, gpu, quant, kv_dtype)
    check_parallelism(m, g, tp, pp, ep, attention_dp)
    _check_engine_runs(catalog, engine, g, q, k)
    cal, resolved = config_params(catalog, m, g, q, calibration, overrides, engine)
    params = params or resolved
    users = batch if users is None else users
    b = min(users, batch)
    layout = {} if (ep, attention_dp) == (1, False) else {"ep": ep, "attention_dp": bool(attention_dp)}
    arrays, fallback = config_arrays(catalog, _frame(m, g, q, k, tp, pp, [b], prompt, output, context, **layout),
                                     models={m.id: m})
    if price is None:
        price = catalog.default_price_usd_per_gpu_hour(g.id)
    out = evaluate(arrays, params, users=users, usd_per_gpu_hour=price)
    result = {key: _scalar(v) for key, v in out.items()}
    result.update({
        "model": m.id, "gpu": g.id, "tp": tp, "pp": pp, "ep": ep, "attention_dp": bool(attention_dp),
        "role": role, "quantization": q.id,
        "kv_cache_dtype": k.id, "batch": b, "max_batch": batch, "users": users,
        "prompt_tokens": prompt, "output_tokens": output,
        "context_tokens": float(arrays.context_tokens[0]), "gpus": gpus_per_replica({"tp": tp, "pp": pp}),
        "math_fallback_to_bf16": bool(fallback[0]),
        "max_concurrency": int(out["max_concurrency"][0]) if np.isfinite(out["max_concurrency"][0]) else None,
        "usd_per_gpu_hour": price,
        "parameters": parameters.scalars(params),
        "parameters_used": parameters.describe(cal, overrides, engine),
    })
    if price is None:
        result.pop("usd_per_million_tokens", None)
    if rate_per_s is not None or slo_ttft_p95_s is not None or slo_tpot_p95_s is not None:
        under_load = eval_under_load if role == "both" else partial(eval_role_under_load, role=role, gpu=g)
        result.update(under_load(arrays.replace(batch=float(batch)), result, rate_per_s=rate_per_s,
                                 slo_ttft_p95_s=slo_ttft_p95_s, slo_tpot_p95_s=slo_tpot_p95_s,
                                 params=params))
    result.update(parameters.gpu_status(cal, g.id))
    result["intervals"] = parameters.prediction_intervals(
        cal, {k: result.get(k) for k in INTERVAL_QUANTITIES if k in result}, g.id, engine)
    return result


#: ``planner eval --role`` values: an aggregated replica, or a disaggregated pool's side.
ROLES = ("both", "prefill", "decode")

#: ``planner eval`` quantities that get 80 % / 95 % prediction intervals (docs/accuracy.md).
INTERVAL_QUANTITIES = ("ttft_s", "tpot_s", "throughput_tokens_per_s", "ttft_p95_s", "tpot_p95_s",
                       "max_rate_per_s")


def knee(catalog: Catalog, *, model: str, context: float, quant: str = "bf16",
         kv_dtype: str = "bf16") -> dict:
    """B_knee = model bytes / KV bytes per sequence, and the recommended max_num_seqs."""
    _check_context(context)
    m, _, q, k = _resolve(catalog, model, None, quant, kv_dtype)
    any_gpu = next(iter(catalog.gpus.entries))
    frame = _frame(m, catalog.gpu(any_gpu), q, k, 1, 1, [1], context, 0, context)
    arrays, _ = config_arrays(catalog, frame, models={m.id: m})
    w = memory.weights_bytes(arrays)[0]
    kv = memory.kv_bytes_per_seq(arrays)[0]
    b = economics.b_knee(w, kv)
    return {"model": m.id, "context_tokens": context, "quantization": q.id, "kv_cache_dtype": k.id,
            "weights_bytes": float(w), "kv_bytes_per_seq": float(kv), "b_knee": float(b),
            "recommended_max_num_seqs": int(economics.recommended_max_num_seqs(b))}


def sweep(catalog: Catalog, *, model: str, gpu: str, context: float, batches: list[int],
          tp: int = 1, pp: int = 1, quant: str = "bf16", kv_dtype: str = "bf16",
          params: ServingParams | None = None, calibration: str | None = "none",
          overrides: dict | None = None, engine: str | None = None) -> pd.DataFrame:
    """TPOT, throughput, per-user speed and bound per batch size at a fixed context."""
    if not batches:
        raise PlanningInputError("--batches: give at least one batch size")
    _check_context(context)
    _check_positive(tp=tp, pp=pp, **{"batches": min(batches)})
    m, g, q, k = _resolve(catalog, model, gpu, quant, kv_dtype)
    check_parallelism(m, g, tp, pp)
    _check_engine_runs(catalog, engine, g, q, k)
    cal, resolved = config_params(catalog, m, g, q, calibration, overrides, engine)
    params = params or resolved
    frame = _frame(m, g, q, k, tp, pp, list(batches), context, 0, context)
    arrays, _ = config_arrays(catalog, frame, models={m.id: m})
    out = evaluate(arrays, params)
    table = pd.DataFrame({
        "batch": list(batches),
        "tpot_s": out["tpot_s"],
        "throughput_tokens_per_s": out["throughput_tokens_per_s"],
        "per_user_tokens_per_s": out["per_user_tokens_per_s"],
        "bound": out["bound"],
        "fits": out["fits"],
        "arithmetic_intensity": out["arithmetic_intensity"],
    })
    table.attrs.update({"model": m.id, "gpu": g.id, "context_tokens": context,
                        "parameters_used": parameters.describe(cal, overrides, engine)})
    return table


def train(catalog: Catalog, *, params: float, tokens: float, gpu: str, gpus: int, mfu: float,
          pp: int = 1, micro_batches: int | None = None) -> dict:
    """Training compute C = 6ND, duration on ``gpus`` GPUs at ``mfu``, Adam state, PP bubble."""
    _check_positive(params=params, tokens=tokens, gpus=gpus, mfu=mfu, pp=pp, micro_batches=micro_batches)
    if mfu > 1:
        raise PlanningInputError(f"--mfu: must be a fraction in (0, 1], got {mfu}")
    g = catalog.gpu(gpu, "--gpu")
    if g.peak_flops_per_s("bf16") is None:
        raise PlanningInputError(f"--gpu: {g.id} has no BF16 TFLOPS figure in the catalog (unknown compute); "
                                 "add one with a source to use it")
    out = economics.training_estimate(params, tokens, g.peak_flops_per_s("bf16"), gpus, mfu)
    m = micro_batches if micro_batches is not None else pp
    out.update({"params": params, "tokens": tokens, "gpu": g.id, "gpus": gpus, "mfu": mfu,
                "pp": pp, "micro_batches": m,
                "pipeline_bubble_fraction": float(pipeline_bubble_fraction(pp, m))})
    return out


def _scalar(v):
    v = np.asarray(v).reshape(-1)[0]
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, str) or v.dtype.kind in "US":
        return str(v)
    return float(v)


def eval_under_load(arrays, config: dict, *, rate_per_s: float | None = None,
                    slo_ttft_p95_s: float | None = None, slo_tpot_p95_s: float | None = None,
                    prompt_dist=None, output_dist=None, prefix_hit_fraction: float = 0.0,
                    params: ServingParams | None = None) -> dict:
    """p95 TTFT/TPOT at a Poisson rate, and the capacity at SLO, of one configuration.

    ``arrays`` holds the configuration with ``batch`` = its max batch; ``config`` is
    :func:`eval_config`'s result. Lengths default to its fixed prompt and output.
    """
    from planner.serving.queueing import capacity_at_slo, state_at_rate

    traffic = _load_traffic(config, rate_per_s, slo_ttft_p95_s, slo_tpot_p95_s, prompt_dist, output_dist,
                            prefix_hit_fraction)
    params = params or ServingParams()
    out: dict = {}
    if rate_per_s is not None:
        state = state_at_rate(arrays, params, traffic, rate_per_s)
        out.update({"rate_per_s": rate_per_s, "ttft_p95_s": _scalar(state["ttft_p95_s"]),
                    "tpot_p95_s": _scalar(state["tpot_p95_s"]), "tpot_mean_s": _scalar(state["tpot_mean_s"]),
                    "mean_decode_batch": _scalar(state["occupancy"]),
                    "overloaded": bool(np.asarray(state["overloaded"]).reshape(-1)[0])})
    if slo_ttft_p95_s is not None:
        cap = capacity_at_slo(arrays, params, traffic, slo_ttft_p95_s, slo_tpot_p95_s)
        fits = config.get("kv_budget_bytes_per_gpu", 1.0) > 0
        out.update({"slo_ttft_p95_s": slo_ttft_p95_s, "slo_tpot_p95_s": slo_tpot_p95_s,
                    "max_rate_per_s": _scalar(cap["max_rate_per_s"]) if fits else 0.0})
    return out


def _load_traffic(config: dict, rate_per_s, slo_ttft_p95_s, slo_tpot_p95_s, prompt_dist=None, output_dist=None,
                  prefix_hit_fraction: float = 0.0):
    """The load flags checked, and the traffic (lengths default to ``config``'s fixed prompt and output)."""
    from planner.serving.queueing import TrafficArrays
    from planner.traffic import Fixed

    if (slo_ttft_p95_s is None) != (slo_tpot_p95_s is None):
        raise PlanningInputError("--slo-ttft-p95 and --slo-tpot-p95 go together: give both")
    _check_positive(rate=rate_per_s, slo_ttft_p95=slo_ttft_p95_s, slo_tpot_p95=slo_tpot_p95_s)
    prompt = prompt_dist or Fixed(int(config["prompt_tokens"]))
    output = output_dist or Fixed(int(config["output_tokens"]))
    return TrafficArrays.from_distributions(prompt, output, prefix_hit_fraction)


def _finite_or_none(v):
    v = _scalar(v)
    return v if np.isfinite(v) else None


def eval_role_under_load(arrays, config: dict, *, role: str, gpu, rate_per_s: float | None = None,
                         slo_ttft_p95_s: float | None = None, slo_tpot_p95_s: float | None = None,
                         params: ServingParams | None = None) -> dict:
    """:func:`eval_under_load` of one side of a disaggregated pool, as the search computes it
    (:mod:`planner.disagg_roles`, ``docs/serving-model.md`` section 14.5).

    ``role`` ``prefill``: ``ttft_p95_s`` is the prefill part of the TTFT (the replica's own
    queue, its prefill and the KV transfer over one link of ``gpu``'s scale-out bandwidth),
    ``tpot_p95_s`` None; ``decode``: ``tpot_p95_s`` of decode-only steps, ``ttft_p95_s`` None.
    ``max_rate_per_s``: the role's central capacity at the SLOs (a prefill replica within the
    TTFT SLO less :data:`planner.disagg_roles.DECODE_TTFT_ALLOWANCE_TPOTS` TPOT SLOs).
    """
    from types import SimpleNamespace

    from planner import disagg_roles
    from planner.margins import Margins
    from planner.serving.disagg import scale_out_bytes_per_s

    traffic = _load_traffic(config, rate_per_s, slo_ttft_p95_s, slo_tpot_p95_s)
    params = params or ServingParams()
    link = scale_out_bytes_per_s(gpu)   # the search's pool_scale_out_bytes_per_s of this one GPU
    out: dict = {}
    if rate_per_s is not None:
        state = disagg_roles.role_latency(role, arrays, params, traffic, np.array([rate_per_s]), link)
        value = state["ttft_p95_s" if role == "prefill" else "tpot_p95_s"]
        out.update({"rate_per_s": rate_per_s, "ttft_p95_s": _finite_or_none(state["ttft_p95_s"]),
                    "tpot_p95_s": _finite_or_none(state["tpot_p95_s"]),
                    "overloaded": not bool(np.isfinite(np.asarray(value)).all())})
    if slo_ttft_p95_s is not None:
        workload = SimpleNamespace(slo=SimpleNamespace(ttft_p95_s=slo_ttft_p95_s, tpot_p95_s=slo_tpot_p95_s))
        cap = disagg_roles.role_capacity(role, arrays, params, traffic, workload, slo_ttft_p95_s, slo_tpot_p95_s,
                                         Margins(confidence=0.5, max_load_fraction=1.0), link)
        fits = config.get("kv_budget_bytes_per_gpu", 1.0) > 0
        out.update({"slo_ttft_p95_s": slo_ttft_p95_s, "slo_tpot_p95_s": slo_tpot_p95_s,
                    "max_rate_per_s": _scalar(cap["central_rate_per_s"]) if fits else 0.0})
    return out
