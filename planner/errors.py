"""The one error type for bad input (a module of its own: the command line's dispatcher catches
it without importing pydantic)."""

from __future__ import annotations


class PlanningInputError(ValueError):
    """Invalid user input: an unknown id, a field out of range, a malformed file.

    ``problems`` holds one line per problem, each starting with the YAML path of the
    offending field (``workloads[1].slo.tpot_p95_s: must be > 0``).
    """

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))
