"""Never a false all-clear: each run that did not check everything it was asked to says so and exits 2.

The closing line is ``gradguard.output.text.summary``; "All checks passed." is printed only when every file
asked for was analysed and nothing is left.  These cases were each seen ending in "All checks passed." or in
a traceback.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gradguard.cli import main
from gradguard.config import KNOWN_CODES, ConfigError, config_from_table, load_config

# GG001 with a safe fix: sigmoid saved its output, += writes it, backward raises.
SAVED_BUG = "import torch\nx = torch.randn(3, requires_grad=True)\ny = torch.sigmoid(x)\ny += 1\ny.sum().backward()\n"
# GG001 with only an unsafe fix: mul saved x, add_ writes it (the caller may see x), backward raises.
UNSAFE_ONLY = (
    "import torch\ndef f(x: torch.Tensor):\n    w = torch.randn(3, requires_grad=True)\n    y = x * w\n"
    "    x.add_(1)\n    return y\n"
)
LEAF_BUG = "import torch\nx = torch.zeros(3, requires_grad=True)\nx += 1\n"
CLEAN = "import torch\nx = torch.zeros(3)\ny = x + 1\n"
NOTEBOOK = Path(__file__).parent / "notebooks" / "cross_cell.ipynb"  # GG001 across cells, with a safe fix
ALL_CLEAR = "All checks passed."
SERVER = str(Path(__file__).resolve().parents[1] / "server")


@pytest.fixture
def gg(monkeypatch, capsys, tmp_path):
    """``gradguard check ARGS`` in-process in tmp_path: (exit code, stdout, stderr)."""

    def run(*argv: str):
        monkeypatch.chdir(tmp_path)
        code = main(["check", "--no-jedi", "--jobs", "1", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


def one_line_error(code: int, out: str, err: str) -> str:
    """The message of a run that stopped with a one-line error (exit 2, nothing on stdout)."""
    assert (code, out) == (2, ""), err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("gradguard: ")
    return err.strip()


def test_positive_snippets_break_autograd():
    """torch is the arbiter: the snippets the fix tests use as findings really break autograd."""
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        exec(SAVED_BUG, {})
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        exec(LEAF_BUG, {})
    scope: dict = {}
    exec(UNSAFE_ONLY, scope)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        scope["f"](torch.ones(3)).sum().backward()


# --- 2. unknown rule codes -----------------------------------------------------


@pytest.mark.parametrize("argv, option, bad", [
    (["--select", "NOTACODE"], "--select", "NOTACODE"),
    (["--select", "GG001,GG777"], "--select", "GG777"),
    (["--ignore", "GG2"], "--ignore", "GG2"),
    (["--extend-ignore", "XYZ"], "--extend-ignore", "XYZ"),
    (["--severity", "GG777=error"], "--severity", "GG777"),
    (["--severity", "GG00=error"], "--severity", "GG00"),  # a severity is set per code, not per prefix
])
def test_unknown_codes_on_the_command_line_are_usage_errors(gg, tmp_path, argv, option, bad):
    (tmp_path / "train.py").write_text(LEAF_BUG)
    message = one_line_error(*gg(*argv, "train.py"))
    assert message.startswith(f"gradguard: {option}: unknown rule code")
    assert repr(bad) in message and f"valid codes: {', '.join(KNOWN_CODES)})" in message


@pytest.mark.parametrize("argv", [["--select", "GG"], ["--select", "gg1"], ["--ignore", "GG10"],
                                  ["--extend-ignore", "GG9"], ["--severity", "GG002=info"]])
def test_known_codes_and_prefixes_are_accepted(gg, tmp_path, argv):
    (tmp_path / "train.py").write_text(LEAF_BUG)
    assert gg(*argv, "train.py")[0] in (0, 1)


@pytest.mark.parametrize("body, bad", [
    ('select = ["GG777"]\n', "'GG777'"),
    ('ignore = ["GG0", "NOPE"]\n', "'NOPE'"),
    ('[tool.gradguard.severity]\nGG777 = "error"\n', "'GG777'"),
])
def test_unknown_codes_in_pyproject_are_config_errors(gg, tmp_path, body, bad):
    (tmp_path / "pyproject.toml").write_text("[tool.gradguard]\n" + body)
    (tmp_path / "train.py").write_text(LEAF_BUG)
    message = one_line_error(*gg("train.py"))
    assert message.startswith(f"gradguard: {tmp_path / 'pyproject.toml'}: [tool.gradguard")
    assert bad in message and "valid codes: GG001" in message


def test_unknown_codes_in_config_tables_raise_config_error(tmp_path):
    """The language server reads the same tables; it shows a ConfigError as a warning and uses the defaults."""
    with pytest.raises(ConfigError, match="select: unknown rule code or prefix 'GG777'"):
        config_from_table({"select": ["GG777"]})
    with pytest.raises(ConfigError, match=r"severity\]: unknown rule code 'GG9'"):
        config_from_table({"severity": {"GG9": "error"}})
    (tmp_path / "pyproject.toml").write_text('[tool.gradguard]\nignore = ["GG777"]\n')
    with pytest.raises(ConfigError, match=re.escape(str(tmp_path / "pyproject.toml"))):
        load_config(tmp_path)
    assert config_from_table({"select": ["GG", "gg1"], "severity": {"gg001": "info"}}).select == ("GG", "GG1")


