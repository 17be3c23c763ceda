"""Bad input and careless use of the command line get a one-line error or a bounded refusal, never a
traceback or a hang (issue 28, items 12, 13, 16).  The real CLI in a subprocess; each test failed before."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BUG = "import torch\nx = torch.zeros(3, requires_grad=True)\nx += 1\n"  # GG002


def gg(*argv: str, cwd: Path, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "GRADGUARD_NO_CACHE": "1", **kwargs.pop("env", {})}
    return subprocess.run([sys.executable, "-m", "gradguard", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env, **kwargs)


def one_line_error(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradguard: "), proc.stderr
    assert all(w in lines[0] for w in words), lines[0]


# ---- item 12: configuration and ignore files ---------------------------------------------------
@pytest.mark.parametrize("line", ["!", "build\\"])
def test_gitignore_lines_git_accepts_are_read_as_git_reads_them(tmp_path, line):
    """git takes a lone ``!`` and a trailing ``\\`` (they match nothing); before: a traceback from pathspec."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text(f"{line}\nskipped.py\n")
    (tmp_path / "bug.py").write_text(BUG)
    (tmp_path / "skipped.py").write_text(BUG)
    proc = gg("check", ".", cwd=tmp_path)
    assert "Traceback" not in proc.stderr and proc.returncode == 1
    assert [line.split(":")[0] for line in proc.stdout.splitlines() if "GG002" in line] == ["bug.py"]


@pytest.mark.parametrize("pattern", ["!", "build\\\\"])
def test_an_exclude_pattern_that_matches_nothing_is_a_one_line_config_error(tmp_path, pattern):
    (tmp_path / "pyproject.toml").write_text(f'[tool.gradguard]\nexclude = ["{pattern}"]\n')
    (tmp_path / "bug.py").write_text(BUG)
    one_line_error(gg("check", ".", cwd=tmp_path), "pyproject.toml", "exclude")


def test_tool_that_is_not_a_table_is_a_one_line_config_error(tmp_path):
    (tmp_path / "pyproject.toml").write_text('tool = "x"\n')
    (tmp_path / "bug.py").write_text(BUG)
    one_line_error(gg("check", ".", cwd=tmp_path), "pyproject.toml", "`tool` must be a table")


# ---- item 12: probe --timeout, Ctrl-C ---------------------------------------------------------
@pytest.mark.parametrize("argv", [["probe", "--timeout", "1e12"], ["check", "--probe", "--timeout", "1e12"]])
def test_an_absurd_probe_timeout_is_a_usage_error(tmp_path, argv):
    (tmp_path / "bug.py").write_text(BUG)
    one_line_error(gg(*argv, "bug.py", cwd=tmp_path, timeout=60), "--timeout", "86400")


def test_ctrl_c_stops_a_parallel_run_at_once_with_one_line_and_exit_130(tmp_path):
    """SIGINT to the process group, as a terminal sends it; before: tracebacks from every worker, and 16-48 s
    until the pool had analysed every file anyway."""
    body = "".join(f"def f{i}(w):\n    y = torch.exp(w)\n    y += {i}\n    return y\n" for i in range(400))
    for i in range(1500):  # some 14 s of work at 2 jobs on a quiet machine: the interrupt comes well before the end
        (tmp_path / f"m{i}.py").write_text("import torch\n" + body)
    # As a terminal's foreground job: SIGINT at its default (a shell starting pytest in the background, as a CI
    # script may, leaves it ignored, and the child would inherit that).
    proc = subprocess.Popen([sys.executable, "-m", "gradguard", "check", "--jobs", "2", "--no-cache", "."],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(2.5)  # imported, workers started, analysing
    assert proc.poll() is None, "the run ended before it could be interrupted: make the files bigger"
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert "Traceback" not in err, err
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip().splitlines()[-1] == "gradguard: interrupted; nothing more was checked or written"
    assert took < 2.0, f"{took:.1f} s to exit after Ctrl-C"


# ---- item 13: a FIFO, --jobs ------------------------------------------------------------------
def test_a_fifo_named_on_the_command_line_is_refused_not_read(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "bug.py").write_text(BUG)
    one_line_error(gg("check", "pipe.py", "bug.py", cwd=tmp_path, timeout=30), "not a regular file", "FIFO",
                   "pipe.py")


def test_a_fifo_in_a_folder_is_skipped(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "bug.py").write_text(BUG)
    proc = gg("check", ".", cwd=tmp_path, timeout=30)
    assert proc.returncode == 1 and "bug.py:3:1: GG002" in proc.stdout


def test_jobs_is_capped(tmp_path):
    """Before: --jobs 100000 started one process per file."""
    from gradguard.cli import MAX_JOBS, build_parser

    args = build_parser().parse_args(["check", "--jobs", "100000"])
    assert args.jobs == MAX_JOBS == 32
    for i in range(40):
        (tmp_path / f"m{i}.py").write_text(BUG)
    proc = gg("check", "--jobs", "100000", ".", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout.count("GG002") == 40


# ---- item 16: notebooks and newer Python ----------------------------------------------------------
def _notebook(**fields) -> str:
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": BUG}
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {"language_info": {"name": "python"}},
                       "cells": [cell], **fields})


