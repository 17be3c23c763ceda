"""Forms of autograd's extension points the static analysis must leave alone although the probe, which sees
every in-place write to a gradient a custom Function's backward is given, reports them (so they cannot be
fixture negatives, which the probe must pass silently).  Each program is proven by torch here: ``run()``'s
gradients equal ``reference()``'s."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from gradguard import parsing
from gradguard.engine import analyze_module

FOLDER = Path(__file__).parent / "extension_points"
PROGRAMS = sorted(FOLDER.glob("*.py"))


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_no_finding(path: Path):
    text = path.read_text(encoding="utf-8")
    findings = analyze_module(parsing.parse(text), str(path), parsing.source_lines(text), use_jedi=False)
    assert [(f.code, f.node.lineno) for f in findings] == []


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_torch_runs_it_with_the_reference_gradients(path: Path):
    spec = importlib.util.spec_from_file_location(f"extension_points_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for got, want in zip(module.run(), module.reference(), strict=True):
        assert torch.allclose(got, want)
