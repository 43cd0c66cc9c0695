import os
import signal
import tempfile
from pathlib import Path

import pytest

# Every test run gets its own cache (compile cache, reference cache, seed secret).
os.environ.setdefault("KLOOP_CACHE_DIR", tempfile.mkdtemp(prefix="kloop-test-cache-"))

# A suite started in the background by a shell without job control (`nohup .ci/run &`, some CI runners) ignores
# SIGINT, and every process it starts inherits that: the Ctrl-C tests would send a signal no one hears. With a
# handler here instead, the processes the tests start get SIGINT's default again (a handler does not survive exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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
