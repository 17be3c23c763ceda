"""GG001 on a write made inside a call the fix cannot change there (a helper passed the tensor, a callable
object, a method): the tensor is cloned where the op that saved it made it (``torch.exp(w).clone()``), so the
call writes memory backward no longer needs -- the same program, safe.  Not offered when the op's result is also
stored in a list read later (the list would see the write the clone keeps), nor for a saved input (the call does
not tell which argument was saved)."""

from __future__ import annotations

import textwrap

import torch
from gradguard.config import Config
from gradguard.fixing import fix_text

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


def test_no_clone_when_a_saved_input_is_written():
    src = textwrap.dedent(HELPER).replace("rates = {op}(w)", "rates = w * 1.0\n    waves = torch.sin(rates)")
    src = src.replace("scaled.sum().backward()", "(scaled.sum() + waves.sum()).backward()")  # sin saved `rates`
    (diag,) = found("GG001", src)
    assert diag.fix is None or "clone()" not in diag.fix.title


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
