"""``sandbox.runtime`` is :mod:`kloop_runtime` itself, under the name candidates import it by
(``from sandbox import runtime``); ``sandbox.runtime.X`` is ``kloop_runtime.X``."""

from kloop_runtime.compat import alias

alias(__name__)
