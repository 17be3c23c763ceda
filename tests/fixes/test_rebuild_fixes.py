"""GG103 fixes that keep the tensor a rebuild copied out of its graph (the fix in ``rules/gg103_graph_break.py``): what
each writes, when it is unsafe, when none is offered; and torch runs each fixed program with the gradients of the
intended one."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.autofix.writer import fix_text

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")


def _fixes(src: str):
    return [d.fix for d in analyze_source(textwrap.dedent(src), "t.py", Config(jedi=False)).diagnostics
            if d.code == "GG103"]


def _fixed(src: str, unsafe: bool = False) -> str:
    return fix_text(textwrap.dedent(src), "t.py", Config(jedi=False), unsafe=unsafe).fixed


def _grads(src: str) -> list:
    scope: dict = {}
    exec(compile(src, "fixed", "exec"), scope)  # noqa: S102 - our own test programs
    return scope["train"]()


_PROGRAM = """
import numpy
import torch


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)

    def forward(self, x):
        out = self.lin(x)
        {line}
        return out


def train():
    torch.manual_seed(1)
    head = Head()
    loss = head(torch.randn(5, 3)).pow(2).sum()
    loss.backward()
    return [p.grad for p in head.parameters()]
"""


@pytest.mark.parametrize("line, expected, intended, safe", [
    ("out = torch.tensor(out)", "out = out.clone()", "out = out.clone()", True),
    ("out = torch.tensor(out, dtype=torch.float64)", "out = out.to(dtype=torch.float64, copy=True)",
     "out = out.double()", True),
    ("out = out.new_tensor(out * 2)", "out = (out * 2).to(out, copy=True)", "out = out * 2", True),
    ("out = torch.from_numpy(numpy.clip(out.detach().numpy(), -0.5, 1 - 0.5))",
     "out = torch.clamp(out, -0.5, 1 - 0.5)", "out = out.clamp(-0.5, 0.5)", False),
    ("out = torch.tensor(numpy.square(out.detach().cpu().numpy()) * 3.0)",
     "out = (torch.square(out) * 3.0)", "out = out.square() * 3", False),
    ("out = torch.tensor(out.tolist())", None, None, False),  # the line goes (`out = out` would be left)
])
def test_a_rebuilt_tensor_keeps_its_graph(line, expected, intended, safe):
    src = textwrap.dedent(_PROGRAM).replace("{line}", line)
    (fix,) = _fixes(src)
    assert fix is not None and fix.safe is safe
    if not safe:
        assert "unsafe:" in fix.title
        assert _fixed(src) == src  # only with --unsafe-fixes
    out = _fixed(src, unsafe=True)
    assert f"        {expected}\n" in out if expected else out == src.replace(f"        {line}\n", "")
    assert not _fixes(out)
    reference = src.replace(line, intended or "pass")
    for got, want in zip(_grads(out), _grads(reference), strict=True):
        assert torch.allclose(got, want)


def test_a_name_bound_to_an_array_for_this_use_only_is_translated_at_its_binding():
    src = textwrap.dedent(_PROGRAM).replace(
        "{line}", "steps = numpy.diff(out.detach().numpy(), axis=1)\n        out = torch.from_numpy(numpy.abs(steps))")
    out = _fixed(src, unsafe=True)
    assert "steps = torch.diff(out, dim=1)\n        out = torch.abs(steps)\n" in out
    reference = src.replace("out = torch.from_numpy(numpy.abs(steps))", "out = out.diff(dim=1).abs()")
    for got, want in zip(_grads(out), _grads(reference), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("use", [
    "if out.shape[0] > 0:\n            out = torch.from_numpy(numpy.abs(steps))",
    "with torch.enable_grad():\n            out = torch.from_numpy(numpy.abs(steps))",
    "for _ in range(1):\n            out = torch.from_numpy(numpy.abs(steps))",
])
def test_a_binding_before_the_block_that_uses_it_is_translated_too(use):
    lines = f"steps = numpy.diff(out.detach().numpy(), axis=1)\n        {use}"
    src = textwrap.dedent(_PROGRAM).replace("{line}", lines)
    out = _fixed(src, unsafe=True)
    assert "steps = torch.diff(out, dim=1)\n" in out and "out = torch.abs(steps)\n" in out and not _fixes(out)
    reference = src.replace("out = torch.from_numpy(numpy.abs(steps))", "out = out.diff(dim=1).abs()")
    for got, want in zip(_grads(out), _grads(reference), strict=True):
        assert torch.allclose(got, want)


@pytest.mark.parametrize("lines", [
    # the binding may not run before the use: it must stay an array where it does
    "if out.shape[0] > 9:\n            steps = numpy.diff(out.detach().numpy(), axis=1)\n"
    "        out = torch.from_numpy(numpy.abs(steps))",
    "try:\n            steps = numpy.diff(out.detach().numpy(), axis=1)\n        except ValueError:\n"
    "            out = torch.from_numpy(numpy.abs(steps))",
    # the array is read again: it must stay an array
    "steps = numpy.diff(out.detach().numpy(), axis=1)\n        print(steps.shape)\n"
    "        out = torch.from_numpy(numpy.abs(steps))",
    # a NumPy function without a torch twin of the same meaning
    "out = torch.from_numpy(numpy.cumprod(out.detach().numpy(), axis=1))",
    # array bounds broadcast in NumPy
    "out = torch.from_numpy(numpy.clip(out.detach().numpy(), out.detach().numpy() * 0, 1.0))",
])
def test_no_numpy_translation_where_the_arrays_meaning_could_change(lines):
    src = textwrap.dedent(_PROGRAM).replace("{line}", lines)
    assert _fixes(src) == [None]


_LIST_PROGRAM = """
import torch


