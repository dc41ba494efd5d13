"""Check that ``planner solve P --out DIR`` is byte-identical before and after a change.

    python benchmarks/check_outputs.py [--base REV] [--keep DIR] [PROBLEM.yaml ...]
    python benchmarks/check_outputs.py --against STORED_DIR [--keep DIR] [PROBLEM.yaml ...]

For every problem (default: ``problems/*.yaml`` of the working tree, sorted) the script runs
``planner solve P --out DIR`` twice, with the same interpreter and from the repository root:
once with the code of the working tree, once with the code of git revision REV (default
``main``), checked out into a temporary ``git worktree`` that is removed afterwards. Each
run gets ``PYTHONPATH`` pointing at its tree and ``python -P`` (the current directory is not
put on ``sys.path``), so ``planner`` (and its ``catalogs/``) come from that tree only; both
runs read the same problem file, the working tree's. It then compares:

- every file under the two output directories byte for byte (the same set of files),
  except ``run.json``, which is compared as JSON without its timing fields
  (:data:`TIMING_KEYS`, at any depth: ``created_utc``, ``timings_s``, ``wall_time_s``);
- stdout, apart from the solver time at the end of the ``solver: ...`` line;
- stderr, with each run's output directory replaced by ``<out>``;
- the exit code.

``--against STORED_DIR`` compares the working tree with outputs stored earlier instead of
running a revision: ``STORED_DIR/<problem>/`` (the ``--out`` directory) and
``STORED_DIR/<problem>.stdout`` (stderr and exit code are not compared then).

It prints one row per problem (identical, or different with the first differing file) and
exits 1 if any problem differs, 2 on a usage error (unknown revision, missing directory),
0 otherwise. Ctrl-C, SIGTERM and SIGHUP remove the temporary worktree too. A solve takes a
few seconds per problem and run; nothing is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_FILE = "run.json"
#: run.json keys (at any depth) that hold wall-clock times or the creation time.
TIMING_KEYS = frozenset({"created_utc", "timings_s", "wall_time_s"})
#: The solver line of ``planner solve``'s stdout ends with the solve's wall time.
SOLVER_TIME = re.compile(r"^(solver: .*), [0-9.]+ s$", flags=re.M)
OUT_PLACEHOLDER = "<out>"


class UsageError(Exception):
    """A bad revision or directory: reported on stderr, exit code 2."""


def planner_command(args: list[str]) -> list[str]:
    """``python -P -m planner ARGS``: the planner found on PYTHONPATH, never the cwd."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", "planner", *args]
    bootstrap = ("import runpy, sys; sys.path.pop(0); "
                 "runpy.run_module('planner', run_name='__main__', alter_sys=True)")
    return [sys.executable, "-c", bootstrap, *args]


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def check_imports_from(tree: Path) -> None:
    """Fail unless ``planner`` imports from ``tree`` under the environment the runs use."""
    code = "import planner; print(planner.__file__)"
    probe = ([sys.executable, "-P", "-c", code] if sys.version_info >= (3, 11)
             else [sys.executable, "-c", "import sys; sys.path.pop(0); " + code])
    found = subprocess.run(probe, capture_output=True, text=True, cwd=ROOT, env=_env(tree))
    where = Path(found.stdout.strip()).resolve() if found.returncode == 0 else None
    if where is None or tree.resolve() not in where.parents:
        raise UsageError(f"planner does not import from {tree} (got {where or found.stderr.strip()})")


def solve(tree: Path, problem: str, out_dir: Path) -> dict:
    """Run ``planner solve PROBLEM --out OUT_DIR`` with the code of ``tree``."""
    proc = subprocess.run(planner_command(["solve", problem, "--out", str(out_dir)]),
                          capture_output=True, text=True, cwd=ROOT, env=_env(tree))
    return {"dir": out_dir, "rc": proc.returncode, "stdout": proc.stdout,
            "stderr": proc.stderr.replace(str(out_dir), OUT_PLACEHOLDER)}


