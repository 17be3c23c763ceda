"""A new ``nn.Parameter(t)`` that starves what ``t`` was computed from (a probe-only GG103 cut): GG103's own fix
lets the gradient through by setting the attribute to ``t`` past the module's parameter registration
(``object.__setattr__``).  Each program is probed (``--entry run``); a positive's fix is applied and torch proves it
(``run()`` of the fixed copy runs clean and gives ``reference()``'s gradients); a negative's finding is real but gets
no fix (the edit would be wrong or would not reach the values there)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from programs import assert_fix_proven

torch = pytest.importorskip("torch")

from gradguard.probe import ProbeOptions
from gradguard.probe.merge import diagnostics
from gradguard.probed_fixes import fixes_for

# `setattr(module, name, nn.Parameter(value))` over names, as a helper that swaps merged weights in for one backward.
SETATTR_BY_NAME = '''
import torch
import torch.nn as nn

def scale_in(layer, factor, keep):
    for name in ("weight", "bias"):
        value = getattr(layer, name) * factor
        if keep:
            object.__setattr__(layer, name, value)
        else:
            setattr(layer, name, nn.Parameter(value))

def grads(keep):
    torch.manual_seed(0)
    layer, factor = nn.Linear(3, 2), nn.Parameter(torch.tensor(2.0))
    opt = torch.optim.SGD([factor], lr=0.1)
    scale_in(layer, factor, keep)
    layer(torch.randn(4, 3)).pow(2).sum().backward()
    grads = [factor.grad]
    opt.step()
    return grads

def run():
    return grads(False)

def reference():
    return grads(True)
'''

# The new Parameter is bound to a name first: the statement sets no attribute, so there is nothing to set instead.
PARAMETER_BOUND_TO_A_NAME = '''
import torch
import torch.nn as nn

def run():
    torch.manual_seed(0)
    layer, factor = nn.Linear(3, 2), nn.Parameter(torch.tensor(2.0))
    opt = torch.optim.SGD([factor], lr=0.1)
    weight = nn.Parameter(layer.weight * factor)
    nn.functional.linear(torch.randn(4, 3), weight).pow(2).sum().backward()
    opt.step()
    return [factor.grad]
'''

# Made once in `__init__` and used by every forward: its history would be backwarded again at each step.
PARAMETER_MADE_IN_INIT = '''
import torch
import torch.nn as nn

class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.raw = nn.Parameter(torch.randn(2, 3))
        self.unit = nn.Parameter(self.raw / self.raw.norm())

    def forward(self, x):
        return x @ self.unit.t()

def run():
    torch.manual_seed(0)
    head = Head()
    opt = torch.optim.SGD(head.parameters(), lr=0.1)
    head(torch.randn(4, 3)).pow(2).sum().backward()
    opt.step()
    return [head.raw.grad]
'''


def _found(source: str, worker, tmp_path: Path):
    path = tmp_path / "program.py"
    text = textwrap.dedent(source)
    path.write_text(text, encoding="utf-8")
    result = worker.probe(path, ProbeOptions(entry="run", timeout=60))
    found = [d for d in diagnostics(result, str(path)) if d.path == str(path) and d.code == "GG103"]
    assert found, [(d.code, d.line, d.message) for d in diagnostics(result, str(path))]
    return path, text, found


def test_new_parameter_set_by_name_is_set_past_registration(worker, tmp_path: Path):
    path, text, found = _found(SETATTR_BY_NAME, worker, tmp_path)
    fixes = fixes_for(text, str(path), found)
    assert len(fixes) == len(found), [(d.line, d.message) for d in found]
    assert all(not fix.safe and "object.__setattr__(layer, name, value)" in fix.title for fix in fixes.values())
    assert_fix_proven(text, path, [e for fix in fixes.values() for e in fix.edits], tmp_path / "fixed.py")


@pytest.mark.parametrize("source", [PARAMETER_BOUND_TO_A_NAME, PARAMETER_MADE_IN_INIT],
                         ids=["parameter_bound_to_a_name", "parameter_made_in_init"])
def test_new_parameter_fix_is_refused(source: str, worker, tmp_path: Path):
    path, text, found = _found(source, worker, tmp_path)
    assert not fixes_for(text, str(path), found)
