"""The name ``sandbox.runtime`` in a candidate's rank, and nothing else of ``sandbox``."""

from kloop_runtime.compat import alias

runtime = alias(__name__ + ".runtime")
del alias

__all__ = ["runtime"]
