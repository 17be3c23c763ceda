"""GG104's advice, followed, must give the gradients of the fixture's ``reference()`` -- torch decides.

- `torch.no_grad()`: every GG104 positive is run again with the flagged write under `with torch.no_grad():`.
  The message recommends it exactly where that gives the reference's gradients (an update between steps); where
  the message warns against it, torch must show why (the gradients differ, or are gone).
- "collect each step in a list and `torch.stack` it": the positive is rewritten so (the stacking fix in
  gradguard/rules/gg104_element_loop_write.py, applied whether or not it is the fix the finding carries), and must
  then run clean with the reference's gradients.  Positives that give this advice where the rewrite cannot be made are listed in
  ``STACK_BY_HAND`` with the reason.
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import re
import warnings
from pathlib import Path

import pytest
from fixture_corpus import Fixture, all_fixtures
from gradients import grads_equal
from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.fixes.context import FixContext
from gradguard.text import apply_edits
from gradguard.rules.gg104_element_loop_write import stack_steps

torch = pytest.importorskip("torch")

POSITIVES = [fx for fx in all_fixtures() if fx.positive and fx.path.parent.name == "GG104"]
RECOMMENDS_NO_GRAD = "do it under `torch.no_grad()`"
WARNS_NO_GRAD = ("Under `torch.no_grad()` the write would run, but their gradient would be dropped",
                 "under `torch.no_grad()` the written entries would still get gradient")
STACK = "collect each step in a list and `torch.stack` it"

STACK_BY_HAND = {
    "GG104/pos_helper_fill_states_call": (
        "the buffer is the caller's, passed to the helper that fills it: collecting the steps changes the "
        "helper's interface (it returns the stack), which the loop rewrite does not do"
    ),
    "GG104/pos_cell_weights_by_name_state_buffer": (
        "row 0 of the buffer is the initial state no step writes (the loop writes rows 1..n): collecting the steps "
        "needs that state kept apart, and the loop rewrite takes only writes that cover every row once, in order"
    ),
    "GG104/pos_stacked_layers_weights_by_formatted_name": (
        "the first row is written before the loop and the loop writes `layers[k + 1]`: the loop rewrite takes only "
        "`name[t] = ...` over the loop variable"
    ),
}
_counter = itertools.count()


def _message(fx: Fixture) -> tuple[int, str]:
    found = [d for d in analyze_source(fx.path.read_text(encoding="utf-8"), str(fx.path), Config(jedi=False)).diagnostics
             if d.code == "GG104"]
    assert len(found) == 1, found
    return found[0].line, found[0].message


def _run(text: str, tmp_path: Path, function: str = "run"):
    path = tmp_path / f"followed_{next(_counter)}.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec.loader.exec_module(module)
        return getattr(module, function)()


def _reference(fx: Fixture, tmp_path: Path):
    return _run(fx.path.read_text(encoding="utf-8"), tmp_path, "reference")


def _under_no_grad(text: str, line: int) -> str:
    lines = text.splitlines(keepends=True)
    indent = re.match(r"[ \t]*", lines[line - 1]).group(0)
    lines[line - 1:line] = [f"{indent}with torch.no_grad():\n", "    " + lines[line - 1]]
    return "".join(lines)


def _follows_reference(text: str, fx: Fixture, tmp_path: Path) -> bool:
    try:
        got = _run(text, tmp_path)
    except RuntimeError:
        return False
    return grads_equal(got, _reference(fx, tmp_path))


@pytest.mark.parametrize("fx", POSITIVES, ids=lambda f: f.id)
def test_no_grad_is_recommended_exactly_where_torch_agrees(fx: Fixture, tmp_path: Path):
    line, message = _message(fx)
    right = _follows_reference(_under_no_grad(fx.path.read_text(encoding="utf-8"), line), fx, tmp_path)
    if RECOMMENDS_NO_GRAD in message.lower():
        assert right, f"the message recommends torch.no_grad(), but followed the gradients differ:\n{message}"
    else:
        assert not right, f"torch.no_grad() gives the reference's gradients, but the message does not say so:\n{message}"
    if any(w in message for w in WARNS_NO_GRAD):
        assert not right


@pytest.mark.parametrize("fx", POSITIVES, ids=lambda f: f.id)
def test_stack_advice_followed_gives_the_reference_gradients(fx: Fixture, tmp_path: Path):
    line, message = _message(fx)
    if STACK not in message:
        assert fx.id not in STACK_BY_HAND
        pytest.skip("the message does not give the stack advice")
    text = fx.path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    write = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign) and n.lineno == line)
    try:
        fix = stack_steps(FixContext(text, tree, str(fx.path)), write)
    except Exception as exc:  # noqa: BLE001 - CannotFix
        assert fx.id in STACK_BY_HAND, f"the stack advice cannot be followed mechanically ({exc}); list why"
        return
    assert fx.id not in STACK_BY_HAND, "the loop rewrite follows the advice now: take it off STACK_BY_HAND"
    followed = apply_edits(text, fix.edits)
    assert _follows_reference(followed, fx, tmp_path), f"followed, the stack advice gives other gradients:\n{followed}"


def test_the_advice_kinds_are_all_exercised():
    messages = [_message(fx)[1] for fx in POSITIVES]
    assert sum(STACK in m for m in messages) >= 5
    assert sum(RECOMMENDS_NO_GRAD in m.lower() for m in messages) >= 2
    assert sum(any(w in m for w in WARNS_NO_GRAD) for m in messages) >= 3
