"""A write inside a helper (``fixes/callers.py``): fixed in the helper when that is safe for every caller, or
through its calls (the helper returns the new tensor, each call rebinds the name it passed) when every call is
in the file; never a rebinding that would leave the callers expecting the write.  torch runs the fixed programs."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
from programs import found, run_program

torch = pytest.importorskip("torch")


def _diags(src: str):
    return analyze_source(src, "t.py", Config(jedi=False)).diagnostics


def _fixed(src: str, unsafe: bool = False) -> str:
    return fix_text(src, "t.py", Config(jedi=False), unsafe=unsafe).fixed


_HELPER = """
import torch


def {name}(h, k):
    h.mul_(k)


def train():
    torch.manual_seed(3)
    w = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(5, 4)
    h = torch.sigmoid(x @ w)
    {name}(h, 0.5)
    g = torch.tanh(h)
    {name}(g, 2.0)
    (h.sum() + g.sum()).backward()
    return [w.grad]
"""
_INTENDED = """
import torch


def train():
    torch.manual_seed(3)
    w = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(5, 4)
    h = torch.sigmoid(x @ w) * 0.5
    g = torch.tanh(h) * 2.0
    (h.sum() + g.sum()).backward()
    return [w.grad]
"""


def test_a_private_helpers_write_is_fixed_through_every_call():
    src = textwrap.dedent(_HELPER).replace("{name}", "_scale_")
    fixes = {d.fix for d in _diags(src) if d.code == "GG001"}
    assert len(fixes) == 1 and next(iter(fixes)).safe
    out = _fixed(src)
    assert "    h = h.mul(k)\n    return h\n" in out
    assert "    h = _scale_(h, 0.5)\n" in out and "    g = _scale_(g, 2.0)\n" in out
    assert not _diags(out)
    assert torch.allclose(run_program(out)[0], run_program(textwrap.dedent(_INTENDED))[0])


_TWO_CALLERS = """
import torch


def _step(h, w, out):
    out.append(h * w)
    h += 1


def train():
    torch.manual_seed(3)
    w = torch.randn(3, requires_grad=True)
    h = w * 2
    outs = []
    _step(h, w, outs)
    (outs[0].sum() + h.sum()).backward()
    return [w.grad]


def evaluate():
    w = torch.randn(3, requires_grad=True)
    h = w * 3
    outs = []
    _step(h, w, outs)
    _step(h, w, outs)
    return sum(o.sum() for o in outs) + h.sum()
"""


def test_a_call_only_another_functions_run_made_is_judged_by_that_run():
    """The finding kept is one function's (its run goes down through its own call only); the other function's calls
    are points of that function's run of the same write (``Moment.elsewhere``), not read again off the code."""
    import ast as _ast

    from gradguard.engine import analyze_module

    src = textwrap.dedent(_TWO_CALLERS)
    tree = _ast.parse(src)
    (finding,) = analyze_module(tree, "t.py", src.splitlines(), use_jedi=False)
    calls = [n for n in _ast.walk(tree) if isinstance(n, _ast.Call) and getattr(n.func, "id", "") == "_step"]
    assert len(calls) == 3 and all(finding.mutation.moment.through(call) is not None for call in calls)
    out = _fixed(src)
    assert out.count("h = _step(h, w, outs)") == 3 and not _diags(out)
    assert torch.allclose(run_program(out)[0], run_program(src.replace("    h += 1", "    h = h + 1"))[0])


def test_a_public_helper_is_fixed_through_its_calls_only_as_an_unsafe_fix():
    src = textwrap.dedent(_HELPER).replace("{name}", "scale_")
    (fix,) = {d.fix for d in _diags(src) if d.code == "GG001"}
    assert not fix.safe and "calls to `scale_` from other files still expect the write" in fix.title
    assert _fixed(src) == src
    out = _fixed(src, unsafe=True)
    assert "    h = scale_(h, 0.5)\n" in out and not _diags(out)
    assert torch.allclose(run_program(out)[0], run_program(textwrap.dedent(_INTENDED))[0])


