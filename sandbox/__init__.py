"""Isolation and the trusted harness: backends, the in-sandbox harness, and ``sandbox.runtime``, the
name candidates import the runtime (:mod:`kloop_runtime`) by."""
