import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

#: The parsed-catalog cache (planner/catalog_cache.py) of this test run, processes started by
#: the tests included: a temporary directory, removed at exit, never the user's ~/.cache.
_CACHE_DIR = tempfile.TemporaryDirectory(prefix="planner-test-cache-")
os.environ["PLANNER_CACHE_DIR"] = _CACHE_DIR.name


@pytest.fixture(scope="session")
def catalog():
    from planner.catalog import load_catalog

    return load_catalog()


def run_cli(*args, expect=0):
    """Run the CLI on ARGS in this process, as ``python -m planner ARGS`` does
    (``planner.cli.main`` from the repository root), and return (stdout, stderr); assert
    the exit code. In-process calls save a Python start and the imports per call (the
    suite's budget); :func:`run_cli_process` runs a real process."""
    import contextlib
    import io

    from planner.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:          # argparse: usage errors and --help
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    assert code == expect, (code, out.getvalue(), err.getvalue())
    return out.getvalue(), err.getvalue()


def run_cli_process(*args, expect=0):
    """Run ``python -m planner ARGS`` as a process and return (stdout, stderr); assert the exit code."""
    proc = subprocess.run([sys.executable, "-m", "planner", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout, proc.stderr


def run_json(*args):
    out, _ = run_cli(*args, "--json")
    return json.loads(out)