def drop_timings(value):
    """``value`` (parsed JSON) without the keys of :data:`TIMING_KEYS`, at any depth."""
    if isinstance(value, dict):
        return {k: drop_timings(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [drop_timings(v) for v in value]
    return value


def mask_solver_time(stdout: str) -> str:
    return SOLVER_TIME.sub(r"\1, <time> s", stdout)


def _files(directory: Path) -> list[str]:
    if not directory.is_dir():
        return []
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


def _same_file(a: Path, b: Path) -> bool:
    if a.name == RUN_FILE:
        try:
            return drop_timings(json.loads(a.read_text())) == drop_timings(json.loads(b.read_text()))
        except ValueError:
            pass
    return a.read_bytes() == b.read_bytes()


def first_difference(new: dict, old: dict) -> str | None:
    """The first thing that differs between two runs (None if they are identical)."""
    if old.get("rc") is not None and new["rc"] != old["rc"]:
        return f"exit code {old['rc']} -> {new['rc']}"
    new_files, old_files = _files(new["dir"]), _files(old["dir"])
    for name in sorted(set(new_files) ^ set(old_files)):
        return f"{name} only in {'the working tree' if name in new_files else 'the base'}"
    for name in new_files:
        if not _same_file(new["dir"] / name, old["dir"] / name):
            return name
    if mask_solver_time(new["stdout"]) != mask_solver_time(old["stdout"]):
        return "stdout"
    if old.get("stderr") is not None and new["stderr"] != old["stderr"]:
        return "stderr"
    return None


def stored_run(stored: Path, stem: str) -> dict:
    stdout = stored / f"{stem}.stdout"
    if not (stored / stem).is_dir() or not stdout.is_file():
        raise UsageError(f"{stored} has no {stem}/ and {stem}.stdout")
    return {"dir": stored / stem, "rc": None, "stdout": stdout.read_text(), "stderr": None}


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)


def add_worktree(rev: str, parent: Path) -> Path:
    if _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").returncode != 0:
        raise UsageError(f"unknown git revision {rev!r}")
    tree = parent / "base"
    added = _git("worktree", "add", "--detach", "--quiet", str(tree), rev)
    if added.returncode != 0:
        raise UsageError(f"git worktree add {rev} failed: {added.stderr.strip()}")
    return tree


def print_table(rows: list[tuple[str, str | None]], base_label: str) -> None:
    width = max([len("problem")] + [len(stem) for stem, _ in rows])
    print(f"working tree vs {base_label}")
    print(f"{'problem':<{width}}  {'result':<9}  first difference")
    for stem, diff in rows:
        print(f"{stem:<{width}}  {'identical' if diff is None else 'different':<9}  {diff or ''}".rstrip())
    different = sum(diff is not None for _, diff in rows)
    print(f"{len(rows) - different} of {len(rows)} identical")


def _exit_on_signal(signum, _frame):
    """SIGTERM/SIGHUP (a timeout, a closed terminal) end the run like Ctrl-C: the temporary
    worktree and outputs are removed on the way out."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _exit_on_signal)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="*", help="problem files (default: problems/*.yaml)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--base", default="main", help="git revision to compare with (default: main)")
    what.add_argument("--against", type=Path, help="stored outputs (DIR/<problem>/, DIR/<problem>.stdout)")
    parser.add_argument("--keep", type=Path, help="write the outputs here instead of a temporary directory "
                        "(DIR/working-tree is then usable as --against)")
    args = parser.parse_args(argv)
    problems = [os.path.relpath(Path(p).resolve(), ROOT) for p in args.problems] or \
        sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "problems").glob("*.yaml"))
    work = Path(tempfile.mkdtemp(prefix="check-outputs-"))
    out_root = args.keep.resolve() if args.keep else work / "out"
    base_tree = None
    try:
        if args.keep and out_root.exists() and any(out_root.iterdir()):
            raise UsageError(f"--keep {out_root} is not empty")
        if args.against is not None:
            if not args.against.is_dir():
                raise UsageError(f"--against {args.against}: no such directory")
            label = str(args.against)
        else:
            base_tree = add_worktree(args.base, work)
            check_imports_from(base_tree)
            label = f"{args.base} ({_git('rev-parse', '--short', args.base).stdout.strip()})"
        check_imports_from(ROOT)
        rows = []
        for problem in problems:
            stem = Path(problem).stem
            new = solve(ROOT, problem, out_root / "working-tree" / stem)
            if args.keep:  # a kept run is itself a valid --against directory
                (out_root / "working-tree" / f"{stem}.stdout").write_text(new["stdout"])
            old = (stored_run(args.against, stem) if args.against is not None
                   else solve(base_tree, problem, out_root / "base" / stem))
            rows.append((stem, first_difference(new, old)))
            verdict = "identical" if rows[-1][1] is None else "different"
            print(f"{stem}: {verdict}", file=sys.stderr, flush=True)
        print_table(rows, label)
        if args.keep:
            print(f"outputs kept in {out_root}")
        return 1 if any(diff is not None for _, diff in rows) else 0
    except UsageError as exc:
        print(f"check_outputs: {exc}", file=sys.stderr)
        return 2
    finally:
        if base_tree is not None:
            _git("worktree", "remove", "--force", str(base_tree))
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
