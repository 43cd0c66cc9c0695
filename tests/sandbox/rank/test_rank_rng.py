"""The global RNG a call may draw from (sandbox/rank/server.py: seed_global_rng): seeded with the
call's rng alike in the reference's rank and the candidate's, to the state torch.manual_seed
gives, so a reference that draws from it (ParallelKernelBench's 69) matches itself as a candidate."""

import torch

from sandbox.rank.server import seed_global_rng


def test_the_global_rng_is_seeded_as_torch_manual_seed_seeds_it():
    torch.manual_seed(12345)
    expected = (torch.randn(16), torch.rand(4), torch.randint(0, 1000, (4,)), torch.initial_seed())
    torch.manual_seed(99)  # another state first: the call's seed must set it, not find it
    torch.randn(3)
    seed_global_rng(torch, 12345, cuda=False)
    drawn = (torch.randn(16), torch.rand(4), torch.randint(0, 1000, (4,)), torch.initial_seed())
    assert all(torch.equal(a, b) for a, b in zip(expected[:3], drawn[:3])) and expected[3] == drawn[3] == 12345
    seed_global_rng(torch, 12346, cuda=False)
    assert not torch.equal(torch.randn(16), expected[0])  # the control: another call's seed, other numbers

