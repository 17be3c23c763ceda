"""CLI options for CI and editors: file lists from stdin or a file (--files-from), and notebooks in them."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import pytest

from gradguard.cli import main

LEAF_BUG = "import torch\nx = torch.zeros(3, requires_grad=True)\nx += 1\n"
NOTEBOOK = Path(__file__).parent / "notebooks" / "cross_cell.ipynb"


@pytest.fixture
def gg(monkeypatch, capsys, tmp_path):
    def run(*argv: str, stdin: str | None = None):
        monkeypatch.chdir(tmp_path)
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
        code = main(["check", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "a.py").write_text(LEAF_BUG)
    (tmp_path / "b.py").write_text(LEAF_BUG)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.py").write_text(LEAF_BUG)
    shutil.copy(NOTEBOOK, tmp_path / "sub" / "nb.ipynb")
    return tmp_path


def paths(out: str) -> list[str]:
    return sorted({line.split(":")[0] for line in out.splitlines() if line and not line.startswith(" ")})


def test_files_from_stdin(gg, tree):
    code, out, _ = gg("--files-from", "-", stdin="a.py\n\nsub/nb.ipynb\n")
    assert code == 1 and paths(out) == ["a.py", "sub/nb.ipynb"]


def test_files_from_stdin_nul_separated_and_with_positional_paths(gg, tree):
    code, out, _ = gg("b.py", "--files-from", "-", stdin="a.py\0sub\0")  # git ls-files -z | ...
    assert paths(out) == ["a.py", "b.py", "sub/c.py", "sub/nb.ipynb"]


def test_files_from_a_file(gg, tree):
    (tree / "list.txt").write_text("sub/c.py\r\n")
    code, out, _ = gg("--files-from", "list.txt")
    assert paths(out) == ["sub/c.py"]


def test_empty_list_checks_nothing(gg, tree):
    code, out, err = gg("--files-from", "-", stdin="")
    assert code == 0 and out == "" and err.strip() == "No files were checked."


def test_files_from_errors(gg, tree):
    code, _, err = gg("--files-from", "-", "-", stdin="a.py\n")
    assert code == 2 and "both want stdin" in err
    code, _, err = gg("--files-from", "missing.txt")
    assert code == 2 and "cannot read missing.txt" in err
    code, _, err = gg("--files-from", "-", stdin="gone.py\n")
    assert code == 2 and "path does not exist: gone.py" in err


def test_statistics_exit_zero_output_file_with_notebooks(gg, tree):
    code, out, _ = gg("--statistics", "--exit-zero", "--output-file", "report.txt", ".")
    assert code == 0 and out == ""
    assert (tree / "report.txt").read_text() == "3  GG002  leaf-mutated\n1  GG001  saved-tensor-mutated\n"


def _documented_commands() -> list[str]:
    """Every `gradguard ...` command in the code blocks of README.md and docs/*.md (workflow `run:` steps and shell
    lines)."""
    import re

    root = Path(__file__).resolve().parents[1]
    readme = "\n".join(p.read_text(encoding="utf-8") for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))])
    blocks = re.findall(r"```(?:yaml|sh)\n(.*?)```", readme, re.S)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            line = line.split("#")[0].strip()
            line = line.split("| ")[-1] if "| gradguard" in line else line
            for prefix in ("- run: ", "run: "):
                line = line[len(prefix):] if line.startswith(prefix) else line
            if line.startswith("gradguard ") and "\"" not in line:
                commands.append(line)
    return commands


def test_readme_workflow_commands_parse():
    import shlex

    from gradguard.cli import build_parser

    commands = _documented_commands()
    assert any("--format github" in c for c in commands) and any("--format sarif" in c for c in commands)
    assert any("--files-from -" in c for c in commands)
    for command in commands:
        args = build_parser().parse_args(shlex.split(command)[1:])  # argparse exits on an unknown option
        assert args.command, command
