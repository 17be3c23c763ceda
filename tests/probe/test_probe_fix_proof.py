"""torch proves the fixes of the findings only the probe makes (issue 31 item 3): every positive of
tests/fixtures/probe_only is probed (``--entry run``) and merged with its static findings as ``check --probe``
does; each fix a probe-only finding carries (``gradguard.probed_fixes``) is applied to a copy, and the copy's
``run()`` must run clean and give the gradients of ``reference()`` (with the fixes of the file's other probe-only
findings, as ``bench/probe_fixes.py`` proves them).

A fixture whose probe-only findings get no fix is listed in ``NO_FIX`` with the reason (a listed one offered a fix
fails).  One whose finding the static analysis reports itself (the probe confirms it; its fix is the static one)
is skipped, saying so.  ``check --probe --fix`` applies the fixes through the one planner.
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from fixture_corpus import Fixture
from gradients import grads_equal
from probe_corpus import DEVICE, PROBE_ONLY
from programs import load_program

torch = pytest.importorskip("torch")

from gradguard.api import analyze_source
from gradguard.cli import main
from gradguard.config import Config
from gradguard.text import apply_edits
from gradguard.probe import ProbeOptions
from gradguard.probe.merge import ProbedDiagnostic, merge
from gradguard.probed_fixes import attach

POSITIVES = [fx for fx in PROBE_ONLY if fx.positive]

_STEP = ("the forward to compute after both steps stands under `if not fixed:`, and GG101's builder moves plain "
         "statements only (the plain shape is proven: test_probe_fix_facts' forward_before_two_steps)")
_SWAP = ("the helper replaces the parameters after the optimizer took the old ones, and the optimizer is made by the "
         "function's caller: giving it the new parameters means choosing its param groups (and dropping the old ones' "
         "state), which no fix decides for the user")
_PARAMETER = ("`nn.Parameter(t)` of a tensor with a history made once in `__init__`: kept as the tensor itself, its "
              "history would be backwarded again at every step (the forward must compute it)")
_MIXED = ("a value from before the optimizer step is combined with one from after it inside a helper; the static "
          "finding at the helper's call gets no fix either: the call stands under `if late:` after the step, and "
          "GG101's builder computes only a plain statement of the step's block before the update")
_SAVED_APART = ("the module and its optimizer are serialised apart by a helper each is handed to: saving them together "
                "restructures both the save and the load (the static fixtures of this bug get no fix either)")
_STORED = ("the stored values must be computed again with grad mode on where the loss is built: which call recomputes "
           "them (a forward whose output the update already has, or one to add) is the program's design, not an edit "
           "of the reading line")
NO_FIX: dict[str, str] = {
    "GG101/pos_margin_helper_scores_before_and_after_step": _MIXED,
    "GG103/pos_parameter_of_normalized_raw_weight": _PARAMETER,
    "GG103/pos_stored_gate_values_in_update_loss": _STORED,
    "GG101/pos_forward_before_two_critic_steps": _STEP,
    "GG103/pos_optimizer_object_saved_apart_from_model": _SAVED_APART,
    "GG101/pos_value_step_before_policy_term_from_fresh_forward": (
        "a fresh forward through the stepped network runs between the step and the backward: moving the step after "
        "the backward would run it with the old weights, which the probe's facts cannot say is meant"),
    "GG103/pos_trainer_calls_layer_swap_without_its_optimizer": _SWAP,
}


def _probe_only(fx: Fixture, worker) -> list[ProbedDiagnostic]:
    """The probe-only findings of ``fx`` as ``check --probe`` reports them, with their fixes."""
    display = str(fx.path)
    static = analyze_source(fx.path.read_text(encoding="utf-8"), display, Config(jedi=False))
    result = worker.probe(fx.path, ProbeOptions(entry="run", timeout=60, device=DEVICE))
    merged = replace(static, diagnostics=merge(static.diagnostics, result, display))
    [fixed] = attach([merged], {display: fx.path})
    return [d for d in fixed.diagnostics if isinstance(d, ProbedDiagnostic) and d.probe is not None]


@pytest.mark.parametrize("fx", POSITIVES, ids=lambda f: f.id)
def test_probe_only_fixes_run_clean_with_reference_gradients(fx: Fixture, worker, tmp_path: Path):
    found = _probe_only(fx, worker)
    fixes = [d.fix for d in found if d.fix is not None]
    if not found:  # the static analysis reports it (the probe confirms): the fix is the static one
        pytest.skip("no probe-only finding: the static analysis reports it now" + (" (drop it from NO_FIX)"
                                                                                   if fx.id in NO_FIX else ""))
    if fx.id in NO_FIX:
        assert not fixes, f"listed in NO_FIX, but a fix is offered: {[f.title for f in fixes]}"
        return
    assert fixes, "no fix offered (list it in NO_FIX with the reason)"
    original = fx.path.read_text(encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = load_program(fx.path).reference()
    for n, fix in enumerate(fixes):
        # With the fixes of the file's other probe-only findings that do not overlap it: a program with two bugs
        # runs clean only with both fixed.
        edits = list(fix.edits)
        for other in fixes:
            if other is not fix and _applies(original, edits + list(other.edits)):
                edits += list(other.edits)
        copy = tmp_path / f"fixed_{n}" / fx.path.name
        copy.parent.mkdir()
        copy.write_text(apply_edits(original, edits), encoding="utf-8")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = load_program(copy).run()  # must run clean: torch raising here fails the test
        assert grads_equal(got, expected), f"{fix.title}: gradients differ from reference():\n{copy.read_text()}"


def _applies(text: str, edits: list) -> bool:
    try:
        apply_edits(text, edits)
    except ValueError:
        return False
    return True


def test_the_lists_name_real_positives():
    ids = {fx.id for fx in POSITIVES}
    assert not set(NO_FIX) - ids, set(NO_FIX) - ids


def test_check_probe_fix_applies_a_probe_only_fix(tmp_path: Path, capsys):
    """The CLI path: ``check --probe`` reports the fix in JSON, and ``--fix`` applies it through the planner."""
    fx = next(f for f in POSITIVES if f.id == "GG103/pos_data_of_encoder_output_grad_report")
    copy = tmp_path / fx.path.name
    shutil.copyfile(fx.path, copy)
    argv = ["check", "--probe", "--entry", "run", "--no-cache", "--quiet", "--exit-zero", "--jobs", "1"]
    main([*argv, "--format", "json", str(copy)])
    report = json.loads(capsys.readouterr().out)
    [added] = [d for d in report["diagnostics"] if d["message"].endswith("(observed by the runtime probe)")]
    assert added["fix"] is not None and added["fix"]["safe"], added
    main([*argv, "--fix", str(copy)])
    assert copy.read_text(encoding="utf-8") != fx.path.read_text(encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert grads_equal(load_program(copy).run(), load_program(fx.path).reference())
