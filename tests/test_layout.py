"""The tests' own layout (issue 12): each test file lives in the folder that mirrors the package it
tests (tests/agent/bash for agent/bash, ...) or at the top when it checks the whole project;
every folder of tests is a package, so two files of one name in different folders never collide;
shared helpers sit in tests/support, data in tests/fixtures; GPU need is said by the ``gpu``
marker, never by a folder."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CROSS_CUTTING = {"test_architecture.py", "test_layout.py"}  # top-level tests: about the whole project
NOT_MIRRORED = {"support", "fixtures"}  # helpers and data, no tests
SCRIPT_FOLDERS = {"benchmarks"}  # folders of scripts, not packages, that have tests


def misplaced(tests: Path, root: Path) -> list[str]:
    """What in ``tests`` (the tests folder of the repository at ``root``) breaks the layout."""
    problems = []
    for path in sorted(tests.rglob("*.py")):
        relative = path.relative_to(tests)
        folder = relative.parent
        if not folder.parts:
            if path.name not in CROSS_CUTTING | {"__init__.py", "conftest.py"}:
                problems.append(f"{relative}: at the top of tests/ (move it into the folder of the package it tests, "
                                f"or into support/ if it is a helper)")
            continue
        if folder.parts[0] == "fixtures":
            continue  # data: candidates and attacks are judged, never imported as tests
        if any(part in ("gpu", "cpu") for part in folder.parts):
            problems.append(f"{relative}: a folder named after hardware (say GPU need with the gpu marker)")
        if path.name.startswith("test_"):
            package = root.joinpath(*folder.parts)
            mirrored = (package / "__init__.py").exists() or (folder.parts[0] in SCRIPT_FOLDERS and package.is_dir())
            if folder.parts[0] in NOT_MIRRORED or not mirrored:
                problems.append(f"{relative}: {folder} mirrors no package of the project")
        for parent in [folder, *folder.parents][:-1]:
            if not (tests / parent / "__init__.py").exists():
                problems.append(f"{relative}: tests/{parent} has no __init__.py (test modules of one name would collide)")
        if path.name.endswith("_gpu.py") and path.name.startswith("test_") and "mark.gpu" not in path.read_text():
            problems.append(f"{relative}: named for a GPU but has no gpu marker")
    return sorted(set(problems))


def test_the_tests_mirror_the_packages():
    assert misplaced(ROOT / "tests", ROOT) == []


def test_the_layout_check_finds_misplaced_files(tmp_path):
    (tmp_path / "agent" / "bash").mkdir(parents=True)
    (tmp_path / "agent" / "__init__.py").write_text("")
    (tmp_path / "agent" / "bash" / "__init__.py").write_text("")
    tests = tmp_path / "tests"
    files = {
        "__init__.py": "", "conftest.py": "", "test_architecture.py": "",
        "test_bash_agent.py": "",  # flat: belongs in tests/agent/bash
        "browser.py": "",  # a helper outside support/
        "agent/__init__.py": "", "agent/bash/test_units.py": "",  # agent/bash has no __init__.py
        "agent/test_fine.py": "",
        "agent/gpu/__init__.py": "", "agent/gpu/test_x.py": "",
        "nowhere/__init__.py": "", "nowhere/test_y.py": "",
        "agent/test_loop_gpu.py": "def test_x(): pass\n",
        "support/__init__.py": "", "support/test_helper.py": "",
        "fixtures/candidates/anything.py": "",
    }
    for name, text in files.items():
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text(text)
    found = "\n".join(misplaced(tests, tmp_path))
    assert "test_bash_agent.py: at the top" in found and "browser.py: at the top" in found
    assert "tests/agent/bash has no __init__.py" in found
    assert "agent/gpu/test_x.py: a folder named after hardware" in found
    assert "nowhere/test_y.py: nowhere mirrors no package" in found
    assert "support/test_helper.py: support mirrors no package" in found
    assert "agent/test_loop_gpu.py: named for a GPU but has no gpu marker" in found
    assert "test_fine" not in found and "test_architecture" not in found and "candidates" not in found