@pytest.mark.parametrize("change", [
    ("    {name}(h, 0.5)\n", "    hooks = [{name}]\n    {name}(h, 0.5)\n"),  # used otherwise than called
    ("    {name}(h, 0.5)\n", "    out = {name}(h, 0.5)\n"),  # the call's result (None) is used
    ("    {name}(h, 0.5)\n", "    keep = [h]\n    {name}(h, 0.5)\n    print(keep)\n"),  # a list holds the tensor
])
def test_no_fix_through_calls_that_would_not_all_rebind(change):
    old, new = change
    src = textwrap.dedent(_HELPER).replace(old, new).replace("{name}", "_scale_")
    assert all(d.fix is None or "rebind" not in d.fix.title for d in _diags(src))


_CLOSURE = """
import torch


def train():
    w = torch.rand(5, requires_grad=True)
    s = torch.sqrt(w + 1.0)

    def limit():
        s.clamp_(max=1.2)

    {calls}
    (s * 2).sum().backward()
    return [w.grad]
"""


def test_a_closure_writing_a_variable_of_its_function_is_fixed():
    src = textwrap.dedent(_CLOSURE).replace("{calls}", "limit()")
    (fix,) = [d.fix for d in _diags(src) if d.code == "GG001"]
    assert fix.safe
    out = _fixed(src)
    assert not _diags(out)
    if "nonlocal" in fix.title:  # rebound in the closure: declared nonlocal, so the function sees the new tensor
        assert "`nonlocal s` in `limit`" in fix.title and "        nonlocal s\n        s = s.clamp(max=1.2)\n" in out
    torch.manual_seed(0)
    got = run_program(out)[0]
    torch.manual_seed(0)
    want = run_program(src.replace("        s.clamp_(max=1.2)", "        pass").replace(
        "    (s * 2)", "    s = s.clamp(max=1.2)\n    (s * 2)"))[0]
    assert torch.allclose(got, want)


_UPDATE_IN_CLOSURE = """
import torch
import torch.nn as nn


def train(wrapped=True):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    x = torch.randn(8, 4)
    for step in range(3):
        model.zero_grad()
        model(x).pow(2).mean().backward()
        for p in model.parameters():
            if step >= 0:
                def update():
                    p.add_(p.grad, alpha=-0.1)
                update()
    return [p.grad for p in model.parameters()]
"""


def test_a_parameter_update_in_a_closure_defined_in_the_training_loop_goes_under_no_grad():
    """The loop around the closure's ``def`` is the training loop: its write is an update, kept under no_grad."""
    (fix,) = [d.fix for d in _diags(_UPDATE_IN_CLOSURE) if d.code == "GG002"]
    out = _fixed(_UPDATE_IN_CLOSURE)
    assert fix.safe and fix.title == "Update under `with torch.no_grad():`" and not _diags(out)
    assert "with torch.no_grad():\n                        p.add_(p.grad, alpha=-0.1)" in out
    torch.manual_seed(0)
    model, x = torch.nn.Linear(4, 2), torch.randn(8, 4)
    for _ in range(3):
        model.zero_grad()
        model(x).pow(2).mean().backward()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-0.1)
    for got, want in zip(run_program(out), [p.grad for p in model.parameters()]):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("calls", [
    "keep = s[:2]\n    limit()\n    print(keep)",  # a view of the old tensor is read after the call
    "run_later = [limit]\n    limit()",  # the closure is used otherwise than called here
])
def test_a_closure_whose_rebinding_the_function_may_not_see_is_not_fixed(calls):
    src = textwrap.dedent(_CLOSURE).replace("{calls}", calls)
    diags = [d for d in _diags(src) if d.code == "GG001"]
    assert diags and all(d.fix is None or "nonlocal" not in d.fix.title for d in diags)
    assert "nonlocal" not in _fixed(src, unsafe=True)


