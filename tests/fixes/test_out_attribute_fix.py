"""GG106: an ``out=`` call into an object's attribute (a scratch buffer the object keeps) binds the attribute to the
result, ``self.buf = torch.mul(h, s)``, where the run shows nothing but that object holding the buffer's memory;
unsafe (the attribute gets a new tensor, with its graph).  Another name holding the buffer gets no fix: it would
keep the old values.  torch runs each fixed program against the intended one."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
from programs import found, run_program

torch = pytest.importorskip("torch")

_PROGRAM = """
import torch


class Scaler:
    def __init__(self):
        self.buf = torch.empty(5, 6)

    def apply(self, h):
        {alias}torch.mul(h, 0.5, out=self.buf)
        return self.buf.sum(dim=1)


def train():
    torch.manual_seed(5)
    lin = torch.nn.Linear(4, 6)
    scaler = Scaler()
    scaler.apply(lin(torch.randn(5, 4))).pow(2).sum().backward()
    return [lin.weight.grad, lin.bias.grad]
"""


def test_an_out_call_into_an_attribute_binds_the_attribute_as_an_unsafe_fix():
    src = textwrap.dedent(_PROGRAM).replace("{alias}", "")
    with pytest.raises(RuntimeError, match="out=... arguments don't support automatic differentiation"):
        run_program(src)
    (diag,) = found("GG106", src)
    assert diag.fix is not None and not diag.fix.safe
    assert fix_text(src, "t.py", Config(jedi=False)).fixed == src
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "        self.buf = torch.mul(h, 0.5)\n" in out and not found("GG106", out)
    intended = src.replace("torch.mul(h, 0.5, out=self.buf)\n        return self.buf.sum(dim=1)",
                           "return torch.mul(h, 0.5).sum(dim=1)")
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


def test_an_attribute_another_name_also_holds_gets_no_such_fix():
    src = textwrap.dedent(_PROGRAM).replace("{alias}", "kept = self.buf\n        ").replace(
        "return self.buf.sum(dim=1)", "return self.buf.sum(dim=1) + kept.sum(dim=1)")
    assert [d.fix for d in found("GG106", src)] == [None]