@pytest.mark.parametrize("fields, words", [
    ({"nbformat": "4"}, "nbformat must be a number"),
    ({"metadata": []}, "metadata must be an object"),
    ({"metadata": {"language_info": "python"}}, "metadata.language_info must be an object"),
    ({"metadata": {"kernelspec": "python3"}}, "metadata.kernelspec must be an object"),
    ({"metadata": {"language_info": {"name": 3}}}, "metadata.language_info.name must be a string"),
    ({"cells": [{"cell_type": 3, "source": "x = 1\n"}]}, "cell 1: cell_type must be a string"),
    ({"cells": [{"cell_type": "code", "source": 5}]}, "cell 1: source must be a string or a list of strings"),
    ({"cells": [{"cell_type": "code", "source": ["x = 1\n", 2]}]}, "cell 1: source must be a string or a list"),
])
def test_a_notebook_field_of_the_wrong_type_is_gg901_not_an_internal_error(tmp_path, fields, words):
    """Before: "internal error while analysing" (AttributeError, TypeError), or a silent "All checks passed."."""
    (tmp_path / "nb.ipynb").write_text(_notebook(**fields))
    proc = gg("check", "nb.ipynb", cwd=tmp_path)
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1
    assert proc.stdout.startswith("nb.ipynb:1:1: GG901 not a valid notebook: ") and words in proc.stdout, proc.stdout


def test_a_non_python_notebook_named_explicitly_is_refused(tmp_path):
    """Before: "All checks passed." about a notebook that was never read."""
    (tmp_path / "r.ipynb").write_text(_notebook(metadata={"kernelspec": {"language": "R", "name": "ir"},
                                                          "language_info": {"name": "R"}}))
    one_line_error(gg("check", "r.ipynb", cwd=tmp_path), "not a Python notebook", "r.ipynb")
    (tmp_path / "bug.py").write_text(BUG)
    proc = gg("check", ".", cwd=tmp_path)  # in a folder it is skipped, as before
    assert proc.returncode == 1 and "r.ipynb" not in proc.stdout + proc.stderr


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="this Python parses 3.12 syntax")
@pytest.mark.parametrize("source, what", [
    ("type Vector = list[float]\n", "`type` alias statement"),
    ("def first[T](xs: list[T]) -> T:\n    return xs[0]\n", "generic function"),
    ("class Box[T]:\n    pass\n", "generic class"),
])
def test_python_newer_than_gradguards_is_named_as_such(tmp_path, source, what):
    """Before: a plain "invalid syntax", with no word that gradguard's Python is older than the code's."""
    (tmp_path / "new.py").write_text(source)
    proc = gg("check", "new.py", cwd=tmp_path)
    assert proc.returncode == 1 and "GG900" in proc.stdout
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert what in proc.stdout and "needs Python 3.12" in proc.stdout, proc.stdout
    assert f"gradguard runs on Python {running}, which is older than the code" in proc.stdout


def test_a_plain_syntax_error_says_nothing_about_versions(tmp_path):
    (tmp_path / "bad.py").write_text("def f(:\n    pass\n")
    proc = gg("check", "bad.py", cwd=tmp_path)
    assert proc.returncode == 1 and "GG900" in proc.stdout and "Python 3" not in proc.stdout
