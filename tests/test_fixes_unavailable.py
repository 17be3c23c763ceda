"""Fixes never vanish silently: without libcst (simulated by ``tests/no_libcst`` first on ``PYTHONPATH``) the CLI
says so once -- and refuses ``--fix``/``--diff`` with exit 2 -- instead of reporting a run with no fixes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
SERVER = TESTS.parent / "server"
FIXTURE = TESTS / "fixtures" / "GG001" / "pos_abs_input_l1_rescale.py"  # has a safe fix
MESSAGE = "gradguard: fixes are unavailable: libcst is not installed (pip install libcst)"


def no_libcst_env() -> dict[str, str]:
    path = os.pathsep.join([str(TESTS / "no_libcst"), str(SERVER), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "GRADGUARD_NO_CACHE": "1"}


def run(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradguard", *argv], cwd=cwd, env=no_libcst_env(),
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def target(tmp_path: Path) -> Path:
    copy = tmp_path / "train.py"
    shutil.copyfile(FIXTURE, copy)
    return copy


def test_the_simulation_really_hides_libcst(tmp_path):
    probe = subprocess.run([sys.executable, "-c", "import libcst"], env=no_libcst_env(), capture_output=True, text=True)
    assert probe.returncode == 1 and "simulated" in probe.stderr


@pytest.mark.parametrize("flags", [("--fix",), ("--diff",), ("--fix", "--unsafe-fixes")])
def test_fix_and_diff_refuse_with_one_clear_line(target, flags):
    done = run("check", *flags, target.name, cwd=target.parent)
    assert done.returncode == 2
    assert done.stderr == MESSAGE + "\n" and done.stdout == ""
    assert target.read_text(encoding="utf-8") == FIXTURE.read_text(encoding="utf-8")


def test_a_plain_check_still_reports_and_says_once_that_fixes_are_missing(target):
    (target.parent / "other.py").write_text(FIXTURE.read_text(encoding="utf-8"), encoding="utf-8")
    done = run("check", ".", cwd=target.parent)
    assert done.returncode == 1
    assert done.stdout.count(" GG001 ") == 2
    assert done.stderr.count(MESSAGE) == 1, done.stderr
    json_run = run("check", "--format", "json", target.name, cwd=target.parent)
    assert '"fix": null' in json_run.stdout  # no fix claimed that this interpreter cannot build
