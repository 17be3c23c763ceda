"""A write through a subscript of a parameter (`outs[0][:, j] = 0.0`) is a write through a view of the parameter
only when the parameter is a tensor.  When a caller passes a list or a dict, `outs = outs.clone()` raises
AttributeError under torch where the program raised the in-place error: the fix that copies the parameter is
not offered when any run of the write (the function's own analysis or a caller's) finds the name holding the
tensor in a container.  A tensor parameter still gets it, proven."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.config import Config
from gradguard.autofix.writer import fix_text

torch = pytest.importorskip("torch")

_MODULE_FORWARD = """
import torch
import torch.nn as nn


class Dec(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, outs):
        ys = []
        for j in range(3):
            ys.append(self.lin(outs{key}))
            outs{key}[:, j] = 0.0
        return torch.stack(ys).sum()


def run():
    torch.manual_seed(0)
    d = Dec()
    x = torch.randn(2, 4, requires_grad=True)
    outs = {outs}
    d(outs).backward()
    return [x.grad]
"""

_HELPER = """
import torch


def scale_first(bufs, w):
    y = torch.sin(bufs{key})
    bufs{key}[1] = 0.0
    return (y * w).sum()


def run():
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, requires_grad=True)
    scale_first({outs}, w).backward()
    return [x.grad, w.grad]
"""


def _run(src: str):
    scope: dict = {}
    exec(compile(src, "program", "exec"), scope)  # noqa: S102 - our own test programs
    return scope["run"]()


@pytest.mark.parametrize("template", [_MODULE_FORWARD, _HELPER], ids=["module_forward_loop", "helper"])
@pytest.mark.parametrize("key, outs", [("[0]", "[x * 2]"), ('["a"]', '{"a": x * 2}')], ids=["list", "dict"])
def test_no_copy_of_a_container_passed_by_the_caller(template: str, key: str, outs: str):
    src = textwrap.dedent(template).replace("{key}", key).replace("{outs}", outs)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _run(src)
    fixed = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "outs = outs.clone()" not in fixed and "bufs = bufs.clone()" not in fixed, fixed
    if fixed != src:  # whatever fix is left must run clean
        _run(fixed)


def test_a_tensor_parameter_written_through_a_view_is_still_copied():
    src = textwrap.dedent(_MODULE_FORWARD).replace("{key}", "[0]").replace("{outs}", "x * 2 + 0 * x.unsqueeze(0)")
    src = src.replace("outs = x * 2 + 0 * x.unsqueeze(0)", "outs = (x * 2).unsqueeze(0)")
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _run(src)
    fixed = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "outs = outs.clone()" in fixed, fixed
    ref = src.replace("outs[0][:, j] = 0.0", "outs = outs.clone()\n            outs[0][:, j] = 0.0")
    for got, want in zip(_run(fixed), _run(ref), strict=True):
        assert torch.allclose(got, want)
