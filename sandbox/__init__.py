"""Isolation and the trusted harness: backends, the in-sandbox harness, the candidate runtime."""
