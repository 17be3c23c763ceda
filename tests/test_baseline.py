"""Baselines (``--write-baseline``, ``--baseline``, ``baseline = "FILE"``): only new findings are reported, the
hidden ones are always counted, and a bad baseline file is a one-line error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gradguard.cli import main
from gradguard.config import ConfigError, config_from_table

# ``sigmoid`` saves its output for backward and ``mul_`` overwrites it: backward raises (checked below).
STEP = '''

def {name}(x):
    y = torch.sigmoid(x)
    y.mul_(2)
    return y
'''
TRAIN = ("import torch\n" + STEP.format(name="step")
         + "\n\nx = torch.randn(3, requires_grad=True)\nstep(x).sum().backward()\n")
# A second finding with the same code on an identical line: a new occurrence, so not in the baseline.
TWICE = TRAIN + STEP.format(name="step2") + "\n\nstep2(x).sum().backward()\n"


def breaks_autograd(source: str) -> bool:
    run = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=120)
    return run.returncode != 0 and "modified by an inplace operation" in run.stderr


def test_the_programs_really_break_autograd():
    assert breaks_autograd(TRAIN)
    assert breaks_autograd(TWICE.replace("\nstep(x).sum().backward()\n", "\n"))  # step2 on its own


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(TRAIN)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check(capsys, *argv: str) -> tuple[int, list[dict], str]:
    """Exit code, JSON diagnostics, stderr."""
    code = main(["check", "--format", "json", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out)["diagnostics"] if out.strip() else []), err


def write_baseline(capsys, *argv: str) -> tuple[int, str]:
    code = main(["check", "--write-baseline", "gg-baseline.json", *argv])
    return code, capsys.readouterr().err


def test_write_then_check_hides_and_counts(project, capsys):
    code, found, _ = check(capsys, "src")
    assert code == 1 and [d["code"] for d in found] == ["GG001"]
    code, err = write_baseline(capsys, "src")
    assert code == 0 and "Wrote 1 finding in 1 file to gg-baseline.json" in err
    data = json.loads((project / "gg-baseline.json").read_text())
    (entry,) = data["files"]["src/train.py"]
    assert data["version"] == 1 and entry["code"] == "GG001" and entry["line"] == 6 and entry["fingerprint"]

    code, found, err = check(capsys, "src", "--baseline", "gg-baseline.json")
    assert code == 0 and found == []
    assert "1 finding hidden by the baseline" in err and "All checks passed" not in err


def test_the_file_is_stable(project, capsys):
    write_baseline(capsys, "src")
    first = (project / "gg-baseline.json").read_text()
    write_baseline(capsys, "src")
    assert (project / "gg-baseline.json").read_text() == first
    assert first.count("\n") == 8  # one finding a line: diffs show which findings came and went


def test_lines_inserted_above_keep_the_finding_hidden(project, capsys):
    write_baseline(capsys, "src")
    (project / "src" / "train.py").write_text('"""Training."""\n# more\n\n' + TRAIN)
    code, found, err = check(capsys, "src", "--baseline", "gg-baseline.json")
    assert (code, found) == (0, []) and "1 finding hidden" in err


def test_a_new_identical_finding_is_reported(project, capsys):
    write_baseline(capsys, "src")
    (project / "src" / "train.py").write_text(TWICE)
    code, found, err = check(capsys, "src", "--baseline", "gg-baseline.json")
    assert code == 1 and [(d["code"], d["line"]) for d in found] == [("GG001", 16)]
    assert "Found 1 problem in 1 file (1 fixable with --fix); 1 finding hidden by the baseline." in err


def test_pyproject_setting_is_relative_to_the_pyproject(project, capsys, monkeypatch):
    write_baseline(capsys, "src")
    (project / "pyproject.toml").write_text(
        "[project]\nname = 'demo'\n[tool.gradguard]\nbaseline = 'gg-baseline.json'\n")
    monkeypatch.chdir(project / "src")  # paths in the baseline stay relative to the project root
    code, found, err = check(capsys, "train.py")
    assert (code, found) == (0, []) and "1 finding hidden by the baseline" in err


def test_the_result_cache_keeps_fingerprints(project, capsys, monkeypatch):
    monkeypatch.delenv("GRADGUARD_NO_CACHE")
    write_baseline(capsys, "src")  # fills the cache
    for _ in range(2):  # a hit, then a hit again
        code, found, err = check(capsys, "src", "--baseline", "gg-baseline.json")
        assert (code, found) == (0, []) and "1 finding hidden" in err


def test_unmatched_entries_are_a_note_not_a_failure(project, capsys):
    write_baseline(capsys, "src")
    (project / "src" / "train.py").write_text("import torch\n")
    code, found, err = check(capsys, "src", "--baseline", "gg-baseline.json")
    assert (code, found) == (0, [])
    assert "1 entry matches no finding any more in the baseline gg-baseline.json" in err
    code = main(["check", "src", "--baseline", "gg-baseline.json", "--statistics"])
    assert code == 0 and "src/train.py: GG001 (recorded at line 6)" in capsys.readouterr().err


def test_a_file_that_cannot_be_analysed_is_never_hidden(project, capsys):
    write_baseline(capsys, "src")
    (project / "src" / "train.py").write_text(TRAIN + "def broken(:\n")
    code, found, err = check(capsys, "src", "--baseline", "gg-baseline.json")
    assert code == 1 and [d["code"] for d in found] == ["GG900"]
    assert "hidden" not in err and "matches no finding" not in err  # its entries were not checked, not fixed
    code, err = write_baseline(capsys, "src")
    assert code == 1 and "Wrote 0 findings" in err and "Found 1 problem" in err


@pytest.mark.parametrize("content, message", [
    (None, "baseline file not found: gg-baseline.json"),
    ("{not json", "baseline gg-baseline.json is not JSON"),
    ('{"version": 1, "files": {"a.py": [{"code": "GG001"}]}}', "the entries of 'a.py' must be a list"),
    ("[1, 2]", "gg-baseline.json is not a gradguard baseline"),
])
def test_bad_baseline_file_is_one_line_exit_2(project, capsys, content, message):
    if content is not None:
        (project / "gg-baseline.json").write_text(content)
    code, found, err = check(capsys, "src", "--baseline", "gg-baseline.json")
    assert code == 2 and found == [] and err.count("\n") == 1 and message in err and "Traceback" not in err
    (project / "pyproject.toml").write_text("[tool.gradguard]\nbaseline = 'gg-baseline.json'\n")
    code, found, err = check(capsys, "src")
    assert code == 2 and err.count("\n") == 1 and "[tool.gradguard] baseline:" in err


def test_write_baseline_refuses_what_it_cannot_record(project, capsys):
    code = main(["check", "--write-baseline", "b.json", "--fix", "src"])
    assert code == 2 and "does not combine with --fix" in capsys.readouterr().err
    assert not (project / "b.json").exists()


def test_baseline_only_from_a_file_setting():
    with pytest.raises(ConfigError, match="read from pyproject.toml only"):
        config_from_table({"baseline": "gg-baseline.json"})  # the editor's settings have no folder to read it from
    with pytest.raises(ConfigError, match="must be a file name"):
        config_from_table({"baseline": 3}, root=Path("."))
