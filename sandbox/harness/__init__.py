"""The trusted harness that runs where the candidate runs: launch ranks, compare, time, profile."""
