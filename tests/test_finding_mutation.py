"""A finding carries the write it is about as a typed attribute, ``Finding.mutation``, not under a string key.

``Finding.data["mutation"]`` was read in ten files, each with its own guard for a missing key; a misspelt key was a
silent None.  This test fails on ``"mutation"`` used as a key anywhere in gradguard: a dict literal's key, a
subscript, ``.get("mutation")``, ``"mutation" in ...``, or a ``**`` merge naming it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOTS = [Path(__file__).resolve().parents[1] / "server" / "gradguard", Path(__file__).resolve().parent]


def _keyed(tree: ast.AST) -> list[int]:
    def is_key(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and node.value == "mutation"

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and any(is_key(k) for k in node.keys):
            found.append(node.lineno)
        elif isinstance(node, ast.Subscript) and is_key(node.slice):
            found.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "pop", "setdefault") and node.args and is_key(node.args[0])):
            found.append(node.lineno)
        elif isinstance(node, ast.Compare) and is_key(node.left) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            found.append(node.lineno)
        elif isinstance(node, ast.Call) and any(k.arg is None and isinstance(k.value, ast.Dict)
                                                and any(is_key(x) for x in k.value.keys) for k in node.keywords):
            found.append(node.lineno)
    return found


def test_the_recogniser_sees_each_form():
    for code in ('d = {"mutation": m}', 'm = f.data["mutation"]', 'm = f.data.get("mutation")',
                 'ok = "mutation" in f.data'):
        assert _keyed(ast.parse(code)), code
    assert not _keyed(ast.parse('m = f.mutation; kind = "mutation"'))


def test_no_mutation_key_anywhere():
    here = Path(__file__).resolve()
    found = [f"{path}:{line}" for root in ROOTS for path in sorted(root.rglob("*.py")) if path != here
             and "fixtures" not in path.parts for line in _keyed(ast.parse(path.read_text(encoding="utf-8")))]
    assert not found, "Finding.data['mutation'] is Finding.mutation now: " + ", ".join(found)
