"""The notebooks: stored without outputs, exactly as ``notebooks/make_notebooks.py`` writes
them, and each runs top to bottom (its last cell asserts the seed numbers it shows).

Kernel ``python3``: jupyter_client starts it with this interpreter (``sys.executable``),
so the notebooks import the package installed in the environment running the tests. One
kernel runs every notebook (starting one and importing numpy, pandas, matplotlib and the
planner cost seconds per notebook); before each notebook its namespace is reset and its
working directory set to ``notebooks/``, so a notebook sees none of another's variables
(only the modules already imported) and runs as in a fresh kernel.
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
#: Run first in the shared kernel before each notebook (a cell of its own, not checked).
FRESH_NAMESPACE = ("get_ipython().run_line_magic('reset', '-f')\n"
                   f"import os as _os; _os.chdir({str(NOTEBOOKS)!r}); del _os\n"
                   "import matplotlib.pyplot as _plt; _plt.close('all'); del _plt")


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


def _client(nb, km=None):
    return nbclient.NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                   resources={"metadata": {"path": str(NOTEBOOKS)}})


@pytest.fixture(scope="module")
def kernel_manager():
    """One started ``python3`` kernel for the notebooks of this module (shut down after)."""
    from nbclient.util import run_sync

    starter = _client(nbformat.v4.new_notebook())
    km = starter.create_kernel_manager()
    starter.start_new_kernel()
    yield km
    run_sync(km.shutdown_kernel)(now=True)


def _execute(nb, km):
    """Run ``nb`` in the shared kernel after a FRESH_NAMESPACE cell; its cells get their outputs.

    Raises CellExecutionError, with the traceback, if any cell fails."""
    from nbclient.util import run_sync

    if not run_sync(km.is_alive)():      # an earlier notebook killed it
        run_sync(km.restart_kernel)(now=True)
    nb.cells.insert(0, nbformat.v4.new_code_cell(FRESH_NAMESPACE))
    client = _client(nb, km)
    try:
        client.execute()
    finally:
        nb.cells.pop(0)
        if client.kc is not None:
            client.kc.stop_channels()


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_notebook_runs(path, kernel_manager):
    nb = nbformat.read(path, as_version=4)
    _execute(nb, kernel_manager)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} draws no plot"
    assert not any(o.get("output_type") == "error" for o in outputs)


def test_the_shared_kernel_starts_each_notebook_afresh(kernel_manager):
    cell = nbformat.v4.new_code_cell
    _execute(nbformat.v4.new_notebook(cells=[cell("import os\nos.chdir('/')\nleaked = 1")]), kernel_manager)
    check = nbformat.v4.new_notebook(cells=[cell(f"import os\nassert os.getcwd() == {str(NOTEBOOKS)!r}"),
                                            cell("leaked")])
    with pytest.raises(nbclient.exceptions.CellExecutionError, match="NameError"):
        _execute(check, kernel_manager)
    assert check.cells[0].outputs == []          # the working directory was reset
