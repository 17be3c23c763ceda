"""ruff and gradguard side by side (docs/ruff.md), with the real ruff pinned in the test extras.

ruff's preview rule PLR6104 (non-augmented-assignment) has an unsafe fix that turns ``y = y + 1`` into
``y += 1``.  On a tensor an op saved for backward that rewrite is the bug gradguard exists to find: the
original runs under torch, the rewrite raises, and gradguard flags the rewrite.  Then the comment interplay
(gradguard's ``# noqa: GG001`` and ``# gradguard: ignore[...]`` against ruff's RUF100), and SARIF from both
tools as two runs of one log.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from gradguard.api import analyze_source
from gradguard.cli import main

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ruff") is None,
                                reason="ruff is installed with the test extras (pyproject.toml)")

ROOT = Path(__file__).resolve().parents[1]
SARIF_SCHEMA = ROOT / "server" / "gradguard" / "output" / "sarif-2.1.0.schema.json"
SAVED = "modified by an inplace operation"

# Runs clean under torch; each of lines 7 and 9 is an out-of-place update of a tensor an op saved for backward
# (`torch.exp` and `torch.sigmoid` save their output), which PLR6104 offers to make in place.
PROGRAM = """\
import torch


def train():
    w = torch.arange(4.0, requires_grad=True)
    y = torch.exp(w)
    y = y + 1
    gate = torch.sigmoid(w)
    gate = gate * 2
    (y * gate).sum().backward()
    return w.grad
"""
REWRITTEN = PROGRAM.replace("y = y + 1", "y += 1").replace("gate = gate * 2", "gate *= 2")


def ruff(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The real ruff, with no configuration file (``--isolated``: this repository's [tool.ruff] stays out)."""
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def findings(path: Path) -> list[tuple[int, str]]:
    return [(d.line, d.code) for d in analyze_source(path.read_text(), path.name).diagnostics]


def run_train(source: str):
    scope: dict = {}
    exec(compile(source, "<train>", "exec"), scope)
    return scope["train"]()


