"""Write the notebooks of this folder (outputs stripped) from the cell sources below.

The notebooks are generated, not edited by hand: change a cell here, then run

    python notebooks/make_notebooks.py           # rewrite every notebook
    python notebooks/make_notebooks.py --check   # exit 1 if a stored notebook differs

``tests/test_notebooks.py`` executes every notebook and checks that the stored files are
exactly what this script writes (no outputs, ``execution_count`` null, stable cell ids).

Every notebook calls the package's public API (``planner.calculators``, ``planner.plan``,
the serving-model functions): the formulas live in ``planner/``, never here.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
LANGUAGE_INFO = {"name": "python"}

#: First code cell of every notebook: inline plots, the repository root as working
#: directory (problem paths are relative to it), the catalogs, and the 2% check.
SETUP = """\
%matplotlib inline
import math
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

# Work from the repository root whether Jupyter started there or in notebooks/.
ROOT = next(p for p in (Path.cwd(), *Path.cwd().parents)
            if (p / "pyproject.toml").is_file() and (p / "planner").is_dir())
os.chdir(ROOT)

import planner  # noqa: E402
from planner import calculators as calc  # noqa: E402
from planner.serving.params import ServingParams  # noqa: E402

catalog = planner.load_catalog()
GB = 1e9
pd.set_option("display.width", 140)
pd.set_option("display.max_columns", 20)


def near(value, seed, rel=0.02):
    \"\"\"True when ``value`` is within ``rel`` (default 2%) of the seed's number.\"\"\"
    return math.isclose(float(value), float(seed), rel_tol=rel)
