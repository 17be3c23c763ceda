"""Issue 14, GG109 on the probe side: a leaf that requires grad, replaced under no_grad by a copy made from it
(``w = w - lr * w.grad``, ``w = w.clamp(...)``), that a later backward runs through while the optimizer step or
a ``.grad`` read still expects a gradient (signal 4's test, ``probe/cuts.py``).  Reported at the copy's line, in
the user's words.  Each program is first run with torch: the parameter gets no gradient and the copy does not
require grad (positives), or the parameter is trained / nothing expects a gradient (negatives)."""

from __future__ import annotations

import runpy

import pytest

from gradguard.diagnostics import Diagnostic, Severity, Span
from gradguard.probe.merge import compatible, merge

torch = pytest.importorskip("torch")

PROGRAM = """\
import torch


def run():
    torch.manual_seed(0)
    w = torch.randn(4, 2, requires_grad=True)
    b = torch.zeros(2, requires_grad=True)
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    opt = {optimizer}
    held = w
    for step in range(3):
        opt.zero_grad()
        loss = ((x @ w + b - y) ** 2).mean()
        loss.backward()
        opt.step()
        with torch.no_grad():
            {update}
        {after}
    return held.grad, w.requires_grad
"""
BACKWARD, STEP, UPDATE = 14, 15, 17
SGD = "torch.optim.SGD([w, b], lr=0.1)"
# name -> (update under no_grad, the line after it, the statement the message quotes)
POSITIVES = {
    "clamp": ("w = w.clamp(-1.0, 1.0)", "pass"),
    "renormalise": ("w = w / w.norm()", "pass"),
    "sign_step_beside_the_optimizer": ("w = w - 0.01 * w.sign()", "pass"),
    "every_other_step": ("w = w * 0.5 if step % 2 == 0 else w", "pass"),
}
# name -> (optimizer, update, the line after it)
NEGATIVES = {
    "in_place_clamp": (SGD, "w.clamp_(-1.0, 1.0)", "pass"),
    # The optimizer's own out-of-place math on parameters (weight decay: grad.add(param)) runs under no_grad too.
    "adam_weight_decay": ("torch.optim.Adam([w, b], lr=0.1, weight_decay=0.1)", "pass", "pass"),
}


def _program(script, name, update, after, optimizer=SGD):
    return script(PROGRAM.format(optimizer=optimizer, update=update, after=after), name=f"{name}.py")


@pytest.mark.parametrize("name", POSITIVES)
def test_copy_that_replaces_a_trained_parameter_is_reported(name, script, probe):
    update, after = POSITIVES[name]
    path = _program(script, name, update, after)
    grad, copy_requires_grad = runpy.run_path(str(path))["run"]()
    assert grad is None and not copy_requires_grad, "torch: the optimizer's leaf gets no gradient from the copy"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    [finding] = result.findings
    assert (finding.code, finding.kind, finding.site.line) == ("GG109", "starved", UPDATE)
    assert finding.message.startswith(f"`{update}` runs under no_grad on a parameter that requires grad ([4, 2])"), \
        finding.message
    assert f"the optimizer step at line {STEP} finds no gradient" in finding.message, finding.message
    assert "aten" not in finding.message and "sub.Tensor" not in finding.message
    assert sorted(n.site.line for n in finding.notes) == [BACKWARD, STEP]
    assert finding.backward.line == BACKWARD
    assert not result.sandbox.get("tracer_errors")


@pytest.mark.parametrize("name", NEGATIVES)
def test_no_grad_math_that_leaves_the_parameter_trained_is_not_reported(name, script, probe):
    optimizer, update, after = NEGATIVES[name]
    path = _program(script, name, update, after, optimizer)
    grad, _ = runpy.run_path(str(path))["run"]()
    assert grad is not None, "torch: the parameter the optimizer holds is trained"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    assert result.findings == [], [f.message for f in result.findings]
    assert not result.sandbox.get("tracer_errors")


FROZEN = """\
import torch


def run():
    torch.manual_seed(0)
    encoder = torch.randn(4, 6, requires_grad=True)
    head = torch.randn(6, 1, requires_grad=True)
    x = torch.randn(8, 4)
    opt = torch.optim.SGD([encoder, head], lr=0.1)  # every parameter, as `model.parameters()` often is
    for _ in range(3):
        opt.zero_grad()
        with torch.no_grad():
            feats = x @ encoder
        loss = (feats @ head).pow(2).mean()
        loss.backward()
        opt.step()
    return encoder.grad, head.grad
"""


def test_features_of_a_frozen_encoder_are_not_a_copy(script, probe):
    """A forward under no_grad (a frozen encoder) feeds the backward, and the optimizer holds the encoder, which gets
    no gradient: that is how freezing is written, and its result is not the parameter's shape (not a copy of it)."""
    path = script(FROZEN, name="frozen.py")
    encoder_grad, head_grad = runpy.run_path(str(path))["run"]()
    assert encoder_grad is None and head_grad is not None, "torch: the encoder is frozen, the head trained"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    assert result.findings == [], [f.message for f in result.findings]


