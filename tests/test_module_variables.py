"""A function is given the module's variables wherever the top level binds them (a ``with`` or ``for`` body, a
walrus) and whichever of the file's functions and classes it reaches them through; torch raises on each program."""

from __future__ import annotations

import textwrap

import pytest

from gradguard.api import analyze_source
from programs import found, run_program

MUTATES = textwrap.dedent('''
    def train():
        weights.mul_(2)
        weights.sum().backward()
        return [weights.grad]
''')

BINDINGS = {
    "with_body": 'with torch.device("cpu"):\n    weights = torch.ones(3, requires_grad=True)\n',
    "for_body": "for _ in range(1):\n    weights = torch.ones(3, requires_grad=True)\n",
    "while_body": "while True:\n    weights = torch.ones(3, requires_grad=True)\n    break\n",
    "walrus": "if (weights := torch.ones(3, requires_grad=True)) is None:\n    pass\n",
}


@pytest.mark.parametrize("shape", sorted(BINDINGS))
def test_a_variable_bound_in_a_top_level_block_reaches_the_functions_that_name_it(shape):
    src = "import torch\n\n" + BINDINGS[shape] + MUTATES
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        run_program(src)
    lines = [d.span.line for d in found("GG002", src)]
    assert lines == [src.splitlines().index("    weights.mul_(2)") + 1]


CHAIN = textwrap.dedent('''
    import torch

    with torch.device("cpu"):
        weights = torch.ones(3, requires_grad=True)


    def scale():
        weights.mul_(2)


    class Step:
        def __call__(self):
            scale()


    def run_step():
        Step()()


    def train():
        run_step()
        weights.sum().backward()
        return [weights.grad]
''')


def test_a_function_reaches_the_variables_through_the_functions_and_classes_it_names():
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        run_program(CHAIN)
    assert [d.span.line for d in found("GG002", CHAIN)] == [CHAIN.splitlines().index("    weights.mul_(2)") + 1]


def test_an_edit_to_the_binding_in_a_block_renews_the_cached_findings():
    cache: dict = {}
    assert analyze_source(CHAIN, "c.py", cache=cache).diagnostics
    edited = CHAIN.replace("torch.ones(3, requires_grad=True)", "torch.ones(3, requires_grad=True).clone()")
    run_program(edited)  # not a leaf, and nothing saved it: torch runs it
    assert analyze_source(edited, "c.py", cache=cache).diagnostics == analyze_source(edited, "c.py").diagnostics == []
