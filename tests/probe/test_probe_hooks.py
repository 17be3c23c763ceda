"""Issue 14, GG108: a user hook (tensor hook, module full backward (pre-)hook) that writes in place the
gradient torch hands it.  The tracer is off during backward; the probe watches the hooks themselves.
Each program is first run with torch: its gradients differ from the reference's (positives) or equal
them (negatives)."""

from __future__ import annotations

import runpy

import pytest

torch = pytest.importorskip("torch")

PROGRAM = """\
import torch
import torch.nn as nn


def scale(module, *grads):
    {scale}


def _setup():
    torch.manual_seed(0)
    return nn.Linear(4, 6), nn.Linear(6, 6), torch.randn(5, 4)


def run():
    stem, inner, x = _setup()
    h = stem(x)
    {module_hook}
    branch = inner(h)
    {tensor_hook}
    (h + branch).pow(2).sum().backward()
    return [stem.weight.grad, inner.weight.grad]
"""
WRITE_IN_SCALE, MODULE_HOOK, TENSOR_HOOK = 6, 17, 19
PRE_HOOK = "inner.register_full_backward_pre_hook(scale)"
FULL_HOOK = "inner.register_full_backward_hook(scale)"
# name -> (scale's body, module hook line, tensor hook line); each positive's out-of-place twin is in PURE.
POSITIVES = {
    "tensor_hook_mul_": ("pass", "pass", "branch.register_hook(lambda g: g.mul_(0.5))"),
    "module_pre_hook_grad_output": ("grads[-1][0].mul_(0.5)", PRE_HOOK, "pass"),
    "module_hook_grad_output": ("grads[-1][0].mul_(0.5)", FULL_HOOK, "pass"),
}
PURE = {
    "tensor_hook_mul_": ("pass", "pass", "branch.register_hook(lambda g: g * 0.5)"),
    "module_pre_hook_grad_output": ("return (grads[-1][0] * 0.5,)", PRE_HOOK, "pass"),
    "module_hook_grad_output": ("pass", "pass", "pass"),  # a full hook's change of grad_output has no effect
}
WRITTEN = {"tensor_hook_mul_": TENSOR_HOOK, "module_pre_hook_grad_output": WRITE_IN_SCALE,
           "module_hook_grad_output": WRITE_IN_SCALE}
REGISTERED = {"tensor_hook_mul_": TENSOR_HOOK, "module_pre_hook_grad_output": MODULE_HOOK,
              "module_hook_grad_output": MODULE_HOOK}
NEGATIVES = {
    "returns_new": ("pass", "pass", "branch.register_hook(lambda g: g * 0.5)"),
    "writes_a_clone": ("pass", "pass", "branch.register_hook(lambda g: g.clone().mul_(0.5))"),
    # torch passes a change of grad_input on as if the hook had returned it: nothing else shares it.
    "module_hook_grad_input": ("grads[0][0].mul_(0.5)", FULL_HOOK, "pass"),
}
NEGATIVE_PURE = {"returns_new": PURE["tensor_hook_mul_"], "writes_a_clone": PURE["tensor_hook_mul_"],
                 "module_hook_grad_input": ("return (grads[0][0] * 0.5,)", FULL_HOOK, "pass")}


def _program(script, name, parts):
    scale, module_hook, tensor_hook = parts
    return script(PROGRAM.format(scale=scale, module_hook=module_hook, tensor_hook=tensor_hook), name=f"{name}.py")


def _run(path):
    return runpy.run_path(str(path))["run"]()


def _same(a, b):
    return all(torch.allclose(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("name", POSITIVES)
def test_hook_writing_its_gradient_is_reported(name, script, probe):
    path = _program(script, name, POSITIVES[name])
    want = _run(_program(script, f"{name}_pure", PURE[name]))
    assert not _same(_run(path), want), "torch: the skip path's gradient is changed too"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    [finding] = result.findings
    assert (finding.code, finding.kind, finding.site.line) == ("GG108", "silent", WRITTEN[name])
    registered = REGISTERED[name]
    assert f"writes in place the gradient that backward() hands to the hook registered at line {registered}" in \
        finding.message
    assert [n.site.line for n in finding.notes] == [registered, 20]
    assert not result.sandbox.get("tracer_errors")


@pytest.mark.parametrize("name", NEGATIVES)
def test_hook_returning_a_new_gradient_is_not_reported(name, script, probe):
    path = _program(script, name, NEGATIVES[name])
    want = _run(_program(script, f"{name}_pure", NEGATIVE_PURE[name]))
    assert _same(_run(path), want), "torch: the write changes no other gradient"
    result = probe(path, entry="run")
    assert result.status == "completed", result.detail
    assert result.findings == [], [f.message for f in result.findings]
