"""GG001's fix for an augmented write to an element of a list the function makes by a comprehension of calls
(``outs[i - 1] += up(outs[i])`` over the outputs of ReLU layers): the element is written out of place when the run
shows no variable but that list holding the written tensor.  torch runs each fixed program with the gradients of the
out-of-place program; where another name holds the element, or the list is not made by a comprehension of calls, this
form is not offered."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.autofix.writer import fix_text
from programs import found

torch = pytest.importorskip("torch")

_HEAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Pyramid(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3)])
        self.mix = nn.Linear(4, 4)

"""

_FORWARDS = {
    # a top-down loop over the levels, each adding the one above it
    "loop": """
    def forward(self, xs):
        outs = [conv(x) for conv, x in zip(self.convs, xs)]
        for i in range(len(outs) - 1, 0, -1):
            outs[i - 1] += F.softplus(outs[i])
        return outs
""",
    # one level picked by an argument, the list read after the write by index
    "indexed": """
    def forward(self, xs, k=1):
        outs = [conv(x) for conv, x in zip(self.convs, xs)]
        outs[k] *= 2.0
        return [o.sum(dim=1) for o in outs]
""",
    # a bottom-up pass whose add goes through a layer, in a method the forward calls
    "method": """
    def up(self, feats):
        outs = [self.mix(f).relu() for f in feats]
        for i in range(len(outs) - 1):
            outs[i + 1] += self.mix(outs[i])
        return outs

    def forward(self, xs):
        return self.up([conv(x) for conv, x in zip(self.convs, xs)])
""",
}

_TAIL = """

def train():
    torch.manual_seed(0)
    net = Pyramid()
    xs = [torch.randn(3, 4) for _ in range(3)]
    sum(o.sum() for o in net(xs)).backward()
    return [p.grad for p in net.parameters() if p.grad is not None]
"""


def _program(forward: str) -> str:
    return textwrap.dedent(_HEAD) + textwrap.indent(textwrap.dedent(forward), "    ") + textwrap.dedent(_TAIL)


def _run(src: str):
    scope: dict = {}
    exec(compile(src, "t", "exec"), scope)  # noqa: S102 - the test's own program
    return scope["train"]()


def _out_of_place(src: str) -> str:
    for op in ("+", "*"):
        src = src.replace(f"outs[i - 1] {op}=", f"outs[i - 1] = outs[i - 1] {op}")
        src = src.replace(f"outs[k] {op}=", f"outs[k] = outs[k] {op}")
        src = src.replace(f"outs[i + 1] {op}=", f"outs[i + 1] = outs[i + 1] {op}")
    return src


@pytest.mark.parametrize("shape", sorted(_FORWARDS))
def test_the_element_is_written_out_of_place(shape):
    src = _program(_FORWARDS[shape])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _run(src)
    (finding,) = found("GG001", src)
    assert finding.fix is not None and finding.fix.safe
    assert finding.fix.title.startswith("Write the element out of place")
    fixed = fix_text(src, "t.py").fixed
    assert fixed == _out_of_place(src)
    assert not found("GG001", fixed)
    for got, want in zip(_run(fixed), _run(_out_of_place(src)), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("forward", [
    # another name holds the element and is read after the write: it would keep the old values
    """
    def forward(self, xs):
        outs = [conv(x) for conv, x in zip(self.convs, xs)]
        top = outs[0]
        outs[0] += 1.0
        return [top, *outs]
""",
    # two slots of the list may hold one tensor: not a comprehension of calls
    """
    def forward(self, xs):
        h = self.convs[0](xs[0])
        outs = [h.relu()] * 2
        outs[0] += 1.0
        return outs
""",
])
def test_no_element_rebinding_when_another_holder_could_tell(forward):
    src = _program(forward)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _run(src)
    for finding in found("GG001", src):
        assert finding.fix is None or not finding.fix.title.startswith("Write the element out of place")
