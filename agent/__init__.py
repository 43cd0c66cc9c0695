"""The controller: model providers, the feedback loop, budgets, trajectories, batch runs, the CLI."""

__version__ = "0.1.0"
