"""Calls that hand their arguments on: ``act = lambda t, *a, **k: F.leaky_relu_(t, *a, **k)`` called ``act(h, -0.5)``
is ``F.leaky_relu_(h, -0.5)`` at that call (its arguments as written there), while what the op saves is saved on the
lambda's own line, the frame torch records it in; a ``def`` helper that forwards ``*args`` the same way runs the op in
its body with the caller's arguments written out."""

from __future__ import annotations

import textwrap

import pytest

from gradguard import parsing
from gradguard.engine import analyze_module
from gradguard.explanation import explain

HEAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F


"""

# name -> (the definition, its call with a negative slope, the line the finding is on: "call" or "def")
SLOPE_SHAPES = {
    "lambda_star_args": ("act = lambda t, *a: F.leaky_relu_(t, *a)", "act(h, {slope})", "call"),
    "lambda_star_kwargs": ("act = lambda t, **k: F.leaky_relu_(t, **k)", "act(h, negative_slope={slope})", "call"),
    "lambda_both": ("act = lambda t, *a, **k: F.leaky_relu_(t, *a, **k)", "act(h, {slope})", "call"),
    "lambda_both_given_by_keyword": ("act = lambda t, *a, **k: F.leaky_relu_(t, *a, **k)",
                                     "act(h, negative_slope={slope})", "call"),
    "def_helper_star_args": ("", "act(h, {slope})", "def"),
}
HELPER = """
def act(t, *a, **k):
    return F.leaky_relu_(t, *a, **k)

"""


def _source(shape: str, slope: str) -> str:
    define, call, _ = SLOPE_SHAPES[shape]
    return HEAD + ("" if define else HELPER) + textwrap.dedent(f"""\
    def step(x):
        {define}
        lin = nn.Linear(3, 4)
        h = lin(x)
        h = {call.format(slope=slope)}
        h.sum().backward()
    """)


def _findings(text: str):
    return analyze_module(parsing.parse(text), "t.py", parsing.source_lines(text), use_jedi=False)


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("shape", sorted(SLOPE_SHAPES))
def test_a_negative_slope_handed_on_to_an_in_place_leaky_relu_is_found(shape):
    text = _source(shape, "-0.5")
    where = SLOPE_SHAPES[shape][2]
    expected = _line(text, "h = act(") if where == "call" else _line(text, "F.leaky_relu_(")
    found = [(f.code, f.node.lineno) for f in _findings(text)]
    assert found == [("GG005", expected)]
    (finding,) = _findings(text)
    assert "negative_slope=-0.5" in str(finding.message)


@pytest.mark.parametrize("shape", sorted(SLOPE_SHAPES))
def test_a_positive_slope_handed_on_is_no_finding(shape):
    assert _findings(_source(shape, "0.5")) == []


SAVED_IN_LAMBDA = HEAD + """\
def step(x):
    exp = lambda t, *a, **k: torch.exp(t, *a, **k)
    act = lambda t, *a, **k: F.relu_(t, *a, **k)
    e = exp(x @ torch.randn(4, 3, requires_grad=True))
    h = act(e)
    h.mean().backward()


def outside(x):
    exp = lambda t, *a, **k: torch.exp(t, *a, **k)
    e = exp(x @ torch.randn(4, 3, requires_grad=True))
    e.add_(1.0)
    e.sum().backward()
"""


def test_the_write_is_at_the_call_and_the_save_on_the_lambdas_own_line():
    """torch records ``torch.exp``'s save in the lambda's frame (its line); the in-place op the code calls through
    ``act`` is at the call ``act(e)``."""
    findings = {f.code: f for f in _findings(SAVED_IN_LAMBDA)}
    write = findings["GG005"]
    assert write.node.lineno == _line(SAVED_IN_LAMBDA, "h = act(e)")
    assert explain(write).save_line == _line(SAVED_IN_LAMBDA, "exp = lambda")
    saved = findings["GG001"]
    assert saved.node.lineno == _line(SAVED_IN_LAMBDA, "e.add_(1.0)")
    assert explain(saved).save_line == _line(SAVED_IN_LAMBDA, "def outside") + 1


def test_a_lambda_forwarding_to_a_callable_the_code_binds_is_followed_not_taken_for_it():
    """``lambda t: op(t)`` with ``op`` a local variable: its value when the lambda runs is what it calls (late
    binding), so the lambda's body is run, as any other lambda's."""
    text = HEAD + textwrap.dedent("""\
    def step(x):
        op = F.relu
        act = lambda t: op(t)
        op = F.relu_
        e = torch.exp(x @ torch.randn(4, 3, requires_grad=True))
        act(e)
        e.sum().backward()
    """)
    found = [(f.code, f.node.lineno) for f in _findings(text)]
    assert found == [("GG005", _line(text, "act = lambda"))]
