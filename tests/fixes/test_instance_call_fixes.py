"""A write inside ``__call__`` / ``forward`` (``fixes/callers.py``): fixed through the calls of the class's instances
(the method returns the new tensor, each ``inst(x)`` rebinds ``x``) when every use of the class makes an instance
that its function only calls; never otherwise.  torch runs the fixed programs."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
from programs import found

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


def _train(src: str, fixed: bool = False):
    scope: dict = {}
    exec(compile(src, "fixed", "exec"), scope)  # noqa: S102 - our own test programs
    return scope["train"](fixed)


@pytest.mark.parametrize("cls, method, me", _SHAPES)
def test_a_write_in_an_instance_called_method_is_fixed_through_the_instance_calls(cls, method, me):
    src = _program(cls, method, me)
    (diag,) = found("GG001", src)
    assert diag.fix is not None and not diag.fix.safe and "calls to `Step` from other files" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "        h = h.mul(0.5)\n        return h\n" in out and "        h = step(h)\n" in out
    assert not found("GG001", out)
    for got, want in zip(_train(out), _train(src, fixed=True), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("tail", [
    "\n        step.register_forward_hook(print)",  # the instance is used otherwise than called
    "\n        other = step",  # another name holds the instance
    "\n        print(Step)",  # the class is used otherwise than made into an instance
])
def test_no_instance_call_fix_when_the_instance_or_class_is_used_otherwise(tail):
    src = _program("class Step(torch.nn.Module)", "forward", "self", tail)
    diags = found("GG001", src)
    assert diags and all(d.fix is None or "calls rebind" not in d.fix.title for d in diags)


def test_forward_of_a_class_that_defines_its_own_call_is_not_fixed_through_the_calls():
    src = _program("class Step(torch.nn.Module)", "forward", "self").replace(
        "    def forward(", "    def __call__(self, h):\n        return self.forward(h)\n\n    def forward(")
    diags = found("GG001", src)
    assert diags and all(d.fix is None or "calls rebind" not in d.fix.title for d in diags)


def test_a_helper_whose_calls_already_rebind_is_fixed_in_the_helper_alone():
    src = textwrap.dedent("""
        import torch


        def rescale(d):
            d /= d.detach().norm()
            return d


        def train(fixed=False):
            torch.manual_seed(0)
            w = torch.randn(5, requires_grad=True)
            d = w * 2
            l1 = d.abs().sum()
            if fixed:
                d = d / d.detach().norm()
            else:
                d = rescale(d)
            (l1 + (d * torch.arange(5.0)).sum()).backward()
            return [w.grad]
    """)
    (diag,) = found("GG001", src)
    assert diag.fix is not None and "which its calls rebind" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "    d = d / d.detach().norm()\n    return d\n" in out and not found("GG001", out)
    for got, want in zip(_train(out), _train(src, fixed=True), strict=True):
        assert torch.allclose(got, want)


def test_a_helper_with_a_call_that_does_not_rebind_is_not_fixed_in_the_helper_alone():
    src = textwrap.dedent("""
        import torch


        def rescale(d):
            d /= d.detach().norm()
            return d


        def train():
            w = torch.randn(5, requires_grad=True)
            d = w * 2
            l1 = d.abs().sum()
            e = rescale(d)
            (l1 + (d * e).sum()).backward()
    """)
    diags = found("GG001", src)
    helper = range(5, 8)  # `rescale`'s lines: its write stays; only the op that saved `d` may take a copy
    assert diags and all(d.fix is None or (d.fix.safe and "clone()" in d.fix.title
                                           and not any(e.line in helper for e in d.fix.edits)) for d in diags)


def test_an_unsafe_fix_of_the_helper_for_another_reason_stays_refused_though_the_calls_rebind():
    src = textwrap.dedent("""
        import torch


        def shift(x):
            x += 1
            return x


        def train():
            x = torch.randn(4, 3, requires_grad=True)
            x = shift(x)
            x.sum().backward()
            return [x.grad]
    """)
    diags = [d for d in analyze_source(src, "t.py", Config(jedi=False)).diagnostics if d.code == "GG002"]
    assert diags and all(d.fix is None for d in diags)  # a copy would leave the leaf's own gradient unset


_CLOSURE = """
import torch


def train(fixed=False):
    torch.manual_seed(0)
    w = torch.randn(5, requires_grad=True)
    d = w * 2
    l1 = d.abs().sum()

    def rescale():
        nonlocal d
        d /= d.detach().norm()
    rescale(){tail}
    (l1 + (d * torch.arange(5.0)).sum()).backward()
    return [w.grad]


def reference():
    torch.manual_seed(0)
    w = torch.randn(5, requires_grad=True)
    d = w * 2
    l1 = d.abs().sum()
    d = d / d.detach().norm()
    (l1 + (d * torch.arange(5.0)).sum()).backward()
    return [w.grad]
"""


def test_a_closure_that_declares_its_name_nonlocal_is_fixed_in_place():
    src = textwrap.dedent(_CLOSURE).replace("{tail}", "")
    (diag,) = found("GG001", src)
    assert diag.fix is not None and diag.fix.safe
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert "        nonlocal d\n        d = d / d.detach().norm()\n" in out and not found("GG001", out)
    scope: dict = {}
    exec(compile(src, "reference", "exec"), scope)  # noqa: S102 - our own test programs
    for got, want in zip(_train(out), scope["reference"](), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("tail", [
    "\n    keep = rescale",  # the closure is used otherwise than called
    "\n    e = d[:2]\n    rescale()\n    print(e)",  # a view of the old tensor is read after a call
])
def test_no_rebinding_through_nonlocal_when_the_enclosing_function_could_see_the_old_tensor(tail):
    """No rebinding through ``nonlocal`` (the old tensor would stay visible); cloning what ``abs`` saved leaves
    the write where it is -- the same program -- and torch gives the reference's gradients."""
    src = textwrap.dedent(_CLOSURE).replace("{tail}", tail)
    diags = found("GG001", src)
    assert diags and all(d.fix is None or d.fix.title.startswith("Clone what backward needs") for d in diags)
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert "d.clone().abs()" in out and "d /= d.detach().norm()" in out and not found("GG001", out)
    scope: dict = {}
    exec(compile(src, "reference", "exec"), scope)  # noqa: S102 - our own test programs
    for got, want in zip(_train(out), scope["reference"](), strict=True):
        assert torch.allclose(got, want)
