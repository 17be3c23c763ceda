"""A write inside ``__call__`` / ``forward`` (``fixes/callers.py``): fixed through the calls of the class's instances
(the method returns the new tensor, each ``inst(x)`` rebinds ``x``) when every use of the class makes an instance
that its function only calls; never otherwise.  torch runs the fixed programs."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.fixing import fix_text

torch = pytest.importorskip("torch")

_PROGRAM = """
import torch


{cls}:
    def {method}({me}, h):
        h.mul_(0.5)


def train(fixed=False):
    torch.manual_seed(3)
    w = torch.randn(4, 3, requires_grad=True)
    h = torch.sigmoid(torch.randn(5, 4) @ w)
    if fixed:
        h = h.mul(0.5)
    else:
        step = Step()
        step(h){tail}
    (h.sum() + torch.tanh(h).sum()).backward()
    return [w.grad]
"""

_SHAPES = [
    ("class Step", "__call__", "self"),
    ("class Step(object)", "__call__", "me"),
    ("class Step(torch.nn.Module)", "forward", "module"),
]


def _program(cls: str, method: str, me: str, tail: str = "") -> str:
    return textwrap.dedent(_PROGRAM).format(cls=cls, method=method, me=me, tail=tail)


def _gg001(src: str):
    return [d for d in analyze_source(src, "t.py", Config(jedi=False)).diagnostics if d.code == "GG001"]


def _train(src: str, fixed: bool = False):
    scope: dict = {}
    exec(compile(src, "fixed", "exec"), scope)  # noqa: S102 - our own test programs
    return scope["train"](fixed)


@pytest.mark.parametrize("cls, method, me", _SHAPES)
def test_a_write_in_an_instance_called_method_is_fixed_through_the_instance_calls(cls, method, me):
    src = _program(cls, method, me)
    (diag,) = _gg001(src)
    assert diag.fix is not None and not diag.fix.safe and "calls to `Step` from other files" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "        h = h.mul(0.5)\n        return h\n" in out and "        h = step(h)\n" in out
    assert not _gg001(out)
    for got, want in zip(_train(out), _train(src, fixed=True), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("tail", [
    "\n        step.register_forward_hook(print)",  # the instance is used otherwise than called
    "\n        other = step",  # another name holds the instance
    "\n        print(Step)",  # the class is used otherwise than made into an instance
])
def test_no_instance_call_fix_when_the_instance_or_class_is_used_otherwise(tail):
    src = _program("class Step(torch.nn.Module)", "forward", "self", tail)
    diags = _gg001(src)
    assert diags and all(d.fix is None or "calls rebind" not in d.fix.title for d in diags)


def test_forward_of_a_class_that_defines_its_own_call_is_not_fixed_through_the_calls():
    src = _program("class Step(torch.nn.Module)", "forward", "self").replace(
        "    def forward(", "    def __call__(self, h):\n        return self.forward(h)\n\n    def forward(")
    diags = _gg001(src)
    assert diags and all(d.fix is None or "calls rebind" not in d.fix.title for d in diags)
