"""LLM deployment planner: which GPUs, how many, in which configuration, how fast, at what cost.

The Python API for notebooks::

    import planner
    problem = planner.load_problem("problems/chat-70b.yaml")
    result = planner.plan(problem)
"""

__version__ = "0.1.0"

__all__ = ["load_catalog", "load_problem", "plan"]


def load_problem(path, catalog=None):
    """Read, validate and resolve a problem YAML (see :func:`planner.problem.load_problem`)."""
    from planner.problem import load_problem as _load

    return _load(path, catalog)


def plan(problem, **options):
    """Solve a problem (see :func:`planner.pipeline.plan`)."""
    from planner.pipeline import plan as _plan

    return _plan(problem, **options)


def load_catalog(directory=None):
    """The validated catalogs (see :func:`planner.catalog.load_catalog`)."""
    from planner.catalog import load_catalog as _load

    return _load(directory)
