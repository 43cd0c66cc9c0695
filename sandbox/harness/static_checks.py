"""Checks on the candidate's source before anything of it runs.

A candidate is ``build_failed`` when it does not parse, and ``rejected`` when it does what the
rules forbid: calling the NCCL collectives it is meant to replace (unless the run allows it),
NVLink multicast (off on these machines), reaching around the harness (subprocesses, sockets,
ctypes, frame and module introspection, ``exec``/``eval``), or monkeypatching the modules the
harness measures with.
"""

from __future__ import annotations

import ast
import re

from sandbox.harness.verdict import Verdict

COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter", "reduce_scatter_tensor",
    "all_to_all", "all_to_all_single", "broadcast", "broadcast_object_list", "reduce", "gather", "scatter", "send", "recv",
    "isend", "irecv", "batch_isend_irecv", "P2POp", "_all_gather_base", "_reduce_scatter_base", "all_gather_coalesced",
    "all_reduce_coalesced", "send_object_list", "recv_object_list", "scatter_object_list", "gather_object",
})
COLLECTIVE_MODULES = ("torch.distributed._functional_collectives", "torch.distributed.nn", "torch.cuda.nccl")
FORBIDDEN_MODULES = {
    "subprocess": "starting processes", "socket": "network access", "ctypes": "raw memory and library access: use sandbox.runtime",
    "multiprocessing": "starting processes", "importlib": "dynamic imports", "inspect": "frame introspection",
    "gc": "object-graph introspection", "sandbox.harness": "touching the harness", "pty": "starting processes",
    "urllib": "network access", "http": "network access", "requests": "network access", "httpx": "network access",
    "signal": "signal handling", "threading": "threads that outlive a call", "concurrent": "threads that outlive a call",
}
FORBIDDEN_BUILTINS = {"exec", "eval", "__import__", "breakpoint", "globals", "vars", "setattr", "delattr"}
FORBIDDEN_ATTRIBUTES = {
    "_getframe", "f_back", "f_globals", "f_locals", "__globals__", "__builtins__", "__subclasses__", "__code__",
    "system", "popen", "fork", "forkpty", "execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp", "spawnv",
    "spawnve", "posix_spawn", "kill", "killpg", "putenv", "unsetenv", "settrace", "setprofile",
    "addaudithook",
}
SYMM_MEM_PREBUILT = re.compile(r"^(_fused_|_low_contention_|_pipelined_|_multimem|one_shot|two_shot|multimem)")
ASSIGNABLE = ("torch.backends.",)  # global switches a solution may set (precision is judged anyway)
MULTICAST = re.compile(r"multimem|multicast|cuMulticast|NVLS", re.IGNORECASE)  # also refused in what ranks ask to compile
MULTICAST_OFF = "NVLink multicast (multimem / cuMulticast / NVLS) is switched off on these machines"
MAX_SOURCE_CHARS = 1_000_000
NCCL_IN_CUDA = re.compile(r"\bnccl[A-Z]\w*\s*\(|#\s*include\s*[<\"]nccl")


def check_source(source: str, filename: str = "solution.py", allow_nccl: bool = False) -> Verdict:
    """``ok``, ``build_failed`` (it does not parse) or ``rejected`` (it breaks a rule)."""
    if len(source) > MAX_SOURCE_CHARS:
        return Verdict("build_failed", f"{filename} is {len(source)} characters long; a solution may have at most {MAX_SOURCE_CHARS}")
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as error:
        where = f" line {error.lineno}" if error.lineno else ""  # null bytes: a SyntaxError of no line
        return Verdict("build_failed", f"{filename}{where}: SyntaxError: {error.msg}")
    except (ValueError, RecursionError, MemoryError, OverflowError) as error:  # null bytes, nesting too deep for the parser
        return Verdict("build_failed", f"{filename} cannot be parsed: {type(error).__name__}: {str(error)[:200]}")
    if not _defines_solution(tree):
        return Verdict("rejected", f"{filename} defines no top-level function `solution`")
    try:
        module_aliases = _module_aliases(tree)
        for node in ast.walk(tree):
            problem = _check_node(node, module_aliases, allow_nccl)
            if problem:
                return Verdict("rejected", f"{filename} line {getattr(node, 'lineno', '?')}: {problem}")
    except (RecursionError, MemoryError) as error:
        return Verdict("build_failed", f"{filename} is nested too deeply to check: {type(error).__name__}")
    return Verdict("ok")


def _defines_solution(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "solution":
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "solution" for t in node.targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == "solution" for a in node.names):
            return True
    return False


def _module_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> module it stands for, for every import in the file."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _resolve(name: str, aliases: dict[str, str]) -> str:
    head, _, rest = name.partition(".")
    return f"{aliases[head]}.{rest}".rstrip(".") if head in aliases else name


def _check_node(node: ast.AST, aliases: dict[str, str], allow_nccl: bool) -> str | None:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        if isinstance(node, ast.ImportFrom) and node.module:
            names += [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            for module, why in FORBIDDEN_MODULES.items():
                if name == module or name.startswith(module + "."):
                    return f"importing {module} is not allowed ({why})"
            if not allow_nccl and (name.startswith(COLLECTIVE_MODULES) or
                                   (name.startswith("torch.distributed.") and name.rsplit(".", 1)[-1] in COLLECTIVES)):
                return f"importing {name} is not allowed: write the communication yourself instead of calling NCCL"
    elif isinstance(node, ast.Name) and node.id in FORBIDDEN_BUILTINS:
        return f"`{node.id}` is not allowed"
    elif isinstance(node, ast.Attribute):
        if node.attr in FORBIDDEN_ATTRIBUTES or (node.attr == "modules" and _dotted(node) in ("sys.modules",)):
            return f"`.{node.attr}` is not allowed (it reaches around the harness)"
        dotted = _dotted(node)
        full = _resolve(dotted, aliases) if dotted else ""
        if not allow_nccl and node.attr in COLLECTIVES and full.startswith("torch.distributed"):
            return f"calling {full} is not allowed: write the communication yourself instead of calling NCCL"
        if full.startswith("torch.ops.symm_mem") or (full.startswith("torch.distributed._symmetric_memory.") and SYMM_MEM_PREBUILT.match(node.attr)):
            return f"{full} is a prebuilt collective; write the kernel yourself"
        if full.startswith("os.environ") and isinstance(getattr(node, "ctx", None), ast.Store):
            return "changing os.environ is not allowed"
    elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for target in targets:
            if isinstance(target, (ast.Attribute, ast.Subscript)):
                dotted = _dotted(target.value if isinstance(target, ast.Subscript) else target)
                root = (dotted or "").split(".")[0]
                if root in aliases and not _resolve(dotted, aliases).startswith(ASSIGNABLE):
                    return f"assigning to {dotted} (a module's attribute) is not allowed"
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        if MULTICAST.search(node.value):
            return MULTICAST_OFF
        if not allow_nccl and NCCL_IN_CUDA.search(node.value):
            return "calling NCCL from CUDA is not allowed: write the communication yourself"
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("update", "setdefault", "pop"):
        if _resolve(_dotted(node.func.value) or "", aliases) == "os.environ":
            return "changing os.environ is not allowed"
    if isinstance(node, ast.Name) and MULTICAST.search(node.id):
        return "NVLink multicast is switched off on these machines"
    if isinstance(node, ast.Attribute) and MULTICAST.search(node.attr):
        return "NVLink multicast is switched off on these machines"
    return None
