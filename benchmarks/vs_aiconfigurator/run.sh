#!/usr/bin/env bash
# Side-by-side benchmark against NVIDIA aiconfigurator (issue 8). One command:
#
#   bash benchmarks/vs_aiconfigurator/run.sh            # every scenario, 3 timed runs each
#   bash benchmarks/vs_aiconfigurator/run.sh --quick    # smoke test: 2 scenarios, 1 run, few rows
#
# 1. creates benchmarks/vs_aiconfigurator/.venv and pip-installs aiconfigurator there
#    (never into the project's environment; AIC_VERSION overrides the pinned 0.12.0);
# 2. uses the project's .venv for `planner` (creates it with `pip install -e .` if missing);
# 3. runs run.py, which times both tools on every scenario and rewrites the
#    "## vs NVIDIA aiconfigurator" section of docs/benchmarks.md.
# Extra arguments go to run.py (see `run.py --help`).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
AIC_VERSION="${AIC_VERSION:-0.12.0}"
AIC_VENV="$HERE/.venv"
PROJECT_VENV="${PROJECT_VENV:-$ROOT/.venv}"
mkdir -p "$HERE/work"
INSTALL_LOG="$HERE/work/aic-install.log"

# --- the project's planner ---------------------------------------------------------------
if [ ! -x "$PROJECT_VENV/bin/planner" ]; then
  echo "[run.sh] creating the project's virtualenv at $PROJECT_VENV (pip install -e .)" >&2
  "$PYTHON" -m venv "$PROJECT_VENV"
  "$PROJECT_VENV/bin/python" -m pip install -q -e "$ROOT"
fi

# --- aiconfigurator in its own virtualenv ------------------------------------------------
aic_error=""
installed="$("$AIC_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("aiconfigurator"))' 2>/dev/null || true)"
if [ "$installed" != "$AIC_VERSION" ]; then
  echo "[run.sh] installing aiconfigurator==$AIC_VERSION into $AIC_VENV (log: $INSTALL_LOG)" >&2
  if ! { [ -x "$AIC_VENV/bin/python" ] || "$PYTHON" -m venv "$AIC_VENV"; } >"$INSTALL_LOG" 2>&1 \
     || ! "$AIC_VENV/bin/python" -m pip install "aiconfigurator==$AIC_VERSION" >>"$INSTALL_LOG" 2>&1; then
    aic_error="pip install aiconfigurator==$AIC_VERSION failed: $(grep -E 'ERROR|error:' "$INSTALL_LOG" | tail -3 | tr '\n' ' ')"
    [ -n "$aic_error" ] || aic_error="pip install aiconfigurator==$AIC_VERSION failed: $(tail -3 "$INSTALL_LOG" | tr '\n' ' ')"
    echo "[run.sh] $aic_error" >&2
  fi
fi

args=(--aic-python "$AIC_VENV/bin/python" --project-python "$PROJECT_VENV/bin/python")
if [ -n "$aic_error" ]; then
  args+=(--aic-unavailable "$aic_error")
fi
exec "$PROJECT_VENV/bin/python" "$HERE/run.py" "${args[@]}" "$@"
