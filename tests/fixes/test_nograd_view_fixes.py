"""GG105: the view made under no_grad is made with grad mode on -- also when the write goes to a view of it, when
the write is the next line, or in a helper the view is passed to; a tied weight's view written out of place is
unsafe (the weight no longer sees the write).  torch runs each fixed program against the intended one."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.autofix.writer import fix_text
from gradguard.config import Config
from programs import found, run_program

torch = pytest.importorskip("torch")

_PROGRAM = """
import torch


def scale_(t):
    t.mul_(3.0)


def train():
    torch.manual_seed(7)
    lin = torch.nn.Linear(4, 6)
    h = lin(torch.randn(5, 4))
    with torch.no_grad():
        {binding}
    {write}
    torch.sigmoid(h).sum().backward()
    return [lin.weight.grad, lin.bias.grad]
"""


@pytest.mark.parametrize("binding, write, expected", [
    ("part = h[1]", "part[:2] = 0.0", "    part = h[1]\n    part[:2] = 0.0\n"),  # a write to a view of the view
    ("part = h[:, :2]", "scale_(part)", "    part = h[:, :2]\n    scale_(part)\n"),  # the write in a helper
])
def test_the_view_is_made_with_grad_mode_on(binding, write, expected):
    src = textwrap.dedent(_PROGRAM).replace("{binding}", binding).replace("{write}", write)
    (diag,) = found("GG105", src)
    assert diag.fix is not None and diag.fix.safe
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert expected in out and "no_grad" not in out and not found("GG105", out)
    run_program(out)  # runs clean (the original raises)


def test_pieces_written_on_the_next_line_are_rebound_out_of_place():
    src = textwrap.dedent("""
        import torch


        def train():
            torch.manual_seed(7)
            lin = torch.nn.Linear(4, 6)
            h = lin(torch.randn(5, 4))
            with torch.no_grad():
                a, b = h.chunk(2, dim=1)
            a.mul_(0.5)
            torch.sigmoid(a @ b.t()).sum().backward()
            return [lin.weight.grad, lin.bias.grad]
    """)
    _assert_first_piece_rebound(src)


def test_a_piece_whose_base_is_bound_anew_before_any_read_is_rebound():
    # `h` is bound to the joined pieces: nothing reads the memory the write changed through it afterwards
    src = textwrap.dedent(_PROGRAM).replace("{binding}", "a, b = h.chunk(2, dim=1)").replace(
        "{write}", "a.mul_(0.5)\n    h = torch.cat([a, b], 1)")
    _assert_first_piece_rebound(src)


def test_a_piece_that_cannot_be_rebound_gets_no_fix():
    # `h` is read after the write (it sees the write): rebinding is not offered, and a chunk written in place with
    # grad on still raises
    src = textwrap.dedent(_PROGRAM).replace("{binding}", "a, b = h.chunk(2, dim=1)").replace(
        "{write}", "a.mul_(0.5)\n    h = torch.cat([a, b], 1) + h.repeat(1, 2)[:, :6]")
    assert [d.fix for d in found("GG105", src)] == [None]


def test_a_tied_weights_view_written_out_of_place_is_unsafe():
    src = textwrap.dedent("""
        import torch


        def train():
            torch.manual_seed(8)
            emb = torch.nn.Embedding(6, 3)
            with torch.no_grad():
                proj = emb.weight.t()
            proj.mul_(0.5)
            (emb(torch.tensor([1, 2])) @ proj).pow(2).sum().backward()
            return [emb.weight.grad]
    """)
    (diag,) = found("GG105", src)
    assert not diag.fix.safe and "`emb` may hold it and is read later, and no longer sees the write" in diag.fix.title
    assert fix_text(src, "t.py", Config(jedi=False)).fixed == src
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "    proj = emb.weight.t()\n    proj = proj.mul(0.5)\n" in out and not found("GG105", out)
    run_program(out)


_HELPER = """
import torch


@torch.no_grad()
def _tail(states):
    {body}


def train():
    torch.manual_seed(9)
    lin = torch.nn.Linear(3, 4)
    states = lin(torch.randn(2, 5, 3))
    last = _tail(states)
    last.mul_(torch.tensor([[1.0], [0.0]]))
    last.pow(2).sum().backward()
    return [lin.weight.grad, lin.bias.grad]
"""


def test_a_helper_returning_a_view_under_no_grad_returns_it_with_grad_on_as_an_unsafe_fix():
    src = textwrap.dedent(_HELPER).replace("{body}", "return states[:, -1]")
    (diag,) = found("GG105", src)
    assert not diag.fix.safe and "every call of `_tail` now gets views with history" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "@torch.no_grad()" not in out and "    last = last.mul(torch.tensor([[1.0], [0.0]]))\n" in out
    assert not found("GG105", out)
    intended = src.replace("@torch.no_grad()\n", "").replace("    last.mul_(", "    last = last.mul(")
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


def test_a_helper_that_does_more_than_return_the_view_is_left_alone():
    src = textwrap.dedent(_HELPER).replace("{body}", "n = states.shape[1]\n    return states[:, n - 1]")
    assert [d.fix for d in found("GG105", src)] == [None]


_NESTED_WRITE = """
import torch


def train(steps=3, flag=True):
    torch.manual_seed(7)
    lin = torch.nn.Linear(4, 6)
    h = lin(torch.randn(5, 4))
    with torch.no_grad():
        a, b = h.chunk(2, dim=1)
    {around}
        a.mul_(0.5)
    torch.sigmoid(a * b).sum().backward()
    return [lin.weight.grad, lin.bias.grad]
