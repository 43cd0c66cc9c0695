"""ParallelKernelBench problems loaded at run time from a checkout (a small one the tests write):
ids and names, what the spec takes from the checkout, inputs per trial, clear errors, and
`kloop eval pkb:...` end to end on CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agent.prompting import input_signature
from problems import find_problem, load_ref
from problems.pkb import ROOT_ENV, TRIALS, PkbError, _generator_module, read_defaults
from tests.fixtures.candidates import HERE as CANDIDATES
from tests.fixtures.pkb_checkout import BASE_SHAPE, make_checkout

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------- the loader
@pytest.mark.parametrize("ident", ["pkb:1", "pkb:1_allreduce", "pkb:allreduce", "pkb:1_allreduce.py", "pkb:ALLREDUCE"])
def test_ids_names_and_file_names_resolve_to_one_problem(pkb_root, ident):
    problem = find_problem(ident, pkb_root)
    assert problem.name == "pkb_1_allreduce"
    assert problem is find_problem("pkb:1", pkb_root)
    assert problem.reference_path == pkb_root / "reference" / "1_allreduce.py"


def test_the_spec_comes_from_the_checkout(pkb_root):
    allreduce, clip = find_problem("pkb:1", pkb_root), find_problem("pkb:grad_norm_clip", pkb_root)
    assert clip.name == "pkb_21_grad_norm_clip"
    assert allreduce.spec.category == "collective" and clip.spec.category == "uncategorized"
    for problem in (allreduce, clip):
        spec = problem.spec
        assert spec.shapes["default"] == spec.shapes["small"] == {"base_shape": BASE_SHAPE}  # run_local.py's --m/--n
        assert (spec.dtype, spec.atol, spec.rtol) == ("bfloat16", 1e-2, 1e-2)
        assert spec.world_sizes == (2, 4, 8) and spec.upcast and not spec.in_place
        assert problem.cost(4, 2, **problem.shape("default")).model_dump() == {"comm_bytes": 0.0, "flops": 0.0, "hbm_bytes": 0.0}
        assert problem.compat == "pkb" and problem.oracle_path is None
        assert problem.reference_source.startswith("import torch")
    assert allreduce.ref == f"pkb:{pkb_root}::1_allreduce"
    assert load_ref(allreduce.ref) is allreduce
    assert input_signature(clip, 2, "default", "bfloat16") == ["[bfloat16[96, 40], bfloat16[96, 40], bfloat16[96, 40]]", "1.0", "2.0", "None"]


def test_the_version_hash_covers_reference_and_generator(tmp_path):
    root = make_checkout(tmp_path)
    before = find_problem("pkb:1", root).source_hash()
    generator = root / "utils" / "input_output_tensors.py"
    generator.write_text(generator.read_text() + "\n# changed\n")
    assert find_problem("pkb:1", root).source_hash() != before


def test_a_broken_generator_is_refused_at_load_without_importing_it(tmp_path):
    root = make_checkout(tmp_path)
    generator = root / "utils" / "input_output_tensors.py"
    text = generator.read_text()
    generator.write_text(text.replace("def create_input_tensor(", "def make_tensor("))
    with pytest.raises(PkbError, match="defines no create_input_tensor"):
        find_problem("pkb:1", root)
    generator.write_text(text + "\ndef broken(:\n")
    with pytest.raises(PkbError, match=r"cannot read .*input_output_tensors.py: SyntaxError"):
        find_problem("pkb:1", root)


def test_launcher_defaults_are_read_without_running_it(tmp_path):
    root = make_checkout(tmp_path)
    launcher = root / "run_local.py"
    launcher.write_text('raise RuntimeError("ran")\n' + launcher.read_text().replace("default=96", "default=32").replace(
        'default="bfloat16"', 'default="float32"').replace("--atol\", type=float, default=1e-2", "--atol\", type=float, default=0.05"))
    defaults = read_defaults(root)
    assert defaults.base_shape == (32, 40) and defaults.dtype == "float32" and defaults.atol == 0.05 and defaults.rtol == 1e-2
    launcher.unlink()
    assert read_defaults(root).base_shape == (1024, 1024)  # PKB's usual defaults where the file is missing


def test_inputs_change_with_the_trial_seed(pkb_root):
    problem = find_problem("pkb:7", pkb_root)
    generator = _generator_module(pkb_root / "utils" / "input_output_tensors.py")

    def inputs(seed, rank=1):
        return problem.make_inputs(rank, 2, torch.Generator().manual_seed(seed), torch.device("cpu"), torch.bfloat16, base_shape=BASE_SHAPE)

    first, again, other, other_rank = inputs(11), inputs(11), inputs(12), inputs(11, rank=0)
    assert first[0].shape == (2 * BASE_SHAPE[0], BASE_SHAPE[1])
    assert torch.equal(first[0], again[0]) and not torch.equal(first[0], other[0]) and not torch.equal(first[0], other_rank[0])
    seed = 2**62 - 5  # the harness's trial seeds are this large: PKB's trial index is derived from it
    direct = generator.create_input_tensor(1, 2, 7, BASE_SHAPE, torch.bfloat16, trial=seed % TRIALS, device=torch.device("cpu"))
    assert torch.equal(inputs(seed)[0], direct[0])


def test_the_checkout_never_becomes_the_utils_package(pkb_root):
    find_problem("pkb:1", pkb_root)
    module = sys.modules.get("utils")
    assert module is None or not str(getattr(module, "__file__", "")).startswith(str(pkb_root))


def test_unknown_problems_name_the_close_ones(pkb_root):
    with pytest.raises(PkbError, match=r"no ParallelKernelBench problem 'allreduc' .*did you mean 1_allreduce"):
        find_problem("pkb:allreduc", pkb_root)
    with pytest.raises(PkbError, match=r"no ParallelKernelBench problem '99' .*5 problems, 1_allreduce to 55_pair_sum"):
        find_problem("pkb:99", pkb_root)


def test_roots_that_are_not_checkouts_are_refused(pkb_root, tmp_path, monkeypatch):
    monkeypatch.delenv(ROOT_ENV, raising=False)
    with pytest.raises(PkbError, match=f"pass --pkb-root PATH or set {ROOT_ENV}"):
        find_problem("pkb:1")
    with pytest.raises(PkbError, match="does not exist"):
        find_problem("pkb:1", tmp_path / "nowhere")
    with pytest.raises(PkbError, match="is not a ParallelKernelBench checkout: it has no reference/ and no utils/input_output_tensors.py"):
        find_problem("pkb:1", tmp_path)
    monkeypatch.setenv(ROOT_ENV, str(pkb_root))
    assert find_problem("pkb:1").name == "pkb_1_allreduce"


# ---------------------------------------------------------------------------- kloop eval
def kloop(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", *args], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


def kloop_eval(root: Path, candidate: str, *extra: str, world: int = 2, env: dict | None = None) -> tuple[int, dict]:
    root_args = ["--pkb-root", str(root)] if root else []
    result = kloop("eval", "pkb:1", str(CANDIDATES / f"{candidate}.py"), *root_args, "--world", str(world), "--allow-nccl",
                   "--trials", "2", "--no-timed", "--json", *extra, env=env)
    assert result.stdout.strip(), result.stderr
    return result.returncode, json.loads(result.stdout)


@pytest.mark.parametrize("world", [2, 4])
def test_eval_of_a_correct_candidate(pkb_root, world):
    code, report = kloop_eval(pkb_root, "pkb_allreduce_fp32", world=world)
    assert code == 0 and report["status"] == "correct", report["message"]
    assert report["problem"] == "pkb_1_allreduce" and report["world"] == world and len(report["ranks"]) == world
    assert any(note.startswith("weak check: ") and "torch.full(rank + 1)" in note for note in report["notes"])


def test_eval_of_a_wrong_candidate(pkb_root):
    code, report = kloop_eval(pkb_root, "pkb_allreduce_no_comm")
    assert code == 1 and report["status"] == "wrong"
    assert report["mismatch"]["kind"] == "values" and "expected 3, got 1" in report["message"]


def test_a_candidate_written_for_pkb_builds_through_the_shim(pkb_root):
    """`from utils.cuda_helpers import compile_cuda_extension` finds the harness's shim (the
    checkout's own helper raises); the source is plain C++, built as such by this CPU torch.
    The root comes from $KLOOP_PKB_ROOT this time."""
    code, report = kloop_eval(None, "pkb_allreduce_cuda_helpers", env={ROOT_ENV: str(pkb_root)})
    assert code == 0 and report["status"] == "correct", json.dumps(report, indent=1)[-3000:]
    assert report["compiles"]["distinct"] == 1 and report["compiles"]["failed"] == 0


@pytest.mark.parametrize("ident, root, expected", [
    ("pkb:allreduc", "checkout", "no ParallelKernelBench problem 'allreduc' in"),
    ("pkb:1", "/nonexistent/pkb", "ParallelKernelBench root /nonexistent/pkb does not exist"),
    ("pkb:1", str(REPO / "tests"), "is not a ParallelKernelBench checkout"),
    ("pkb:1", None, f"pass --pkb-root PATH or set {ROOT_ENV}"),
])
def test_bad_ids_and_roots_are_one_line(pkb_root, ident, root, expected):
    root_args = [] if root is None else ["--pkb-root", str(pkb_root) if root == "checkout" else root]
    result = kloop("eval", ident, str(CANDIDATES / "pkb_allreduce_fp32.py"), *root_args, env={ROOT_ENV: ""})
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip() and "Warning" not in line and "_conversion_method" not in line]
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_the_prompt_tells_of_the_pkb_helper(pkb_root):
    result = kloop("prompt", "pkb:1", "--pkb-root", str(pkb_root), "--device", "cuda")
    assert result.returncode == 0, result.stderr
    assert "# Task: pkb_1_allreduce (collective, allreduce)" in result.stdout
    assert "from utils.cuda_helpers import compile_cuda_extension" in result.stdout
    assert "fastest possible time" not in result.stdout  # no cost model, no roofline


@pytest.mark.parametrize("command", ["problems", "eval"])
def test_the_cli_process_never_imports_torch_for_a_pkb_problem(pkb_root, command):
    """The checkout's generator imports torch (seconds on a GPU host): listing a PKB problem or
    evaluating one leaves that to the harness's own process."""
    args = (["problems", "--json"] if command == "problems" else
            ["eval", "pkb:1", str(CANDIDATES / "pkb_allreduce_fp32.py"), "--world", "2", "--allow-nccl", "--trials", "2",
             "--no-timed", "--json"])
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "agent", *args, "--pkb-root", str(pkb_root)], cwd=REPO,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "agent.cli" in imported and not {name for name in imported if name.split(".")[0] == "torch"}
    if command == "eval":
        assert json.loads(result.stdout)["status"] == "correct"


def test_problems_lists_the_checkout(pkb_root):
    result = kloop("problems", "--json", "--pkb-root", str(pkb_root))
    assert result.returncode == 0, result.stderr
    names = [entry["name"] for entry in json.loads(result.stdout)]
    assert "all_reduce" in names and "pkb_1_allreduce" in names and "pkb_55_pair_sum" in names


def test_run_with_a_scripted_model(pkb_root, tmp_path):
    """`kloop run` takes the same --pkb-root; the demo script's second answer (a sum) is right for pkb:1."""
    result = kloop("run", "pkb:1", "--pkb-root", str(pkb_root), "--model", "scripted:demo", "--steps", "2", "--allow-nccl",
                   "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    (folder,) = tmp_path.iterdir()
    assert folder.name.split("_", 1)[1].startswith("pkb_1_allreduce")
    config = json.loads((folder / "config.json").read_text())
    assert config["harness"]["problem"] == "pkb_1_allreduce" and config["harness"]["problem_ref"] == f"pkb:{pkb_root}::1_allreduce"
    assert (folder / "best" / "solution.py").exists()
