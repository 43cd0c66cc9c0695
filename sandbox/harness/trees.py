"""Inputs and outputs as trees: tensors inside lists, tuples and dicts, modules, and plain values.

A problem's inputs are a tuple whose items may be tensors, lists of tensors, modules
(``nn.Linear``), Python numbers, ``None``, shapes or process groups. The rank workers use these
helpers to clone inputs for the mutation check, to upcast every floating tensor (also inside
lists and modules) for the reference's high-precision run, and to flatten outputs into leaves.
Anything that is not a container, tensor or module is passed through untouched.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Iterator

NEARLY_CONSTANT_DISTINCT = 64  # a floating input with at most this many distinct values...
NEARLY_CONSTANT_MIN_NUMEL = 256  # ...among at least this many elements tells little about a solution
NEARLY_CONSTANT_SAMPLE = 1 << 20  # elements of each tensor looked at


def map_tensors(obj: Any, tensor_fn: Callable, module_fn: Callable | None = None) -> Any:
    """``obj`` with ``tensor_fn`` applied to every tensor and ``module_fn`` to every module;
    containers are rebuilt only where something inside changed."""
    import torch

    if isinstance(obj, torch.Tensor):
        return tensor_fn(obj)
    if isinstance(obj, torch.nn.Module):
        return module_fn(obj) if module_fn is not None else obj
    if isinstance(obj, list):
        return [map_tensors(item, tensor_fn, module_fn) for item in obj]
    if isinstance(obj, tuple):
        items = [map_tensors(item, tensor_fn, module_fn) for item in obj]
        if all(new is old for new, old in zip(items, obj)):
            return obj
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, dict):
        return {key: map_tensors(value, tensor_fn, module_fn) for key, value in obj.items()}
    return obj


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


def clone_inputs(inputs: tuple) -> tuple:
    """A copy of every tensor (and module) in ``inputs``; other values are shared."""
    return tuple(map_tensors(x, lambda t: t.clone(), copy.deepcopy) for x in inputs)


def upcast_inputs(inputs: tuple, dtype) -> tuple:
    """Every floating tensor in ``inputs`` cast to ``dtype`` (modules: a cast copy)."""
    return tuple(map_tensors(x, lambda t: t.to(dtype) if t.is_floating_point() else t,
                             lambda m: copy.deepcopy(m).to(dtype)) for x in inputs)


def modified_inputs(inputs: tuple, clones: tuple) -> list[int]:
    """Indices of the inputs whose tensors differ from their clones."""
    modified = []
    for index, (now, before) in enumerate(zip(inputs, clones)):
        current, original = list(tensor_leaves(now)), list(tensor_leaves(before))
        if len(current) != len(original) or not all(_same(x, y) for x, y in zip(current, original)):
            modified.append(index)
    return modified


def _same(x, y) -> bool:
    import torch

    x, y = x.detach(), y.detach()
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if torch.equal(x, y):
        return True
    return x.is_floating_point() and torch.equal(x.isnan(), y.isnan()) and torch.equal(x.nan_to_num(), y.nan_to_num())


def nearly_constant(inputs: tuple) -> bool:
    """True when the inputs hold sizeable floating tensors and every one of them has only a
    few distinct values (``torch.full(rank + 1)`` and the like): a check on such inputs cannot
    tell a solution that computes from one that guesses."""
    sizeable = [t for t in tensor_leaves(inputs) if t.is_floating_point() and t.numel() >= NEARLY_CONSTANT_MIN_NUMEL]
    return bool(sizeable) and all(
        t.detach().reshape(-1)[:NEARLY_CONSTANT_SAMPLE].float().unique().numel() <= NEARLY_CONSTANT_DISTINCT for t in sizeable
    )


def flatten_outputs(result: Any) -> list:
    """Output leaves in order: lists and tuples unrolled, dicts by sorted key, Python numbers
    as 0-d tensors (what ``torch.tensor`` makes of them), ``None`` dropped (nothing to check;
    a solution returning a tensor there has more outputs than the reference); anything else is
    kept as it is."""
    import torch

    if result is None:
        return []
    if isinstance(result, (tuple, list)):
        return [leaf for item in result for leaf in flatten_outputs(item)]
    if isinstance(result, dict):
        return [leaf for key in sorted(result, key=str) for leaf in flatten_outputs(result[key])]
    if isinstance(result, (bool, int, float)):
        return [torch.tensor(result)]
    return [result]
