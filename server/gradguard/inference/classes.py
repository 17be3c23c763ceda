"""The file's own ``nn.Module`` subclasses, and what their ``__init__`` makes ``self.x``."""

from __future__ import annotations

import ast
from dataclasses import replace

from .imports import qualified_name
from .interpreter import ClassInfo, Context, Interpreter
from .values import ModuleValue, Value


_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def statements(tree: ast.AST):
    """Every statement, nested ones included, without visiting expressions (``ast.walk`` costs ~3x more)."""
    stack = list(getattr(tree, "body", []))
    while stack:
        node = stack.pop()
        yield node
        for field in _BODIES:
            children = getattr(node, field, None)
            if children:
                stack.extend(children)


def find_module_classes(tree: ast.Module, imports: dict[str, str]) -> dict[str, ClassInfo]:
    """Classes deriving (directly or through another class of the file) from an nn.Module-like base."""
    classes: dict[str, ClassInfo] = {}
    for node in statements(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        is_module = False
        for base in node.bases:
            q = qualified_name(base, imports) or ""
            name = q or (base.id if isinstance(base, ast.Name) else getattr(base, "attr", ""))
            if q.startswith("torch.nn.") or name.endswith("Module") or name in classes:
                is_module = True
        if is_module:
            init = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
            classes[node.name] = ClassInfo(node, init)
    return classes


def init_attributes(ctx: Context, info: ClassInfo, module: ModuleValue) -> dict[str, Value]:
    """Run ``__init__`` abstractly with ``self`` bound to ``module`` and return what it assigned to ``self``."""
    if info.init is None:
        return module.attrs
    interp = Interpreter(replace(ctx, depth=ctx.depth + 1), self_value=module)
    interp.run_function(info.init, is_forward=False)
    return module.attrs
