"""Across files, jedi settles what an imported helper returns (our own dataflow sees one file)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from gradguard.api import analyze_path
from gradguard.config import Config

LAYERS = """
import torch
import torch.nn as nn

def make_weight(n):
    return nn.Parameter(torch.randn(n))

def make_buffer(n):
    return [0.0] * n
"""

TRAIN = """
from pkg.layers import make_buffer, make_weight

def run():
    w = make_weight(3)
    w += 1
    buf = make_buffer(3)
    buf[0] += 1
"""


def _project(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "layers.py").write_text(textwrap.dedent(LAYERS))
    (pkg / "train.py").write_text(textwrap.dedent(TRAIN))
    return pkg / "train.py"


def test_parameter_from_another_module_is_a_leaf(tmp_path, capsys):
    train = _project(tmp_path)
    start = time.perf_counter()
    result = analyze_path(train, Config(jedi=True))
    elapsed = time.perf_counter() - start
    assert [(d.line, d.code) for d in result.diagnostics] == [(6, "GG002")]
    with capsys.disabled():
        print(f"\njedi-assisted analysis of one file (cold): {elapsed * 1000:.0f} ms")


def test_torch_agrees(tmp_path):
    pytest = __import__("pytest")
    pytest.importorskip("torch")
    _project(tmp_path)
    proc = subprocess.run([sys.executable, "-c", "from pkg.train import run; run()"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert "a leaf Variable that requires grad is being used in an in-place operation." in proc.stderr


def test_jedi_is_opt_in(tmp_path):
    """Without jedi, code that runs no backward does not follow calls into the project's other modules (only
    training code does, see ``inference/project.py``), so the helper's leaf is not known here."""
    assert analyze_path(_project(tmp_path)).diagnostics == []
