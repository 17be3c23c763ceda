"""GG103 NumPy round trips kept in torch.  Rows selected through NumPy (``torch.from_numpy(t.data.numpy()[idx])``, in the legacy ``Variable`` that
detaches what it is given) are the same rows of the tensor itself: the fix indexes the tensor, and the wrapper goes
with the round trip.  A NumPy sum or mean of a list of tensors, which torch refuses to convert, is the same
reduction of their stack.  torch runs each fixed program against the intended one."""

from __future__ import annotations

import pytest
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
from gradients import grads_equal
from programs import found, run_program

torch = pytest.importorskip("torch")

_SELECTED = """
import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable


def train():
    torch.manual_seed(0)
    encoder, x = nn.Linear(6, 4), torch.randn(8, 6)
    emb = encoder(x)
    norms = emb.norm(dim=1).detach().numpy()
    hard = np.where(norms > np.median(norms))[0]
    selected = {selection}
    loss = selected.pow(2).sum() + 0.1 * emb.abs().mean()
    loss.backward()
    return [p.grad for p in encoder.parameters()]


def intended():
    torch.manual_seed(0)
    encoder, x = nn.Linear(6, 4), torch.randn(8, 6)
    emb = encoder(x)
    norms = emb.norm(dim=1).detach().numpy()
    hard = np.where(norms > np.median(norms))[0]
    loss = emb[hard].pow(2).sum() + 0.1 * emb.abs().mean()
    loss.backward()
    return [p.grad for p in encoder.parameters()]
"""


@pytest.mark.parametrize("selection", ["Variable(torch.from_numpy(emb.data.numpy()[hard]))",
                                       "torch.from_numpy(emb.cpu().detach().numpy()[hard, :])",
                                       "torch.tensor(emb.data.numpy()[hard][:, 1:] * 2.0)"])
def test_rows_selected_through_numpy_are_indexed_in_the_tensor(selection):
    src = _SELECTED.replace("{selection}", selection)
    (diag,) = found("GG103", src)
    assert diag.fix is not None and not diag.fix.safe
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "numpy()" not in out.split("def intended")[0].split("hard = ")[1] and not found("GG103", out)
    if selection.startswith("torch.tensor"):
        src_ref = out.replace("emb[hard].pow(2)", "(emb[hard][:, 1:] * 2.0).pow(2)")
        assert grads_equal(run_program(out), run_program(src_ref, "intended"))
    else:
        assert grads_equal(run_program(out), run_program(out, "intended"))


def test_no_rewrite_of_a_reversed_selection():
    src = _SELECTED.replace("{selection}", "Variable(torch.from_numpy(emb.data.numpy()[::-1].copy()))")
    (diag,) = found("GG103", src)
    assert diag.fix is None


_REDUCED = """
import numpy as np
import torch


def train():
    torch.manual_seed(0)
    w, x = torch.randn(3, requires_grad=True), torch.randn(4, 3)
    loss = np.{reduction}([(x @ w).pow(2).mean(), (x @ w).abs().sum(), {third}])
    loss.backward()
    return [w.grad]


def intended():
    torch.manual_seed(0)
    w, x = torch.randn(3, requires_grad=True), torch.randn(4, 3)
    loss = torch.stack([(x @ w).pow(2).mean(), (x @ w).abs().sum(), {third}]).{reduction}()
    loss.backward()
    return [w.grad]
"""


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_a_numpy_reduction_of_tensors_is_their_stack_reduced(reduction):
    src = _REDUCED.replace("{reduction}", reduction).replace("{third}", "w.sum()")
    (diag,) = found("GG103", src)
    assert diag.fix is not None and not diag.fix.safe
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert "np." not in out and not found("GG103", out)
    assert grads_equal(run_program(out), run_program(out, "intended"))


def test_no_stack_of_a_list_holding_a_number():
    src = _REDUCED.replace("{reduction}", "sum").replace("{third}", "0.5")
    (diag,) = found("GG103", src)
    assert diag.fix is None
