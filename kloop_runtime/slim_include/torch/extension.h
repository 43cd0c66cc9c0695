// kloop's torch/extension.h, found ahead of torch's own on a build's include path (kloop_runtime/build.py): what
// torch's own brings less the C++ frontend (torch/all.h's nn, optim, data, jit, autograd functions and
// torch/python.h's nn module bindings): the tensor API, and torch/python.h's Python headers, among them every type
// caster and the error translation (torch::wrap_pybind_function) torch's brings. nvcc's front ends and the host
// compiler parse it in about half the time; a source that needs more is built again with torch's own.
#pragma once
#include <torch/types.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/python_headers.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/utils/python_numbers.h>
#include <torch/csrc/utils/python_tuples.h>