def train():
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    {parts} = [(w * k).sum() for k in range(4)]
    loss = (torch.tensor(parts) * 2).sum()
    loss.backward()
    return [w.grad]
"""


def test_a_list_of_tensors_is_stacked():
    src = textwrap.dedent(_LIST_PROGRAM).replace("{parts}", "parts")
    out = _fixed(src)
    assert "loss = (torch.stack(parts).flatten() * 2).sum()" in out and not _fixes(out)
    assert torch.allclose(_grads(out)[0], torch.full((3,), 12.0))


_VALUES_PROGRAM = """
import torch


def train():
    torch.manual_seed(0)
    critic = torch.nn.Linear(2, 1)
    states = torch.randn(4, 2)
    values = [critic(s) for s in states]
    returns = torch.arange(4.0)
    advantage = returns - torch.tensor(values)
    advantage.pow(2).mean().backward()
    return [p.grad for p in critic.parameters()]


def reference():
    torch.manual_seed(0)
    critic = torch.nn.Linear(2, 1)
    states = torch.randn(4, 2)
    returns = torch.arange(4.0)
    advantage = returns - critic(states).squeeze(1)
    advantage.pow(2).mean().backward()
    return [p.grad for p in critic.parameters()]
"""


def test_stacked_one_element_tensors_keep_the_rebuilds_shape():
    # torch.tensor makes (4,) of four (1,) critic values; torch.stack alone would make (4, 1), and `returns - ...`
    # would broadcast to (4, 4): a fix that runs clean with other gradients
    src = textwrap.dedent(_VALUES_PROGRAM)
    out = _fixed(src)
    assert "torch.stack(values).flatten()" in out and not _fixes(out)
    namespace: dict = {}
    exec(compile(out, "fixed", "exec"), namespace)
    got = namespace["train"]()
    for g, r in zip(got, namespace["reference"]()):
        assert torch.allclose(g, r)


def test_a_name_that_may_hold_a_tensor_is_not_stacked():
    src = textwrap.dedent(_LIST_PROGRAM).replace("{parts} = [(w * k).sum() for k in range(4)]",
                                                  "parts = [(w * k).sum() for k in range(4)]\n    parts = w * 2")
    assert _fixes(src)  # found, but not stacked
    assert all(f is None or "stack" not in f.title for f in _fixes(src))


@pytest.mark.parametrize("rebuild, left", [
    ("loss = torch.tensor(loss.item(), requires_grad=True)", ""),  # the line goes: `loss = loss` would be left
    ("if True:\n        loss = torch.tensor(float(loss), requires_grad=True)", "    if True:\n        pass\n"),
    ("scale = torch.tensor(loss.item(), requires_grad=True)", "    scale = loss\n"),
])
def test_a_number_made_a_leaf_again_becomes_the_tensor_as_an_unsafe_fix(rebuild, left):
    src = textwrap.dedent(_LIST_PROGRAM).replace("{parts}", "parts").replace(
        "loss = (torch.tensor(parts) * 2).sum()", f"loss = (w * 4).sum()\n    {rebuild}")
    if rebuild.startswith("scale"):
        src = src.replace("loss.backward()", "scale.backward()")
    (fix,) = _fixes(src)
    assert not fix.safe and "not a new leaf" in fix.title
    out = _fixed(src, unsafe=True)
    assert out == src.replace(f"    {rebuild}\n", left) and not _fixes(out)
    assert "loss = loss" not in out
    assert torch.allclose(_grads(out)[0], torch.full((3,), 4.0))


def test_a_tensor_rebuilt_again_around_the_rebuild_is_not_kept_there():
    src = textwrap.dedent(_LIST_PROGRAM).replace("{parts}", "parts").replace(
        "loss = (torch.tensor(parts) * 2).sum()",
        "loss = (w * 4).sum()\n    loss = torch.autograd.Variable(torch.tensor(float(loss)), requires_grad=True)")
    assert _fixes(src) == [None]


_CONVERTER = """
import numpy
import torch


