"""The controller: model providers, the feedback loop, budgets, trajectories, batch runs, the CLI."""
