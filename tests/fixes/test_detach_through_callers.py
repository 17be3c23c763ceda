"""GG103: ``x.detach_()`` on a helper's parameter, fixed through its calls: the helper detaches out of place and
returns the tensor, each call rebinds the name it passed (``h = _cut(h)``).  Who else holds the tensor is what the
run tells, at the helper's write and at each call (a view of it does not matter: detaching never meant to cut it;
another name read later does).  torch runs the fixed programs against the intended ones."""

from __future__ import annotations

import textwrap

import pytest
from gradguard.api import analyze_source
from gradguard.autofix.writer import fix_text
from gradguard.config import Config
from programs import run_program

torch = pytest.importorskip("torch")


def _fixes(src: str):
    return [d.fix for d in analyze_source(src, "t.py", Config(jedi=False)).diagnostics if d.code == "GG103"]


def _fixed(src: str) -> str:
    return fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed


_VIEW = """
import torch


def _stop(anchor):
    anchor.detach_()


def train():
    torch.manual_seed(0)
    w = torch.randn(4, 3, requires_grad=True)
    scores = torch.randn(6, 4) @ w
    anchor = scores[:, 0]
    _stop(anchor)
    other = scores.exp()[:, 1]
    _stop(other)
    loss = (scores - anchor[:, None] - other[:, None]).pow(2).mean()
    loss.backward()
    return [w.grad]
"""


def test_a_view_detached_in_a_helper_is_detached_out_of_place_and_rebound_at_every_call():
    src = textwrap.dedent(_VIEW)
    with pytest.raises(RuntimeError):
        run_program(src)
    fixes = _fixes(src)
    assert fixes and all(f is not None and f.safe for f in fixes)
    out = _fixed(src)
    assert "    anchor = anchor.detach()\n    return anchor\n" in out
    assert "    anchor = _stop(anchor)\n" in out and "    other = _stop(other)\n" in out
    intended = src.replace("    _stop(anchor)\n", "    anchor = anchor.detach()\n").replace(
        "    _stop(other)\n", "    other = other.detach()\n")
    assert torch.allclose(run_program(out)[0], run_program(intended)[0])
    # `keep` would stay the undetached tensor (the write detached it under every name): no fix
    kept = src.replace("    _stop(anchor)\n", "    keep = anchor\n    _stop(anchor)\n").replace(
        "- other[:, None]", "- other[:, None] + keep.requires_grad")
    assert _fixes(kept)[0] is None
    # the caller's caller holds it too: rebinding in one caller does not reach it
    deeper = src.replace("    _stop(anchor)\n", "    _pass(anchor)\n") + "\n\ndef _pass(t):\n    _stop(t)\n"
    assert _fixes(deeper)[0] is None


_STATE = """
import torch
import torch.nn as nn


class Truncator:
    def __call__(self, h):
        h.detach_()


def train():
    torch.manual_seed(0)
    cell, readout, xs = nn.RNNCell(2, 3), nn.Linear(3, 1), torch.randn(5, 4, 2)
    trunc = Truncator()
    h = torch.zeros(4, 3)
    loss = 0
    for t, x in enumerate(xs):
        h = cell(x, h)
        loss = loss + readout(h).pow(2).mean()
        if t % 2 == 1:
            trunc(h)
    loss.backward()
    return [p.grad for p in cell.parameters()]
"""


def test_a_saved_state_detached_by_a_method_is_rebound_in_the_loop_unsafely():
    src = textwrap.dedent(_STATE)
    with pytest.raises(RuntimeError):
        run_program(src)
    fixes = _fixes(src)
    assert len(fixes) == 1 and fixes[0] is not None and not fixes[0].safe
    out = _fixed(src)
    assert "        h = h.detach()\n        return h\n" in out and "            h = trunc(h)\n" in out
    intended = src.replace("            trunc(h)\n", "            h = h.detach()\n")
    for got, want in zip(run_program(out), run_program(intended)):
        assert torch.allclose(got, want)
