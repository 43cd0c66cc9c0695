"""A torch extension is built first with kloop's slim torch/extension.h (kloop_runtime/slim_include),
again with torch's own where a name was missing; a syntax error is not built twice. Real builds of
C++ extensions on the CPU, loaded and called: the slim header's Python casters behave as torch's."""

import importlib.machinery
import importlib.util
import json

import pytest
import torch

from kloop_runtime.build import CompileError, arch_list_entry, build_extension_in

pytestmark = pytest.mark.slow

TENSORS_ONLY = r"""
#include <torch/extension.h>
#include <vector>

torch::Tensor scaled(torch::Tensor x, double a, c10::optional<torch::Tensor> out, at::ScalarType dtype, std::vector<int64_t> shape) {
  TORCH_CHECK(x.dim() == 1, "one dimension");
  auto y = (x * a).to(dtype).reshape(shape);
  return out.has_value() ? out->copy_(y) : y;
}
"""

CPP_FRONTEND = r"""
#include <torch/extension.h>

torch::Tensor relu(torch::Tensor x) { return torch::nn::functional::relu(x); }
"""


def spec(name: str, source: str, functions: list[str]) -> dict:
    return {"name": name, "cuda_sources": "", "cpp_sources": source, "functions": functions, "extra_cflags": [],
            "extra_cuda_cflags": [], "extra_ldflags": [], "extra_include_paths": [], "arch_list": arch_list_entry("90a")}


def load(folder, name: str):
    path = folder / f"{name}.so"
    module_spec = importlib.util.spec_from_file_location(name, path, loader=importlib.machinery.ExtensionFileLoader(name, str(path)))
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def test_an_extension_of_tensors_builds_with_the_slim_header_and_its_arguments_convert(tmp_path):
    assert build_extension_in(tmp_path, spec("slim_scaled", TENSORS_ONLY, ["scaled"])) == ("slim", tmp_path / "slim")
    module = load(tmp_path / "slim", "slim_scaled")
    x = torch.arange(6, dtype=torch.float32)
    assert torch.equal(module.scaled(x, 2.0, None, torch.int64, [2, 3]), (x * 2).long().reshape(2, 3))
    out = torch.empty(3, 2, dtype=torch.float64)
    assert module.scaled(x, 0.5, out, torch.float64, [3, 2]) is out and torch.equal(out, (x * 0.5).double().reshape(3, 2))
    with pytest.raises(RuntimeError, match="one dimension"):
        module.scaled(x.reshape(2, 3), 1.0, None, torch.float32, [6])


def test_a_source_using_the_cpp_frontend_is_built_again_with_torchs_header(tmp_path):
    assert build_extension_in(tmp_path, spec("frontend_relu", CPP_FRONTEND, ["relu"])) == ("torch", tmp_path / "torch")
    assert not (tmp_path / "slim" / "frontend_relu.so").exists()  # the first attempt's folder is not the second's
    x = torch.tensor([-1.0, 0.0, 2.5])
    assert torch.equal(load(tmp_path / "torch", "frontend_relu").relu(x), torch.tensor([0.0, 0.0, 2.5]))


@pytest.mark.parametrize(("source", "error", "last_tried"), [
    ("torch::Tensor twice(torch::Tensor x) { return x * 2 }", "expected", "slim"),  # a syntax error: once
    ("torch::Tensor twice(torch::Tensor x) { return x * tow; }", "tow", "torch"),  # a missing name: again, with torch's
], ids=["syntax-error", "missing-name"])
def test_a_failed_build_reports_the_compilers_words_and_is_built_again_only_for_a_missing_name(tmp_path, source, error, last_tried):
    with pytest.raises(CompileError, match=error):
        build_extension_in(tmp_path, spec("broken", source, ["twice"]))
    assert sorted(p.name for p in tmp_path.iterdir()) == (["slim"] if last_tried == "slim" else ["slim", "torch"])
    assert json.loads((tmp_path / last_tried / "spec.json").read_text())["torch_extension_h"] == last_tried
