"""The jail on a GPU (marker gpu): cuda devices, a FileStore group and symmetric memory with
peer-pointer copies at world 1, 2 and 4 on one GPU. The same checks run standalone with
``python tests/fixtures/gpu_probes/jail_cuda.py``."""

import pytest

from tests.fixtures.gpu_probes.jail_cuda import run_checks

pytestmark = pytest.mark.gpu


def test_candidate_ranks_work_on_a_gpu_inside_the_jail():
    results = run_checks()
    for passed, line in results:
        print(("PASS " if passed else "FAIL ") + line)
    assert all(passed for passed, _ in results), [line for passed, line in results if not passed]
