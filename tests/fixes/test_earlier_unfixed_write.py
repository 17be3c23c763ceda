"""A fix is not offered when it leaves an earlier in-place write of the same memory that is a finding with no fix
of its own (``Fixer._leaves``, from ``Moment.earlier_writes``): torch still breaks there, so the fixed program
would break all the same.  The earlier write runs in a closure, a lambda or a helper that rebinds a global (each
has no fix here); the later one, in the caller, could be computed on a copy.  When the earlier write has a fix
of its own, both are fixed."""

from __future__ import annotations

import warnings

import pytest
from gradguard.api import analyze_source
from gradguard.autofix.writer import fix_text
from gradguard.config import Config

torch = pytest.importorskip("torch")

CLOSURE = """import torch


def run():
    w = torch.randn(4, requires_grad=True)
    def shift():
        nonlocal y
        y = w.add_(1.0)
    shift()
    y = y.mul_(2.0)
    (y * 3).sum().backward()
    return w.grad
"""

LAMBDA = """import torch


def run():
    w = torch.randn(4, requires_grad=True)
    bump = lambda: w.add_(1.0)
    bump()
    w.mul_(2.0)
    (w * 3).sum().backward()
    return w.grad
"""

GLOBAL = """import torch

w = torch.randn(4, requires_grad=True)


def bump():
    global w
    w = w.add_(1.0)


def run():
    bump()
    w.mul_(2.0)
    (w * 3).sum().backward()
    return w.grad
"""

BOTH_FIXED = """import torch


def run():
    torch.manual_seed(0)
    w = torch.randn(4, requires_grad=True)
    for _ in range(1):
        w.sigmoid_()
    h = w.mul_(2.0)
    h.sum().backward()
    return w.grad
"""


def _run(source: str):
    names: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(source, "t.py", "exec"), names)  # noqa: S102 - the test's own program
    return names["run"]()


@pytest.mark.parametrize("source", [CLOSURE, LAMBDA, GLOBAL], ids=["closure", "lambda", "global"])
def test_no_fix_that_leaves_an_earlier_unfixed_write_of_the_leaf(source):
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        _run(source)
    earlier, later = sorted(analyze_source(source, "t.py", Config(jedi=False)).diagnostics, key=lambda d: d.line)
    assert (earlier.code, later.code) == ("GG002", "GG002")
    assert earlier.fix is None and later.fix is None, later.fix and later.fix.title
    assert fix_text(source, "t.py", Config(jedi=False), unsafe=True).fixed == source


def test_an_earlier_write_with_a_fix_of_its_own_leaves_both_fixed():
    diagnostics = analyze_source(BOTH_FIXED, "t.py", Config(jedi=False)).diagnostics
    assert [d.code for d in diagnostics] == ["GG002", "GG002"] and all(d.fix is not None for d in diagnostics)
    fixed = fix_text(BOTH_FIXED, "t.py", Config(jedi=False), unsafe=True).fixed
    assert fixed != BOTH_FIXED and not analyze_source(fixed, "t.py", Config(jedi=False)).diagnostics
    torch.manual_seed(0)
    w = torch.randn(4, requires_grad=True)
    torch.sigmoid(w).mul(2.0).sum().backward()
    assert torch.allclose(_run(fixed), w.grad)
