"""GG002/GG003 when a helper writes its parameter, a leaf, and its callers read the leaf afterwards
(``inplace._copy_for_callers``): the helper writes a copy and returns it, each call binds it to a new name the
caller reads from then on, and ``.grad`` still reads the leaf.  torch runs each fixed program against the intended
one; where a call cannot be rewritten that way, no such fix is made."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.config import Config
from gradguard.fixing import fix_text
from programs import found, run_program

torch = pytest.importorskip("torch")

_PROGRAM = """
import torch


{helper}


def train():
    torch.manual_seed(2)
    w = torch.randn(3, 4, requires_grad=True)
    x = torch.randn(5, 3)
    {call}
    (x @ w).pow(2).sum().backward()
    return [w.grad]
"""

_INTENDED = """
import torch


def train():
    torch.manual_seed(2)
    w = torch.randn(3, 4, requires_grad=True)
    x = torch.randn(5, 3)
    (x @ ({scaled})).pow(2).sum().backward()
    return [w.grad]
"""

HELPERS = {  # helper, its call, the call once fixed, what the caller meant to compute, the rule
    "function": ("def rescale(t):\n    t.T.mul_(2)", "rescale(w)", "w_new = rescale(w)", "w * 2", "GG003"),
    "callable object": ("class Rescale:\n    def __call__(self, t):\n        t[0].mul_(3)",
                        "step = Rescale()\n    step(w)", "w_new = step(w)", "w * torch.tensor([[3.0], [1.0], [1.0]])",
                        "GG003"),
    "whole tensor": ("def rescale(t):\n    t.mul_(2)", "rescale(w)", "w_new = rescale(w)", "w * 2", "GG002"),
}


@pytest.mark.parametrize("kind", sorted(HELPERS))
def test_the_helper_returns_a_written_copy_that_its_caller_reads(kind):
    helper, call, fixed_call, scaled, code = HELPERS[kind]
    src = textwrap.dedent(_PROGRAM).replace("{helper}", helper).replace("{call}", call)
    (diag,) = found(code, src)
    assert diag.fix is not None and not diag.fix.safe and "returns it, read as `w_new`" in diag.fix.title, diag.fix
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert f"    {fixed_call}\n" in out and "(x @ w_new)" in out and "return [w.grad]" in out
    assert not found(code, out)
    intended = textwrap.dedent(_INTENDED).replace("{scaled}", scaled)
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("call", [
    "y = rescale(w)",  # the call's result is used already
    "for _ in range(2):\n        rescale(w)",  # called in a loop: each call would copy the copy
    "rescale(w)\n    w = w * 1",  # the caller binds the name again
])
def test_no_copy_for_callers_where_a_call_cannot_take_it(call):
    src = textwrap.dedent(_PROGRAM).replace("{helper}", "def rescale(t):\n    t.T.mul_(2)").replace("{call}", call)
    assert all(d.fix is None or "read as `w_new`" not in d.fix.title for d in found("GG003", src))
