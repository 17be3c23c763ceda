"""A list display of plain numbers is a list whose items the code may replace (``expressions._expr_Tuple``): a
number read out of a tensor (``.item()``) written into it is read back out as one, so a loss summed through the
list and then differentiated is GG103; a tensor written into it stays a tensor.  torch confirms each program."""

from __future__ import annotations

import pytest
from gradguard.api import analyze_source
from gradguard.config import Config

torch = pytest.importorskip("torch")

HEAD = """import torch


def run():
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(4, 3)
"""

POSITIVES = {
    "augmented": HEAD + """    loss = 0
    for row in x:
        totals = [loss]
        totals[0] -= (row * w).sum().item()  # culprit
        loss = totals[0]
    loss.backward()
""",
    "assigned": HEAD + """    parts = [0.0, 0.0]
    parts[1] = (x @ w).mean().item()  # culprit
    total = parts[0] + parts[1]
    total.backward()
""",
    "two_items": HEAD + """    acc = [0.0, 1.0]
    for row in x:
        acc[0] += (row * w).sum().item() * acc[1]  # culprit
    acc[0].backward()
""",
}

NEGATIVES = {
    "tensor_written": HEAD + """    totals = [0.0]
    for row in x:
        totals[0] += (row * w).sum()
    totals[0].backward()
    return w.grad
""",
    "numbers_logged": HEAD + """    log = [0.0]
    loss = (x @ w).pow(2).mean()
    log[0] += loss.item()
    loss.backward()
    return w.grad
""",
}


def _run(source: str):
    names: dict = {}
    exec(compile(source, "t.py", "exec"), names)  # noqa: S102 - the test's own program
    return names["run"]()


@pytest.mark.parametrize("name", sorted(POSITIVES))
def test_a_number_read_out_into_a_list_and_differentiated_is_found(name):
    source = POSITIVES[name]
    with pytest.raises(AttributeError, match="'float' object has no attribute 'backward'"):
        _run(source)
    culprit = next(i for i, line in enumerate(source.splitlines(), 1) if line.endswith("# culprit"))
    found = [(d.code, d.line) for d in analyze_source(source, "t.py", Config(jedi=False)).diagnostics]
    assert ("GG103", culprit) in found, found


@pytest.mark.parametrize("name", sorted(NEGATIVES))
def test_a_list_of_numbers_that_breaks_nothing_is_not_flagged(name):
    source = NEGATIVES[name]
    assert _run(source) is not None
    assert not analyze_source(source, "t.py", Config(jedi=False)).diagnostics
