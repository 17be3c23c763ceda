"""The pre-commit hooks in .pre-commit-hooks.yaml, run the way a user runs them: ``pre-commit try-repo``.

One run of pre-commit (it builds its own virtualenv and installs gradguard from a git repository, so this
needs PyPI for gradguard's dependencies): both hooks, over a Python file, a notebook and a clean file.
The hook repository is a fresh git repository made from this working tree, so what is tested is the code
as it is now, committed or not.  Skipped when pre-commit is not installed, except in CI, where it fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "tests" / "notebooks" / "cross_cell.ipynb"
TRAIN = "import torch\nw = torch.randn(3, requires_grad=True)\nh = torch.sigmoid(w)\nh += 1\nh.sum().backward()\n"


def _require_pre_commit() -> None:
    if importlib.util.find_spec("pre_commit") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("pre-commit is not installed (it is in the `test` extra)")
        pytest.skip("pre-commit is not installed")


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def _hook_repo(dest: Path) -> Path:
    """A git repository holding what ``pip install`` of gradguard needs, from this working tree."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    shutil.copytree(ROOT / "server", dest / "server", ignore=ignore)
    for name in ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml"):
        shutil.copy2(ROOT / name, dest / name)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "gradguard")
    return dest


def test_hooks_file_declares_check_and_fix_for_python_and_notebooks():
    yaml = pytest.importorskip("yaml")  # comes with pre-commit
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"gradguard", "gradguard-fix"}
    for hook in hooks.values():
        assert hook["language"] == "python" and hook["entry"].startswith("gradguard check")
        assert hook["types_or"] == ["python", "jupyter"] and "types" not in hook  # `types` would AND the tags
    assert "--fix" in hooks["gradguard-fix"]["entry"] and "--fix" not in hooks["gradguard"]["entry"]


def test_pre_commit_try_repo_runs_both_hooks(tmp_path):
    _require_pre_commit()
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    hooks = _hook_repo(tmp_path / "gradguard")
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    (project / "clean.py").write_text("import torch\nx = torch.zeros(3)\ny = x + 1\n")
    shutil.copy2(NOTEBOOK, project / "explore.ipynb")
    (project / "README.md").write_text("not checked: neither python nor jupyter\n")
    _git(project, "init", "-q")
    _git(project, "add", "-A")

    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "PRE_COMMIT_COLOR": "never"}
    env.pop("VIRTUAL_ENV", None)
    env.pop("GRADGUARD_NO_CACHE", None)  # the hooks run as for a user: with the result cache
    run = subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(hooks), "--all-files", "--verbose"],
        cwd=project, env=env, capture_output=True, text=True, timeout=900,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out  # both hooks fail: findings, and files the fix hook changed
    # The check hook saw both kinds of file, and only those.
    assert "train.py:4:1: GG001" in out, out
    assert "explore.ipynb:cell 5:3:1: GG001" in out, out
    assert "README.md" not in out.replace("README.md\n", "")  # only as a file name pre-commit may list
    assert "clean.py:" not in out
    assert "gradguard (fix)" in out and "files were modified by this hook" in out, out
    # The fix hook fixed the Python file and the notebook's cell, and nothing else of the notebook.
    assert (project / "train.py").read_text() == TRAIN.replace("h += 1", "h = h + 1")
    before, after = json.loads(NOTEBOOK.read_text()), json.loads((project / "explore.ipynb").read_text())
    assert after["cells"][4]["source"][-1] == "h = h + scale"
    after["cells"][4]["source"] = before["cells"][4]["source"]
    assert after == before
    # The cache went into the project root and keeps itself out of git.
    assert (project / ".gradguard_cache" / "CACHEDIR.TAG").is_file()
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=project,
                            capture_output=True, text=True, check=True).stdout
    assert ".gradguard_cache" not in status