"""


def _intended(steps: int, flag: bool, around: str):
    torch.manual_seed(7)
    lin = torch.nn.Linear(4, 6)
    h = lin(torch.randn(5, 4))
    a, b = h.chunk(2, dim=1)
    times = steps if around.startswith("for") else int(flag)
    for _ in range(times):
        a = a * 0.5
    torch.sigmoid(a * b).sum().backward()
    return [lin.weight.grad, lin.bias.grad]


@pytest.mark.parametrize("around", ["if flag:", "for _ in range(steps):"])
def test_a_write_inside_an_if_or_a_loop_after_the_view_is_rebound_there(around):
    """The view leaves no_grad; the write, in an ``if`` (it may not run) or a loop (it runs again on the value
    it wrote), becomes ``a = a.mul(0.5)`` where it was: torch gives the intended gradients on every path."""
    src = textwrap.dedent(_NESTED_WRITE).replace("{around}", around)
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
        run_program(src)
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert f"    a, b = h.chunk(2, dim=1)\n    {around}\n        a = a.mul(0.5)\n" in out and not found("GG105", out)
    scope: dict = {}
    exec(compile(out, "fixed", "exec"), scope)  # noqa: S102 - the test's own program
    for steps, flag in ((3, True), (1, False), (2, True)):
        for got, want in zip(scope["train"](steps, flag), _intended(steps, flag, around)):
            assert torch.allclose(got, want)


_METHOD = """
import torch


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 4)

    def forward(self, x):
        return self.fc(x)

    @torch.no_grad()
    def split(self, out):
        {body}


def train():
    torch.manual_seed(3)
    model = Head()
    out = model(torch.randn(5, 3))
    mean, scale = model.split(out)
    scale.exp_()
    (mean / scale).pow(2).sum().backward()
    return [model.fc.weight.grad, model.fc.bias.grad]
"""


def test_pieces_a_method_of_the_files_class_returns_are_seen_as_views_of_its_argument():
    """`model.split(out)` only returns pieces of `out`: `model` keeps nothing and `mean` is another piece, so the
    write to `scale` can go out of place once the method makes the pieces with grad on."""
    src = textwrap.dedent(_METHOD).replace("{body}", "return out.chunk(2, dim=-1)")
    (diag,) = found("GG105", src)
    assert not diag.fix.safe and "`split` returns `out.chunk(2, dim=-1)` without `@torch.no_grad()`" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "@torch.no_grad()" not in out and "    scale = scale.exp()\n" in out and not found("GG105", out)
    intended = src.replace("    @torch.no_grad()\n", "").replace("    scale.exp_()", "    scale = scale.exp()")
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


def test_a_method_that_also_keeps_its_argument_is_not_seen_through():
    src = textwrap.dedent(_METHOD).replace("{body}", "self.last = out\n        return out.chunk(2, dim=-1)")
    assert [d.fix for d in found("GG105", src)] == [None]


_CACHED_ROW = """
import torch


def train():
    torch.manual_seed(3)
    lin = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    with torch.no_grad():
        first = lin.weight[0]
    for _ in range(3):
        opt.zero_grad()
        lin(torch.randn(5, 4)).pow(2).sum().backward()
        opt.step()
        {write}
    return [lin.weight.grad, lin.bias.grad, lin.weight.detach().clone()]
"""


@pytest.mark.parametrize("write", ["first.mul_(0.9)", "first[:2] = 0.0"])
def test_a_parameters_cached_view_updated_after_the_step_is_updated_under_no_grad(write):
    """A view of a parameter taken under no_grad and written with plain values after a backward is an update:
    the fix writes it under no_grad (a view of a leaf cannot be written with grad on anyway), and the parameter
    gets the values the update meant."""
    src = textwrap.dedent(_CACHED_ROW).replace("{write}", write)
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
        run_program(src)
    (diag,) = found("GG105", src)
    assert diag.fix is not None and diag.fix.safe
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert f"        with torch.no_grad():\n            {write}\n" in out and not found("GG105", out)
    intended = src.replace(f"        {write}\n", f"        with torch.no_grad():\n            {write}\n")
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


def test_a_parameters_view_read_after_its_write_is_not_updated_under_no_grad():
    """Scaled in place and then computed with, the view is a step of the computation: writing it under no_grad
    would scale the weight itself at each pass, so no such fix is offered."""
    src = textwrap.dedent("""
        import torch


        def train():
            torch.manual_seed(8)
            emb = torch.nn.Embedding(6, 3)
            emb(torch.tensor([1])).sum().backward()
            for _ in range(2):
                with torch.no_grad():
                    scale = 0.5
                    proj = emb.weight.t()
                proj.mul_(scale)
                (emb(torch.tensor([1, 2])) @ proj).pow(2).sum().backward()
            return [emb.weight.grad]
    """)
    assert [d.fix for d in found("GG105", src)] == [None]


def _assert_first_piece_rebound(src: str) -> None:
    """The chunk is made with grad on and its first piece rebound out of place; torch gives the intended gradients."""
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert "    a, b = h.chunk(2, dim=1)\n    a = a.mul(0.5)\n" in out and not found("GG105", out)
    intended = src.replace("    with torch.no_grad():\n        a, b = h.chunk(2, dim=1)\n    a.mul_(0.5)\n",
                           "    a, b = h.chunk(2, dim=1)\n    a = a * 0.5\n")
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)
