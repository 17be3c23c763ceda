"""GG001 on a write made inside a call the fix cannot change there (a helper passed the tensor, a callable
object, a method): the tensor is cloned where the op that saved it made it (``torch.exp(w).clone()``), so the
call writes memory backward no longer needs -- the same program, safe.  A saved input is cloned as the argument
whose value the run saw the op save (``Save.operand``).  Not offered when the op's result is also stored in a list
read later (the list would see the write the clone keeps)."""

from __future__ import annotations

import textwrap

import pytest
import torch
from gradguard.config import Config
from gradguard.autofix.writer import fix_text

from programs import found, run_program

HELPER = """
import torch


class Scale:
    def __init__(self, factor):
        self.factor = factor

    def __call__(self, t):
        t.mul_(self.factor)
        return t


def train():
    torch.manual_seed(0)
    w = torch.randn(6, requires_grad=True)
    rates = {op}(w)
    scaled = Scale(0.5)(rates)
    scaled.sum().backward()
    return [w.grad]
"""


def test_the_tensor_is_cloned_where_the_op_that_saved_it_made_it():
    src = textwrap.dedent(HELPER).replace("{op}", "torch.exp")
    (diag,) = found("GG001", src)
    assert diag.fix is not None and diag.fix.safe and "torch.exp(w).clone()" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert "rates = torch.exp(w).clone()" in out and "t.mul_(self.factor)" in out and not found("GG001", out)
    torch.manual_seed(0)
    w = torch.randn(6, requires_grad=True)
    (torch.exp(w) * 0.5).sum().backward()
    (got,) = run_program(out)
    assert torch.allclose(got, w.grad)


def test_a_saved_input_is_cloned_as_the_argument_the_run_saw_saved():
    src = textwrap.dedent(HELPER).replace("rates = {op}(w)", "rates = w * 1.0\n    waves = torch.sin(rates)")
    src = src.replace("scaled.sum().backward()", "(scaled.sum() + waves.sum()).backward()")  # sin saved `rates`
    (diag,) = found("GG001", src)
    assert diag.fix is not None and diag.fix.safe and "rates.clone()" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert "waves = torch.sin(rates.clone())" in out and "t.mul_(self.factor)" in out and not found("GG001", out)
    torch.manual_seed(0)
    w = torch.randn(6, requires_grad=True)
    ((w * 0.5).sum() + torch.sin(w).sum()).backward()
    (got,) = run_program(out)
    assert torch.allclose(got, w.grad)


NOISE = """
import torch
import torch.nn as nn


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.sigma = nn.Parameter(torch.full((3, 4), 0.1))
        self.register_buffer("eps", torch.zeros(3, 4))

    def forward(self, x):
        self.eps.normal_()
        return x @ (self.sigma * self.eps).t()


def train():
    torch.manual_seed(0)
    layer = Noisy()
    x = torch.randn(2, 4)
    loss = layer(x).sum() + layer(x).pow(2).sum()
    loss.backward()
    return [layer.sigma.grad]
"""


def test_a_buffer_resampled_by_the_next_forward_is_cloned_where_the_product_saved_it():
    """The second forward resamples the buffer the first one's product saved: the buffer is an attribute, not a
    name, and the run tells which operand of ``*`` was saved: that one is cloned."""
    src = textwrap.dedent(NOISE)
    (diag,) = found("GG001", src)
    assert diag.fix is not None and diag.fix.safe
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert "(self.sigma * self.eps.clone())" in out and "self.eps.normal_()" in out and not found("GG001", out)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run_program(src)
    intended = src.replace("(self.sigma * self.eps)", "(self.sigma * self.eps.detach().clone())")
    assert intended != src
    scope: dict = {}
    exec(compile(intended, "intended", "exec"), scope)  # noqa: S102 - the test's own program
    for got, want in zip(run_program(out), scope["train"]()):
        assert torch.allclose(got, want)


def test_no_clone_when_the_output_is_also_stored_in_a_list_read_later():
    src = textwrap.dedent("""
        import torch


        def decay(h, keep):
            h.mul_(keep)


        def train():
            torch.manual_seed(0)
            W = torch.randn(4, 4, requires_grad=True)
            h = torch.zeros(4)
            outputs = []
            for t in range(3):
                if t > 0:
                    decay(h, 0.5)
                h = torch.tanh(W @ h + 1.0)
                outputs.append(h)
            torch.stack(outputs).pow(2).sum().backward()
            return [W.grad]
    """)
    (diag,) = found("GG001", src)
    assert diag.fix is None or "clone()" not in diag.fix.title


CLOSURE = """
import torch


def train():
    torch.manual_seed(0)
    theta = torch.randn(3, requires_grad=True)
    logw = torch.randn(8, 3) @ theta
    weights = torch.exp(logw - logw.max())
    ess = weights.sum() ** 2 / (weights ** 2).sum()
    if ess < 100.0:
        def reset():
            weights.fill_(1.0)
        reset()
    (weights.mean() + ess).backward()
    return [theta.grad]
"""


def test_a_closure_writing_its_free_variable_clones_the_saved_argument_by_its_name():
    """The closure writes ``weights``, a name it does not bind: the same name holds the tensor where ``**``
    saved it, so the argument is cloned there too (``weights.clone() ** 2``), as is exp's output."""
    src = textwrap.dedent(CLOSURE)
    (diag,) = found("GG001", src)
    assert diag.fix is not None and diag.fix.safe
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert "torch.exp(logw - logw.max()).clone()" in out and "(weights.clone() ** 2)" in out
    assert "weights.fill_(1.0)" in out and not found("GG001", out)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run_program(src)
    intended = src.replace("        def reset():\n            weights.fill_(1.0)\n        reset()\n",
                           "        weights = torch.ones_like(weights)\n")
    assert intended != src
    scope: dict = {}
    exec(compile(intended, "intended", "exec"), scope)  # noqa: S102 - the test's own program
    for got, want in zip(run_program(out), scope["train"]()):
        assert torch.allclose(got, want)
