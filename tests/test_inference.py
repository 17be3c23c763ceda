"""Tensor inference: in-place syntax on things that are not tensors (or not at risk) is never flagged."""

from __future__ import annotations

import ast
import textwrap

import pytest

from gradguard import engine
from gradguard.api import analyze_source
from programs import found

NOT_TENSORS = {
    "ints": """
        import torch
        x = torch.randn(3, requires_grad=True)
        n = 0
        for i in range(10):
            n += i
        y = torch.sigmoid(x)
        n *= 2
        y.sum().backward()
    """,
    "lists": """
        import torch
        x = torch.randn(3, requires_grad=True)
        losses = []
        y = torch.exp(x)
        losses += [1.0]
        losses[0] = 2.0
        y.sum().backward()
    """,
    "numpy": """
        import numpy as np
        import torch
        a = np.zeros(3)
        x = torch.randn(3, requires_grad=True)
        y = torch.tanh(x)
        a += 1
        a[0] = 5
        y.sum().backward()
    """,
    "strings": """
        import torch
        s = "torch"
        s += "!"
        x = torch.randn(3, requires_grad=True)
        (x * 2).sum().backward()
    """,
    "floats_from_item": """
        import torch
        x = torch.randn(3, requires_grad=True)
        y = torch.sigmoid(x)
        total = y.sum().item()
        total += 1.0
        y.sum().backward()
    """,
    "unknown_function_params": """
        import torch
        def update(buf, value):
            buf += value
            buf[0] = 0
            return buf
    """,
    "tensor_without_grad": """
        import torch
        mask = torch.zeros(3)
        mask[0] = 1
        mask += 1
        counts = torch.zeros(10, dtype=torch.long)
        counts.index_add_(0, torch.tensor([1]), torch.tensor([1]))
    """,
}


@pytest.mark.parametrize("name", sorted(NOT_TENSORS))
def test_no_findings_on_non_tensors(name):
    source = textwrap.dedent(NOT_TENSORS[name])
    assert analyze_source(source).diagnostics == [], name


def test_forward_parameters_are_tensors():
    source = textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = nn.LayerNorm(8)
                self.ff = nn.Linear(8, 8)

            def forward(self, x):
                x += self.ff(self.norm(x))
                return x
    """)
    (diag,) = analyze_source(source).diagnostics
    assert (diag.code, diag.line) == ("GG001", 12)
    assert {r.line for r in diag.related} == {12, 13}


def test_columns_count_code_points_not_bytes():
    source = 'import torch\nx = torch.zeros(3, requires_grad=True); s = "é"; x += 1\n'
    (diag,) = analyze_source(source).diagnostics
    assert diag.span.column == source.splitlines()[1].index("x += 1") + 1


# The file is analysed as the program that runs: its `__main__` block runs, so what it does to objects (a hook
# registered on a layer, `m.inplace = True`) is known to the calls it makes, and its `else` does not run.
MAIN_BLOCK = """
    import torch
    import torch.nn as nn


    def forward_of(model):
        return model(torch.randn(2, 3)).sum()


    if __name__ == "__main__":
        model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True))
        model[0].register_full_backward_hook(lambda *grads: None)
        forward_of(model).backward()
    else:
        model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True))
        model[1].inplace = False
"""


def test_the_main_block_runs_and_its_else_does_not():
    found = analyze_source(textwrap.dedent(MAIN_BLOCK)).diagnostics
    assert [(d.line, d.code) for d in found] == [(12, "GG004")]  # the registration


def test_a_block_for_imports_only_does_not_run():
    source = textwrap.dedent(MAIN_BLOCK).replace('__name__ == "__main__"', '__name__ != "__main__"')
    assert analyze_source(source).diagnostics == []


# `t.data` handed to an op by keyword (`input=`, torch's Python name of the schema's `self`) is the op's tensor
# argument as it is by position: the cut term of the loss is found either way.
_CUT_TERM = """
import torch
import torch.nn as nn
import torch.nn.functional as F


def train():
    torch.manual_seed(0)
    body, head = nn.Linear(6, 8), nn.Linear(8, 3)
    x, y, t = torch.randn(4, 6), torch.tensor([0, 1, 2, 1]), torch.randn(4, 8)
    features = torch.relu(body(x))
    term = {term}
    total = F.cross_entropy(head(features), y) + 0.5 * term
    total.backward()