def test_the_installed_ruff_is_the_pinned_one(tmp_path):
    """docs/ruff.md says which ruff these results are from; the test extras pin that version."""
    pinned = re.search(r'"ruff==([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert ruff("--version", cwd=tmp_path).stdout.split() == ["ruff", pinned]
    assert f"ruff {pinned}" in (ROOT / "docs" / "ruff.md").read_text()


def test_plr6104_unsafe_fix_breaks_autograd_and_gradguard_flags_it(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "train.py"
    path.write_text(PROGRAM)
    assert findings(path) == []
    flagged = ruff("check", "--isolated", "--preview", "--select", "PLR6104", "train.py", cwd=tmp_path)
    assert flagged.returncode == 1 and flagged.stdout.count("non-augmented-assignment") == 2, flagged.stdout
    ruff("check", "--isolated", "--preview", "--select", "PLR6104", "--fix", "train.py", cwd=tmp_path)
    assert path.read_text() == PROGRAM  # an unsafe fix: --fix alone leaves it
    fixed = ruff("check", "--isolated", "--preview", "--select", "PLR6104", "--fix", "--unsafe-fixes", "train.py",
                 cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert path.read_text() == REWRITTEN
    # torch: the original runs and gives d/dw [(e^w + 1) * 2 sigmoid(w)]; ruff's rewrite raises at the backward.
    w = torch.arange(4.0)
    s = torch.sigmoid(w)
    expected = torch.exp(w) * 2 * s + (torch.exp(w) + 1) * 2 * s * (1 - s)
    assert torch.allclose(run_train(PROGRAM), expected)
    with pytest.raises(RuntimeError, match=SAVED):
        run_train(REWRITTEN)
    # gradguard flags both rewritten lines, and its fix (safe) gives the original back.
    assert findings(path) == [(7, "GG001"), (9, "GG001")]
    assert main(["check", "--no-cache", "--fix", str(path)]) == 0
    assert path.read_text() == PROGRAM


def test_ruff_can_be_kept_from_that_rewrite(tmp_path):
    """`--unfixable PLR6104` (``lint.unfixable``) or ``# noqa: PLR6104`` on the line keeps the program as written."""
    path = tmp_path / "train.py"
    path.write_text(PROGRAM)
    ruff("check", "--isolated", "--preview", "--select", "PLR6104", "--unfixable", "PLR6104", "--fix",
         "--unsafe-fixes", "train.py", cwd=tmp_path)
    assert path.read_text() == PROGRAM
    marked = PROGRAM.replace("y = y + 1", "y = y + 1  # noqa: PLR6104").replace("gate * 2", "gate * 2  # noqa: PLR6104")
    path.write_text(marked)
    quiet = ruff("check", "--isolated", "--preview", "--select", "PLR6104", "--fix", "--unsafe-fixes", "train.py",
                 cwd=tmp_path)
    assert quiet.returncode == 0 and path.read_text() == marked


# Four bugs, each silenced for gradguard in one of the ways suppressions.py reads.
SUPPRESSED = """\
import torch


def train():
    w = torch.randn(4, requires_grad=True)
    y = torch.exp(w)
    y += 1  # noqa: GG001
    z = torch.exp(w)
    z += 1  # noqa: PLR6104, GG001
    u = torch.exp(w)
    u += 1  # noqa
    v = torch.exp(w)
    v += 1  # gradguard: ignore[GG001]
    (y * z * u * v).sum().backward()
"""


def test_ruff_unused_noqa_fix_and_gradguard_suppressions(tmp_path):
    """RUF100 (unused-noqa) with --fix: it drops a bare ``# noqa`` it has no use for, and a ``# noqa:`` list whose
    ruff codes are unused, GG codes with it, unless ``lint.external = ["GG"]``; it never touches
    ``# gradguard: ignore[...]``.  A dropped comment is a gradguard finding again."""
    path = tmp_path / "train.py"
    path.write_text(SUPPRESSED)
    assert findings(path) == []
    ruff("check", "--isolated", "--select", "RUF100", "--fix", "train.py", cwd=tmp_path)
    lines = path.read_text().splitlines()
    assert lines[6].endswith("y += 1  # noqa: GG001")  # a lone GG code is kept
    assert lines[8] == "    z += 1" and lines[10] == "    u += 1"  # dropped, GG001 with PLR6104
    assert lines[12].endswith("# gradguard: ignore[GG001]")
    assert findings(path) == [(9, "GG001"), (11, "GG001")]

    path.write_text(SUPPRESSED)
    ruff("check", "--isolated", "--select", "RUF100", "--config", 'lint.external = ["GG"]', "--fix", "train.py",
         cwd=tmp_path)
    lines = path.read_text().splitlines()
    assert lines[8].endswith("z += 1  # noqa: GG001")  # only the unused ruff code goes
    assert lines[10] == "    u += 1"  # a bare noqa still goes: ruff has nothing on that line
    assert findings(path) == [(11, "GG001")]


def sarif_validator():
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_sarif_from_both_tools_is_one_log_of_two_runs(tmp_path, monkeypatch, capsys):
    (tmp_path / "train.py").write_text(REWRITTEN)
    (tmp_path / "before.py").write_text(PROGRAM)
    out = ruff("check", "--isolated", "--preview", "--select", "PLR6104", "--output-format", "sarif", "before.py",
               cwd=tmp_path)
    ruff_log = json.loads(out.stdout)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--no-cache", "--format", "sarif", "train.py"]) == 1
    gradguard_log = json.loads(capsys.readouterr().out)
    validator = sarif_validator()
    validator.validate(ruff_log)
    validator.validate(gradguard_log)
    merged = {"$schema": gradguard_log["$schema"], "version": "2.1.0",
              "runs": [*ruff_log["runs"], *gradguard_log["runs"]]}
    validator.validate(merged)
    tools = [run["tool"]["driver"]["name"] for run in merged["runs"]]
    assert tools == ["ruff", "gradguard"]
    ruff_results, gradguard_results = (run["results"] for run in merged["runs"])
    assert [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in ruff_results] == [7, 9]
    assert [(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in gradguard_results] \
        == [("GG001", 7), ("GG001", 9)]
    (tmp_path / "merged.sarif").write_text(json.dumps(merged))
