"""Per-rank generators (problems/authoring.py): one rank's seed must say nothing of another's."""

import torch

from problems.authoring import rank_generator


def _seed(shared: int, rank: int) -> int:
    generator = torch.Generator()
    generator.manual_seed(shared)
    return rank_generator(generator, rank).initial_seed()


def test_a_cpu_generator_keeps_only_32_bits_of_its_seed():
    """Why the derivation matters: seeds equal in their low 32 bits draw the same numbers."""
    a, b = torch.Generator(), torch.Generator()
    a.manual_seed(5)
    b.manual_seed(5 + 2**40)
    assert torch.equal(torch.randn(8, generator=a), torch.randn(8, generator=b))


def test_rank_seeds_are_not_a_known_offset_of_each_other():
    """The old derivation (shared * phi + 7919 * (rank + 1)) put every pair of ranks a constant
    apart in the low 32 bits: a rank that searched out its own seed knew them all."""
    gaps = {(_seed(shared, 1) - _seed(shared, 0)) % 2**32 for shared in range(1000, 1064)}
    assert len(gaps) == 64
    assert len({_seed(77, rank) % 2**32 for rank in range(64)}) == 64  # the ranks' draws differ
    assert _seed(77, 3) == _seed(77, 3)  # and are reproducible
