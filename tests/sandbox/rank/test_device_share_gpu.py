"""Device memory handed to another process as a descriptor (marker gpu): a plain child and a
child in a cuda jail import it whole after the exporter closed its own descriptor; a memfd and an
allocation smaller than claimed are refused; and the staging time of a 64 MiB call, through a
memfd blob and through device memory, side by side. Standalone:
``python tests/fixtures/gpu_probes/device_share.py``."""

import pytest

from tests.fixtures.gpu_probes.device_share import run_checks

pytestmark = pytest.mark.gpu


def test_device_memory_crosses_into_a_jailed_process_by_descriptor():
    results = run_checks()
    for passed, line in results:
        print(("PASS " if passed else "FAIL ") + line)
    assert all(passed for passed, _ in results), [line for passed, line in results if not passed]