def test_a_no_grad_method_goes_into_the_graph_with_its_decorator_removed():
    src = textwrap.dedent("""
        import torch


        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Linear(3, 3)
                self.b = torch.nn.Linear(3, 2)

            @torch.no_grad()
            def _bound(self, z):
                z.clamp_(-0.1, 0.1)

            def forward(self, x):
                z = self.a(x)
                self._bound(z)
                return self.b(z)


        def train():
            torch.manual_seed(4)
            net = Net()
            net(torch.randn(6, 3)).pow(2).sum().backward()
            return [p.grad for p in net.parameters()]
    """)
    (fix,) = [d.fix for d in _diags(src) if d.code == "GG102"]
    assert not fix.safe and "the gradient now goes through it" in fix.title
    out = _fixed(src, unsafe=True)
    assert "@torch.no_grad()" not in out and "        z = self._bound(z)\n" in out and not _diags(out)
    intended = src.replace("        z.clamp_(-0.1, 0.1)", "        return z.clamp(-0.1, 0.1)").replace(
        "        self._bound(z)", "        z = self._bound(z)").replace("    @torch.no_grad()\n", "")
    assert intended.count("return z.clamp") == 1
    for got, want in zip(run_program(out), run_program(intended), strict=True):
        assert torch.allclose(got, want)


def test_a_helpers_element_loop_clones_what_backward_saved_and_leaves_the_calls_alone():
    src = textwrap.dedent("""
        import torch


        def unit_rows(t):
            for i in range(t.shape[0]):
                t[i] = t[i] / t[i].norm()


        def train():
            torch.manual_seed(5)
            lin = torch.nn.Linear(3, 4)
            e = lin(torch.randn(6, 3))
            unit_rows(e)
            e.sum().backward()
            return [lin.weight.grad]
    """)
    out = _fixed(src)
    assert "unit_rows(e)\n" in out and ".clone()" in out and not _diags(out)
    intended = src.replace("    unit_rows(e)\n", "    e = e / e.norm(dim=1, keepdim=True)\n")
    assert torch.allclose(run_program(out)[0], run_program(intended)[0], atol=1e-6)


_FORWARDED = """
import torch
import torch.nn.functional as F


def _act(t, **options):
    return F.relu(t, **options)


def train():
    torch.manual_seed(11)
    w = torch.randn(4, 3, requires_grad=True)
    g = torch.sigmoid(torch.randn(2, 4) @ w)
    {call}
    g.sum().backward()
    return [w.grad]
"""


def test_an_inplace_flag_forwarded_through_kwargs_is_dropped_where_it_is_spelled():
    src = textwrap.dedent(_FORWARDED).replace("{call}", "g = _act(g, inplace=True)")
    (fix,) = [d.fix for d in _diags(src) if d.code == "GG005"]
    assert fix.safe and "Drop `inplace=True`" in fix.title
    out = _fixed(src)
    assert "    g = _act(g)\n" in out and not _diags(out)
    assert torch.allclose(run_program(out)[0], run_program(src.replace("g = _act(g, inplace=True)", "g = torch.relu(g)"))[0])


@pytest.mark.parametrize("call", [
    "h = _act(g, inplace=True)\n    g = g + h",  # the caller reads the tensor the flag wrote
])
def test_a_forwarded_flag_whose_write_the_caller_reads_is_kept(call):
    src = textwrap.dedent(_FORWARDED).replace("{call}", call)
    assert all(d.fix is None or "Drop" not in d.fix.title for d in _diags(src))


@pytest.mark.parametrize("body", [
    # the closure passes its function's variable to a helper: rebinding it there would make a new local
    "def limit():\n        _clamp_(s)\n",
    # the closure writes a local it bound from its function's variable: who else holds it is not visible there
    "def limit():\n        cur = s\n        cur.clamp_(max=1.2)\n",
])
def test_a_closure_that_does_not_own_the_tensor_gets_no_rebinding(body):
    src = textwrap.dedent(_CLOSURE).replace("def limit():\n        s.clamp_(max=1.2)\n", body).replace(
        "{calls}", "limit()").replace("def train():", "def _clamp_(t):\n    t.clamp_(max=1.2)\n\n\ndef train():")
    diags = [d for d in _diags(src) if d.code == "GG001"]
    assert diags
    out = _fixed(src, unsafe=True)
    assert "s = _clamp_(s)" not in out and "cur = cur.clamp" not in out


