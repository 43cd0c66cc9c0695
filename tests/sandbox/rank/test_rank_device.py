"""A rank's device set-up without collectives: ``dist.barrier()`` still meets every rank (solutions
order their set-up with it), while a collective still fails. Real processes, gloo's CPU path,
at world sizes 2, 4 and 8."""

import multiprocessing
import time

import pytest


def _rank(rank: int, world: int, store: str, results) -> None:
    from sandbox.rank.device import RankDevice

    device = RankDevice(rank, world, "cpu", store, collectives=False)
    import torch

    time.sleep(0.3 * rank)  # the last rank arrives last
    arrived = time.time()
    device.dist.barrier()
    left = time.time()
    device.dist.barrier()  # a second barrier: epochs do not mix
    try:
        device.dist.all_reduce(torch.ones(4))
        collective = "ran"
    except RuntimeError:
        collective = "refused"
    results.put((rank, arrived, left, collective))


@pytest.mark.parametrize("world", [2, 4, 8])
def test_barrier_meets_every_rank_without_collectives(tmp_path, world):
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    procs = [context.Process(target=_rank, args=(r, world, str(tmp_path / "store"), results)) for r in range(world)]
    for proc in procs:
        proc.start()
    rows = [results.get(timeout=540) for _ in range(world)]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    last_arrival = max(arrived for _, arrived, _, _ in rows)
    assert min(left for _, _, left, _ in rows) >= last_arrival - 0.01  # nobody left before the last rank came
    assert {collective for *_, collective in rows} == {"refused"}
