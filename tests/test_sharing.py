"""The run log (``inference/sharing.py``): what the code reads after a write, as the interpreter ran it."""

from __future__ import annotations

import ast
import textwrap

import pytest
from gradguard.engine import analyze_module

SETUP = """\
import torch
def use(y):
    n = y * 2
    return n
w = torch.ones(3, requires_grad=True)
y = w.exp()
loss = y.sum()
"""


def moment_of_write(body: str):
    """The moment of the one GG001 write (``y.add_(1)``) in SETUP + body."""
    text = SETUP + textwrap.dedent(body)
    findings = analyze_module(ast.parse(text), "<test>", text.splitlines(), use_jedi=False)
    (finding,) = [f for f in findings if f.code == "GG001"]
    return finding.mutation.moment


@pytest.mark.parametrize("body, read", [
    ("y.add_(1)\nz = y * 2\nloss.backward()\n", True),  # read by name
    ("y.add_(1)\nz = [0, y][1]\nloss.backward()\n", True),  # read into a list
    ("y.add_(1)\nn = y.shape\nloss.backward()\n", False),  # metadata only
    ("y.add_(1)\nprint(y.grad, y.dtype)\nloss.backward()\n", False),
    ("y.add_(1)\nother = use(w)\nloss.backward()\n", False),  # `y` of the followed call is another variable
    ("z = y * 1\ny.add_(1)\nloss.backward()\n", False),  # read before only
    ("debug = False\ny.add_(1)\nif debug:\n    print(y.sum())\nloss.backward()\n", True),  # a branch left out may run
    ("y.add_(1)\nwhile loss.item() > y.sum().item():\n    break\nloss.backward()\n", True),  # a loop's test
])
def test_value_read_after_the_write(body, read):
    moment = moment_of_write(body)
    assert moment.value_read_after("y") is read


def test_metadata_reads_are_kept_apart():
    moment = moment_of_write("y.add_(1)\nn = y.shape\nloss.backward()\n")
    assert moment.log.metadata_read(moment.frames[-1], "y", moment.position)
    assert not moment.value_read_after("y")


def test_a_loop_around_the_write_counts_its_earlier_reads_as_after():
    text = textwrap.dedent("""\
        import torch
        w = torch.ones(3, requires_grad=True)
        for _ in range(3):
            y = w.exp()
            z = y * 2
            y.add_(1)
            z.sum().backward()
        """)
    findings = analyze_module(ast.parse(text), "<test>", text.splitlines(), use_jedi=False)
    (finding,) = [f for f in findings if f.code == "GG001"]
    moment = finding.mutation.moment
    assert moment.value_read_after("y")  # `z = y * 2` of the next iteration
    assert moment.value_read_after("z")


def test_a_write_inside_a_followed_call_asks_about_the_callers_frame_by_depth():
    text = textwrap.dedent("""\
        import torch
        def bump(t):
            t.add_(1)
            return None
        w = torch.ones(3, requires_grad=True)
        y = w.exp()
        loss = y.sum()
        bump(y)
        k = y + 1
        loss.backward()
        """)
    findings = analyze_module(ast.parse(text), "<test>", text.splitlines(), use_jedi=False)
    (finding,) = [f for f in findings if f.code == "GG001"]
    moment = finding.mutation.moment
    assert len(moment.frames) == 2
    assert not moment.value_read_after("t")  # the helper reads `t` no more after its write
    assert moment.value_read_after("y", depth=0)  # the caller reads `y` after the call
