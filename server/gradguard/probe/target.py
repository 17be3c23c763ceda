"""The child side: what exactly is run, and how.  No torch here.

- Without an entry, the file runs as ``__main__``, as ``python FILE`` would run it: ``sys.argv`` is
  ``[FILE]``, the file's folder is first on ``sys.path``, ``if __name__ == "__main__":`` blocks run.
- With ``entry="run"``, the file is imported as a module (its ``__main__`` block does not run) and
  ``run()`` is called with no arguments.  ``entry`` may name an attribute path (``Suite.run``).

- With ``module="pkg.mod"`` (a file inside a package), the file runs as ``python -m pkg.mod`` would run
  it from ``module_root`` (the folder above the top package): that folder is first on ``sys.path``, the
  parent packages are imported first, and ``__package__`` is set, so relative imports work.
- ``argv`` (``--probe-args``) is what the script sees as ``sys.argv[1:]``.

Either way the working directory is a fresh temporary folder, not the file's folder.

``runnable(path)`` says, from the source alone, whether and how ``check --probe`` runs a file: a script
(top-level code or an ``if __name__ == "__main__":`` block), a package module run with ``-m``, or a
module with only definitions (no entry point: not run, and said so).

When the caller wants to know whether some lines ran (``check --probe`` asks about the lines of its
static findings), the source is compiled with a marker call inserted before the innermost statement
holding each such line; nothing else about the code changes (line numbers and tracebacks included).
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import os
import sys
import types
from dataclasses import dataclass
from typing import Callable

from ..statements import children, walk_blocks

HIT = "__gradguard_hit__"


class TargetError(Exception):
    """The target cannot be run at all (unreadable, not Python, no such entry function)."""


def read_source(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TargetError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return importlib.util.decode_source(data)
    except (UnicodeDecodeError, SyntaxError, LookupError) as exc:
        raise TargetError(f"cannot decode {path}: {exc}") from None


def instrument(tree: ast.Module, lines: set[int]) -> ast.Module:
    """Insert ``__gradguard_hit__(L)`` before the innermost statement that holds each line L."""
    if not lines:
        return tree
    owner: dict[int, tuple[ast.stmt, int]] = {}  # line -> (innermost statement, its span)
    for _, _, stmts in walk_blocks(tree):
        for stmt in stmts:
            end = getattr(stmt, "end_lineno", None) or stmt.lineno
            span = end - stmt.lineno
            for line in lines:
                if stmt.lineno <= line <= end:
                    best = owner.get(line)
                    if best is None or span <= best[1]:
                        owner[line] = (stmt, span)
    marks: dict[int, list[int]] = {}
    for line, (stmt, _) in owner.items():
        marks.setdefault(id(stmt), []).append(line)
    for node, name, stmts in list(walk_blocks(tree)):
        new: list[ast.stmt] = []
        for stmt in stmts:
            for line in sorted(marks.get(id(stmt), ())):
                call = ast.Expr(ast.Call(ast.Name(HIT, ast.Load()), [ast.Constant(line)], []))
                new.append(ast.copy_location(call, stmt))
            new.append(stmt)
        setattr(node, name, new)
    return ast.fix_missing_locations(tree)


def compile_target(path: str, source: str, lines: set[int]):
    try:
        tree = ast.parse(source, path)
    except (SyntaxError, ValueError) as exc:
        where = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
        raise TargetError(f"{path} is not valid Python: {exc.msg if hasattr(exc, 'msg') else exc}{where}") from None
    return compile(instrument(tree, lines), path, "exec", dont_inherit=True)


def _module_name(path: str) -> str:
    stem = os.path.splitext(os.path.basename(path))[0]
    if stem.isidentifier() and stem not in sys.modules:
        return stem
    return "__gradguard_target__"


def prepare(path: str, entry: str | None, lines: set[int], hit: Callable[[int], None],
            module_name: str | None = None, module_root: str | None = None,
            argv: tuple[str, ...] | list[str] = ()) -> Callable[[], object]:
    """Everything that can fail before the user's code starts; returns the body to run."""
    source = read_source(path)
    code = compile_target(path, source, lines)
    folder = module_root if module_name else os.path.dirname(path)
    if module_name:
        name = "__main__" if entry is None else module_name
    else:
        name = "__main__" if entry is None else _module_name(path)
    module = types.ModuleType(name)
    module.__file__ = path
    module.__builtins__ = builtins
    if lines:
        setattr(module, HIT, hit)

    def body():
        sys.argv = [path, *argv]
        sys.path.insert(0, folder)
        if module_name:
            # As runpy does for ``python -m``: the parent packages first (their __init__ runs), then the
            # module itself under its spec, with __package__ set so that relative imports resolve.
            package = module_name.rpartition(".")[0]
            if package:
                importlib.import_module(package)
            module.__spec__ = importlib.util.spec_from_file_location(module_name, path)
            module.__package__ = package
        sys.modules[name] = module
        exec(code, module.__dict__)
        if entry is None:
            return None
        target = module
        for part in entry.split("."):
            try:
                target = getattr(target, part)
            except AttributeError:
                raise TargetError(f"{os.path.basename(path)} defines no {entry!r} to call (--entry)") from None
        if not callable(target):
            raise TargetError(f"{entry!r} in {os.path.basename(path)} is not callable")
        return target()

    return body


