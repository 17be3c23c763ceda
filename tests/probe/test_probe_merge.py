"""Merging probe results into static findings (no torch, no processes: results are built by hand),
and the probe's data model."""

from __future__ import annotations

import pytest

from gradguard.diagnostics import Diagnostic, Related, Severity, Span
from gradguard.probe import ProbeResult, resolve_device
from gradguard.probe.merge import ProbedDiagnostic, compatible, counts, diagnostics, merge
from gradguard.probe.model import Note, ProbeFinding, ProbeOptions, Site

PATH = "/project/train.py"


def _static(line: int, code: str = "GG001", severity: Severity = Severity.WARNING) -> Diagnostic:
    return Diagnostic("train.py", Span(line, 5, line, 12), code, severity, f"static {code} on {line}",
                      (Related("train.py", 3, 1, "saved here"),))


def _finding(line: int, code: str = "GG001", callers=(), origins=(), kind: str = "raised") -> ProbeFinding:
    return ProbeFinding(code, kind, Site(PATH, line, 9, line, 15), f"probe {code} on {line}",
                        torch_message="one of the variables needed for gradient computation has been modified "
                                      "by an inplace operation: [torch.FloatTensor [3]] is at version 1; expected "
                                      "version 0 instead. Hint: ...",
                        notes=(Note(Site(PATH, 3), "saved for backward here by `sigmoid`"),
                               Note(Site(PATH, 30, 5), "backward() raises here")),
                        callers=tuple(Site(PATH, c) for c in callers), origins=tuple(Site(PATH, o) for o in origins))


def _result(*findings, reached=(), status="raised") -> ProbeResult:
    return ProbeResult(PATH, status, findings=list(findings), reached=list(reached), device="cpu")


def test_confirmed_static_finding_is_raised_to_error_and_gains_torchs_message():
    [d] = merge([_static(10)], _result(_finding(10)), "train.py")
    assert isinstance(d, ProbedDiagnostic) and d.confirmed
    assert d.severity is Severity.ERROR
    assert "confirmed by the runtime probe on cpu: torch raises: one of the variables" in d.message
    assert [(r.line, r.message) for r in d.related] == [(3, "saved here"), (30, "backward() raises here")]
    data = d.to_json()
    assert data["confirmed"] is True and data["device"] == "cpu"
    assert data["torch_message"].startswith("one of the variables")
    assert data["line"] == 10 and data["code"] == "GG001"


def test_a_static_finding_at_a_helpers_call_site_is_confirmed_through_the_callers():
    [d] = merge([_static(29, "GG102")], _result(_finding(13, "GG102", callers=[29], kind="silent")), "train.py")
    assert d.confirmed and d.span.line == 29
    assert any(r.line == 13 and "the probe saw the write here" in r.message for r in d.related)
    assert "without an error (wrong gradients)" in d.message


def test_origin_lines_confirm_too():
    """GG005 points at `nn.ReLU(inplace=True)`; the probe writes at the call and names the constructor."""
    found = merge([_static(11, "GG005"), _static(15, "GG005")], _result(_finding(15, "GG005", origins=[11])),
                  "train.py")
    assert [(d.span.line, d.confirmed) for d in found] == [(11, True), (15, True)]


def test_reached_without_conflict_is_unconfirmed_and_kept():
    [d] = merge([_static(12)], _result(reached=[12], status="completed"), "train.py")
    assert isinstance(d, ProbedDiagnostic) and d.confirmed is False
    assert d.severity is Severity.WARNING
    assert "not confirmed: the runtime probe ran this line and saw no conflict" in d.message
    assert d.to_json()["confirmed"] is False


def test_not_reached_is_unchanged():
    static = _static(40)
    [d] = merge([static], _result(reached=[12], status="completed"), "train.py")
    assert d is static
    assert "confirmed" not in d.to_json()


def test_a_failed_probe_changes_nothing():
    static = [_static(10), _static(12)]
    assert merge(static, _result(reached=[10, 12], status="failed"), "train.py") == static


def test_probe_only_findings_are_added():
    found = merge([_static(10)], _result(_finding(10), _finding(20)), "train.py")
    assert [(d.span.line, d.confirmed) for d in found] == [(10, True), (20, True)]
    added = found[1]
    assert added.message.endswith("(observed by the runtime probe)")
    assert counts(found, 1) == {"confirmed": 1, "added": 1, "unconfirmed": 0}


def test_graph_breaks_only_confirm_graph_breaks():
    assert compatible("GG104", "GG003") and compatible("GG101", "GG001") and compatible("GG005", "GG001")
    assert not compatible("GG103", "GG001") and not compatible("GG001", "GG103")
    assert compatible("GG103", "GG103") and not compatible("GG900", "GG001")
    found = merge([_static(10, "GG103")], _result(_finding(10, "GG001")), "train.py")
    assert [(d.code, getattr(d, "confirmed", None)) for d in found] == [("GG103", None), ("GG001", True)]