class Logger:
    def as_array(self, t):
        return t.detach().numpy()


def train():
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    log = Logger()
    total = torch.tensor(numpy.mean(log.as_array(w * w)), requires_grad=True)
    total.backward()
    return [w.grad]
"""


def test_a_method_that_only_converts_its_argument_to_numpy_is_seen_through():
    src = textwrap.dedent(_CONVERTER)
    (fix,) = _fixes(src)
    assert not fix.safe and "not a new leaf" in fix.title
    out = _fixed(src, unsafe=True)
    assert "    total = torch.mean((w * w))\n" in out and not _fixes(out)
    assert torch.allclose(_grads(out)[0], _grads(src.replace(
        "torch.tensor(numpy.mean(log.as_array(w * w)), requires_grad=True)", "(w * w).mean()"))[0])


def test_a_method_that_does_more_than_convert_is_not_seen_through():
    src = textwrap.dedent(_CONVERTER).replace("return t.detach().numpy()", "return t.detach().numpy() * 2")
    assert _fixes(src) == [None]


def test_numpy_keepdims_without_an_axis_names_every_dim_of_the_tensor():
    line = "out = torch.from_numpy(numpy.sum(out.detach().numpy(), keepdims=True)) * out"
    src = textwrap.dedent(_PROGRAM).replace("{line}", line)
    (fix,) = _fixes(src)
    assert not fix.safe
    out = _fixed(src, unsafe=True)
    assert "out = torch.sum(out, dim=tuple(range(out.dim())), keepdim=True) * out\n" in out and not _fixes(out)
    reference = src.replace(line, "out = out.sum(dim=(0, 1), keepdim=True) * out")
    for got, want in zip(_grads(out), _grads(reference), strict=True):
        assert torch.allclose(got, want)


def test_numpy_keepdims_of_a_computed_array_is_not_translated():
    # its dims would be named by computing the tensor a second time
    src = textwrap.dedent(_PROGRAM).replace(
        "{line}", "out = torch.from_numpy(numpy.sum((out * 2).detach().numpy(), keepdims=True)) * out")
    assert _fixes(src) == [None]


_ITEMS_PROGRAM = """
import numpy as np
import torch


