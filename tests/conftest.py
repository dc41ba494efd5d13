import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def catalog():
    from planner.catalog import load_catalog

    return load_catalog()


def run_cli(*args, expect=0):
    """Run ``python -m planner ARGS`` and return (stdout, stderr); assert the exit code."""
    proc = subprocess.run([sys.executable, "-m", "planner", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout, proc.stderr


def run_json(*args):
    out, _ = run_cli(*args, "--json")
    return json.loads(out)
