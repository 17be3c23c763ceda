"""Writes through a wrapper of a name (``fixes/wrappers.py``): an alias chain or a one-off container is the very
tensor its name holds (as the run saw it at the write), so the write is fixed as the same write to the name.  torch
runs each fixed program against the intended one; where the wrapper is read after the write, is rebound, or the
name changes in between, no wrapper fix is made."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
from programs import found, run_program

torch = pytest.importorskip("torch")

_PROGRAM = """
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.branch = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.branch(torch.relu(x))
        {wrap}
        {write}  # GG102: a write autograd does not see
        {after}


def train():
    torch.manual_seed(5)
    block = Block()
    x = torch.randn(3, 4)
    block(block(x)).pow(2).sum().backward()
    return [p.grad for p in block.parameters()]
"""

_INTENDED = textwrap.dedent(_PROGRAM).format(wrap="", write="h = h.mul(0.5)", after="return x + h")

WRAPS = [
    ("h_ref = h\n        h_cur = h_ref", "h_cur.data.mul_(0.5)", "`h_cur` is `h`"),
    ("tensors = {'h': h}", "tensors['h'].data.mul_(0.5)", "`tensors['h']` is `h`"),
    ("group = [h]", "group[0].data.mul_(0.5)", "`group[0]` is `h`"),
    # the run saw `group[0]` be `h` at the write, whatever else the list got before
    ("group = [h]\n        group.append(x)", "group[0].data.mul_(0.5)", "`group[0]` is `h`"),
    ("group = [h]\n        for t in group:", "    t.data.mul_(0.5)", "`t` is `h`"),  # a loop that runs once
    ("for t in [h]:", "    t.data.mul_(0.5)", "`t` is `h`"),
]


def _src(wrap: str, write: str, after: str = "return x + h") -> str:
    return textwrap.dedent(_PROGRAM).format(wrap=wrap, write=write, after=after)


@pytest.mark.parametrize("wrap, write, says", WRAPS)
def test_a_write_through_a_wrapper_is_fixed_as_the_write_to_the_name(wrap, write, says):
    src = _src(wrap, write)
    (diag,) = found("GG102", src)
    assert diag.fix is not None and says in diag.fix.title, diag.fix
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert not found("GG102", out)
    assert f"        {write}\n" not in out  # the write itself was rewritten, on the name
    for got, want in zip(run_program(out), run_program(_INTENDED), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("wrap, write, after", [
    ("h_cur = h", "h_cur.data.mul_(0.5)", "return x + h_cur"),  # the alias is read after the write
    ("tensors = {'h': h}", "tensors['h'].data.mul_(0.5)", "return x + tensors['h']"),  # the container too
    ("h_cur = h\n        h = h * h", "h_cur.data.mul_(0.5)", "return x + h"),  # `h` is another tensor by then
    ("for t in [h]:", "    t.data.mul_(0.5)\n            t = t * 1", "return x + h"),  # `t` is bound again
])
def test_no_wrapper_fix_where_the_wrapper_is_not_plainly_the_name(wrap, write, after):
    src = _src(wrap, write, after)
    diags = found("GG102", src)
    assert diags and all(d.fix is None or " is `h`)" not in d.fix.title for d in diags)


_LEAF = """
import torch


def train():
    torch.manual_seed(0)
    x = torch.randn(6, 4, requires_grad=True)
    mask = x < 0
    {wrap}
    {write}  # a write to a leaf that requires grad
    loss = ({read} * 3).sum()
    loss.backward()
    return [x.grad]
"""

# The wrapper stands where the written tensor is a view of it, or the write indexes it further: the run bound it
# (or the list's or dict's item) to the very tensor `x` is, a step up the written tensor's view chain.
THROUGH_VIEWS = [
    ("GG002", "tensors = {'x': x}", "tensors['x'][mask] = 0", "x.masked_fill(mask, 0)", "`tensors['x']` is `x`"),
    ("GG002", "group = [x]", "group[0][mask] = 0", "x.masked_fill(mask, 0)", "`group[0]` is `x`"),
    ("GG003", "x_ref = x\n    x_cur = x_ref", "x_cur[0] = 0", "torch.cat([x[:1] * 0, x[1:]])", "`x_cur` is `x`"),
    ("GG003", "tensors = {'x': x}", "tensors['x'][0] = 0", "torch.cat([x[:1] * 0, x[1:]])", "`tensors['x']` is `x`"),
    # the loop's variable is read again only by the write's own next runs (where the fix reads `x` instead)
    ("GG104", "for i in range(2):\n        for t in [x]:", "        t[i] = 0", "torch.cat([x[:2] * 0, x[2:]])", "`t` is `x`"),
]


@pytest.mark.parametrize("code, wrap, write, intended, says", THROUGH_VIEWS)
def test_a_wrapper_a_view_or_an_index_is_taken_of_is_fixed_as_the_name(code, wrap, write, intended, says):
    src = textwrap.dedent(_LEAF).format(wrap=wrap, write=write, read="x")
    (diag,) = found(code, src)
    assert diag.fix is not None and says in diag.fix.title, diag.fix
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert not found(code, out)
    want = textwrap.dedent(_LEAF).format(wrap="", write="", read=intended)
    for got, expected in zip(run_program(out), run_program(want), strict=True):
        assert torch.allclose(got, expected)


def test_a_loop_wrapper_is_fixed_in_a_file_with_a_form_feed():
    """The loop's header is put back on its own line as the server counts lines: a form feed (a page break between
    sections of a file) is whitespace to Python, not a line break as ``str.splitlines`` takes it."""
    src = _src("for t in [h]:", "    t.data.mul_(0.5)").replace("\n\nclass Block", "\n\x0c\nclass Block")
    (diag,) = found("GG102", src)
    assert diag.fix is not None and "`t` is `h`" in diag.fix.title, diag.fix
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert not found("GG102", out) and "\x0c\nclass Block" in out and "for t in [h]:" in out and "if True" not in out
    for got, want in zip(run_program(out), run_program(_INTENDED), strict=True):
        assert torch.allclose(got, want)
