"""A run stopped by an autograd error the findings explain: the functions it stopped in would have returned and
dropped the graphs only their locals hold.  A graph held that way is not "still alive when the run ended": the
write to a tensor it saved is no pending finding (bench case 109's optimizer step of the other network).
A graph the script's top level holds, or one kept when the run stopped at an error no finding explains, still is."""

from __future__ import annotations

_PROGRAM = """
import torch


def train():
    torch.manual_seed(0)
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    kept = torch.sigmoid(a)
    kept.mul_(2)
    y = torch.sigmoid(b)
    y.mul_(2)
    {stop}


{top}train()
"""

_KEPT_LINE, _WRITE_LINE = 10, 12


def _found(probe, script, stop: str, top: str = "") -> list[tuple]:
    path = script(_PROGRAM.replace("{stop}", stop).replace("{top}", top))
    result = probe(path, timeout=60)
    assert result.status == "raised", result.detail
    return sorted((f.code, f.kind, f.site.line) for f in result.findings)


def test_a_graph_held_by_the_stopped_functions_locals_is_no_pending_finding(probe, script):
    found = _found(probe, script, "y.sum().backward()")
    assert ("GG001", "raised", _WRITE_LINE) in found
    assert not any(kind == "pending" for _, kind, _ in found), found


def test_a_graph_kept_when_an_unexplained_error_stopped_the_run_is_still_pending(probe, script):
    found = _found(probe, script, "raise ValueError('the data loader failed')")
    assert ("GG001", "pending", _KEPT_LINE) in found, found


def test_a_graph_the_scripts_top_level_holds_is_still_pending(probe, script):
    top = "held = torch.sigmoid(torch.randn(3, requires_grad=True))\nheld.mul_(2)\n"
    found = _found(probe, script, "y.sum().backward()", top)
    assert ("GG001", "pending", 17) in found and ("GG001", "raised", _WRITE_LINE) in found, found
