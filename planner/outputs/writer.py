"""Writing ``planner solve --out DIR``: reports, CSVs, plots, launch settings and the run record.

Writes are atomic: every file is generated in memory, written into a temporary sibling
directory, and that directory is renamed into place (replacing an earlier planner output
directory), so a failure leaves no half-written files.

Output-directory rule (:func:`check_out_dir`): the path may be missing, an empty
directory, or a directory this planner wrote before (its ``run.json`` names the
generator); anything else (a file, a non-empty foreign directory) is refused.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import platform
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

import pandas as pd

from planner import dimensions, jsonio
from planner.outputs.tables import csv_text
from planner.schema import PlanningInputError

#: The run record; its ``generator`` key marks a directory as planner output.
RUN_FILE = "run.json"
GENERATOR = "llm-deployment-planner"
PACKAGES = ("llm-deployment-planner", "numpy", "pandas", "ortools", "pydantic", "pyyaml",
            "matplotlib", "openpyxl")


def _is_planner_dir(path: Path) -> bool:
    try:
        record = json.loads((path / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("generator") == GENERATOR


def check_out_dir(path) -> Path:
    """Check that ``path`` may receive planner output, before any work is done.

    Raises
    ------
    PlanningInputError
        ``path`` is a file, or a non-empty directory without a planner ``run.json``.
    """
    path = Path(path)
    if not path.exists():
        _check_parent(path)
        return path
    if not path.is_dir():
        raise PlanningInputError(f"--out {path}: exists and is not a directory")
    _check_parent(path)
    if any(path.iterdir()) and not _is_planner_dir(path):
        raise PlanningInputError(f"--out {path}: directory is not empty and was not written by the planner "
                                 f"(no {RUN_FILE} from {GENERATOR}); choose another directory or empty it")
    foreign = _foreign_files(path)
    if foreign:
        raise PlanningInputError(f"--out {path}: holds files the planner did not write ({', '.join(foreign[:5])}"
                                 f"{', ...' if len(foreign) > 5 else ''}); replacing the directory would delete "
                                 "them: move them out or choose another directory")
    return path


def _check_parent(path: Path) -> None:
    """The nearest existing ancestor of ``path`` must be a writable directory (the output is
    written beside ``path`` and renamed into place)."""
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise PlanningInputError(f"--out {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PlanningInputError(f"--out {path}: cannot write in {parent} (permission denied)")


def _foreign_files(path: Path) -> list[str]:
    """Files under a planner output directory that its ``run.json`` does not list (sorted)."""
    try:
        listed = set(json.loads((path / RUN_FILE).read_text(encoding="utf-8")).get("files") or {})
    except (OSError, ValueError, AttributeError):
        listed = set()
    listed.add(RUN_FILE)
    found = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if not p.is_dir())
    return [rel for rel in found if rel not in listed]


@contextlib.contextmanager
def atomic_output_dir(path):
    """Yield a temporary sibling directory; on success it replaces ``path``, on error it is removed."""
    path = Path(path).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the output is an ordinary directory
    try:
        yield tmp
        old = None
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
            old.rmdir()
            os.replace(path, old)
        try:
            os.replace(tmp, path)
        except OSError:
            if old is not None:
                os.replace(old, path)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _write_file(root: Path, rel: str, data: bytes | str) -> None:
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    if rel.endswith(".sh"):
        target.chmod(0o755)


def write_files(out_dir, files: dict[str, bytes | str], record: dict) -> Path:
    """Write ``files`` (relative path -> content) and ``run.json`` atomically into ``out_dir``.

    ``record`` gains ``generator``, ``created_utc``, package versions and the SHA-256 of
    every file; it is the only file allowed to differ between two runs of the same input.
    """
    out_dir = check_out_dir(out_dir)
    digests = {rel: hashlib.sha256(d.encode("utf-8") if isinstance(d, str) else d).hexdigest()
               for rel, d in sorted(files.items())}
    record = {"generator": GENERATOR, **record,
              "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "python": platform.python_version(), "packages": package_versions(), "files": digests}
    with atomic_output_dir(out_dir) as tmp:
        for rel in sorted(files):
            _write_file(tmp, rel, files[rel])
        _write_file(tmp, RUN_FILE, jsonio.dumps(record) + "\n")
    return out_dir


def package_versions() -> dict[str, str | None]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def file_sha256(path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def plans_frame(doc: dict) -> pd.DataFrame:
    """``plans.csv``: one row per (plan, deployment), numbers from the JSON result."""
    names = [w["name"] for w in doc["workloads"]]
    extra = (("ttft_p95_at_confidence_s", "tpot_p95_at_confidence_s") if doc["margins"]["model_error"] else ()) \
        + (("simulated_ttft_p95_s", "simulated_tpot_p95_s") if "verification" in doc else ())
    rows = []
    for p in doc["plans"]:
        for d in p["deployments"]:
            row = {"rank": p["rank"], "plan_usd_per_hour": p["usd_per_hour"],
                   "plan_usd_per_million_tokens": p["usd_per_million_tokens"],
                   "plan_usd_per_million_input_tokens": p["usd_per_million_input_tokens"],
                   "plan_usd_per_million_total_tokens": p["usd_per_million_total_tokens"], "plan_gpus": p["gpus"],
                   **{k: d.get(k) for k in ("candidate_id", "name", *dimensions.NAMES, "pool", "replicas",
                                             "gpus_per_replica", "gpus", "usd_per_hour", "load_fraction")}}
            if d.get("quality") is not None:
                row["quality_recovery"] = d["quality"]["recovery"]
                row["quality_source"] = d["quality"]["source"]
            for n in names:
                w = d["workloads"].get(n, {})
                row[f"rate_per_s[{n}]"] = w.get("rate_per_s", 0.0)
                row[f"ttft_p95_s[{n}]"] = w.get("ttft_p95_s")
                row[f"tpot_p95_s[{n}]"] = w.get("tpot_p95_s")
                for key in extra:
                    row[f"{key}[{n}]"] = w.get(key)
            rows.append(row)
    frame = pd.DataFrame(rows, columns=list(rows[0]) if rows else
                         ["rank", "plan_usd_per_hour", "plan_usd_per_million_tokens",
                          "plan_usd_per_million_input_tokens", "plan_usd_per_million_total_tokens", "plan_gpus",
                          "candidate_id", "gpu", "replicas", "gpus", "usd_per_hour"])
    config = ["name", "model", *dimensions.SETTINGS, "pool"]
    empty = [c for c in config if c in frame and frame[c].isna().all()]
    return frame.drop(columns=empty) if rows else frame


PARETO_COLUMNS = ["front", "metric", "target_s", "status", "usd_per_hour", "usd_per_million_tokens",
                  "gpus", "deployments", "binding"]


def solve_files(result) -> tuple[dict[str, bytes | str], dict]:
    """Every output file of a solve, in memory, and the run record (without timestamps)."""
    from planner.outputs import launch_pools, plots, report
    from planner.outputs.result_json import result_to_dict

    doc = result_to_dict(result)
    problem = result.problem
    files: dict[str, bytes | str] = {
        "plans.csv": csv_text(plans_frame(doc)),
        "pareto.csv": csv_text(result.pareto if not result.pareto.empty
                               else pd.DataFrame(columns=PARETO_COLUMNS)),
        "candidates.csv": csv_text(_with_calibration_status(result), index=True),
    }
    images = plots.render_plots(result, doc)
    files.update(images)
    launch_tree = launch_pools.launch_files(result)
    files.update({f"launch/{rel}": text for rel, text in launch_tree.items()})
    blocks = report.build_blocks(result, doc, launch_tree)
    files["report.md"] = report.render_markdown(blocks)
    files["report.html"] = report.render_html(blocks, images, f"Deployment plan: {problem.name}")
    record = {
        "command": "solve", "problem": problem.name,
        "input": {"path": problem.path, "sha256": file_sha256(problem.path)},
        "catalog_versions": dict(sorted(problem.catalog.versions.items())),
        "status": result.status, "solver": result.solver, "candidates": result.counts,
        "serving_params": {k: float(v) for k, v in result.params.base.as_dict().items()},
        "serving_parameters_used": result.params.used,
        "prices_usd_per_gpu_hour": dict(sorted(problem.prices_usd_per_gpu_hour.items())),
        "timings_s": result.timings_s,
    }
    return files, record


def write_outputs(result, out_dir) -> Path:
    """Write every ``--out`` file of a solve atomically (see the module docstring).

    Parameters
    ----------
    result : planner.planning.PlanResult
    out_dir : str or Path

    Returns
    -------
    Path of the written directory.

    Raises
    ------
    PlanningInputError
        ``out_dir`` is not acceptable (:func:`check_out_dir`); nothing is written.
    """
    check_out_dir(out_dir)
    files, record = solve_files(result)
    return write_files(out_dir, files, record)


def _with_calibration_status(result) -> pd.DataFrame:
    """The candidates with a ``calibration_status`` column (calibrated / uncalibrated GPU)."""
    from planner import parameters

    frame = result.candidates
    if result.problem.measured or "gpu" not in frame:
        return frame
    status = {g: parameters.gpu_status(result.problem.calibration, g)["calibration_status"]
              for g in frame["gpu"].dropna().unique()}
    return frame.assign(calibration_status=frame["gpu"].map(status))
