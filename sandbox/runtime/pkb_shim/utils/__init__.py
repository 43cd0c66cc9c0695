"""Stands in for ParallelKernelBench's ``utils`` package in candidate ranks (see ``sandbox.runtime.pkb_shim``)."""
