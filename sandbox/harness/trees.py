"""The tensors inside a problem's inputs (lists, tuples, dicts, modules), and whether they
say enough to judge by: inputs that hold only a few distinct values (``torch.full(rank + 1)``)
cannot tell a solution that computes from one that guesses."""

from __future__ import annotations

from typing import Any, Iterator

NEARLY_CONSTANT_DISTINCT = 64  # a floating input with at most this many distinct values...
NEARLY_CONSTANT_MIN_NUMEL = 256  # ...among at least this many elements tells little about a solution
NEARLY_CONSTANT_SAMPLE = 1 << 20  # elements of each tensor looked at


def tensor_leaves(obj: Any) -> Iterator:
    """Every tensor in ``obj``, in order, including the parameters and buffers of modules."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, torch.nn.Module):
        yield from obj.state_dict(keep_vars=True).values()
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from tensor_leaves(item)
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from tensor_leaves(value)


def nearly_constant(inputs: tuple) -> bool:
    """True when the inputs hold sizeable floating tensors and every one of them has only a
    few distinct values (``torch.full(rank + 1)`` and the like): a check on such inputs cannot
    tell a solution that computes from one that guesses."""
    sizeable = [t for t in tensor_leaves(inputs) if t.is_floating_point() and t.numel() >= NEARLY_CONSTANT_MIN_NUMEL]
    return bool(sizeable) and all(
        t.detach().reshape(-1)[:NEARLY_CONSTANT_SAMPLE].float().unique().numel() <= NEARLY_CONSTANT_DISTINCT for t in sizeable
    )