def train():
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    losses = [(w * k).pow(2).sum() for k in range(1, 4)]
    {line}
    total.backward()
    return [w.grad]
"""


@pytest.mark.parametrize("line, expected, intended", [
    ("total = torch.tensor(sum(l.item() for l in losses), requires_grad=True)",
     "total = sum(l for l in losses)", "total = torch.stack(losses).sum()"),
    ("total = torch.tensor(np.mean([l.item() for l in losses]), requires_grad=True)",
     "total = torch.stack([l for l in losses]).mean()", "total = torch.stack(losses).mean()"),
    ("total = torch.tensor(np.sum([float(losses[0]), losses[2].item()]) * 2, requires_grad=True)",
     "total = (torch.stack([losses[0], losses[2]]).sum() * 2)", "total = (losses[0] + losses[2]) * 2"),
])
def test_numbers_read_out_of_tensors_and_reduced_are_reduced_as_tensors(line, expected, intended):
    src = textwrap.dedent(_ITEMS_PROGRAM).replace("{line}", line)
    assert _grads(src) == [None]  # the rebuilt leaf cut every gradient
    (fix,) = _fixes(src)
    assert not fix.safe and "not a new leaf" in fix.title
    out = _fixed(src, unsafe=True)
    assert f"    {expected}\n" in out and not _fixes(out)
    assert torch.allclose(_grads(out)[0], _grads(src.replace(line, intended))[0])


@pytest.mark.parametrize("line", [
    # a start value: the sum is no longer only the tensors'
    "total = torch.tensor(sum((l.item() for l in losses), 0.5), requires_grad=True)",
    # lists read out of tensors: stacking them is not the same reduction
    "total = torch.tensor(np.mean([l.tolist() for l in losses]), requires_grad=True)",
    # a reduction over an axis of the numbers' list
    "total = torch.tensor(np.mean([l.item() for l in losses], axis=0), requires_grad=True)",
])
def test_numbers_not_only_read_out_and_reduced_are_not_rewritten(line):
    src = textwrap.dedent(_ITEMS_PROGRAM).replace("{line}", line)
    assert _fixes(src) == [None]


_HELPER = """
import torch


def combined(parts):
    return torch.tensor(parts).sum()


def train():
    w = torch.ones(3, requires_grad=True)
    combined([w.sum(), w.pow(2).sum()]).backward()
"""


def test_a_list_read_through_a_parameter_is_not_stacked():
    """The run knows the list one caller passed; another may pass numbers, which torch.stack refuses."""
    assert _fixes(_HELPER) == [None]


_MIXED = """
import torch


def train():
    w = torch.ones(3, requires_grad=True)
    parts = [w.sum(), 0.5]
    parts.append(w.pow(2).sum())
    torch.tensor(parts).sum().backward()
"""


def test_a_list_holding_a_number_is_not_stacked_on_its_facts():
    """An element the run knows is a number: torch.stack would refuse it, so the list fact offers no stack."""
    fixes = _fixes(_MIXED)
    assert fixes and all(f is None or "stack" not in f.title for f in fixes)


def test_no_translation_of_a_binding_read_by_each_pass_of_a_loop():
    # each pass's backward would go through the one graph the translated binding made (freed after the first)
    src = """
import numpy
import torch


def train():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 4)
    x = torch.randn(5, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    arr = model(x).detach().numpy()
    for _ in range(2):
        opt.zero_grad()
        loss = model(x).pow(2).mean() + torch.tensor(arr.std())
        loss.backward()
        opt.step()
    return [p.grad for p in model.parameters()]
"""
    assert _fixes(src) == [None]
