"""Regression tests for messages that said something torch does not do (each checked against torch by
tests/probe/test_agreement.py), and for the structured explanation the agreement test reads."""

from __future__ import annotations

import ast

from fixture_corpus import FIXTURES, all_fixtures
from gradguard import parsing
from gradguard.api import analyze_path
from gradguard.engine import analyze_module
from gradguard.explanation import AT_WRITE, SILENT, explain
from gradguard.inference.events import Finding, Mutation
from gradguard.inference.values import Grad, Storage, Tensor
from gradguard.rules import RULES_BY_CODE


def static_explanations(path):
    """(line, explanation) of each finding (tests/agreement.py has the same, but imports torch)."""
    text = path.read_text(encoding="utf-8")
    findings = analyze_module(parsing.parse(text), str(path), parsing.source_lines(text), use_jedi=False)
    return [(f.node.lineno, e) for f in findings if (e := explain(f)) is not None]


def _diagnostics(code: str):
    for path in sorted((FIXTURES / code).glob("pos_*.py")):
        yield from (d for d in analyze_path(path).diagnostics if d.code == code)


def test_silent_data_write_never_says_backward_raises():
    """GG102 is silent: torch raises nothing; its notes must not say that backward raises."""
    found = list(_diagnostics("GG102"))
    assert found
    for d in found:
        assert "raises" not in " ".join(r.message for r in d.related), d
        assert any("no error" in r.message or "wrong gradients" in r.message for r in d.related), d


def test_a_saved_weight_is_called_a_weight():
    """`nn.Linear` saves its weight (the probe sees `addmm` save the Parameter), not "this input"."""
    path = FIXTURES / "GG102" / "pos_prune_data_mask_assign.py"
    (d,) = analyze_path(path).diagnostics
    assert any(r.message == "nn.Linear saves its weight for backward here" for r in d.related), d.related
    assert not any("saves this input" in r.message for r in d.related)


def test_chunk_is_named_chunk_and_torch_node_split():
    """The user called `chunk`; torch names the node `Split`.  Both are said, each for what it is."""
    path = FIXTURES / "GG004" / "pos_attention_qkv_chunk_scale.py"
    (d,) = analyze_path(path).diagnostics
    assert "returned by `chunk`" in d.message and "`Split`" in d.message, d.message
    assert "returned by `split`" not in d.message


def test_optimizer_step_does_not_repeat_the_optimizer():
    for d in _diagnostics("GG101"):
        assert "updates the parameters `" not in d.message, d.message
        if ".step()`" in d.message and "already applied" not in d.message:  # not a step applying gradients again
            assert "its parameters in place" in d.message, d.message  # updates, or updated (a kept value)


def test_unpacking_a_call_result_is_not_explained_as_one_tensor():
    """`a, b, c = self.decoder(x)`: unless the call returns one tensor, no unbind happens; say so."""
    statement = ast.parse("a, b, c = self.decoder(x)").body[0]
    whole = Tensor(Storage(), Grad.YES, leaf=False, origin=statement.value)
    piece = Tensor(whole.storage, Grad.YES, leaf=False, base=whole, multi_view="Unbind", origin=statement)
    write = ast.parse("a.mul_(2)").body[0]
    mutation = Mutation(write, piece, "`.mul_()`", grad_enabled=True, seq=1)
    (finding,) = RULES_BY_CODE["GG004"].check(mutation)
    assert "if `self.decoder(x)` returns one tensor" in str(finding.message), finding.message
    assert "returned by `unbind`" not in str(finding.message)


def test_explanations_are_structured_from_the_analysis():
    path = FIXTURES / "GG001" / "pos_imul_after_sigmoid_gate.py"
    ((line, e),) = static_explanations(path)
    assert (e.code, e.saving_op, e.save_role, e.mutation_line) == ("GG001", "torch.sigmoid", "output", line)
    assert e.save_line < line and e.tensor_line == e.save_line  # sigmoid's output is the written tensor

    ((_, e),) = static_explanations(FIXTURES / "GG102" / "pos_prune_data_mask_assign.py")
    assert e.kind == SILENT and e.backward_line is not None

    ((_, e),) = static_explanations(FIXTURES / "GG004" / "pos_split_output_column_assign.py")
    assert e.kind == AT_WRITE and e.multi_view == "Split" and e.through_view  # `piece[:, 0] = ...`

    assert explain(Finding("GG103", ast.parse("x").body[0], "a graph break")) is None


def test_a_replacement_helper_is_not_said_to_change_shapes():
    """GG103 at the call of a helper that replaces a module an optimizer holds: the analysis knows a new module with
    parameters the optimizer does not hold, not their shapes; the message must not claim "other shapes"."""
    found = [d for d in _diagnostics("GG103") if d.message.startswith("This call gives")]
    assert found
    for d in found:
        assert "shape" not in d.message, d
        assert "does not hold" in d.message, d


def test_a_silent_saved_tensor_write_never_says_backward_raises():
    """A write torch does not see (a custom Function's forward writing what it saved before it returns: torch packs
    the saves, with their versions, only then) raises nothing; its message and explanation must say so."""
    silent = [fx for fx in all_fixtures() if fx.silent and fx.positive and fx.path.parent.name in ("GG001", "GG005")]
    assert len(silent) >= 2
    for fx in silent:
        for d in analyze_path(fx.path).diagnostics:
            assert '"one of the variables needed' not in d.message, (fx.id, d.message)
        for _, e in static_explanations(fx.path):
            assert e.kind == SILENT, (fx.id, e)
