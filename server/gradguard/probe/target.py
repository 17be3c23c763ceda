"""The child side: what exactly is run, and how.  No torch here.

- Without an entry, the file runs as ``__main__``, as ``python FILE`` would run it: ``sys.argv`` is
  ``[FILE]``, the file's folder is first on ``sys.path``, ``if __name__ == "__main__":`` blocks run.
- With ``entry="run"``, the file is imported as a module (its ``__main__`` block does not run) and
  ``run()`` is called with no arguments.  ``entry`` may name an attribute path (``Suite.run``).

Either way the working directory is a fresh temporary folder, not the file's folder.

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
from typing import Callable

from ..statements import walk_blocks

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


def prepare(path: str, entry: str | None, lines: set[int], hit: Callable[[int], None]) -> Callable[[], object]:
    """Everything that can fail before the user's code starts; returns the body to run."""
    source = read_source(path)
    code = compile_target(path, source, lines)
    folder = os.path.dirname(path)
    name = "__main__" if entry is None else _module_name(path)
    module = types.ModuleType(name)
    module.__file__ = path
    module.__builtins__ = builtins
    if lines:
        setattr(module, HIT, hit)

    def body():
        sys.argv = [path]
        sys.path.insert(0, folder)
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
