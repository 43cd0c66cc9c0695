"""Imported once by the forkserver, so forked ranks start with torch already loaded."""

import torch  # noqa: F401
import torch.distributed  # noqa: F401

import problems.spec  # noqa: F401
import sandbox.harness.worker  # noqa: F401
import kloop_runtime.driver  # noqa: F401
import kloop_runtime.symmetric  # noqa: F401
import sandbox.runtime  # noqa: F401
