"""GG103: an optimizer built, then a helper that replaces the model's layers by ones of other shapes.  The line to
change is the one, in the function that calls the helper, that built the optimizer: its construction, or its call
of what built it (a closure that binds it ``nonlocal``, a helper that returns it), bound to a variable or to an
attribute of an instance (``self.opt``).  Built after the helper's call, the optimizer takes the new parameters.
The static analysis (``inference/stale_optimizers.py``) and the probe (``probe/module_flags.py``, ``_later_call``)
name the same line; torch shows the bug (the new layers get gradients no optimizer applies)."""

from __future__ import annotations

import runpy
import textwrap

import pytest

from programs import found

_HEAD = """\
import torch
import torch.nn as nn


def factorize(model, rank):
    for name, layer in list(model.named_children()):
        if isinstance(layer, nn.Linear):
            setattr(model, name, nn.Sequential(nn.Linear(layer.in_features, rank), nn.Linear(rank, layer.out_features)))
"""

_TAIL = """
def run():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = train(model)
    return [p.grad for group in opt.param_groups for p in group["params"]]
"""

SHAPES = {
    "a closure binds it nonlocal": """
def train(model):
    opt = None
    def build():
        nonlocal opt
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    build()  # the line
    factorize(model, 2)
    opt.zero_grad()
    model(torch.randn(4, 6)).pow(2).mean().backward()
    opt.step()
    return opt
""",
    "a helper returns it": """
def make(model):
    return torch.optim.SGD(model.parameters(), lr=0.1)


def train(model):
    opt = make(model)  # the line
    factorize(model, 2)
    opt.zero_grad()
    model(torch.randn(4, 6)).pow(2).mean().backward()
    opt.step()
    return opt
""",
    "an instance's attribute": """
class Trainer:
    def __init__(self, model):
        self.model = model

    def fit(self):
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)  # the line
        factorize(self.model, 2)
        self.opt.zero_grad()
        self.model(torch.randn(4, 6)).pow(2).mean().backward()
        self.opt.step()
        return self.opt


def train(model):
    return Trainer(model).fit()
""",
}

# A method of the instance called between may read its optimizer: the static analysis, which names the construction
# only when moving it after the call changes nothing else, names the helper's call (the probe, which does not look
# at what runs between, still names the construction).
BETWEEN = """
class Trainer:
    def __init__(self, model):
        self.model = model

    def log(self):
        return len(self.opt.param_groups)

    def fit(self):
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.log()
        factorize(self.model, 2)  # the line
        self.opt.zero_grad()
        self.model(torch.randn(4, 6)).pow(2).mean().backward()
        self.opt.step()
        return self.opt


def train(model):
    return Trainer(model).fit()
"""


def _program(shape: str) -> tuple[str, int]:
    source = _HEAD + textwrap.dedent(shape) + _TAIL
    return source, next(i for i, line in enumerate(source.splitlines(), 1) if line.endswith("# the line"))


@pytest.mark.parametrize("shape", SHAPES.values(), ids=list(SHAPES))
def test_the_analysis_and_the_probe_name_the_line_that_built_the_optimizer(shape, script, probe):
    source, line = _program(shape)
    path = script(source)
    assert all(g is None for g in runpy.run_path(str(path))["run"]()), "torch: the optimizer's tensors get no grad"
    assert [d.line for d in found("GG103", source)] == [line]
    result = probe(path, entry="run")
    assert [(f.code, f.site.line) for f in result.findings] == [("GG103", line)], [f.message for f in result.findings]


def test_a_method_called_between_keeps_the_static_finding_at_the_helpers_call():
    source, line = _program(BETWEEN)
    assert [d.line for d in found("GG103", source)] == [line]
