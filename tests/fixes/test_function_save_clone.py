"""A custom Function saves with ``ctx.save_for_backward(...)``, a call that returns None.  GG001's clone where the
tensor is saved copies the argument that holds it (``ctx.save_for_backward(out.clone())``), never the call: when
the saved output is handed in a sequence (``*[out]``, ``*saved``) no argument names it, and the clone is refused
(``ctx.save_for_backward(*[out]).clone()`` raised AttributeError under torch).  The probe's facts reach the same
builder (tests/probe/test_probe_fix_facts.py)."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
from gradients import grads_equal
from programs import found, run_program

torch = pytest.importorskip("torch")

_PROGRAM = """
import torch


class Exponential(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = torch.exp(x)
        {bind}ctx.save_for_backward({saved})
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out


def train():
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    h = Exponential.apply(x)
    k = h
    h.mul_(2)
    (k * 1).sum().backward()
    return [x.grad]
"""


def _program(bind: str, saved: str) -> str:
    return textwrap.dedent(_PROGRAM).replace("{bind}", bind).replace("{saved}", saved)


@pytest.mark.parametrize("bind, saved", [("", "*[out]"), ("saved = (out,)\n        ", "*saved")],
                         ids=["starred_list", "starred_name"])
def test_no_clone_of_the_save_call(bind: str, saved: str):
    src = _program(bind, saved)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run_program(src)
    offered = [d.fix.title for d in found("GG001", src) if d.fix is not None]
    assert not any(").clone()" in title for title in offered), offered
    fixed = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert ").clone()" not in fixed, fixed
    if fixed != src:  # whatever fix is left must run clean
        run_program(fixed)


def test_the_saved_argument_is_cloned_and_proven():
    src = _program("", "out")
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run_program(src)
    fixed = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "ctx.save_for_backward(out.clone())" in fixed, fixed
    reference = src.replace("k = h\n    h.mul_(2)", "h = h * 2\n    k = h")  # k sees the write
    assert reference != src
    assert grads_equal(run_program(fixed), run_program(reference))
