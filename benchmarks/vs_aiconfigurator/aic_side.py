"""Runs INSIDE aiconfigurator's virtualenv (never the project's): helpers for run.py.

    python aic_side.py info                      -> JSON: version, silicon_sample.csv path
    python aic_side.py estimate ROWS.json OUT.json

``estimate`` predicts TTFT/TPOT for each measured row of aiconfigurator's shipped
``silicon_sample.csv`` that run.py selected, with aiconfigurator's own single-point
estimator (``aiconfigurator.cli.api.cli_estimate``, the Python form of
``aiconfigurator cli estimate``), at the row's backend, ISL/OSL, parallelism, batch size
(= the measured concurrency) and GEMM quantization. When the row's backend version is not
a queryable slot of the shipped database any more, it retries with the default version
(aiconfigurator's own regression tooling does the same) and records that.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from importlib import metadata
from pathlib import Path

#: silicon_sample.csv names Llama 3.1 70B by a HuggingFace id whose config.json is not
#: shipped with the package (and nothing can be downloaded); the same architecture ships
#: under this id.
MODEL_ALIASES = {"meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B"}


def info() -> dict:
    import aiconfigurator_core

    systems = Path(aiconfigurator_core.__file__).parent / "systems"
    return {
        "aiconfigurator": metadata.version("aiconfigurator"),
        "aiconfigurator_core": metadata.version("aiconfigurator-core"),
        "silicon_sample_csv": str(systems / "silicon_sample.csv"),
        "python": sys.version.split()[0],
    }


def _int(value) -> int | None:
    return None if value in (None, "") else int(float(value))


def estimate(rows: list[dict]) -> list[dict]:
    from aiconfigurator.cli.api import cli_estimate

    out = []
    for row in rows:
        args = dict(
            model_path=MODEL_ALIASES.get(row["model_path"], row["model_path"]),
            system_name=row["system"],
            mode="agg",
            backend_name=row["backend"],
            backend_version=row.get("backend_version") or None,
            isl=int(row["isl"]),
            osl=int(row["osl"]),
            gemm_quant_mode=row.get("gemm_quant_mode") or None,
            batch_size=_int(row["batch_size"]),
            tp_size=_int(row["tp_size"]),
            pp_size=_int(row["pp_size"]) or 1,
        )
        rec = {"id": row["id"], "aic_backend_version_used": args["backend_version"]}
        t0 = time.perf_counter()
        for attempt in (1, 2):
            try:
                with contextlib.redirect_stdout(sys.stderr):
                    res = cli_estimate(**args)
                raw = res.get()
                rec.update(
                    aic_ttft_ms=float(res.ttft),
                    aic_tpot_ms=float(res.tpot),
                    aic_gemm=raw.get("gemm"),
                    aic_kvcache=raw.get("kvcache"),
                    aic_backend_version_used=raw.get("version", args["backend_version"]),
                    aic_error=None,
                )
                break
            except Exception as exc:  # noqa: BLE001 - report every failure per row
                message = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                if attempt == 1 and args["backend_version"] is not None and "version" in str(exc).lower():
                    rec["aic_version_fallback"] = f"{args['backend_version']} -> default ({message[:120]})"
                    args["backend_version"] = None
                    continue
                rec.update(aic_ttft_ms=None, aic_tpot_ms=None, aic_error=message)
                break
        rec["aic_estimate_s"] = time.perf_counter() - t0
        print(
            f"[aic estimate] {row['id']}: {rec.get('aic_ttft_ms')} / {rec.get('aic_tpot_ms')} ms "
            f"({rec['aic_estimate_s']:.1f} s)",
            file=sys.stderr,
            flush=True,
        )
        out.append(rec)
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["info"]:
        print(json.dumps(info()))
        return 0
    if argv[:1] == ["estimate"] and len(argv) == 3:
        rows = json.loads(Path(argv[1]).read_text())
        Path(argv[2]).write_text(json.dumps(estimate(rows), indent=1))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
