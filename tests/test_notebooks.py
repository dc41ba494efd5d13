"""The notebooks: stored without outputs, exactly as ``notebooks/make_notebooks.py`` writes
them, and each runs top to bottom (its last cell asserts the seed numbers it shows).

Kernel ``python3``: jupyter_client starts it with this interpreter (``sys.executable``),
so the notebooks import the package installed in the environment running the tests.
"""

import importlib.util
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
CELL_TIMEOUT_S = 120


def _generator():
    spec = importlib.util.spec_from_file_location("make_notebooks", NOTEBOOKS / "make_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_notebook_per_playground_and_the_pareto_explorer():
    names = [p.name for p in PATHS]
    assert len(names) == 9, names
    assert names[-1] == "09_pareto_explorer.ipynb"


def test_stored_notebooks_are_what_the_generator_writes():
    gen = _generator()
    assert sorted(gen.NOTEBOOKS) == [p.name for p in PATHS]
    stale = [name for name in gen.NOTEBOOKS if (NOTEBOOKS / name).read_text(encoding="utf-8") != gen.render(name)]
    assert not stale, f"run `python notebooks/make_notebooks.py` ({', '.join(stale)} differ)"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "a notebook without code"
    for cell in code:
        assert cell.outputs == [], f"{path.name}: cell {cell.id} has outputs"
        assert cell.execution_count is None, f"{path.name}: cell {cell.id} has an execution count"
    assert nb.cells[0].cell_type == "markdown", "every notebook opens with an explanation"
    assert "assert" in code[-1].source, "the last cell checks the numbers the notebook shows"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_notebook_runs(path):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()  # raises CellExecutionError, with the traceback, if any cell fails
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} draws no plot"
    assert not any(o.get("output_type") == "error" for o in outputs)
