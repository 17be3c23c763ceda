"""Names that explain themselves: a class name means one thing across the layers, and ``F`` is torch's.

A reader who meets ``Write`` or ``Rebind`` should not have to look up which layer's it is (the fixes' in-place write,
the probe's untracked write, the analysis' rebinding event), and every PyTorch reader takes ``F`` for
``torch.nn.functional``.  Both are read from the source, no import needed.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "server" / "gradguard"

# Shared by the probe and the static analysis, which name the same runtime facts; left to the probe's owner to
# rename (issue 26, item 5).  This list may only shrink.
KNOWN = {"Conflict", "GradRead", "HookWrite", "KeptOutput"}


def _layer(path: Path) -> str:
    """``fixes``, ``inference``, ``probe``, ``rules``, ``lsp``...; the package's own modules are one layer."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else "gradguard"


def _trees():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def test_no_class_name_in_two_layers():
    where: dict[str, set[str]] = defaultdict(set)
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                where[node.name].add(_layer(path))
    shared = {name: sorted(layers) for name, layers in where.items() if len(layers) > 1 and name not in KNOWN}
    assert not shared, f"class names defined in more than one layer: {shared}"


def test_nothing_but_torch_nn_functional_is_imported_as_F():
    wrong = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                wrong += [(path, node.lineno, a.name) for a in node.names
                          if a.asname == "F" and a.name != "torch.nn.functional"]
            elif isinstance(node, ast.ImportFrom):
                wrong += [(path, node.lineno, f"{node.module}.{a.name}") for a in node.names
                          if a.asname == "F" and (node.module, a.name) != ("torch.nn", "functional")]
    assert not wrong, [f"{p.relative_to(PACKAGE)}:{line}: {name} as F" for p, line, name in wrong]
