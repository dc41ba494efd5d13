"""LLM deployment planner: which GPUs, how many, in which configuration, how fast, at what cost."""

__version__ = "0.1.0"
