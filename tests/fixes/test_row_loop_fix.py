"""GG004 on a loop writing each row of a tensor in place (the fix in ``rules/gg004_multi_view_mutated.py``): the same
elementwise op on the whole tensor, rebound; none when the loop does more, the op is not elementwise, or the row is
read after the loop.  Rows handed to a helper that writes them are iterated as plain views of the tensor instead
(none for the rows of a leaf that requires grad)."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.config import Config
from gradguard.text import apply_edits
from gradguard.autofix.writer import fix_text
from programs import found, run_program

torch = pytest.importorskip("torch")

_PROGRAM = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)

    def forward(self, x, scale):
        h = self.lin(x) + 1
        for r in h:
            {write}
        return torch.tanh(h)


def train():
    torch.manual_seed(10)
    net = Net()
    net(torch.randn(5, 3), torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    return [net.lin.weight.grad, net.lin.bias.grad]
"""


@pytest.mark.parametrize("write, expected", [
    ("r.mul_(scale)", "h = h.mul(scale)"),
    ("r.clamp_(min=1.5)", "h = h.clamp(min=1.5)"),
])
def test_a_loop_writing_each_row_becomes_the_op_on_the_whole_tensor(write, expected):
    src = textwrap.dedent(_PROGRAM).replace("{write}", write)
    (diag,) = found("GG004", src)
    assert diag.fix is not None and diag.fix.safe
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert f"        {expected}\n        return" in out and not found("GG004", out)
    intended = src.replace(f"        for r in h:\n            {write}\n", f"        {expected}\n")
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("write", [
    "r.mul_(r.sum())",  # the argument reads the row
    "r.cumsum_(0)",  # not elementwise
    "r.mul_(scale)\n        print(r)",  # the row is read after the loop
    "r.mul_(scale)\n            r.add_(1)",  # the loop does more
])
def test_no_whole_tensor_rewrite_when_it_could_compute_something_else(write):
    src = textwrap.dedent(_PROGRAM).replace("{write}", write)
    diags = found("GG004", src)
    assert diags and all(d.fix is None or "whole tensor" not in d.fix.title for d in diags)


def test_the_rows_of_an_attribute_are_written_through_it_not_rebound():
    src = textwrap.dedent("""
        import torch


        class Trainer:
            def __init__(self):
                self.x = torch.randn(3, 4, requires_grad=True)
                self.t = self.x + 1

            def train(self):
                for row in self.t:
                    row.mul_(2)
                self.t.pow(2).sum().backward()
    """)
    (diag,) = found("GG004", src)
    # `row = row.mul(2)` would drop the write to `self.t`; writing each row through `self.t[i]` keeps it
    assert diag.fix is not None and all("row = " not in e.new_text for e in diag.fix.edits)
    assert "self.t[i].mul_(2)" in apply_edits(src, diag.fix.edits)


def test_the_loop_over_rows_may_run_inside_another_loop():
    """The rows' memory is held by the tensor and the row only, as the run shows at each write: a loop around the
    row loop (the row read at its next pass) does not make another name see the write."""
    src = textwrap.dedent(_PROGRAM).replace("        for r in h:\n            {write}\n",
                                            "        for _ in range(2):\n            for r in h:\n"
                                            "                r.mul_(scale)\n")
    (diag,) = found("GG004", src)
    assert diag.fix is not None and diag.fix.safe and "whole tensor" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert "            h = h.mul(scale)\n        return" in out and not found("GG004", out)
    intended = src.replace("            for r in h:\n                r.mul_(scale)\n", "            h = h.mul(scale)\n")
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("before, after", [
    ("g = h[0]", "print(g)"),  # a view of the tensor, read after the rows were written
    ("g = h", "print(g)"),  # the tensor under another name
    ("keep = [h]", "print(keep)"),  # a list holding it
    ("self.kept = h", ""),  # an attribute: it escapes the forward
])
def test_no_whole_tensor_rewrite_when_another_name_sees_the_rows(before, after):
    src = textwrap.dedent(_PROGRAM).replace("{write}", "r.mul_(scale)").replace(
        "        for r in h:\n", f"        {before}\n        for r in h:\n").replace(
        "        return torch.tanh(h)", f"        {after}\n        return torch.tanh(h)")
    diags = found("GG004", src)
    assert diags and all(d.fix is None or "whole tensor" not in d.fix.title for d in diags)


_HELPER_PROGRAM = """
import torch


def rescale_(img):
    low, high = float(img.min()), float(img.max())
    img.clamp_(low, high).sub_(low).div_(max(high - low, 1e-5))


def train():
    torch.manual_seed(0)
    w = torch.randn(3, 2, 2, requires_grad=True)
    tiles = {tiles}
    for img in tiles:
        rescale_(img)
    tiles.pow(2).sum().backward()
    return [w.grad]
"""


def test_rows_handed_to_a_helper_that_writes_them_become_plain_views():
    """The helper's writes reach the tensor through each row, as before; autograd lets them through a plain view."""
    src = textwrap.dedent(_HELPER_PROGRAM).replace("{tiles}", "w * 2")
    (diag,) = found("GG004", src)
    assert diag.fix is not None and diag.fix.safe and "plain views" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert "    for img in [tiles[i] for i in range(len(tiles))]:\n" in out and not found("GG004", out)
    intended = src.replace("    for img in tiles:\n        rescale_(img)\n",
                           "    tiles = torch.stack([_rescaled(img) for img in tiles])\n") + textwrap.dedent("""

        def _rescaled(img):
            low, high = float(img.min()), float(img.max())
            return img.clamp(low, high).sub(low).div(max(high - low, 1e-5))
    """)
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


def test_rows_of_a_leaf_are_not_made_plain_views():
    """A write through any view of a leaf that requires grad is refused: plain views would raise too."""
    src = textwrap.dedent(_HELPER_PROGRAM).replace("{tiles}", "w")
    diags = found("GG004", src)
    assert diags and all(d.fix is None or "plain views" not in d.fix.title for d in diags)
