"""What a keystroke costs besides the edited function's own run: no walk of the unchanged rest of the file.

Which functions are given the module's variables (``engine._ModuleVariables``) was worked out again at each version
from scratch (every top-level statement's bindings, every expression node of the tree): at a keystroke in timm's
``vision_transformer.py`` (5,000 lines) that was over half of the engine's CPU (20 -> 55 ms).  The bench that shows
it is ``bench/bench_lsp.py --real bench/corpus``; this test pins the work, not the time."""

from __future__ import annotations

import ast
import textwrap

from gradguard import engine
from gradguard.api import analyze_source
from test_cache import _findings

SOURCE = textwrap.dedent('''
    import torch

    SCALE = 2.0
    for _name in ("a", "b"):
        LAST = _name
    TABLE = {"a": 1, "b": 2}


    def helper(t):
        return t * SCALE


    def train(x):
        w = torch.ones(3, requires_grad=True)
        y = torch.sigmoid(helper(w))
        y.mul_(2)
        return y.sum()
''')


def test_a_keystroke_asks_no_unchanged_top_level_statement_for_its_bindings(monkeypatch):
    asked: list[str] = []
    real = engine.module_bound

    def counting(node: ast.AST) -> frozenset[str]:
        asked.append(type(node).__name__)
        return real(node)

    monkeypatch.setattr(engine, "module_bound", counting)
    cache: dict = {}
    analyze_source(SOURCE, "m.py", cache=cache, fixes=False)
    for keystroke in ("  # e", "  # ed", ""):
        asked.clear()
        edited = SOURCE.replace("y.mul_(2)", "y.mul_(2)" + keystroke)
        result = analyze_source(edited, "m.py", cache=cache, fixes=False)
        assert asked == []
        assert _findings(result) == _findings(analyze_source(edited, "m.py", fixes=False))
        assert _findings(result)  # the write of the saved product is found at each version


def test_the_functions_given_the_module_variables_are_those_that_read_one_or_name_such_a_function():
    """Definitions are statements: the readers are found from the statement tree (``statements.walk``), nested
    definitions included, not from every expression node."""
    nested = SOURCE + textwrap.dedent('''

        def outer():
            def inner():
                return TABLE
            return inner


        def caller():
            return outer()
    ''')
    tree = ast.parse(nested)
    variables = engine._ModuleVariables(tree, nested.split("\n"))
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert {name for name, node in functions.items() if variables.reaches(node)} == \
        {"helper", "train", "outer", "caller"}
