"""Wrong for ParallelKernelBench problem 1: never talks to the other ranks."""
import torch


@torch.no_grad()
def solution(tensor):
    return tensor.clone()
