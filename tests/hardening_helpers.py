"""Shared helpers of the hardening tests: a tiny problem and an in-process CLI call."""

from __future__ import annotations

import contextlib
import io
import json

import yaml

from planner.cli import main

#: A problem that solves in well under a second (one model, two GPUs, a small grid).
TINY = {
    "name": "tiny",
    "workloads": [{"name": "chat", "model": "llama-3.1-8b", "rate_per_s": 4,
                   "prompt_tokens": {"mean": 1200, "p95": 3000}, "output_tokens": {"mean": 300, "p95": 800},
                   "slo": {"ttft_p95_s": 1.0, "tpot_p95_s": 0.05}}],
    "search": {"gpus": ["h100-sxm", "l40s"], "quantization": ["bf16", "fp8"], "kv_cache_dtype": ["bf16"],
               "tp": [1, 2], "pp": [1], "max_batch": [16, 64]},
}


def tiny(**changes) -> dict:
    """A deep copy of :data:`TINY` with top-level keys replaced."""
    return {**json.loads(json.dumps(TINY)), **changes}


def write(tmp_path, doc, name="p.yaml"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def cli(*argv) -> tuple[int, str, str]:
    """``planner ARGV`` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def assert_input_error(rc: int, err: str, *needles: str) -> None:
    """Exit 2, no traceback or internal error, every line an ``error:`` line, the needles named."""
    assert rc == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), err
    for needle in needles:
        assert needle in err, (needle, err)
