import os
import tempfile

import pytest

# Every test run gets its own cache (compile cache, reference cache, seed secret).
os.environ.setdefault("KLOOP_CACHE_DIR", tempfile.mkdtemp(prefix="kloop-test-cache-"))


@pytest.fixture
def local_sandbox():
    from sandbox.backends import LocalSandbox

    with LocalSandbox() as box:
        yield box
