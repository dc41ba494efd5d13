"""Runs in the project's virtualenv: many `planner eval ... --json` calls in one process.

    python ours_side.py CALLS.json OUT.json

CALLS.json is a list of ``{"key": ..., "argv": ["eval", "--model", ...]}``; each argv is
run through ``planner.cli.main`` exactly as the console script would run it (same parsing,
defaults and JSON), only without starting a new Python process per call. OUT.json maps
each key to ``{"rc": exit code, "result": parsed JSON or null, "stderr": text}``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    from planner.cli import main as planner_main

    calls = json.loads(Path(argv[0]).read_text())
    out = {}
    for call in calls:
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            rc = planner_main(list(call["argv"]))
        try:
            result = json.loads(stdout.getvalue()) if rc == 0 else None
        except json.JSONDecodeError:
            result = None
        out[call["key"]] = {"rc": rc, "result": result, "stderr": stderr.getvalue()[-2000:]}
    Path(argv[1]).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