"""


def md(text: str):
    return ("markdown", textwrap.dedent(text).strip("\n"))


def code(text: str):
    return ("code", textwrap.dedent(text).strip("\n"))


# --------------------------------------------------------------------------- 01

MEMORY = [
    md("""
    # 1. GPU memory budget: weights + KV cache + workspace

    A serving GPU's memory holds three things:

    * **weights**: parameters x bytes per parameter (split N ways by tensor parallelism);
    * **KV cache**: every layer keeps the keys and values of every token seen so far,
      `2 x layers x KV heads x head dim x bytes` per token (GQA);
    * **workspace**: CUDA context, kernel buffers, activations (about 2 GB per GPU).

    Engines such as vLLM use 90% of the memory (`gpu_memory_utilization = 0.9`) and turn
    everything left after weights and workspace into KV-cache blocks. The KV budget divided
    by the KV of one request is the number of requests served **at once**.

    Seed check: Llama 3 8B in BF16 on one H100 leaves about 54 GB for KV after 16 GB of
    weights; an 8K-token request needs 1.07 GB, so about 50 run concurrently. Llama 3 70B
    in BF16 (141 GB) does not fit on one H100 at all.

    Every number below comes from `planner.calculators.eval_config`.
    """),
    code(SETUP),
    md("""
    ## KV cache per token and per 8K request (the seed's model table)
    """),
    code("""
    CONTEXT = 8192
    kv_rows = []
    for model in ["llama-3-8b", "llama-3-70b", "llama-3.1-405b", "mixtral-8x7b"]:
        r = calc.eval_config(catalog, model=model, gpu="b200", prompt=CONTEXT, output=1, context=CONTEXT)
        kv_rows.append({"model": r["model"], "weights_gb": r["weights_bytes"] / GB,
                        "kv_kib_per_token": r["kv_bytes_per_token"] / 1024,
                        "kv_gb_per_8k_request": r["kv_bytes_per_seq"] / GB})
    kv_table = pd.DataFrame(kv_rows).set_index("model")
    kv_table.round(2)
    """),
    md("""
    ## The budget of one GPU (or one GPU of a TP group) for 8K-token requests
    """),
    code("""
    CASES = {
        "8B BF16, 1x H100": dict(model="llama-3-8b", gpu="h100-sxm"),
        "70B BF16, 1x H100": dict(model="llama-3-70b", gpu="h100-sxm"),
        "70B FP8, 1x H100": dict(model="llama-3-70b", gpu="h100-sxm", quant="fp8"),
        "70B INT4-AWQ, 1x H100": dict(model="llama-3-70b", gpu="h100-sxm", quant="int4-awq"),
        "70B BF16, 4x H100 (TP 4)": dict(model="llama-3-70b", gpu="h100-sxm", tp=4),
        "70B FP8, 1x H200": dict(model="llama-3-70b", gpu="h200-sxm", quant="fp8"),
    }
    rows = []
    for label, cfg in CASES.items():
        r = calc.eval_config(catalog, **cfg, prompt=CONTEXT, output=1, context=CONTEXT)
        gpu = catalog.gpu(r["gpu"])
        usable = r["parameters"]["gpu_memory_utilization"] * gpu.memory_bytes
        rows.append({
            "configuration": label,
            "gpu_memory_gb": gpu.memory_bytes / GB,
            "usable_gb": usable / GB,
            "weights_gb_per_gpu": r["weights_bytes_per_gpu"] / GB,
            "workspace_gb": r["parameters"]["workspace_bytes"] / GB,
            "kv_budget_gb_per_gpu": r["kv_budget_bytes_per_gpu"] / GB,
            "max_concurrent_8k_requests": r["max_concurrency"],
            "fits": r["fits"],
        })
    budget = pd.DataFrame(rows).set_index("configuration")
    budget.round(1)
    """),
    code("""
    fig, ax = plt.subplots(figsize=(9, 4))
    y = np.arange(len(budget))
    weights = budget["weights_gb_per_gpu"]
    workspace = budget["workspace_gb"]
    kv = budget["kv_budget_gb_per_gpu"].clip(lower=0)
    ax.barh(y, weights, color="tab:blue", label="weights")
    ax.barh(y, workspace, left=weights, color="tab:gray", label="workspace")
    ax.barh(y, kv, left=weights + workspace, color="tab:green", label="KV cache budget")
    ax.scatter(budget["usable_gb"], y, marker="|", s=400, color="black", label="90% of memory")
    ax.scatter(budget["gpu_memory_gb"], y, marker="|", s=400, color="red", label="GPU memory")
    for i, (fits, n) in enumerate(zip(budget["fits"], budget["max_concurrent_8k_requests"])):
        text = f"{n} x 8K requests" if fits else "does not fit"
        ax.text(budget["gpu_memory_gb"].iloc[i] + 2, i, text, va="center", fontsize=8)
    ax.set_yticks(y, budget.index)
    ax.invert_yaxis()
    ax.set_xlim(0, 200)
    ax.set_xlabel("GB per GPU")
    ax.set_title("GPU memory budget (8K-token requests)")
    ax.legend(loc="lower right", fontsize=8)
    plt.tight_layout()
    """),
    md("""
    ## Filling the KV cache request by request

    The seed's playground lets you drag the bar up: each extra concurrent 8K request adds
    its KV cache until the 90% line is reached (Llama 3 8B, BF16, H100).
    """),
    code("""
    fill = []
    for n in range(1, 61):
        r = calc.eval_config(catalog, model="llama-3-8b", gpu="h100-sxm", batch=n,
                             prompt=CONTEXT, output=1, context=CONTEXT)
        fill.append({"requests": n, "kv_gb": r["kv_bytes_needed_per_gpu"] / GB, "fits": r["fits"]})
    fill = pd.DataFrame(fill).set_index("requests")
    h100 = budget.loc["8B BF16, 1x H100"]
    largest_fitting = int(fill.index[fill["fits"]].max())

    fig, ax = plt.subplots(figsize=(8, 3.5))
    base = h100["weights_gb_per_gpu"] + h100["workspace_gb"]
    ax.fill_between(fill.index, 0, h100["weights_gb_per_gpu"], color="tab:blue", alpha=0.6, label="weights")
    ax.fill_between(fill.index, h100["weights_gb_per_gpu"], base, color="tab:gray", alpha=0.6, label="workspace")
    ax.fill_between(fill.index, base, base + fill["kv_gb"], color="tab:green", alpha=0.6, label="KV cache in use")
    ax.axhline(h100["usable_gb"], color="black", ls="--", label="90% of 80 GB")
    ax.axvline(largest_fitting, color="tab:red", ls=":", label=f"last request that fits: {largest_fitting}")
    ax.set_xlabel("concurrent 8K-token requests")
    ax.set_ylabel("GB")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("Llama 3 8B on one H100")
    plt.tight_layout()
    """),
    md("""
    ## Concurrency against context length

    The KV budget is fixed; longer requests mean fewer of them at once.
    """),
    code("""
    contexts = [512, 1024, 2048, 4096, 8192, 16384, 32768]
    gpus = {"A100 80GB": "a100-sxm-80gb", "H100": "h100-sxm", "H200": "h200-sxm", "B200": "b200"}
    concurrency = pd.DataFrame({
        name: [calc.eval_config(catalog, model="llama-3-8b", gpu=g, prompt=c, output=1, context=c)["max_concurrency"]
               for c in contexts]
        for name, g in gpus.items()}, index=pd.Index(contexts, name="context_tokens"))
    ax = concurrency.plot(marker="o", logx=True, logy=True, figsize=(7, 3.5))
    ax.set_ylabel("max concurrent requests")
    ax.set_title("Llama 3 8B BF16: concurrent requests per GPU")
    concurrency
    """),
    md("""
    ## 70B weights by format (seed: 141 GB BF16, 71 GB FP8, about 36 GB at 4.125 bits)
    """),
    code("""
    weights_70b = pd.Series({q: calc.eval_config(catalog, model="llama-3-70b", gpu="h200-sxm", quant=q)["weights_bytes"] / GB
                             for q in ["bf16", "fp8", "int4-awq"]}, name="weights_gb")
    weights_70b.round(1)
    """),
    md("## Seed checks"),
    code("""
    assert near(h100["weights_gb_per_gpu"], 16)
    assert near(h100["kv_budget_gb_per_gpu"], 54)
    assert near(kv_table.loc["llama-3.1-8b", "kv_kib_per_token"], 128)
    assert near(kv_table.loc["llama-3.1-70b", "kv_kib_per_token"], 320)
    assert near(kv_table.loc["llama-3.1-405b", "kv_kib_per_token"], 504)
    assert near(kv_table.loc["mixtral-8x7b", "kv_kib_per_token"], 128)
    assert near(kv_table.loc["llama-3.1-8b", "kv_gb_per_8k_request"], 1.07)
    assert near(kv_table.loc["llama-3.1-70b", "kv_gb_per_8k_request"], 2.68)
    assert near(kv_table.loc["llama-3.1-405b", "kv_gb_per_8k_request"], 4.23)
    assert near(h100["max_concurrent_8k_requests"], 50)
    assert largest_fitting == h100["max_concurrent_8k_requests"]
    assert not budget.loc["70B BF16, 1x H100", "fits"]
    assert budget.loc["70B BF16, 4x H100 (TP 4)", "fits"]
    assert near(weights_70b["bf16"], 141) and near(weights_70b["fp8"], 71) and near(weights_70b["int4-awq"], 36)
    assert (concurrency.diff().iloc[1:] <= 0).all().all(), "longer contexts never allow more requests"
    print("memory budget: seed numbers reproduced")
    """),
]

# --------------------------------------------------------------------------- 02

ROOFLINE = [
    md("""
    # 2. Roofline: is a step memory bound or compute bound?

    A kernel takes the longer of *bytes / bandwidth* and *FLOPs / peak FLOP/s*. The ratio
    FLOPs per byte is the **arithmetic intensity** I; the GPU's **ridge point** pi / beta is
    the intensity above which compute, not memory, is the limit.

    * **Decode**: one step of a batch of b sequences does about 2P b FLOPs but reads the
      2P bytes of BF16 weights once, so I is about b. At batch 1, I is about 1: three
      hundred times below an H100's ridge (295), so decode speed is the speed of reading
      the weights (Llama 3 8B on H100: 16 GB / 3.35 TB/s = 4.8 ms, about 210 tok/s).
    * **Prefill** processes the p prompt tokens at once, so I is about p: a few hundred
      tokens already make it compute bound.
    * **KV reads are not shared** by the batch: attention alone has the fixed intensity
      d / (n_kv d_head), about 4 FLOP/byte for Llama 3 8B, whatever the batch; long
      contexts keep decode memory bound.

    Ridge points of the seed's GPU table: A100 156, H100 295, H200 206, B200 281,
    RTX 4090 165, M2 Ultra 34 FLOP/byte (BF16 dense).
    """),
    code(SETUP),
    code("""
    from planner.configs import config_arrays
    from planner.serving import roofline

    SEED_GPUS = {"A100 SXM 80GB": "a100-sxm-80gb", "H100 SXM": "h100-sxm", "H200": "h200-sxm",
                 "B200": "b200", "RTX 4090": "rtx-4090", "Apple M2 Ultra": "m2-ultra"}
    ridge = pd.Series({name: calc.eval_config(catalog, model="llama-3-8b", gpu=g)["ridge_point"]
                       for name, g in SEED_GPUS.items()}, name="ridge_point_flop_per_byte")
    ridge.round(1)
    """),
    md("""
    ## Decode intensity against batch, prefill intensity against prompt length

    Decode intensities come from `calculators.sweep` (Llama 3 8B, BF16). A mean context of
    one token stands for "KV ignored"; at 2K and 8K tokens the unshared KV reads cap the
    intensity. Prefill intensity is the prefill FLOPs over the bytes it reads, from the
    roofline module's own terms.
    """),
    code("""
    BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    decode_ai = pd.DataFrame({
        f"decode, context {c}": calc.sweep(catalog, model="llama-3-8b", gpu="h100-sxm", context=c,
                                           batches=BATCHES)["arithmetic_intensity"].to_numpy()
        for c in (1, 2048, 8192)}, index=pd.Index(BATCHES, name="batch"))

    PROMPTS = np.array([16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192])
    frame = pd.DataFrame({"model": "llama-3.1-8b", "gpu": "h100-sxm", "quantization": "bf16",
                          "kv_cache_dtype": "bf16", "tp": 1, "pp": 1, "batch": 1, "prompt_tokens": PROMPTS,
                          "output_tokens": 1, "context_tokens": np.nan})
    arrays, _ = config_arrays(catalog, frame)
    prefill_ai = pd.Series(PROMPTS * roofline.prefill_flops_per_token(arrays, PROMPTS)
                           / roofline.weight_read_bytes(arrays, PROMPTS),
                           index=pd.Index(PROMPTS, name="prompt_tokens"), name="prefill")

    fig, ax = plt.subplots(figsize=(9, 5))
    for col in decode_ai:
        ax.loglog(decode_ai.index, decode_ai[col], marker="o", label=col)
    ax.loglog(prefill_ai.index, prefill_ai, marker="s", color="black", label="prefill (x = prompt tokens)")
    for (name, value), color in zip(ridge.items(), plt.cm.tab10(np.arange(len(ridge)) + 3)):
        ax.axhline(value, color=color, ls="--", lw=1, label=f"ridge point {name}: {value:.0f}")
    ax.set_xlabel("batch (decode) or prompt tokens (prefill)")
    ax.set_ylabel("arithmetic intensity [FLOP/byte]")
    ax.set_title("Llama 3 8B BF16: where decode and prefill sit against each GPU's ridge point")
    ax.legend(loc="upper left", fontsize=8, ncol=2)
    plt.tight_layout()
    """),
    md("""
    ## Batch-1 speed limit and the compute-bound crossover on H100

    With ideal efficiencies (`memory_efficiency = compute_efficiency = 1`) and no KV, a
    batch-1 decode step is the weight read; decode turns compute bound only when the batch
    reaches the ridge point.
    """),
    code("""
    ideal = ServingParams().with_overrides(memory_efficiency=1, compute_efficiency=1)
    batch1 = calc.eval_config(catalog, model="llama-3-8b", gpu="h100-sxm", batch=1, prompt=1, output=1,
                              context=1, params=ideal)
    crossover = calc.sweep(catalog, model="llama-3-8b", gpu="h100-sxm", context=1,
                           batches=list(range(200, 401, 4)), params=ideal)
    first_compute_bound = int(crossover.loc[crossover["bound"] == "compute", "batch"].min())
    kv_intensity = {m: calc.eval_config(catalog, model=m, gpu="h100-sxm")["kv_arithmetic_intensity"]
                    for m in ("llama-3-8b", "llama-3-70b")}
    pd.Series({"batch-1 TPOT [ms]": batch1["tpot_s"] * 1e3,
               "batch-1 tokens/s": batch1["throughput_tokens_per_s"],
               "first compute-bound batch": first_compute_bound,
               "KV-read intensity, Llama 3 8B": kv_intensity["llama-3-8b"],
               "KV-read intensity, Llama 3 70B": kv_intensity["llama-3-70b"]}).round(2)
    """),
    md("## Seed checks"),
    code("""
    SEED_RIDGE = {"A100 SXM 80GB": 156, "H100 SXM": 295, "H200": 206, "B200": 281, "RTX 4090": 165,
                  "Apple M2 Ultra": 34}
    for name, seed in SEED_RIDGE.items():
        assert near(ridge[name], seed), (name, ridge[name], seed)
    assert near(kv_intensity["llama-3-8b"], 4)
    assert near(batch1["tpot_s"], 4.8e-3) and near(batch1["throughput_tokens_per_s"], 210)
    assert batch1["bound"] == "memory"
    assert near(first_compute_bound, ridge["H100 SXM"])
    assert near(decode_ai.loc[1, "decode, context 1"], 1)
    assert near(prefill_ai[512], 512) and prefill_ai[512] > ridge["H100 SXM"] > prefill_ai[256]
    assert (decode_ai["decode, context 8192"] < ridge.min()).all(), "8K-context decode is memory bound on every GPU"
    print("roofline: seed numbers reproduced")
    """),
]

# --------------------------------------------------------------------------- 03

SWEEP = [
    md("""
    # 3. Batch sweep and the decode batch knee

    One decode step reads the weights once for the whole batch, plus every sequence's own
    KV cache: `bytes = model_bytes + B x kv_bytes_per_seq`. While the weights dominate,
    doubling the batch almost doubles throughput at nearly the same TPOT (a free lunch).
    Once the KV reads dominate, TPOT grows in proportion to B and throughput flattens.
    The two terms are equal at

    **B_knee = model_bytes / kv_bytes_per_seq**

    which depends on the model and the context, not on the GPU's bandwidth. The
    decode-batch-knee seed recommends `--max-num-seqs` in [1.0, 1.5] x B_knee: Llama-3-8B
    B_knee = 60 at 2,048 tokens (-> 64), 15 at 8,192 (-> 16), 238 at 512 (-> 256); the 70B
    knee at 2,048 is 208 (-> 256). vLLM's default of 256 runs the 8B at 2K context four
    times past its knee.

    The seed's A100 table uses efficiency 1 (memory term only); so does this notebook.
    """),
    code(SETUP),
    code("""
    ideal = ServingParams().with_overrides(memory_efficiency=1, compute_efficiency=1)
    BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    CONTEXTS = [512, 2048, 8192]
    tables = {c: calc.sweep(catalog, model="llama-3-8b", gpu="a100-sxm-80gb", context=c, batches=BATCHES,
                            params=ideal).set_index("batch")
              for c in CONTEXTS}
    knees = pd.DataFrame([calc.knee(catalog, model=m, context=c)
                          for m, c in [("llama-3-8b", 2048), ("llama-3-8b", 8192), ("llama-3-8b", 512),
                                       ("llama-3-70b", 2048)]])
    knees = knees.set_index(["model", "context_tokens"])[["b_knee", "recommended_max_num_seqs"]]
    knees.round(1)
    """),
    code("""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for c, color in zip(CONTEXTS, ["tab:green", "tab:blue", "tab:red"]):
        t = tables[c]
        knee_b = knees.loc[("llama-3.1-8b", c), "b_knee"]
        fits, over = t[t["fits"]], t[~t["fits"]]
        for ax, col, scale in [(axes[0], "tpot_s", 1e3), (axes[1], "throughput_tokens_per_s", 1)]:
            ax.plot(t.index, t[col] * scale, color=color, label=f"context {c}")
            ax.scatter(fits.index, fits[col] * scale, color=color)
            ax.scatter(over.index, over[col] * scale, facecolors="none", edgecolors=color)
            ax.axvline(knee_b, color=color, ls=":", lw=1)
        axes[2].plot(t["tpot_s"] * 1e3, t["throughput_tokens_per_s"], marker="o", color=color, label=f"context {c}")
        for b in (32, 128):
            axes[2].annotate(f"B={b}", (t.loc[b, "tpot_s"] * 1e3, t.loc[b, "throughput_tokens_per_s"]), fontsize=7)
    axes[0].set_ylabel("TPOT [ms]")
    axes[1].set_ylabel("throughput [output tokens/s]")
    for ax in axes[:2]:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch (dotted: B_knee; hollow: KV does not fit in 80 GB)")
    axes[2].set_xlabel("TPOT [ms]")
    axes[2].set_ylabel("throughput [output tokens/s]")
    axes[2].set_title("the trade-off: throughput bought with latency")
    axes[0].legend()
    fig.suptitle("Llama-3-8B on A100 (2 TB/s), efficiency 1")
    plt.tight_layout()
    """),
    md("## The seed's table"),
    code("""
    seed_table = pd.concat({c: tables[c][["tpot_s", "throughput_tokens_per_s", "bound", "fits"]] for c in CONTEXTS},
                           names=["context_tokens"])
    seed_table.assign(tpot_ms=seed_table["tpot_s"] * 1e3).drop(columns="tpot_s").round(1)
    """),
    md("""
    ## Marginal efficiency and the GPU's role

    From B=64 to B=128 at 2,048 tokens TPOT rises about 51% while throughput rises only
    32%: past the knee each extra sequence costs more latency than it earns. A faster GPU
    (H100, 3.35 TB/s) lowers TPOT by about 40% but leaves B_knee where it is.
    """),
    code("""
    t2k = tables[2048]
    growth_64_128 = {"tpot": t2k.loc[128, "tpot_s"] / t2k.loc[64, "tpot_s"],
                     "throughput": t2k.loc[128, "throughput_tokens_per_s"] / t2k.loc[64, "throughput_tokens_per_s"]}
    t8k = tables[8192]
    tpot_vs_b1_8k = {b: t8k.loc[b, "tpot_s"] / t8k.loc[1, "tpot_s"] for b in (8, 32)}
    h100_2k = calc.sweep(catalog, model="llama-3-8b", gpu="h100-sxm", context=2048, batches=[32], params=ideal)
    h100_over_a100 = h100_2k["tpot_s"].iloc[0] / t2k.loc[32, "tpot_s"]
    pd.Series({"TPOT x, B 64->128 @2K": growth_64_128["tpot"], "tok/s x, B 64->128 @2K": growth_64_128["throughput"],
               "TPOT(B=8)/TPOT(B=1) @8K": tpot_vs_b1_8k[8], "TPOT(B=32)/TPOT(B=1) @8K": tpot_vs_b1_8k[32],
               "TPOT H100 / A100 @2K, B=32": h100_over_a100}).round(3)
    """),
    md("## Seed checks"),
    code("""
    assert near(t2k.loc[32, "tpot_s"], 12.3e-3) and near(t2k.loc[32, "throughput_tokens_per_s"], 2602)
    assert near(t2k.loc[64, "tpot_s"], 16.6e-3) and near(t2k.loc[64, "throughput_tokens_per_s"], 3857)
    assert near(t8k.loc[32, "throughput_tokens_per_s"], 1270) and near(t8k.loc[256, "throughput_tokens_per_s"], 1759)
    assert near(growth_64_128["tpot"], 1.51) and near(growth_64_128["throughput"], 1.32)
    assert near(tpot_vs_b1_8k[8], 1.45) and near(tpot_vs_b1_8k[32], 2.95)
    assert near(1 - h100_over_a100, 0.40)
    SEED_KNEES = {("llama-3.1-8b", 2048): (60, 64), ("llama-3.1-8b", 8192): (15, 16),
                  ("llama-3.1-8b", 512): (238, 256), ("llama-3.1-70b", 2048): (208, 256)}
    for key, (seed_knee, seed_seqs) in SEED_KNEES.items():
        assert near(knees.loc[key, "b_knee"], seed_knee), key
        assert knees.loc[key, "recommended_max_num_seqs"] == seed_seqs, key
        assert knees.loc[key, "b_knee"] <= seed_seqs <= 1.5 * knees.loc[key, "b_knee"]
    for t in tables.values():
        assert t["tpot_s"].is_monotonic_increasing and t["throughput_tokens_per_s"].is_monotonic_increasing
    print("batch sweep and knee: seed numbers reproduced")
    """),
]

# --------------------------------------------------------------------------- 04

BATCHING = [
    md("""
    # 4. Static vs continuous batching

    Requests arrive at random times and want very different numbers of output tokens.
    **Static batching** starts a batch and keeps it until its longest request finishes: a
    slot whose request stopped after 10 tokens idles until the 500-token one is done, and
    new arrivals wait. **Continuous batching** (iteration-level scheduling, Orca 2022)
    schedules per decode step: finished requests leave, waiting ones take the free slots
    at once. Since a decode step costs about the same whatever the batch (memory bound),
    keeping the slots full *is* throughput. vLLM, TensorRT-LLM and SGLang all do this.

    The seed's toy timeline: seeded Poisson arrivals, one time unit = one decode step of
    cost 1 whatever the batch, output lengths uniform in [10, 500], no prefill
    (`planner.simulate.scheduler_timeline`). Then the same comparison on a real replica
    with the discrete-event simulator (`planner.simulate.simulate_replica`).
    """),
    code(SETUP),
    code("""
    from planner.simulate import scheduler_timeline

    tl = scheduler_timeline(requests=40, arrival_rate_per_step=0.5, max_batch=8, output_min=10, output_max=500,
                            seed=0)
    POLICIES = ("static", "continuous")
    summary = pd.DataFrame({p: {k: v for k, v in tl[p].items() if k != "timeline"} for p in POLICIES}).T
    summary
    """),
    code("""
    fig, axes = plt.subplots(2, 1, figsize=(12, 6), sharex=True)
    colors = plt.cm.tab20(np.arange(20))
    for ax, policy in zip(axes, POLICIES):
        for slot, request, start, end in tl[policy]["timeline"]:
            ax.broken_barh([(start, end - start)], (slot - 0.4, 0.8), color=colors[request % 20],
                           edgecolor="white", lw=0.5)
        ax.plot(tl["arrival_steps"], np.full(len(tl["arrival_steps"]), -1.0), "k|", ms=8)
        s = tl[policy]
        ax.set_title(f"{policy}: slot utilization {s['slot_utilization']:.0%}, "
                     f"mean wait {s['mean_wait_steps']:.0f} steps, makespan {s['makespan_steps']} steps")
        ax.set_yticks(range(-1, tl["max_batch"]), ["arrivals", *[f"slot {i}" for i in range(tl["max_batch"])]])
    axes[-1].set_xlabel("decode step")
    plt.tight_layout()
    """),
    md("""
    ## The same comparison on a real replica

    Llama 3.1 8B, BF16, one H100, 32 slots; lognormal prompts (mean 600, p95 1,800 tokens)
    and outputs (mean 200, p95 600), Poisson arrivals. Static batching runs out of capacity
    long before continuous batching does, and its requests wait for whole batches.
    """),
    code("""
    from planner.configs import config_arrays
    from planner.simulate import simulate_replica
    from planner.traffic import LogNormal

    frame = pd.DataFrame({"model": ["llama-3.1-8b"], "gpu": ["h100-sxm"], "quantization": ["bf16"],
                          "kv_cache_dtype": ["bf16"], "tp": [1], "pp": [1], "batch": [32], "prompt_tokens": [600],
                          "output_tokens": [200], "context_tokens": [np.nan]})
    arrays, _ = config_arrays(catalog, frame)
    RATES = [1.0, 2.0, 3.0, 4.0]
    sims = []
    for policy in POLICIES:
        for rate in RATES:
            r = simulate_replica(arrays, ServingParams(), rate_per_s=rate, prompt=LogNormal(600, 1800),
                                 output=LogNormal(200, 600), max_batch=32, requests=2000, seed=0, scheduler=policy)
            sims.append({"scheduler": policy, "rate_per_s": rate, "ttft_p95_s": r.ttft_p95_s,
                         "tpot_p95_s": r.tpot_p95_s, "mean_wait_s": r.mean_wait_s,
                         "slot_utilization": r.slot_utilization, "throughput_tokens_per_s": r.throughput_tokens_per_s})
    sims = pd.DataFrame(sims).set_index(["scheduler", "rate_per_s"])

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for policy in POLICIES:
        s = sims.loc[policy]
        axes[0].semilogy(s.index, s["ttft_p95_s"], marker="o", label=policy)
        axes[1].plot(s.index, s["slot_utilization"], marker="o", label=policy)
    axes[0].set_ylabel("p95 TTFT [s]")
    axes[1].set_ylabel("slot utilization")
    for ax in axes:
        ax.set_xlabel("arrival rate [requests/s]")
        ax.legend()
    fig.suptitle("Llama 3.1 8B on one H100, 32 slots (discrete-event simulation)")
    plt.tight_layout()
    sims.round(3)
    """),
    md("## Checks: continuous batching wins on the same arrivals"),
    code("""
    static, continuous = tl["static"], tl["continuous"]
    assert continuous["busy_slot_steps"] == static["busy_slot_steps"], "same work on the same requests"
    assert continuous["slot_utilization"] > static["slot_utilization"]
    assert continuous["mean_wait_steps"] < static["mean_wait_steps"]
    assert continuous["makespan_steps"] <= static["makespan_steps"]
    for rate in RATES:
        assert sims.loc[("continuous", rate), "ttft_p95_s"] < sims.loc[("static", rate), "ttft_p95_s"], rate
        assert sims.loc[("continuous", rate), "mean_wait_s"] < sims.loc[("static", rate), "mean_wait_s"], rate
    print("continuous batching beats static batching:",
          f"utilization {static['slot_utilization']:.0%} -> {continuous['slot_utilization']:.0%},",
          f"mean wait {static['mean_wait_steps']:.0f} -> {continuous['mean_wait_steps']:.0f} steps")
    """),
]

# --------------------------------------------------------------------------- 05

PARALLEL = [
    md("""
    # 5. Parallelism: tensor, pipeline, data

    * **Tensor parallelism (TP, N GPUs)** splits every layer's matrices: weights, KV and
      memory bandwidth are divided / multiplied by N, so TPOT really drops, at the price of
      two all-reduces per layer per step (160 per token for an 80-layer model). Each is
      small (b x d elements) but they add up: without NVLink (hundreds of GB/s) the gain
      melts away over PCIe (32-64 GB/s) and its higher fixed latency.
    * **Pipeline parallelism (PP, S stages)** gives each GPU a contiguous block of layers:
      little communication, but a token still visits every stage in turn, so a single
      request is not faster; micro-batches keep the stages busy, except for the bubble
      `(S - 1) / (m + S - 1)` of GPipe with m micro-batches (4 stages, 8 micro-batches:
      27.3%).
    * **Data parallelism (DP)** runs replicas behind a load balancer: the simplest way to
      add throughput (the planner's "replicas").

    Numbers: `calculators.eval_config` (TP all-reduce time `t_comm_s`, TPOT) and
    `planner.serving.roofline.pipeline_bubble_fraction`.
    """),
    code(SETUP),
    code("""
    from planner.serving.roofline import pipeline_bubble_fraction

    LINKS = {"H100 SXM, NVLink 450 GB/s": "h100-sxm", "H100 PCIe, PCIe 64 GB/s": "h100-pcie",
             "L40S, PCIe 32 GB/s": "l40s"}
    TP = [1, 2, 4, 8]
    rows = []
    for label, gpu in LINKS.items():
        for n in TP:
            r = calc.eval_config(catalog, model="llama-3-70b", gpu=gpu, tp=n, batch=32, prompt=1024, output=256)
            rows.append({"gpu": label, "tp": n, "t_comm_ms": r["t_comm_s"] * 1e3, "tpot_ms": r["tpot_s"] * 1e3,
                         "t_mem_ms": r["t_mem_s"] * 1e3, "fits": r["fits"]})
    tp_table = pd.DataFrame(rows).set_index(["gpu", "tp"])
    tp_table.round(2)
    """),
    code("""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for label in LINKS:
        t = tp_table.loc[label]
        axes[0].plot(t.index, t["t_comm_ms"], marker="o", label=label)
        axes[1].plot(t.index, t["tpot_ms"], marker="o", label=label)
        bad = t[~t["fits"]]
        axes[1].scatter(bad.index, bad["tpot_ms"], s=120, facecolors="none", edgecolors="red")
    axes[0].set_ylabel("all-reduce time per decode step [ms]")
    axes[1].set_ylabel("TPOT [ms] (red ring: weights do not fit)")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("TP degree N")
        ax.set_xticks(TP)
        ax.legend(fontsize=8)
    fig.suptitle("Llama 3 70B BF16, batch 32: TP communication over NVLink vs PCIe")
    plt.tight_layout()
    """),
    md("""
    ## Pipeline parallelism: no single-request speed-up, and the bubble
    """),
    code("""
    single = pd.Series({f"TP {tp} x PP {pp}": calc.eval_config(catalog, model="llama-3-70b", gpu="h100-sxm", tp=tp, pp=pp,
                                                                batch=1, prompt=1024, output=256)["tpot_s"] * 1e3
                        for tp, pp in [(1, 1), (1, 4), (4, 1)]}, name="batch-1 TPOT [ms]")

    micro = np.arange(1, 33)
    bubbles = pd.DataFrame({f"S = {s}": pipeline_bubble_fraction(s, micro) for s in (2, 4, 8)},
                           index=pd.Index(micro, name="micro-batches m"))
    ax = bubbles.plot(figsize=(7, 3.8), marker=".")
    ax.set_ylabel("bubble fraction (S - 1) / (m + S - 1)")
    ax.set_title("GPipe pipeline bubble")
    ax.axhline(bubbles.loc[8, "S = 4"], color="gray", ls=":")
    ax.annotate(f"S=4, m=8: {bubbles.loc[8, 'S = 4']:.1%}", (8, bubbles.loc[8, "S = 4"]), xytext=(12, 0.45),
                arrowprops={"arrowstyle": "->"})
    single.round(2)
    """),
    md("## Checks"),
    code("""
    assert near(bubbles.loc[8, "S = 4"], 0.273)
    train_bubble = calc.train(catalog, params=70e9, tokens=1e12, gpu="h100-sxm", gpus=64, mfu=0.4, pp=4, micro_batches=8)
    assert near(train_bubble["pipeline_bubble_fraction"], 0.273)
    assert (bubbles.diff().iloc[1:] < 0).all().all(), "more micro-batches, smaller bubble"
    nvlink, pcie = tp_table.loc["H100 SXM, NVLink 450 GB/s"], tp_table.loc["H100 PCIe, PCIe 64 GB/s"]
    assert (nvlink.loc[1, "t_comm_ms"], pcie.loc[1, "t_comm_ms"]) == (0.0, 0.0), "no all-reduce without TP"
    assert (pcie.loc[2:, "t_comm_ms"] > 3 * nvlink.loc[2:, "t_comm_ms"]).all()
    assert nvlink["tpot_ms"].is_monotonic_decreasing, "over NVLink TP keeps cutting TPOT"
    assert near(single["TP 1 x PP 4"], single["TP 1 x PP 1"]), "PP does not speed up one request"
    assert single["TP 4 x PP 1"] < 0.35 * single["TP 1 x PP 1"], "TP does"
    print("parallelism: bubble 27.3% at S=4, m=8; PCIe all-reduces cost",
          f"{(pcie.loc[8, 't_comm_ms'] / nvlink.loc[8, 't_comm_ms']):.1f}x NVLink's at TP 8")
    """),
]

# --------------------------------------------------------------------------- 06

COST = [
    md("""
    # 6. Cost: dollars per million tokens

    Serving cost is GPU time shared out over tokens. N GPUs rented at c dollars per GPU-hour
    producing T tokens/s cost

    **$/1M tokens = N x c / (T x 3600) x 10^6**

    (`planner.serving.economics.usd_per_million_tokens`). An H100 at $2.5/h making 200 tok/s
    at batch 1 costs about $3.5 per million tokens; batched to 2,500 tok/s, about $0.28:
    same hardware, same model, more than ten times cheaper. The batch (the throughput) sets
    the unit price. Prices are examples: clouds, commitments and months differ a lot.
    Output tokens only; input (prefill) tokens are much cheaper to make.
    """),
    code(SETUP),
    code("""
    from planner.serving.economics import usd_per_million_tokens

    seed_cases = pd.DataFrame({"gpus": [1, 1], "usd_per_gpu_hour": [2.5, 2.5], "tokens_per_s": [200, 2500]},
                              index=["batch 1", "batched"])
    seed_cases["usd_per_million_tokens"] = usd_per_million_tokens(
        seed_cases["gpus"], seed_cases["usd_per_gpu_hour"], seed_cases["tokens_per_s"])
    seed_cases.round(3)
    """),
    md("""
    ## $/1M tokens against batch and price

    Llama 3.1 8B BF16 on one H100 at a mean context of 2,048 tokens, throughput from the
    batch sweep (default efficiencies 0.8 / 0.6), at several hourly prices.
    """),
    code("""
    BATCHES = [1, 2, 4, 8, 16, 32, 64, 128]
    PRICES = [1.5, 2.5, 3.5, 5.0]
    sweep = calc.sweep(catalog, model="llama-3-8b", gpu="h100-sxm", context=2048, batches=BATCHES).set_index("batch")
    cost = pd.DataFrame({f"${p}/h": usd_per_million_tokens(1, p, sweep["throughput_tokens_per_s"]) for p in PRICES},
                        index=sweep.index)

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for col in cost:
        axes[0].loglog(cost.index, cost[col], marker="o", label=col)
    axes[0].set_xscale("log", base=2)
    axes[0].set_xlabel("batch")
    axes[0].set_ylabel("$ per 1M output tokens")
    axes[0].set_title("Llama 3.1 8B, H100, context 2048")
    axes[0].legend(title="GPU price")

    price_grid = np.linspace(0.5, 6, 23)
    for tps in [200, 1000, 2500, 10000]:
        axes[1].plot(price_grid, usd_per_million_tokens(1, price_grid, tps), label=f"{tps:,} tok/s")
    axes[1].scatter(seed_cases["usd_per_gpu_hour"], seed_cases["usd_per_million_tokens"], color="black", zorder=3,
                    label="seed examples")
    axes[1].set_yscale("log")
    axes[1].set_xlabel("$ per GPU-hour")
    axes[1].set_ylabel("$ per 1M output tokens")
    axes[1].set_title("one GPU at a given throughput")
    axes[1].legend(fontsize=8)
    plt.tight_layout()
    cost.round(3)
    """),
    md("""
    ## Across GPUs at their catalog prices

    `eval_config` prices a configuration with the catalog's default on-demand rate (Llama
    3.1 8B, batch 64, prompt 1,024, output 256).
    """),
    code("""
    gpu_rows = []
    for gpu in ["l40s", "a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200", "mi300x"]:
        r = calc.eval_config(catalog, model="llama-3-8b", gpu=gpu, batch=64, prompt=1024, output=256)
        gpu_rows.append({"gpu": gpu, "usd_per_gpu_hour": r["usd_per_gpu_hour"],
                         "throughput_tokens_per_s": r["throughput_tokens_per_s"],
                         "usd_per_million_tokens": r["usd_per_million_tokens"]})
    by_gpu = pd.DataFrame(gpu_rows).set_index("gpu")
    ax = by_gpu["usd_per_million_tokens"].plot.bar(figsize=(7, 3.5), rot=0)
    ax.set_ylabel("$ per 1M output tokens")
    ax.set_title("Llama 3.1 8B, batch 64, catalog on-demand prices")
    by_gpu.round(3)
    """),
    md("## Seed checks"),
    code("""
    assert near(seed_cases.loc["batch 1", "usd_per_million_tokens"], 3.47)
    assert near(seed_cases.loc["batched", "usd_per_million_tokens"], 0.28)
    assert seed_cases.loc["batch 1", "usd_per_million_tokens"] > 10 * seed_cases.loc["batched", "usd_per_million_tokens"]
    assert (cost.diff().iloc[1:] < 0).all().all(), "bigger batches make every token cheaper"
    for gpu, row in by_gpu.iterrows():
        assert near(row["usd_per_million_tokens"],
                    usd_per_million_tokens(1, row["usd_per_gpu_hour"], row["throughput_tokens_per_s"]), rel=1e-9), gpu
    print("cost: $2.5/h at 200 tok/s -> $%.2f, at 2,500 tok/s -> $%.2f per 1M tokens"
          % tuple(seed_cases["usd_per_million_tokens"]))
    """),
]

# --------------------------------------------------------------------------- 07

PLAYGROUND = [
    md("""
    # 7. The comprehensive serving playground

    One configuration, every quantity of the analytic serving model (DESIGN section 4) at
    once, from `calculators.eval_config`:

    * **fit**: weights / N + KV + 2 GB workspace within 90% of each GPU; the decode batch
      is b = min(users, max batch) and the other users queue;
    * **decode step**: `TPOT = max(t_mem, t_comp) + t_comm` (memory, compute, TP
      all-reduces);
    * **prefill** and **TTFT** = queue wait + prefill + one step in progress; the seed's
      closed-loop wait `ceil(U/b - 1) x (t_pf + o x TPOT)`;
    * **throughput** b / TPOT, per-user speed 1 / TPOT, **$/1M tokens**, **B_knee**;
    * **under Poisson load** (`rate_per_s`): p95 TTFT and TPOT of a continuous-batching
      replica; with both SLOs, the **capacity at SLO**: the largest request rate one
      replica carries within them (what the optimizer buys).

    Change `CONFIG` and re-run to play.
    """),
    code(SETUP),
    code("""
    CONFIG = dict(model="llama-3-70b", gpu="h100-sxm", tp=4, pp=1, quant="fp8", kv_dtype="bf16",
                  batch=64, users=96, prompt=1024, output=256)
    SLO = dict(slo_ttft_p95_s=1.0, slo_tpot_p95_s=0.05)
    RATE = 4.0  # requests/s, Poisson

    result = calc.eval_config(catalog, **CONFIG, rate_per_s=RATE, **SLO)

    UNITS = {  # key -> (group, unit, scale)
        "weights_bytes": ("memory", "GB", 1e-9), "weights_bytes_per_gpu": ("memory", "GB", 1e-9),
        "kv_bytes_per_token": ("memory", "KiB", 1 / 1024), "kv_bytes_per_seq": ("memory", "GB", 1e-9),
        "kv_budget_bytes_per_gpu": ("memory", "GB", 1e-9), "kv_bytes_needed_per_gpu": ("memory", "GB", 1e-9),
        "max_concurrency": ("memory", "requests", 1), "fits": ("memory", "", 1),
        "arithmetic_intensity": ("roofline", "FLOP/byte", 1), "kv_arithmetic_intensity": ("roofline", "FLOP/byte", 1),
        "ridge_point": ("roofline", "FLOP/byte", 1), "bound": ("roofline", "", 1),
        "t_mem_s": ("decode step", "ms", 1e3), "t_comp_s": ("decode step", "ms", 1e3),
        "t_comm_s": ("decode step", "ms", 1e3), "tpot_s": ("decode step", "ms", 1e3),
        "expert_read_fraction": ("decode step", "", 1),
        "prefill_s": ("first token", "ms", 1e3), "queue_wait_s": ("first token", "ms", 1e3),
        "ttft_s": ("first token", "ms", 1e3),
        "throughput_tokens_per_s": ("throughput and cost", "tok/s", 1),
        "per_user_tokens_per_s": ("throughput and cost", "tok/s", 1),
        "usd_per_gpu_hour": ("throughput and cost", "$/GPU-h", 1),
        "usd_per_million_tokens": ("throughput and cost", "$/1M tok", 1),
        "b_knee": ("throughput and cost", "sequences", 1),
        "rate_per_s": ("under load", "req/s", 1), "ttft_p95_s": ("under load", "ms", 1e3),
        "tpot_p95_s": ("under load", "ms", 1e3), "tpot_mean_s": ("under load", "ms", 1e3),
        "mean_decode_batch": ("under load", "sequences", 1), "overloaded": ("under load", "", 1),
        "slo_ttft_p95_s": ("under load", "ms", 1e3), "slo_tpot_p95_s": ("under load", "ms", 1e3),
        "max_rate_per_s": ("under load", "req/s", 1),
    }
    table = []
    for key, value in result.items():
        group, unit, scale = UNITS.get(key, ("configuration", "", 1))
        if isinstance(value, dict):
            continue
        shown = value * scale if isinstance(value, float) else value
        table.append({"group": group, "quantity": key, "value": shown, "unit": unit})
    table = pd.DataFrame(table).set_index(["group", "quantity"])
    with pd.option_context("display.max_rows", 100, "display.float_format", "{:,.4g}".format):
        display(table)
    """),
    md("""
    ## Where the decode step goes, and p95 latency against load
    """),
    code("""
    rates = np.linspace(0.05, 1.15, 24) * result["max_rate_per_s"]
    load = pd.DataFrame([calc.eval_config(catalog, **CONFIG, rate_per_s=float(r)) for r in rates])
    load = load.set_index("rate_per_s")[["ttft_p95_s", "tpot_p95_s", "mean_decode_batch", "overloaded"]]

    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    parts = pd.Series({k: result[k] * 1e3 for k in ("t_mem_s", "t_comp_s", "t_comm_s", "tpot_s")})
    parts.plot.bar(ax=axes[0], rot=0, color=["tab:blue", "tab:orange", "tab:purple", "black"])
    axes[0].set_ylabel("ms")
    axes[0].set_title(f"decode step at batch {result['batch']} ({result['bound']} bound)")
    ok = load[~load["overloaded"]]
    for ax, col, slo in [(axes[1], "ttft_p95_s", SLO["slo_ttft_p95_s"]), (axes[2], "tpot_p95_s", SLO["slo_tpot_p95_s"])]:
        ax.plot(ok.index, ok[col] * 1e3, marker="o")
        ax.axhline(slo * 1e3, color="red", ls="--", label="SLO")
        ax.axvline(result["max_rate_per_s"], color="gray", ls=":", label="capacity at SLO")
        ax.set_xlabel("arrival rate [requests/s]")
        ax.set_ylabel(f"{col.removesuffix('_s')} [ms]")
        ax.legend(fontsize=8)
    axes[1].set_yscale("log")
    fig.suptitle(f"{result['model']} on {result['tp']}x {result['gpu']} ({result['quantization']}), max batch "
                 f"{result['max_batch']}: the replica carries {result['max_rate_per_s']:.2f} req/s within the SLOs")
    plt.tight_layout()
    """),
    md("## Checks (invariants of the model's outputs)"),
    code("""
    r = result
    assert r["fits"] and r["kv_bytes_needed_per_gpu"] <= r["kv_budget_bytes_per_gpu"]
    assert r["batch"] == min(CONFIG["users"], CONFIG["batch"])
    assert near(r["throughput_tokens_per_s"], r["batch"] / r["tpot_s"], rel=1e-9)
    assert near(r["per_user_tokens_per_s"], 1 / r["tpot_s"], rel=1e-9)
    assert near(r["ttft_s"], r["queue_wait_s"] + r["prefill_s"] + r["tpot_s"], rel=1e-9)
    assert r["queue_wait_s"] > 0, "96 users on 64 slots: a third of them queue"
    assert r["tpot_s"] >= max(r["t_mem_s"], r["t_comp_s"])
    assert (r["bound"] == "memory") == (r["arithmetic_intensity"] < r["ridge_point"])
    assert r["ttft_p95_s"] <= SLO["slo_ttft_p95_s"] and r["tpot_p95_s"] <= SLO["slo_tpot_p95_s"]
    assert r["max_rate_per_s"] > RATE
    within = load[load.index <= 0.99 * r["max_rate_per_s"]]
    assert (within["ttft_p95_s"] <= SLO["slo_ttft_p95_s"]).all() and (within["tpot_p95_s"] <= SLO["slo_tpot_p95_s"]).all()
    beyond = load[load.index >= 1.05 * r["max_rate_per_s"]]
    assert ((beyond["ttft_p95_s"] > SLO["slo_ttft_p95_s"]) | (beyond["tpot_p95_s"] > SLO["slo_tpot_p95_s"])).all()
    assert ok["ttft_p95_s"].is_monotonic_increasing and ok["tpot_p95_s"].is_monotonic_increasing
    print(f"playground: {r['max_rate_per_s']:.2f} req/s per replica at p95 TTFT <= {SLO['slo_ttft_p95_s']} s,"
          f" TPOT <= {SLO['slo_tpot_p95_s'] * 1e3:.0f} ms; ${r['usd_per_million_tokens']:.3f} per 1M tokens at batch"
          f" {r['batch']}")
    """),
]

# --------------------------------------------------------------------------- 08

TRAINING = [
    md("""
    # 8. Training compute and duration: C = 6ND

    Training an N-parameter model on D tokens takes about **C = 6ND FLOPs** (2 forward,
    4 backward per parameter and token). On K GPUs of peak pi at a model FLOPs utilization
    MFU (typically 30-50% at scale: communication, bubbles, memory-bound kernels, restarts)
    it lasts C / (K x pi x MFU). Adam in mixed precision holds about 16 bytes per parameter
    (BF16 weights and gradients 4 B, FP32 master weights and two moments 12 B), which is
    why training shards even the optimizer state (FSDP / ZeRO).

    Seed: Llama 3.1 405B on 15.6T tokens is 6 x 405e9 x 15.6e12 = 3.8e25 FLOPs, trained on
    up to 16K H100s at 38-43% BF16 MFU; its Adam state alone is about 6.5 TB. A 70B model
    on 15T tokens: 6.3e24 FLOPs. Numbers from `calculators.train`.
    """),
    code(SETUP),
    code("""
    RUNS = {"Llama 3.1 405B, 15.6T tokens": (405e9, 15.6e12), "70B, 15T tokens": (70e9, 15e12),
            "Llama 3 8B, 15T tokens": (8e9, 15e12)}
    runs = pd.DataFrame({name: calc.train(catalog, params=n, tokens=d, gpu="h100-sxm", gpus=16384, mfu=0.40)
                         for name, (n, d) in RUNS.items()}).T
    runs = runs[["params", "tokens", "flops", "days", "optimizer_state_bytes"]].astype(float)
    runs.assign(optimizer_state_tb=runs["optimizer_state_bytes"] / 1e12).drop(columns="optimizer_state_bytes")
    """),
    code("""
    gpu_counts = [1024, 2048, 4096, 8192, 16384, 32768]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    for mfu in (0.3, 0.4, 0.5):
        days = [calc.train(catalog, params=405e9, tokens=15.6e12, gpu="h100-sxm", gpus=k, mfu=mfu)["days"]
                for k in gpu_counts]
        axes[0].loglog(gpu_counts, days, marker="o", label=f"H100, MFU {mfu:.0%}")
    days_b200 = [calc.train(catalog, params=405e9, tokens=15.6e12, gpu="b200", gpus=k, mfu=0.4)["days"]
                 for k in gpu_counts]
    axes[0].loglog(gpu_counts, days_b200, marker="s", ls="--", label="B200, MFU 40%")
    axes[0].set_xscale("log", base=2)
    axes[0].set_xlabel("GPUs")
    axes[0].set_ylabel("days")
    axes[0].set_title("Llama 3.1 405B on 15.6T tokens")
    axes[0].legend()
    axes[1].bar(runs.index, runs["flops"], color="tab:purple")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("training FLOPs (C = 6ND)")
    axes[1].tick_params(axis="x", labelsize=8)
    plt.tight_layout()
    """),
    md("## Seed checks"),
    code("""
    big = runs.loc["Llama 3.1 405B, 15.6T tokens"]
    assert near(big["flops"], 3.8e25)
    assert near(runs.loc["70B, 15T tokens", "flops"], 6.3e24)
    assert near(big["optimizer_state_bytes"], 6.5e12)
    meta = [calc.train(catalog, params=405e9, tokens=15.6e12, gpu="h100-sxm", gpus=16384, mfu=m)["days"]
            for m in (0.38, 0.43)]
    assert meta[1] < big["days"] < meta[0], "MFU 40% lies between the reported 38% and 43%"
    print(f"405B x 15.6T = {big['flops']:.2e} FLOPs, {big['days']:.0f} days on 16,384 H100 at MFU 40%,"
          f" Adam state {big['optimizer_state_bytes'] / 1e12:.1f} TB")
    """),
]

# --------------------------------------------------------------------------- 09

PARETO = [
    md("""
    # 9. Pareto explorer: cost against p95 latency

    `planner.plan` solves a problem (CP-SAT: the cheapest replicas of the cheapest
    configurations that serve every workload within its p95 SLOs) and sweeps
    epsilon-constraint **Pareto fronts**: for a target t on p95 TPOT (or TTFT) every
    workload's SLO becomes min(SLO, t) and the minimum cost is solved again, once over all
    GPU types (the **mixed** front) and, with `fronts="used"` (the default is the mixed
    front alone), once per GPU type of the plans and of the mixed front.

    The problem here is a smaller variant of `problems/mix-8b-70b.yaml` (an 8B assistant
    and a 70B "pro" tier): four GPU types, six points per front, one plan, so that the
    whole notebook runs in seconds. Then the optimum is re-solved as the H100 price
    (x0.6..x1.4) and the traffic (x0.5..x2) move.
    """),
    code(SETUP),
    code("""
    from planner.problem import ProblemSpec, resolve_problem

    PROBLEM = "problems/mix-8b-70b.yaml"
    shipped = planner.load_problem(PROBLEM, catalog)
    BASE = shipped.spec.model_dump(exclude_none=True)
    BASE["search"]["gpus"] = ["l40s", "a100-sxm-80gb", "h100-sxm", "h200-sxm"]
    BASE["optimize"].update(pareto_points=6, top_k=1)


    def variant(prices=None, traffic=1.0):
        \"\"\"The base problem with price overrides (USD/GPU-hour) and every rate scaled by ``traffic``.\"\"\"
        spec = {**BASE, "prices": {**BASE["prices"], **(prices or {})},
                "workloads": [{**{k: v for k, v in w.items() if k not in ("rate_per_s", "requests_per_day")},
                               "rate_per_s": resolved.rate_per_s * traffic}
                              for w, resolved in zip(BASE["workloads"], shipped.workloads)]}
        return resolve_problem(ProblemSpec.model_validate(spec), PROBLEM, catalog)


    base = variant()
    result = planner.plan(base, fronts="used")
    print(result.status, f"${result.best.usd_per_hour:.2f}/h", result.best.gpus_by_type,
          {k: round(v, 2) for k, v in result.timings_s.items()})
    result.plans_table()[["gpu", "tp", "quantization", "kv_cache_dtype", "max_batch", "replicas", "gpus"]]
    """),
    code("""
    from matplotlib.ticker import LogLocator

    fronts = result.pareto
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8))
    for ax, metric in zip(axes, ("tpot_p95_s", "ttft_p95_s")):
        f = fronts[fronts["metric"] == metric]
        mixed = f[f["front"] == "mixed"]
        ax.plot(mixed["target_s"] * 1e3, mixed["usd_per_hour"], color="black", lw=7, alpha=0.3, label="mixed")
        for front, pts in f[f["front"] != "mixed"].groupby("front"):
            ax.plot(pts["target_s"] * 1e3, pts["usd_per_hour"], marker="o", lw=1.2, label=front)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(plt.ScalarFormatter())
            axis.set_minor_formatter(plt.NullFormatter())
        ax.set_xlabel(f"p95 {metric.split('_')[0].upper()} target [ms]")
        ax.set_ylabel("$ per hour")
        ax.legend(fontsize=8)
    fig.suptitle(f"{base.name}: cost vs p95 latency, mixed fleet and one GPU type at a time")
    plt.tight_layout()
    fronts.pivot_table(index=["metric", "target_s"], columns="front", values="usd_per_hour").round(2)
    """),
    md("""
    ## How the optimum moves with the H100 price and with traffic
    """),
    code("""
    H100 = "h100-sxm"
    h100_price = base.prices_usd_per_gpu_hour[H100]


    def optimum(problem):
        best = planner.plan(problem, pareto=False, top_k=1).best
        return {"usd_per_hour": best.usd_per_hour, **best.gpus_by_type}


    by_price = pd.DataFrame({f: optimum(variant(prices={H100: h100_price * f})) for f in (0.6, 0.8, 1.0, 1.2, 1.4)}).T
    by_traffic = pd.DataFrame({f: optimum(variant(traffic=f)) for f in (0.5, 0.75, 1.0, 1.5, 2.0)}).T
    by_price.index.name, by_traffic.index.name = "h100_price_factor", "traffic_factor"
    by_price, by_traffic = by_price.fillna(0), by_traffic.fillna(0)

    gpu_types = sorted((set(by_price.columns) | set(by_traffic.columns)) - {"usd_per_hour"})
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.2))
    for ax, table, label in [(axes[0], by_price, f"H100 price factor (x ${h100_price}/h)"),
                             (axes[1], by_traffic, "traffic factor")]:
        mix = table.reindex(columns=gpu_types, fill_value=0)
        mix.plot.bar(stacked=True, ax=ax, rot=0, alpha=0.8)
        ax.set_xlabel(label)
        ax.set_ylabel("GPUs in the optimal plan")
        twin = ax.twinx()
        twin.plot(range(len(table)), table["usd_per_hour"], color="black", marker="o", label="$ per hour")
        twin.set_ylabel("$ per hour")
        twin.set_ylim(0, None)
        twin.legend(loc="upper center")
    plt.tight_layout()
    pd.concat({"H100 price": by_price, "traffic": by_traffic}, names=["sweep", "factor"]).round(2)
    """),
    md("## Checks (invariants of the fronts and the sweeps)"),
    code("""
    TOL = 1e-6
    ok = fronts[fronts["usd_per_hour"].notna()]
    for (front, metric), pts in ok.groupby(["front", "metric"]):
        costs = pts.sort_values("target_s")["usd_per_hour"].to_numpy()
        assert (np.diff(costs) <= TOL * costs[:-1]).all(), (front, metric, "looser targets never cost more")
    for metric, f in fronts.groupby("metric"):
        table = f.pivot_table(index="target_s", columns="front", values="usd_per_hour")
        others = table.drop(columns="mixed")
        assert (table["mixed"].to_numpy()[:, None] <= others.to_numpy() * (1 + TOL)).all(where=others.notna().to_numpy()), \\
            (metric, "the mixed front is never above a single-type front")
        assert near(table["mixed"].iloc[-1], result.best.usd_per_hour, rel=TOL), "at the SLOs the front meets the optimum"
    assert (np.diff(by_price["usd_per_hour"]) >= -TOL).all(), "dearer H100s never make the plan cheaper"
    assert (np.diff(by_price[H100]) <= 0).all(), "dearer H100s never buy more H100s"
    assert (np.diff(by_traffic["usd_per_hour"]) >= -TOL).all(), "more traffic never costs less"
    assert by_traffic["usd_per_hour"].iloc[-1] > by_traffic["usd_per_hour"].iloc[0]
    assert near(by_price.loc[1.0, "usd_per_hour"], result.best.usd_per_hour, rel=TOL)
    assert near(by_traffic.loc[1.0, "usd_per_hour"], result.best.usd_per_hour, rel=TOL)
    print("pareto explorer: fronts non-increasing, mixed <= per-GPU fronts, optimum on the fronts;",
          f"H100 GPUs in the optimum from x0.6 to x1.4 of its price: {by_price[H100].astype(int).tolist()}")
    """),
]

NOTEBOOKS = {
    "01_memory_budget.ipynb": MEMORY,
    "02_roofline.ipynb": ROOFLINE,
    "03_batch_sweep_and_knee.ipynb": SWEEP,
    "04_static_vs_continuous_batching.ipynb": BATCHING,
    "05_parallelism.ipynb": PARALLEL,
    "06_cost.ipynb": COST,
    "07_serving_playground.ipynb": PLAYGROUND,
    "08_training_compute.ipynb": TRAINING,
    "09_pareto_explorer.ipynb": PARETO,
}


def build(name: str) -> nbformat.NotebookNode:
    """The notebook ``name`` with stripped outputs and stable cell ids."""
    stem = name.removesuffix(".ipynb")
    cells = []
    for i, (kind, source) in enumerate(NOTEBOOKS[name]):
        cell = new_markdown_cell(source) if kind == "markdown" else new_code_cell(source)
        cell.id = f"{stem[:2]}-{i:02d}"
        cells.append(cell)
    nb = new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC, "language_info": LANGUAGE_INFO})
    nbformat.validate(nb)
    return nb


def render(name: str) -> str:
    return nbformat.writes(build(name)) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name in NOTEBOOKS:
        path = HERE / name
        text = render(name)
        if check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print("out of date (run python notebooks/make_notebooks.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
