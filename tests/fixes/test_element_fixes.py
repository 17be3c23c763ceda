"""GG001 on a write to an element of a local list or dict (the fix in ``rules/gg001_saved_tensor_mutated.py``): the
element is rebound out of place (and the name the display put there, when it is read later); none when something
else could see the old tensor."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
from programs import found

torch = pytest.importorskip("torch")

_PROGRAM = """
import torch


def run():
    torch.manual_seed(0)
    w = torch.randn(5, requires_grad=True)
    h = w * 2
    s = h.sin()
    {holder}
    {write}
    loss = s.sum() + (h * torch.arange(5.0)).sum(){tail}
    loss.backward()
    return [w.grad]


def reference():
    torch.manual_seed(0)
    w = torch.randn(5, requires_grad=True)
    h = w * 2
    s = h.sin()
    h = h * 3
    loss = s.sum() + (h * torch.arange(5.0)).sum()
    loss.backward()
    return [w.grad]
"""


def _program(holder: str, write: str, tail: str = "") -> str:
    return textwrap.dedent(_PROGRAM).replace("{holder}", holder).replace("{write}", write).replace("{tail}", tail)


def _grads(src: str, fn: str):
    scope: dict = {}
    exec(compile(src, "fixed", "exec"), scope)  # noqa: S102 - our own test programs
    return scope[fn]()


@pytest.mark.parametrize("holder, write, expected", [
    ("hs = [h]", "hs[0].mul_(3)", 'h = hs[0] = hs[0].mul(3)'),
    ("hs = [w, h]", "hs[1] *= 3", 'h = hs[1] = hs[1] * 3'),
    ('d = {"h": h}', 'd["h"].mul_(3)', 'h = d["h"] = d["h"].mul(3)'),
    ('d = {"h": h}', 'd["h"] *= 3', 'h = d["h"] = d["h"] * 3'),
])
def test_an_element_write_rebinds_the_element_and_its_name(holder, write, expected):
    src = _program(holder, write)
    (diag,) = found("GG001", src)
    assert diag.fix is not None and diag.fix.safe and "element out of place" in diag.fix.title
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert f"    {expected}\n" in out and not found("GG001", out)
    for got, want in zip(_grads(out, "run"), _grads(src, "reference"), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("holder, write, tail", [
    ("hs = [h]\n    v = hs[0].view(-1)", "hs[0].mul_(3)", "\n    print(v)"),  # a view of the element kept before
    ("hs = [h]\n    v = h[:2]", "hs[0].mul_(3)", "\n    print(v)"),  # a view of the name read later
    ("hs = [h]", "hs[0].mul_(3)", "\n    keep(hs)"),  # the container handed on after the write
    ("hs = [h]\n    hs.append(w)", "hs[0].mul_(3)", ""),  # the container used before the write
    ("hs = [h.view(-1)]", "hs[0].mul_(3)", ""),  # the element is not a name
])
def test_no_element_rebinding_when_something_else_could_see_the_old_tensor(holder, write, tail):
    src = _program(holder, write, tail)
    diags = found("GG001", src)
    assert diags and all(d.fix is None or "element" not in d.fix.title for d in diags)


def test_the_element_of_a_parameter_is_rebound_only_as_an_unsafe_fix():
    src = textwrap.dedent("""
        import torch


        class Scale(torch.nn.Module):
            def forward(self, h):
                s = h.sin()
                hs = [h]
                hs[0].mul_(3)
                return s + hs[0]


        def run():
            w = torch.randn(5, requires_grad=True)
            Scale()(w * 2).sum().backward()
    """)
    (diag,) = found("GG001", src)
    assert diag.fix is not None and not diag.fix.safe and "parameter" in diag.fix.title


@pytest.mark.parametrize("holder, write, expected, tail", [
    ("hs = [h]", "hs[0][0] = 0", "h = hs[0] = hs[0].clone()\n    hs[0][0] = 0", ""),  # a view of the element
    ("hs = [h]", "g = hs[0].mul_(3)", "g = h = hs[0] = hs[0].mul(3)", "\n    print(g.sum())"),  # the result used
])
def test_other_element_write_forms(holder, write, expected, tail):
    src = _program(holder, write, tail)
    (diag,) = found("GG001", src)
    assert diag.fix is not None and diag.fix.safe
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert f"    {expected}\n" in out and not found("GG001", out)
    _grads(out, "run")  # runs clean


def test_an_element_write_in_a_loop_that_rebuilds_the_container():
    src = textwrap.dedent("""
        import torch


        def run(fixed=False):
            w = torch.randn(3, requires_grad=True)
            phase = w * 1.0
            samples = []
            for _ in range(4):
                samples.append(torch.sin(phase))
                phases = [phase]
                phases[0] += 0.5
                phase = phases[0]
            torch.stack(samples).sum().backward()
            return [w.grad]
    """)
    (diag,) = found("GG001", src)
    assert diag.fix is not None and diag.fix.safe
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert "phase = phases[0] = phases[0] + 0.5" in out and not found("GG001", out)
    _grads(out, "run")


@pytest.mark.parametrize("program", [
    # another name bound to the element inside the loop keeps this pass's tensor, which the next pass wrote
    """
    def run():
        w = torch.randn(3, requires_grad=True)
        phase = w * 1.0
        kept = phase
        for _ in range(3):
            s = torch.sin(phase)
            phases = [phase]
            phases[0] += 0.5
            kept = phases[0]
        (s.sum() + kept.sum()).backward()
    """,
    # the element is a dict, not a tensor to copy
    """
    def run():
        w = torch.randn(3, requires_grad=True)
        acts = {"h": w * 2}
        s = acts["h"].sin()
        holder = [acts]
        holder[0]["h"].mul_(3)
        s.sum().backward()
    """,
])
def test_no_element_fix_where_the_element_is_not_the_one_tensor(program):
    src = "import torch\n" + textwrap.dedent(program)
    diags = found("GG001", src)
    assert diags and all(d.fix is None or "element" not in d.fix.title for d in diags)


def test_a_parameter_update_through_an_element_is_wrapped_in_no_grad():
    src = textwrap.dedent("""
        import torch


        def train():
            torch.manual_seed(0)
            model = torch.nn.Linear(3, 2)
            for _ in range(2):
                model(torch.randn(4, 3)).sum().backward()
                for p in model.parameters():
                    ps = [p]
                    ps[0] -= 0.1 * p.grad
            return [p.detach().clone() for p in model.parameters()]
    """)
    diags = [d for d in analyze_source(src, "t.py", Config(jedi=False)).diagnostics if d.code == "GG002"]
    assert diags and diags[0].fix is not None and diags[0].fix.safe
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert "with torch.no_grad():\n                ps[0] -= 0.1 * p.grad\n" in out
    _grads(out, "train")  # runs clean


@pytest.mark.parametrize("program", [
    # `h` belongs to the enclosing function: binding it in the closure would make a new, unbound local
    """
    def run():
        w = torch.randn(3, requires_grad=True)
        h = w * 2
        s = h.sin()

        def step():
            hs = [h]
            hs[0].mul_(3)
        step()
        (s.sum() + h.sum()).backward()
    """,
    # a parameter's element written and nothing reading the new value: the fix would drop the caller's write
    """
    class Scale(torch.nn.Module):
        def forward(self, h):
            s = h.sin()
            hs = [h]
            hs[0].mul_(3)
            return s


    def run():
        w = torch.randn(3, requires_grad=True)
        Scale()(w * 2).sum().backward()
    """,
])
def test_no_element_fix_where_the_new_value_would_not_reach_the_readers(program):
    src = "import torch\n" + textwrap.dedent(program)
    diags = found("GG001", src)
    assert diags and all(d.fix is None or "element" not in d.fix.title for d in diags)


_PIECE_IN_LIST = """
import torch


