"""GG109's fix on small programs: a leaf rebound under no_grad is updated in place, and torch shows what the fix
keeps -- the optimizer's leaf, which gets gradients again -- and, when it is offered as unsafe, the dtype or
shape the rebinding would have changed."""

from __future__ import annotations

import warnings

import pytest
from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.autofix.writer import fix_text

torch = pytest.importorskip("torch")

PROGRAM = """import torch
torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
x = torch.randn(5, 3)
opt = torch.optim.SGD([w, b], lr=0.1)
scale = torch.full((3,), 0.1, dtype=torch.float64)
lr = 0.1
for _ in range(3):
    opt.zero_grad()
    (x * w + b).pow(2).mean().backward()
    opt.step()
    with torch.no_grad():
        {line}
"""


def _fix(new: str):
    source = PROGRAM.format(line=f"w = {new}")
    (d,) = analyze_source(source, "t.py", Config(jedi=False)).diagnostics
    assert d.code == "GG109" and d.fix is not None
    return source, d.fix, fix_text(source, "t.py", Config(jedi=False), unsafe=True).fixed


def _run(source: str) -> dict:
    names: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(source, "t.py", "exec"), names)  # noqa: S102 - the test's own program
    return names


@pytest.mark.parametrize("new, update", [
    ("w - lr * w.grad", "w -= lr * w.grad\n        w.grad = None"),
    ("w / w.norm()", "w /= w.norm()"),
    ("w.clamp(-0.5, 0.5)", "w.clamp_(-0.5, 0.5)"),
    ("torch.clamp(w - 0.1 * w.grad, min=-1.0)", "w.copy_(torch.clamp(w - 0.1 * w.grad, min=-1.0))\n        w.grad = None"),
])
def test_the_safe_fix_keeps_the_optimizers_leaf_training(new, update):
    source, fix, fixed = _fix(new)
    assert fix.safe, fix.title
    assert fixed == PROGRAM.format(line=update)
    assert not analyze_source(fixed, "t.py", Config(jedi=False)).diagnostics
    after = _run(fixed)
    assert after["w"] is after["opt"].param_groups[0]["params"][0] and after["w"].requires_grad
    try:
        before = _run(source)
    except TypeError:  # the rebound `w` has no `.grad`: `lr * w.grad` fails on the next step
        assert "w.grad" in new
        return
    assert before["w"] is not before["opt"].param_groups[0]["params"][0]  # the rebinding leaves the leaf behind
    assert after["w"].dtype == before["w"].dtype and after["w"].shape == before["w"].shape
    assert fix_text(fixed, "t.py", Config(jedi=False), unsafe=True).fixed == fixed  # idempotent


def test_a_tensor_that_could_widen_the_dtype_makes_the_fix_unsafe():
    source, fix, fixed = _fix("w - scale * w")
    assert not fix.safe and "keeps its dtype" in fix.title
    assert "w -= scale * w" in fixed
    before, after = _run(source), _run(fixed)
    # torch: the rebinding widens `w` to float64, the in-place update casts back to float32
    assert (before["w"].dtype, after["w"].dtype) == (torch.float64, torch.float32)


def test_a_result_that_could_be_smaller_makes_copy_unsafe():
    source, fix, fixed = _fix("w.mean(0, keepdim=True)")
    assert not fix.safe and "keeps its shape" in fix.title and "dtype" not in fix.title
    assert "w.copy_(w.mean(0, keepdim=True))" in fixed
    before, after = _run(source), _run(fixed)
    # torch: the rebinding makes `w` one element, copy_ silently broadcasts the mean back over all three
    assert (tuple(before["w"].shape), tuple(after["w"].shape)) == ((1,), (3,))


def test_a_comparison_is_not_turned_into_its_in_place_form():
    _, fix, fixed = _fix("w.gt(0) * w")
    assert "w.gt_" not in fixed and not fix.safe  # gt_ would write 0/1 in w's dtype where gt gives bool


def test_a_rebinding_sharing_its_line_gets_no_fix():
    source = PROGRAM.format(line="w = w - lr * w.grad; y = 1")
    (d,) = analyze_source(source, "t.py", Config(jedi=False)).diagnostics
    assert d.code == "GG109" and d.fix is None


HELPER = """import torch


def project(w):
    with torch.no_grad():
        w = w / w.norm()
    return w


w = torch.randn(3, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
x = torch.randn(5, 3)
opt = torch.optim.SGD([w, b], lr=0.1)
for _ in range(3):
    opt.zero_grad()
    (x * w + b).pow(2).mean().backward()
    opt.step()
    {call}
"""


@pytest.mark.parametrize("call, safe", [("w = project(w)", True), ("unit = project(w)\n    w = unit", False)])
def test_a_helpers_parameter_is_updated_in_place_safely_only_when_every_caller_rebinds_to_the_result(call, safe):
    source = HELPER.format(call=call)
    (d,) = analyze_source(source, "t.py", Config(jedi=False)).diagnostics
    assert d.code == "GG109" and d.fix is not None and d.fix.safe is safe, d.fix.title
    assert safe or "the tensor a caller passes as `w` is now changed in place" in d.fix.title
    fixed = fix_text(source, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "        w /= w.norm()\n" in fixed and not analyze_source(fixed, "t.py", Config(jedi=False)).diagnostics
    after = _run(fixed)
    assert after["w"] is after["opt"].param_groups[0]["params"][0] and after["w"].grad is not None


STEP_HELPER = """import torch


def step(w, lr):
    w = w - lr * w.grad
    return w


x = torch.linspace(-1, 1, 8)
w = torch.tensor(0.0, requires_grad=True)
for _ in range(3):
    ((w * x - 3 * x) ** 2).mean().backward()
    with torch.no_grad():
        w = step(w, 0.1)
    w.grad.zero_()
"""


def test_an_update_of_the_gradient_a_helper_returns_gets_no_fix():
    """Whether ``w.grad`` is cleared after ``return w`` is the callers' business: clearing it in the helper breaks
    this caller's ``w.grad.zero_()``, leaving it accumulates where a caller does not clear it."""
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'zero_'"):
        _run(STEP_HELPER)
    (d,) = analyze_source(STEP_HELPER, "t.py", Config(jedi=False)).diagnostics
    assert d.code == "GG109" and d.fix is None
