"""GG002/GG003 when a helper writes its parameter, a leaf, and its callers read the leaf afterwards
(``copies.copy_for_callers``): the helper writes a copy and returns it, each call binds it to a new name the
caller reads from then on, and ``.grad`` still reads the leaf.  torch runs each fixed program against the intended
one; where a call cannot be rewritten that way, no such fix is made."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
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


_ASKED = """
import torch


def mask_(h, mask):
    h.mul_(mask)


def train():
    torch.manual_seed(4)
    enc = torch.nn.Linear(3, 5)
    h = enc(torch.randn(4, 3))
    mask = (torch.rand(4, 5) > 0.5).float()
    aux = h.mean(dim=0).pow(2).sum()
    mask_(h, mask)
    main = torch.tanh(h).sum()
    (g,) = torch.autograd.grad(aux + main, inputs=[h])
    return [g]
"""


def test_gg107_the_ask_keeps_the_tensor_passed_and_the_later_uses_read_the_copy():
    """GG107 in a helper: ``inputs=[h]`` keeps asking for the tensor passed, whose every use (the penalty before
    the call, the copy after it) then counts."""
    (diag,) = found("GG107", _ASKED)
    assert diag.fix is not None and not diag.fix.safe and "read as `h_new`" in diag.fix.title, diag.fix
    out = fix_text(_ASKED, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "    h_new = mask_(h, mask)\n" in out and "torch.tanh(h_new)" in out and "inputs=[h]" in out
    assert not found("GG107", out)
    intended = _ASKED.replace("    mask_(h, mask)\n", "").replace("torch.tanh(h)", "torch.tanh(h * mask)")
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


_CLOSURE = """
import torch


def train():
    torch.manual_seed(2)
    w = torch.randn(3, 4, requires_grad=True)
    x = torch.randn(5, 3)
    def rescale():
        {body}
    {calls}
    (x @ w).pow(2).sum().backward()
    return [w.grad]
"""


@pytest.mark.parametrize("body, code", [
    ("nonlocal w\n        w *= 2", "GG002"),  # rebinding the variable needs `nonlocal`, now for the copy
    ("w.T.mul_(2)", "GG003"),
])
def test_a_closure_writes_a_copy_bound_before_its_call(body, code):
    src = textwrap.dedent(_CLOSURE).replace("{body}", body).replace("{calls}", "rescale()")
    (diag,) = found(code, src)
    assert diag.fix is not None and not diag.fix.safe and "`w_new = w.clone()` before `rescale()`" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "    w_new = w.clone()\n    rescale()\n" in out and "(x @ w_new)" in out and "return [w.grad]" in out
    assert "nonlocal w\n" not in out and not found(code, out)
    intended = textwrap.dedent(_INTENDED).replace("{scaled}", "w * 2")
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


def test_no_closure_copy_when_the_closure_is_called_twice():
    src = textwrap.dedent(_CLOSURE).replace("{body}", "w.T.mul_(2)").replace("{calls}", "rescale()\n    rescale()")
    assert all(d.fix is None or "w.clone()` before" not in d.fix.title for d in found("GG003", src))
