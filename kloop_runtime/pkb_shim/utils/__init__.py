"""Stands in for ParallelKernelBench's ``utils`` package in candidate ranks (see ``kloop_runtime.pkb_shim``)."""