"""


@pytest.mark.parametrize("term", [
    "F.mse_loss(features.data, t)",
    "F.mse_loss(input=features.data, target=t)",
    "torch.mul(input=features.data, other=t).sum()",
])
def test_a_cut_value_given_by_keyword_is_the_op_argument(term):
    (diag,) = found("GG103", _CUT_TERM.replace("{term}", term))
    assert _CUT_TERM.replace("{term}", term).splitlines()[diag.line - 1].strip().startswith("term = ")


# A value mapped under the caller's `torch.no_grad()` by the file's own code that rebinds its own names there (a
# forward looping `x = layer(x)`, a helper's `p = net(p)`): the cut is the call in the function that switched grad
# mode off, as the probe reports it, not a line of the callee, whose names are its own.
_MAPPED_UNDER_NO_GRAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Stack(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def mapped(net, p):
    p = net(p)
    return p


def twice(net, p):
    p = mapped(net, p)
    return p


def train():
    torch.manual_seed(0)
    student = nn.Linear(4, 4)
    teacher = {teacher}
    x = torch.randn(6, 4)
    pred = student(x)
    with torch.no_grad():
        pred = {call}
    loss = F.mse_loss(pred, x) + 0.1 * student(x).pow(2).mean()
    loss.backward()
"""


@pytest.mark.parametrize("teacher, call", [
    ("Stack([nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4)])", "teacher(pred)"),
    ("nn.Linear(4, 4)", "mapped(teacher, pred)"),
    ("nn.Linear(4, 4)", "twice(teacher, pred)"),
    ("nn.Linear(4, 4)", "teacher(pred)"),
])
def test_a_value_mapped_under_the_callers_no_grad_is_cut_at_the_callers_line(teacher, call):
    src = _MAPPED_UNDER_NO_GRAD.replace("{teacher}", teacher).replace("{call}", call)
    (diag,) = found("GG103", src)
    assert src.splitlines()[diag.line - 1].strip() == f"pred = {call}"


# A module of the file's own class holding another instance of that class (a stack of layers one of which is a stack)
# runs the inner instance's forward too: a cut in it is found.
_NESTED_STACKS = """
import torch
import torch.nn as nn


class Stack(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Wrap(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


class Detach(nn.Module):
    def forward(self, x):
        return x.detach()


def train():
    torch.manual_seed(0)
    trunk = {trunk}
    model = {model}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 3), torch.randn(8, 2)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
"""


@pytest.mark.parametrize("trunk, model", [
    ("Stack([nn.Linear(3, 9), nn.ReLU()])", "Stack([trunk, Detach(), nn.Linear(9, 2)])"),
    ("Wrap(nn.Linear(3, 9))", "Wrap(nn.Sequential(trunk, Detach(), nn.Linear(9, 2)))"),
    ("Wrap(Wrap(nn.Linear(3, 9)))", "Stack([trunk, Detach(), nn.Linear(9, 2)])"),
])
def test_a_cut_after_another_instance_of_the_running_class_is_found(trunk, model):
    src = _NESTED_STACKS.replace("{trunk}", trunk).replace("{model}", model)
    (diag,) = found("GG103", src)
    assert src.splitlines()[diag.line - 1].strip() == "return x.detach()"


_SPREAD_OPS = """\
import torch


def scaled(x, **options):
    torch.add(x, unknown(), **options)
    torch.add(x, unknown(), **options)
    torch.add(x, unknown(), **options)
    return torch.add(x, unknown(), **options)


def train():
    w = torch.randn(3, requires_grad=True)
    y = scaled(w * 2, alpha=2)
    y.sum().backward()
"""


def test_each_call_with_spread_keywords_is_its_own_op(monkeypatch):
    """A call with a caller's ``**options`` runs as a call written out with them, a syntax node the run makes
    (``_spread_keywords``); a memo keyed by a node's id (``opaque_at``: an op's marker of the unknown value it took)
    must not take the next one made at the id of one already dropped for the same op: four ops, four markers."""
    runs = []
    real = engine._run_unit
    monkeypatch.setattr(engine, "_run_unit", lambda *args: runs.append(real(*args)) or runs[-1])
    engine.analyze_module(ast.parse(_SPREAD_OPS), "spread.py", _SPREAD_OPS.splitlines(), use_jedi=False)
    (train,) = [run for run in runs if run.root_fn is not None and run.root_fn.name == "train"]
    assert len(train.opaque_markers) == len(train.opaque_at) == 4
