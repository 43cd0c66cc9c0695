"""The dependency direction of the packages (agent -> sandbox -> problems; kloop_runtime a leaf),
and the runtime's public name ``sandbox.runtime`` with and without the judge's package around."""

import ast
import json
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("agent", "sandbox", "problems", "prompts", "kloop_runtime", "service")
# What each package must never import, lazy imports inside functions included. The sandbox image
# holds only kloop_runtime, sandbox and problems; candidate code sees only kloop_runtime.
FORBIDDEN = {
    "kloop_runtime": {"sandbox", "problems", "agent", "prompts", "service"},
    "problems": {"sandbox", "agent", "prompts", "service"},
    "sandbox": {"agent", "prompts", "service"},
}
CANDIDATE_API = "sandbox.runtime"  # the runtime's public name: what oracles (candidate code) import
RUNTIME_DEPENDENCIES = {"torch", "filelock"}


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source`` (a module of ``package``),
    relative ones resolved."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}".rstrip(".")
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def imports_of(root: Path, package: str):
    """(path, line, module) of every import in the files of ``root/package``."""
    for path in sorted((root / package).rglob("*.py")):
        for line, name in imported_modules(path.read_text(), ".".join(path.relative_to(root).parent.parts)):
            yield path.relative_to(root), line, name


def violations(root: Path, package: str) -> list[str]:
    bad = []
    for path, line, name in imports_of(root, package):
        if name.split(".")[0] not in FORBIDDEN[package]:
            continue
        if path.name == "oracle.py" and (name == CANDIDATE_API or name.startswith(CANDIDATE_API + ".")):
            continue
        bad.append(f"{path}:{line} imports {name}")
    return bad


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_goes_against_the_dependency_direction(package):
    assert violations(ROOT, package) == []


def test_the_check_finds_lazy_and_relative_imports(tmp_path):
    folder = tmp_path / "problems" / "collective" / "x"
    folder.mkdir(parents=True)
    (folder / "problem.py").write_text("from ...registry import get_problem\n\ndef f():\n    import agent.cli\n    import sandbox.harness\n")
    (folder / "oracle.py").write_text("from sandbox import runtime\nfrom sandbox import topology\n")
    assert violations(tmp_path, "problems") == [
        "problems/collective/x/oracle.py:2 imports sandbox.topology",
        "problems/collective/x/problem.py:4 imports agent.cli", "problems/collective/x/problem.py:5 imports sandbox.harness"]
    assert imported_modules((folder / "problem.py").read_text(), "problems.collective.x")[0] == (1, "problems.registry.get_problem")


def test_runtime_imports_only_stdlib_torch_and_filelock():
    allowed = RUNTIME_DEPENDENCIES | {"kloop_runtime", "__future__"} | set(sys.stdlib_module_names)
    outside = [f"{path}:{line} imports {name}" for path, line, name in imports_of(ROOT, "kloop_runtime")
               if name.split(".")[0] not in allowed]
    assert outside == []


def test_importing_the_whole_runtime_loads_nothing_of_ours():
    code = ("import importlib, json, pkgutil, sys, kloop_runtime\n"
            "for info in pkgutil.walk_packages(kloop_runtime.__path__, 'kloop_runtime.'):\n"
            "    importlib.import_module(info.name)\n"
            "print(json.dumps(sorted(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT, check=True)
    loaded = json.loads(result.stdout.splitlines()[-1])
    assert {"kloop_runtime.driver", "kloop_runtime.symmetric", "kloop_runtime.settings", "kloop_runtime.compat"} <= set(loaded)
    assert [name for name in loaded if name.split(".")[0] in set(OURS) - {"kloop_runtime"}] == []


def test_sandbox_runtime_is_the_runtime_itself():
    import kloop_runtime
    import kloop_runtime.driver
    import sandbox.runtime.driver
    from sandbox import runtime

    assert runtime is kloop_runtime and sandbox.runtime.driver is kloop_runtime.driver
    assert runtime.load_kernel is kloop_runtime.load_kernel and runtime.SymmetricBuffer is kloop_runtime.SymmetricBuffer


def test_compat_package_gives_sandbox_runtime_and_nothing_else(tmp_path):
    """Only the runtime (a copy, far from the project) and its compat folder on the path, as in a
    candidate's rank: ``sandbox.runtime`` works, the judge's ``sandbox`` is not there."""
    shutil.copytree(ROOT / "kloop_runtime", tmp_path / "kloop_runtime", ignore=shutil.ignore_patterns("__pycache__"))
    from kloop_runtime.compat import ROOT as COMPAT

    compat = tmp_path / COMPAT.relative_to(ROOT)
    code = ("import importlib.util, json, sys\n"
            "import sandbox\n"
            "from sandbox import runtime\n"
            "import sandbox.runtime.driver, kloop_runtime, kloop_runtime.driver\n"
            "print(json.dumps({'sandbox': sandbox.__file__, 'runtime': runtime.__file__, 'load_kernel': callable(runtime.load_kernel),\n"
            "  'same': runtime is kloop_runtime and sandbox.runtime.driver is kloop_runtime.driver,\n"
            "  'public': sorted(n for n in vars(sandbox) if not n.startswith('_')),\n"
            "  'harness': importlib.util.find_spec('sandbox.harness') is not None}))")
    path = [str(compat), str(tmp_path), *site.getsitepackages()]
    env = {"PYTHONPATH": ":".join(path), "PATH": "/usr/bin:/bin"}
    # -S: no site processing, so no .pth file (the editable install's finder) brings the project back.
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["sandbox"] == str(compat / "sandbox" / "__init__.py")
    assert seen["runtime"] == str(tmp_path / "kloop_runtime" / "__init__.py")
    assert seen["load_kernel"] and seen["same"] and seen["public"] == ["runtime"] and not seen["harness"]