# --- what check --probe can run ---------------------------------------------------------------------

SCRIPT = "script"  # run as ``python FILE``
MODULE = "module"  # inside a package: run as ``python -m pkg.mod`` from the package root
NO_ENTRY = "no-entry"  # only definitions: nothing to run
NOT_PYTHON = "not-python"  # unreadable or not valid Python: the static analysis reports it

# Calls at module level that only define things (a logger, a type variable, a device): a module whose
# top level holds nothing else has no entry point.
_DEFINING_CALLS = {
    "TypeVar", "ParamSpec", "TypeVarTuple", "NewType", "NamedTuple", "namedtuple", "TypedDict", "Enum",
    "IntEnum", "getLogger", "get_logger", "device", "dtype", "field", "partial", "Path", "PurePath",
    "compile", "frozenset", "set", "dict", "list", "tuple", "object", "getenv", "get", "import_module",
    "cast", "dataclass", "lru_cache", "register", "Registry", "defaultdict", "OrderedDict", "Counter",
}


@dataclass(frozen=True)
class Runnable:
    """How ``check --probe`` runs a file: ``kind`` (SCRIPT, MODULE, NO_ENTRY, NOT_PYTHON); for a MODULE,
    its dotted name and the folder it is run from; ``why``: one phrase for the report."""

    kind: str
    module: str | None = None
    root: str | None = None
    why: str = ""

    @property
    def runs(self) -> bool:
        return self.kind in (SCRIPT, MODULE)


def package_of(path: str) -> tuple[str | None, str | None]:
    """(dotted module name, package root) of a file inside a package (its folder has ``__init__.py``),
    or (None, None).  The root is the folder above the topmost package folder."""
    path = os.path.realpath(path)
    folder = os.path.dirname(path)
    parts = []
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.append(os.path.basename(folder))
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    if not parts:
        return None, None
    stem = os.path.splitext(os.path.basename(path))[0]
    names = [*reversed(parts)] + ([] if stem == "__init__" else [stem])
    return ".".join(names), folder


def _is_main_test(test: ast.expr) -> bool:
    if not isinstance(test, ast.Compare) or len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, *test.comparators]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
        isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)


def _callee(call: ast.Call) -> str:
    func = call.func
    while isinstance(func, ast.Call):
        func = func.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _only_defines(value: ast.AST | None) -> bool:
    """A module-level value that defines rather than runs: no call, or only calls that make definitions."""
    if value is None:
        return True
    return all(_callee(node) in _DEFINING_CALLS for node in ast.walk(value) if isinstance(node, ast.Call))


def _runs_code(stmts: list[ast.stmt], entry: str | None) -> bool:
    for stmt in stmts:
        if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass, ast.Global, ast.Nonlocal)):
            continue
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if entry is not None and stmt.name == entry.split(".")[0]:
                return True
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring, ``...``
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            if entry is not None and any(isinstance(t, ast.Name) and t.id == entry.split(".")[0]
                                         for t in getattr(stmt, "targets", [getattr(stmt, "target", None)])):
                return True
            if _only_defines(stmt.value):
                continue
            return True
        if isinstance(stmt, ast.If):
            if _is_main_test(stmt.test):
                return True
            if _runs_code(stmt.body, entry) or _runs_code(stmt.orelse, entry):
                return True
            continue
        if isinstance(stmt, ast.Try):  # ``try: import x`` / ``except ImportError: x = None``
            if _runs_code(list(children(stmt)), entry):  # body, handlers, else and finally
                return True
            continue
        return True  # a call, a loop, a ``with``, an ``assert``, ``raise``...: code that runs
    return False


def runnable(path: str, entry: str | None = None) -> Runnable:
    """Whether ``check --probe`` can run ``path``, and how (read from the source; nothing is imported).

    ``entry``: with ``--entry FUNC``, a file that defines FUNC is runnable (FUNC is called)."""
    try:
        tree = ast.parse(read_source(path), path)
    except TargetError as exc:
        return Runnable(NOT_PYTHON, why=str(exc))
    except (SyntaxError, ValueError) as exc:
        return Runnable(NOT_PYTHON, why=f"not valid Python: {getattr(exc, 'msg', exc)}")
    module, root = package_of(path)
    if os.path.basename(path) == "__init__.py":
        return Runnable(NO_ENTRY, module, root, "a package's __init__.py (it runs when its package is imported)")
    if not _runs_code(tree.body, entry):
        return Runnable(NO_ENTRY, module, root, "only definitions (no top-level code, no "
                                                "`if __name__ == \"__main__\":` block)")
    if module:
        return Runnable(MODULE, module, root, f"python -m {module}")
    return Runnable(SCRIPT, why="python " + os.path.basename(path))