EMA = """\
import torch


def run():
    torch.manual_seed(0)
    w = torch.randn(4, 2, requires_grad=True)
    teacher = torch.randn(4, 2, requires_grad=True)  # requires grad, but no optimizer holds it
    x = torch.randn(8, 4)
    opt = torch.optim.SGD([w], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        loss = ((x @ w - x @ teacher) ** 2).mean()
        loss.backward()
        opt.step()
        with torch.no_grad():
            teacher = teacher * 0.9 + w * 0.1
    return w.grad
"""


def test_ema_teacher_rebound_under_no_grad_is_not_reported(script, probe):
    """The teacher is replaced by a copy each step, and the copy feeds the next backward; but the teacher was never
    trained, and the student the EMA reads is trained by that backward."""
    path = script(EMA, name="ema.py")
    assert runpy.run_path(str(path))["run"]() is not None, "torch: the student is trained"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    assert result.findings == [], [f.message for f in result.findings]


MANUAL = """\
import torch


def run():
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    x, y = torch.randn(16, 3), torch.randn(16)
    seen = []
    for _ in range(3):
        loss = ((x @ w + b - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            seen.append(w.grad is not None)
            if w.grad is not None:
                w = w - 0.1 * w.grad
            b -= 0.1 * b.grad
            b.grad = None
    return seen
"""


def test_grad_read_of_the_copy_is_reported(script, probe):
    """A hand-written update reads `.grad` of the name, which now holds the copy: it never gets one."""
    path = script(MANUAL, name="manual.py")
    assert runpy.run_path(str(path))["run"]() == [True, False, False], "torch: the copy never gets a gradient"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    [finding] = result.findings
    assert (finding.code, finding.kind, finding.site.line) == ("GG109", "starved", 16)
    assert finding.message.startswith("`w = w - 0.1 * w.grad` runs under no_grad"), finding.message
    assert "the `.grad` read at line 14 finds none" in finding.message, finding.message
    assert sorted(n.site.line for n in finding.notes) == [12, 14]


def test_manual_update_rebound_then_requires_grad_is_not_reported(script, probe):
    path = script(MANUAL.replace("w = w - 0.1 * w.grad", "w = (w - 0.1 * w.grad).requires_grad_()"),
                  name="regrad.py")
    assert runpy.run_path(str(path))["run"]() == [True, True, True], "torch: the new leaf gets every gradient"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    assert result.findings == [], [f.message for f in result.findings]


SOLE = """\
import torch


def run():
    torch.manual_seed(0)
    theta = torch.zeros(5, requires_grad=True)
    x, y = torch.randn(8, 5), torch.randn(8)
    for _ in range(2):
        loss = ((x @ theta - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            theta = theta - 0.1 * theta.grad
"""
RAISES = "element 0 of tensors does not require grad and does not have a grad_fn"


def test_backward_that_raises_through_the_copy_names_the_copy(script, probe):
    path = script(SOLE, name="sole.py")
    with pytest.raises(RuntimeError, match=RAISES):
        runpy.run_path(str(path))["run"]()
    result = probe(path, entry="run")
    assert result.status == "raised" and result.exception["finding"], result.detail
    [finding] = result.findings
    assert (finding.code, finding.kind, finding.site.line) == ("GG109", "raised", 12)
    assert finding.message.startswith("`theta = theta - 0.1 * theta.grad` runs under no_grad on a leaf tensor that "
                                      "requires grad ([5])"), finding.message
    assert finding.message.endswith(f"the backward() at line 10 runs through that copy with nothing else requiring "
                                    f"grad, and raises: {RAISES}")
    assert [n.site.line for n in finding.notes] == [10] and finding.backward.line == 10


def test_backward_on_a_tensor_rebuilt_from_values_stays_a_graph_break(script, probe):
    """The raise is GG109 only when the roots went through a copy of a leaf: a tensor rebuilt from numbers is GG103."""
    path = script("""\
        import torch


        def run():
            w = torch.randn(3, requires_grad=True)
            loss = torch.tensor((w * 2).sum().item())
            loss.backward()
        """, name="rebuilt.py")
    result = probe(path, entry="run")
    found = [(f.code, f.kind, f.site.line) for f in result.findings]
    assert ("GG103", "graph-break", 7) in found and not [f for f in found if f[0] == "GG109"], found


def test_merge_confirms_static_gg109_only_with_the_probes_gg109(script, probe):
    path = script(SOLE, name="sole.py")
    result = probe(path, entry="run")
    static = Diagnostic(str(path), Span(12, 13, 12, 46), "GG109", Severity.WARNING, "rebound under no_grad")
    [merged] = merge([static], result, str(path))
    assert merged.confirmed and merged.severity == Severity.ERROR
    assert f"torch raises: {RAISES}" in merged.message
    assert compatible("GG109", "GG109")
    assert not compatible("GG109", "GG001") and not compatible("GG001", "GG109")
    assert not compatible("GG109", "GG103") and not compatible("GG103", "GG109")
