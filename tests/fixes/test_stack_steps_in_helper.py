"""GG104's list + ``torch.stack`` rewrite (``rules/gg104_element_loop_write.py``) when the row write is the whole body
of a function defined in the loop and called there right after, once (``def update(): buf[t] = ...`` then
``update()``): the function appends to the list instead, which the loop then sees.  torch runs the rewritten program
with the gradients of the recurrence written with a list; where the function could run elsewhere, no stacking is
offered.  (Here the fix offered is GG001's safe clone where ``@`` saved the row, which GG104 prefers.)"""

from __future__ import annotations

import ast
import textwrap

import pytest
from gradguard.fixes.context import FixContext
from gradguard.text import apply_edits
from gradguard.autofix.writer import fix_text
from gradguard.rules.gg104_element_loop_write import stack_steps
from programs import found, run_program

torch = pytest.importorskip("torch")

_PROGRAM = """
import torch


def train():
    torch.manual_seed(0)
    w = torch.randn(4, 4, requires_grad=True)
    xs = torch.randn(5, 4)
    out = torch.zeros(xs.shape[0], 4)
    out[0] = torch.tanh(xs[0])
    for t in range(1, xs.shape[0]):
        def update():
            out[t] = torch.tanh(out[t - 1] @ w + xs[t])
        update()
    {tail}
    out.sum().backward()
    return [w.grad]
"""


def _intended():
    torch.manual_seed(0)
    w = torch.randn(4, 4, requires_grad=True)
    xs = torch.randn(5, 4)
    rows = [torch.tanh(xs[0])]
    for t in range(1, xs.shape[0]):
        rows.append(torch.tanh(rows[t - 1] @ w + xs[t]))
    torch.stack(rows).sum().backward()
    return [w.grad]


def test_a_row_write_in_a_function_called_once_in_the_loop_appends_to_the_list():
    src = textwrap.dedent(_PROGRAM).replace("{tail}", "pass")
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run_program(src)
    tree = ast.parse(src)
    write = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign) and ast.unparse(n).startswith("out[t] ="))
    fix = stack_steps(FixContext(src, tree, "t.py"), write)
    assert not fix.safe and "torch.stack" in fix.title
    out = apply_edits(src, fix.edits)
    assert ("        def update():\n            out_steps.append(torch.tanh(out_steps[t - 1] @ w + xs[t]))\n"
            "        update()\n    out = torch.stack(out_steps)\n") in out
    assert not found("GG104", out)
    for got, want in zip(run_program(out), _intended(), strict=True):
        assert torch.allclose(got, want)


def test_the_offered_fix_is_the_safe_clone_where_matmul_saved_the_row():
    """The closure writes ``out``, a name of the loop's function: ``out[t - 1]`` is cloned where ``@`` saved it
    (GG001's fix, safe, the same program), which GG104 prefers to the unsafe stacking; torch agrees."""
    src = textwrap.dedent(_PROGRAM).replace("{tail}", "pass")
    (finding,) = found("GG104", src)
    assert finding.fix.safe and "out[t - 1].clone()" in finding.fix.title
    out = fix_text(src, "t.py").fixed
    assert not found("GG104", out)
    for got, want in zip(run_program(out), _intended(), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("change", [
    # called again after the loop: it would append a row the buffer never had
    ("{tail}", "update()"),
    # not called right after its definition: something between could run first
    ("        update()\n", "        pass\n        update()\n"),
])
def test_no_stacking_when_the_function_may_run_elsewhere(change):
    src = textwrap.dedent(_PROGRAM).replace(*change).replace("{tail}", "pass")
    assert src != textwrap.dedent(_PROGRAM).replace("{tail}", "pass")
    assert all(f.fix is None or "torch.stack" not in f.fix.title for f in found("GG104", src))
