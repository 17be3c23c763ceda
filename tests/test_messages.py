"""Messages are templates with line references: built from nodes, moved by shifting, named at the output."""

from __future__ import annotations

import ast
import json

import pytest

from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.messages import Line, Message
from gradguard.api import analyze_notebook
from test_notebooks import notebook


def test_a_node_becomes_a_reference_to_its_line_and_text_stays_text():
    node = ast.parse("\n\ny = x * 2").body[0]
    message = Message.format("`{op}` on {saved} saved {label}", op="mul", saved=node, label="`d[{k}]`")
    assert message.parts == ("`mul` on ", Line(3), " saved `d[{k}]`")
    assert str(message) == "`mul` on line 3 saved `d[{k}]`"
    assert list(message.lines()) == [3]


def test_a_message_is_spliced_into_another_with_its_references():
    inner = Message.format("the backward on {sink} raises", sink=Line(9))
    outer = Message.format("{how} modifies it; {raises}.", how="`+=`", raises=inner)
    assert outer.parts == ("`+=` modifies it; the backward on ", Line(9), " raises.")


def test_moving_shifts_references_and_rendering_names_them():
    message = Message.format("saved on {a}, raises on {b}", a=Line(4), b=Line(10))
    moved = message.moved(lambda line: line + 2)
    assert str(moved) == "saved on line 6, raises on line 12"
    assert moved.render(lambda line: f"line {line - 5} of cell 2") == "saved on line 1 of cell 2, raises on line 7 of cell 2"
    assert str(Message.text("no line in line 4")) == "no line in line 4"  # plain text is never read for lines


def test_slots_take_no_format_spec():
    with pytest.raises(ValueError):
        Message.format("{n:>3}", n=1)


def test_a_call_path_note_names_notebook_cells():
    nb = notebook(
        ("code", "import torch\ndef scale_(t):\n    t.mul_(2)"),
        ("code", "w = torch.randn(3, requires_grad=True)\ny = torch.exp(w)\nscale_(y)\ny.sum().backward()"),
    )
    (d,) = analyze_notebook(json.dumps(nb), "nb.ipynb").diagnostics
    assert (d.code, d.cell, d.span.line) == ("GG001", 1, 3)
    assert "`torch.exp` on line 2 of cell 2" in d.message and "the backward on line 4 of cell 2" in d.message
    call = next(r for r in d.related if r.message.startswith("`scale_()`"))
    assert (call.cell, call.line) == (2, 3)
    assert call.message == "`scale_()` is called here; the write on line 3 of cell 1 happens inside it"


def test_an_optimizer_step_is_named_as_the_code_spells_it():
    source = """import torch


class Trainer:
    def __init__(self):
        self.w = torch.randn(4, 2, requires_grad=True)
        self.opt = torch.optim.SGD([self.w], lr=0.5)

    def step(self, x):
        self.opt.zero_grad()
        (x @ self.w).sum().backward()
        self.opt.step()
        with torch.no_grad():
            self.w = self.w.clamp(-1.0, 1.0)


trainer = Trainer()
for _ in range(3):
    trainer.step(torch.randn(3, 4))
"""
    (d,) = analyze_source(source, "trainer.py", Config(jedi=False)).diagnostics
    assert d.code == "GG109"
    assert "`self.opt.step()` on line 12" in d.message and "optimizer.step()" not in d.message