def train():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 8)
    qk = lin(torch.randn(3, 4))
    q, k = qk.chunk(2, dim=-1)
    pieces = [q, k]
    {write}
    torch.softmax(q @ k.t(), dim=-1).pow(2).sum().backward()
    return [lin.weight.grad, lin.bias.grad]
"""


def test_a_piece_of_chunk_held_in_a_list_is_rebound_out_of_place_there():
    """GG004 on ``pieces[0].mul_(s)``, a piece of ``chunk`` held in a list: the element and the name the list was
    made from are rebound to the out-of-place result, as GG001 does for any element; torch gives the intended
    gradients."""
    src = textwrap.dedent(_PIECE_IN_LIST).replace("{write}", "pieces[0].mul_(0.5)")
    with pytest.raises(RuntimeError, match="is a view and is being modified inplace. This view is the output of a function that returns multiple views"):
        scope: dict = {}
        exec(compile(src, "t", "exec"), scope)  # noqa: S102 - the test's own program
        scope["train"]()
    (diag,) = found("GG004", src)
    assert diag.fix is not None
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "q = pieces[0] = pieces[0].mul(0.5)" in out and not found("GG004", out)
    intended = textwrap.dedent(_PIECE_IN_LIST).replace("{write}", "q = q * 0.5")
    got, want = {}, {}
    exec(compile(out, "fixed", "exec"), got)  # noqa: S102
    exec(compile(intended, "intended", "exec"), want)  # noqa: S102
    for a, b in zip(got["train"](), want["train"]()):
        assert torch.allclose(a, b)


def test_no_element_fix_when_the_write_indexes_into_the_element():
    """``parts_list[0][0].zero_()`` where the element is the tuple of pieces itself: cloning the element would
    call ``clone`` on a tuple (the fixed program raises AttributeError), so no fix."""
    src = textwrap.dedent("""
        import torch


        def train():
            lin = torch.nn.Linear(4, 8)
            h = lin(torch.randn(3, 4))
            parts = torch.split(h, 4, dim=-1)
            parts_list = [parts]
            parts_list[0][0].zero_()
            torch.cat(parts, dim=-1).pow(2).sum().backward()
    """)
    for diag in found("GG004", src):
        assert diag.fix is None or "clone()" not in diag.fix.title