def test_probe_diagnostics_use_the_display_path_and_columns():
    [d] = diagnostics(_result(_finding(10)), "src/train.py")
    assert d.path == "src/train.py" and (d.span.line, d.span.column, d.span.end_column) == (10, 9, 15)
    assert d.related[0].path == "src/train.py"


def test_results_and_options_survive_json():
    result = _result(_finding(10, callers=[29], origins=[11]), reached=[10])
    assert ProbeResult.from_json(result.to_json()) == result
    options = ProbeOptions(device="auto", timeout=3, memory_mb=None, entry="run", lines=(3, 4), roots=("/x",))
    assert ProbeOptions.from_json(options.to_json()) == options


def test_device_selection():
    assert resolve_device("cpu", cuda_available=True) == "cpu"
    assert resolve_device("auto", cuda_available=False) == "cpu"
    assert resolve_device("auto", cuda_available=True) == "cuda"
    assert resolve_device("cuda", cuda_available=True) == "cuda"
    with pytest.raises(ValueError, match="is_available"):
        resolve_device("cuda", cuda_available=False)
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("tpu", cuda_available=True)


def test_a_static_finding_placed_in_another_module_is_confirmed_by_the_probes_finding_there():
    """The static analysis of train.py reports a write in ops.py under ops.py (``engine._placed``); the probe, which
    ran train.py, saw the same write there: one finding, confirmed, and no train.py line is taken for ops.py's."""
    elsewhere = Diagnostic("/project/ops.py", Span(2, 5, 2, 12), "GG001", Severity.WARNING, "static GG001 in ops.py",
                           (Related("train.py", 7, 1, "`scale()` is called here"),))
    seen = ProbeFinding("GG001", "raised", Site("/project/ops.py", 2, 5, 2, 12), "probe GG001 in ops.py",
                        torch_message="one of the variables needed for gradient computation has been modified")
    [d] = merge([elsewhere], _result(seen, reached=[2]), "train.py")
    assert (d.path, d.line, d.severity) == ("/project/ops.py", 2, Severity.ERROR) and "confirmed" in d.message
    [d] = merge([elsewhere], _result(reached=[2]), "train.py")  # train.py's line 2 ran: not ops.py's
    assert d == elsewhere


def test_a_finding_placed_at_the_line_to_change_carries_the_fix_of_the_static_finding_it_confirmed(tmp_path):
    """A GG101 the probe placed at the stale value's use (line 7) confirms the static finding at the statement to
    move (line 9, whose first related line is the use) and is also reported at its own line: it carries that
    finding's fix, which repairs the same conflict; a probe-only finding that confirmed nothing carries none."""
    from gradguard.diagnostics import FileResult, Fix, TextEdit
    from gradguard.probe.merge import STEP_NOTE
    from gradguard.probed_fixes import attach

    fix = Fix("Detach the state after each step", False, (TextEdit(9, 1, 9, 5, "    "),))
    static = Diagnostic("train.py", Span(9, 5, 9, 12), "GG101", Severity.WARNING, "static GG101 on 9",
                        (Related("train.py", 7, 1, "the carried state is used here"),), fix=fix)
    placed = ProbeFinding("GG101", "raised", Site(PATH, 7, 9, 7, 15), "probe GG101 on 7",
                          notes=(Note(Site(PATH, 8, 5), STEP_NOTE),))
    merged = merge([static], _result(placed, _finding(3, "GG103", kind="starved")), "train.py")
    assert [(d.line, d.confirms) for d in merged if d.probe is not None] == [(3, None), (7, ("GG101", 9))]
    source = tmp_path / "train.py"
    source.write_text("\n".join(f"x{n} = {n}" for n in range(12)) + "\n", encoding="utf-8")
    [result] = attach([FileResult("train.py", merged)], {"train.py": source})
    assert [(d.line, d.fix) for d in result.diagnostics] == [(3, None), (7, fix), (9, fix)]


def test_the_probes_silent_write_after_a_cut_confirms_the_static_cut_at_the_same_expression():
    """`s = s.data.clone(); s[:k] = v`: the static analysis names the cut graph (GG103 at `s.data`), the probe the
    silent write's lost gradient (GG102 placed at the same `s.data`): one finding, confirmed.  A GG102 elsewhere on
    the line stays the probe's own."""
    static = Diagnostic("train.py", Span(12, 9, 12, 15), "GG103", Severity.WARNING, "static GG103 on 12")
    same = ProbeFinding("GG102", "silent", Site(PATH, 12, 9, 12, 15), "probe GG102 on 12")
    [d] = merge([static], _result(same), "train.py")
    assert d.confirmed and d.code == "GG103" and d.probe is None
    other = ProbeFinding("GG102", "silent", Site(PATH, 12, 20, 12, 26), "probe GG102 on 12")
    assert [(d.code, getattr(d, "probe", None) is not None) for d in merge([static], _result(other), "train.py")] == [
        ("GG103", False), ("GG102", True)]
