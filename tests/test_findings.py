"""One finding per bug, on the line the fix changes, with the call path and the save as related locations."""

from __future__ import annotations

import textwrap
from collections import Counter

import pytest

from fixture_corpus import Fixture, all_fixtures
from gradguard import parsing
from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.engine import analyze_module


def _findings(text: str):
    lines = parsing.source_lines(text)
    return analyze_module(parsing.parse(text), "t.py", lines, use_jedi=False)


def _write(finding) -> tuple[int, int] | None:
    mutation = finding.mutation
    return None if mutation is None else (mutation.node.lineno, mutation.node.col_offset)


@pytest.mark.parametrize("fx", all_fixtures(), ids=lambda f: f.id)
def test_no_write_gets_two_findings_of_one_code(fx: Fixture):
    findings = _findings(fx.path.read_text(encoding="utf-8"))
    counts = Counter((f.code, _write(f)) for f in findings if _write(f) is not None)
    assert not [key for key, n in counts.items() if n > 1]
    for f in findings:  # an inplace=True module: where it was made in-place only (its constructor, or the later
        # `m.inplace = True`), never also where it is applied; or, when a full backward hook is what makes its write
        # refused, where the hook was registered
        module = f.mutation.module if f.mutation is not None else None
        if module is not None and module.ctor is not None:
            hooked = [t.custom_view for t in f.mutation.target.view_chain() if t.custom_view is not None]
            assert f.node is (module.made_inplace or module.ctor) or f.node in hooked


def analyse(src: str):
    return analyze_source(textwrap.dedent(src), "t.py", Config(jedi=False)).diagnostics


HELPER = """
import torch

def normalize_(t):
    t.div_(t.norm())

def train():
    w = torch.randn(3, requires_grad=True)
    y = torch.sigmoid(w)
    normalize_(y)
    y.sum().backward()

def evaluate():
    y = torch.randn(3)
    normalize_(y)
    return y
"""


def test_a_write_in_a_helper_is_reported_in_the_helper_with_the_buggy_call_path():
    (diag,) = analyse(HELPER)
    assert (diag.code, diag.line) == ("GG001", 5)
    assert "inside" not in diag.message
    notes = {r.line: r.message for r in diag.related}
    assert list(notes) == [9, 10, 11]  # the save, the call in train() (not the one in evaluate()), the backward
    assert notes[10] == "`normalize_()` is called here; the write on line 5 happens inside it"


def test_a_helper_called_twice_with_saved_tensors_is_one_finding():
    src = HELPER.replace("y = torch.randn(3)", "y = torch.randn(3, requires_grad=True).tanh()")
    src = src.replace("return y", "y.sum().backward()")
    assert [(d.code, d.line) for d in analyse(src)] == [("GG001", 5)]


def test_nested_helpers_relate_every_call_site_outermost_first():
    src = """
    import torch

    def scale_(t):
        t.mul_(2)

    def step_(t):
        scale_(t)

    def train():
        y = torch.exp(torch.randn(3, requires_grad=True))
        step_(y)
        y.sum().backward()
    """
    (diag,) = analyse(src)
    assert diag.line == 5
    assert [r.line for r in diag.related] == [11, 12, 8, 13]


AVERAGED_PIECES = """
import torch

def average(scores, heads):
    pieces = torch.split(scores, 1, dim=1)
    total = pieces[0]
    for i in range(1, heads):
        total += pieces[i]
    total /= heads
    return total

def run(heads):
    w = torch.randn(2, 3, requires_grad=True)
    average(w * 1.5, heads).sum().backward()
"""


def test_a_write_in_a_branch_and_one_after_it_are_two_findings():
    # With one head the loop's `+=` never runs and torch refuses the `/=`; with more it refuses the `+=` first:
    # each write is a bug of its own, not a related line of the other.
    assert [(d.code, d.line) for d in analyse(AVERAGED_PIECES)] == [("GG004", 8), ("GG004", 9)]


def test_a_later_write_of_the_same_piece_is_a_related_line_of_the_first():
    src = AVERAGED_PIECES.replace("    for i in range(1, heads):\n        total += pieces[i]\n",
                                  "    total += pieces[1]\n")
    (diag,) = analyse(src)
    assert (diag.code, diag.line) == ("GG004", 7)
    assert {r.line: r.message for r in diag.related}[8] == (
        "the same tensor is written in place again here, for the same reason")