def test_a_helper_called_under_no_grad_is_not_fixed_through_its_calls():
    # what hides the write is the caller's no_grad block: a rebound value made there has no graph either
    src = textwrap.dedent("""
        import torch


        def _zero_(h, pad):
            h[pad] = 0.0


        def train():
            lin = torch.nn.Linear(3, 4)
            mask = torch.arange(4)[None, :] >= torch.tensor([4, 2, 1, 3, 0])[:, None]
            h = lin(torch.randn(5, 3))
            with torch.no_grad():
                _zero_(h, mask)
            torch.tanh(h).sum().backward()
            return [lin.weight.grad]
    """)
    diags = _diags(src)
    assert diags and all(d.fix is None or "rebind" not in d.fix.title for d in diags)


def test_the_pieces_of_a_split_are_not_copied_as_one_tensor():
    # `parts` holds the pieces (a tuple): `parts = parts.clone()` would fail
    src = textwrap.dedent("""
        import torch


        def train():
            x = torch.randn(6, 3, requires_grad=True)
            parts = torch.split(x * 3, 2)

            def update():
                parts[0].zero_()

            update()
            sum(p.sum() for p in parts).backward()
            return [x.grad]
    """)
    diags = _diags(src)
    assert diags and "parts.clone()" not in _fixed(src, unsafe=True)


_UNREAD = """
import torch


class {cls}:
    def __call__(self, logits):
        weights = logits.exp_()
        return weights


def train():
    torch.manual_seed(0)
    logits = torch.randn(5, requires_grad=True)
    softmax = {cls}()
    weights = softmax(logits)
    (weights / weights.sum()).pow(2).sum().backward()
    return [logits.grad]
"""


def test_a_helper_writing_a_parameter_nobody_reads_afterwards_writes_out_of_place():
    """``weights = logits.exp_()`` in a helper: neither the helper nor its caller reads ``logits``'s value after
    (``logits.grad`` is about the leaf), so ``logits.exp()`` gives every reader what it read.  Safe for a private
    helper; unsafe, saying why, for a public one (calls from other files are not seen)."""
    torch.manual_seed(0)
    logits = torch.randn(5, requires_grad=True)
    weights = logits.exp()
    (weights / weights.sum()).pow(2).sum().backward()
    for cls, safe in (("_Softmax", True), ("Softmax", False)):
        src = _UNREAD.replace("{cls}", cls)
        (diag,) = found("GG002", src)
        assert diag.fix is not None and diag.fix.safe is safe, diag.fix
        assert safe or "from other files may read `logits`" in diag.fix.title
        out = fix_text(src, "t.py", unsafe=True).fixed
        assert "weights = logits.exp()" in out and not found("GG002", out)
        (got,) = run_program(out)
        assert torch.allclose(got, logits.grad)
    read_later = _UNREAD.replace("{cls}", "_Softmax").replace("return [logits.grad]", "return [logits.grad, logits * 1]")
    (diag,) = found("GG002", read_later)
    assert diag.fix is None or "logits.exp()" not in diag.fix.title


def test_a_call_site_is_judged_by_what_the_run_saw_there():
    """Who holds what a call passes is what the run saw at that call (``Moment.through``): a helper of the file
    that reads the tensor and keeps only a number is no escape, so every call still rebinds; one that keeps the
    tensor is."""
    logged = "    {name}(h, 0.5)\n"
    src = textwrap.dedent(_HELPER).replace("def train():", "stats = []\n\n\ndef log_stats(t):\n"
                                           "    stats.append(float(t.mean()))\n\n\ndef train():").replace(
        logged, "    log_stats(h)\n" + logged).replace("{name}", "_scale_")
    out = _fixed(src)
    assert "    h = _scale_(h, 0.5)\n" in out and "    g = _scale_(g, 2.0)\n" in out and not _diags(out)
    assert torch.allclose(run_program(out)[0], run_program(textwrap.dedent(_INTENDED))[0])
    kept = src.replace("stats.append(float(t.mean()))", "stats.append(t)")
    assert all(d.fix is None or "rebind" not in d.fix.title for d in _diags(kept))
