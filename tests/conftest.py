import os
import tempfile
from pathlib import Path

import pytest

# Every test run gets its own cache (compile cache, reference cache, seed secret).
os.environ.setdefault("KLOOP_CACHE_DIR", tempfile.mkdtemp(prefix="kloop-test-cache-"))


@pytest.fixture
def local_sandbox():
    from sandbox.backends import LocalSandbox

    with LocalSandbox() as box:
        yield box


@pytest.fixture(scope="session")
def pkb_root(tmp_path_factory) -> Path:
    """A small ParallelKernelBench checkout (see tests.fixtures.pkb_checkout), shared by the PKB tests."""
    from tests.fixtures.pkb_checkout import make_checkout

    return make_checkout(tmp_path_factory.mktemp("pkb"))
