"""Resolve local names to qualified names (``F`` -> ``torch.nn.functional``) from import statements."""

from __future__ import annotations

import ast

from ..statements import children

# What a bare name means when nothing imports it (builtins the dataflow cares about).
BUILTINS = {"range", "enumerate", "zip", "len", "list", "tuple", "float", "int", "print", "reversed", "super", "sum",
            "getattr", "setattr", "dict", "isinstance", "property", "all", "any"}


def collect_imports(body: list[ast.stmt], into: dict[str, str] | None = None) -> dict[str, str]:
    """Map each imported local name to its qualified name, for imports anywhere in ``body`` (not nested defs)."""
    names = {} if into is None else into
    stack = list(body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
            for alias in stmt.names:
                names[alias.asname or alias.name] = f"{stmt.module}.{alias.name}"
        elif isinstance(stmt, ast.ImportFrom) and stmt.level:  # `from .trainer import Trainer`: ".trainer.Trainer"
            prefix = "." * stmt.level + (f"{stmt.module}." if stmt.module else "")
            for alias in stmt.names:
                names[alias.asname or alias.name] = f"{prefix}{alias.name}"
        elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
            stack.extend(children(stmt))
    return names


def qualified_name(node: ast.expr, imports: dict[str, str]) -> str | None:
    """``F.relu`` -> ``torch.nn.functional.relu`` when ``F`` was imported; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    head = imports.get(node.id)
    if head is None:
        if node.id in BUILTINS and not parts:
            return f"builtins.{node.id}"
        return None
    return ".".join([head, *reversed(parts)])


def normalize(qualname: str) -> str:
    """Fold torch's many spellings of one thing onto one (``torch.nn.modules.activation.ReLU`` -> ``torch.nn.ReLU``)."""
    if qualname.startswith("torch.nn.modules."):
        return "torch.nn." + qualname.rsplit(".", 1)[1]
    if qualname.startswith("torch.nn.parameter."):
        return "torch.nn." + qualname.rsplit(".", 1)[1]
    if qualname.startswith("torch.functional."):
        return "torch." + qualname.rsplit(".", 1)[1]
    return qualname
