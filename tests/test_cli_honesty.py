"""Never a false all-clear: each run that did not check everything it was asked to says so and exits 2.

The closing line is ``gradguard.output.text.summary``; "All checks passed." is printed only when every file
asked for was analysed and nothing is left.  These cases were each seen ending in "All checks passed." or in
a traceback.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gradguard.cli import main
from gradguard.config import KNOWN_CODES, ConfigError, config_from_table, load_config
from gradguard.diagnostics import Diagnostic, Severity, Span
from gradguard.output.text import Fixing, summary

# GG001 with a safe fix: sigmoid saved its output, += writes it, backward raises.
SAVED_BUG = "import torch\nx = torch.randn(3, requires_grad=True)\ny = torch.sigmoid(x)\ny += 1\ny.sum().backward()\n"
# GG001 with only an unsafe fix: mul saved x, add_ writes it (the caller may see x), backward raises.
UNSAFE_ONLY = (
    "import torch\ndef f(x: torch.Tensor):\n    w = torch.randn(3, requires_grad=True)\n    y = x * w\n"
    "    x.add_(1)\n    return y * x\n"
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


# --- 1. --fix on a file it cannot write ----------------------------------------


@pytest.fixture
def unwritable():
    """Make a file unwritable in a way root respects too: ``chattr +i`` as root, read-only mode otherwise."""
    made: list[Path] = []
    root = hasattr(os, "geteuid") and os.geteuid() == 0

    def make(path: Path) -> Path:
        if root:
            if shutil.which("chattr") is None or subprocess.run(
                    ["chattr", "+i", str(path)], capture_output=True).returncode != 0:
                pytest.skip("chattr +i is not available here, and root writes read-only files")
        else:
            path.chmod(0o444)
        made.append(path)
        return path

    yield make
    for path in made:
        if root:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        else:
            path.chmod(0o644)


def test_fix_on_an_unwritable_file_reports_its_findings_and_exits_2(gg, tmp_path, unwritable):
    path = tmp_path / "train.py"
    path.write_text(SAVED_BUG)
    unwritable(path)
    code, out, err = gg("--fix", "train.py")
    assert code == 2
    assert path.read_text() == SAVED_BUG
    assert out.startswith("train.py:4:1: GG001 ")  # the file as it is, not as the fix would have made it
    assert "gradguard: train.py: cannot write the fixed file: Operation not permitted" in err \
        or "gradguard: train.py: cannot write the fixed file: Permission denied" in err
    assert ALL_CLEAR not in err and "no fixes applied" not in err
    assert last_line(err) == "1 file could not be written; 1 problem in 1 file remains."


def test_fix_writes_the_files_it_can_and_still_exits_2(gg, tmp_path, unwritable):
    (tmp_path / "ok.py").write_text(SAVED_BUG)
    (tmp_path / "locked.py").write_text(SAVED_BUG)
    unwritable(tmp_path / "locked.py")
    code, out, err = gg("--fix", ".")
    assert code == 2
    assert "y = y + 1" in (tmp_path / "ok.py").read_text()
    assert [line.split(":")[0] for line in out.splitlines() if not line.startswith(" ")] == ["locked.py"]
    assert last_line(err) == (
        "Fixed 1 problem in 1 file; 1 file could not be written; 1 problem in 1 file remains.")


def test_fix_on_an_unwritable_notebook_reports_its_findings_and_exits_2(gg, tmp_path, unwritable):
    path = Path(shutil.copy(NOTEBOOK, tmp_path / "explore.ipynb"))
    unwritable(path)
    code, out, err = gg("--fix", "explore.ipynb")
    assert code == 2
    assert path.read_bytes() == NOTEBOOK.read_bytes()
    assert re.match(r"explore\.ipynb:cell 5:\d+:\d+: GG001 ", out), out
    assert "gradguard: explore.ipynb: cannot write the fixed notebook: " in err
    assert ALL_CLEAR not in err
    assert last_line(err) == "1 file could not be written; 1 problem in 1 file remains."


def test_fix_on_a_file_replaced_by_a_folder_after_analysis(gg, tmp_path, monkeypatch):
    """A file that is gone by the time --fix reads it again (here: replaced by a folder) keeps its findings."""
    import gradguard.autofix.writer as runner

    path = tmp_path / "train.py"
    path.write_text(SAVED_BUG)
    real_fix_path = runner.fix_path

    def replaced_then_fixed(target, *args, **kwargs):
        target.unlink()
        target.mkdir()
        return real_fix_path(target, *args, **kwargs)

    monkeypatch.setattr(runner, "fix_path", replaced_then_fixed)
    code, out, err = gg("--fix", "train.py")
    assert code == 2 and out.startswith("train.py:4:1: GG001 ")
    assert "gradguard: train.py: cannot read the file to fix it: Is a directory" in err
    assert last_line(err) == "1 file could not be written; 1 problem in 1 file remains."


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


# --- 3. nothing to check -------------------------------------------------------


def test_a_folder_without_python_files_is_an_error(gg, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.md").write_text("# hi\n")
    message = one_line_error(*gg("docs"))
    assert message == "gradguard: no Python files or notebooks found under docs; nothing was checked"
    assert one_line_error(*gg())  # the default path, ".", has none either


def test_a_folder_whose_files_are_all_excluded_is_an_error(gg, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.gradguard]\nexclude = ["*.py"]\n')
    (tmp_path / "train.py").write_text(LEAF_BUG)
    (tmp_path / "eval.py").write_text(LEAF_BUG)
    message = one_line_error(*gg("."))
    assert message == ("gradguard: no Python files or notebooks found under .; nothing was checked "
                       "(the `exclude` setting of [tool.gradguard] excludes all 2)")
    assert gg("train.py")[0] == 1  # named explicitly it is analysed, as before


def test_an_empty_file_list_checks_nothing_and_says_so(gg, tmp_path):
    (tmp_path / "list.txt").write_text("")
    code, out, err = gg("--files-from", "list.txt")
    assert (code, out) == (0, "") and err.strip() == "No files were checked."


# --- 4. --diff and --fix summaries ---------------------------------------------


def test_diff_summary_tells_what_would_remain(gg, tmp_path):
    (tmp_path / "a.py").write_text(SAVED_BUG)
    (tmp_path / "b.py").write_text(UNSAFE_ONLY)
    code, out, err = gg("--diff", ".")
    assert code == 1 and out.startswith("--- a/a.py\n")
    assert "--- a/b.py" not in out
    assert ALL_CLEAR not in err
    assert last_line(err) == (
        "Would fix 1 problem in 1 file; 1 problem in 1 file would remain (1 fixable with --unsafe-fixes).")
    code, out, err = gg("--diff", "--unsafe-fixes", ".")
    assert code == 1 and "--- a/b.py" in out
    assert last_line(err) == "Would fix 2 problems in 2 files; no problems would remain."
    assert (tmp_path / "a.py").read_text() == SAVED_BUG


def test_fix_summary_has_the_same_shape(gg, tmp_path):
    (tmp_path / "a.py").write_text(SAVED_BUG)
    (tmp_path / "b.py").write_text(UNSAFE_ONLY)
    code, out, err = gg("--fix", ".")
    assert code == 1 and out.startswith("b.py:5:5: GG001 ")
    assert last_line(err) == "Fixed 1 problem in 1 file; 1 problem in 1 file remains (1 fixable with --unsafe-fixes)."
    code, _, err = gg("--fix", "--unsafe-fixes", ".")
    assert code == 0 and last_line(err) == "Fixed 1 problem in 1 file; no problems remain."
    code, _, err = gg("--fix", ".")
    assert code == 0 and last_line(err) == ALL_CLEAR  # everything was checked, and nothing is left


def test_diff_with_nothing_to_fix(gg, tmp_path):
    (tmp_path / "b.py").write_text(UNSAFE_ONLY)
    code, out, err = gg("--diff", "b.py")
    assert (code, out) == (1, "")
    assert last_line(err) == "1 problem in 1 file would remain (1 fixable with --unsafe-fixes)."


# --- 5. one-line errors instead of tracebacks ----------------------------------


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*extra.values(), SERVER) if p)
    env["GRADGUARD_NO_CACHE"] = "1"
    return env


def test_check_probe_without_torch_is_a_one_line_error(tmp_path):
    fake = tmp_path / "no_torch"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("raise ImportError('torch is not installed here')\n")
    (tmp_path / "train.py").write_text(LEAF_BUG)
    proc = subprocess.run([sys.executable, "-m", "gradguard", "check", "--probe", "train.py"], cwd=tmp_path,
                          env=_env(fake=str(fake)), capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().startswith(
        "gradguard: cannot run the probe: cannot import torch: torch is not installed here (the probe runs your "
        "code with "), proc.stderr
    assert "-m pip install torch==2.13.0" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_symlink_loop_named_on_the_command_line(gg, tmp_path):
    os.symlink("loop", tmp_path / "loop")
    assert one_line_error(*gg("loop")) == "gradguard: path is a symlink loop: loop"
    os.symlink("b.py", tmp_path / "a.py")
    os.symlink("a.py", tmp_path / "b.py")
    assert one_line_error(*gg("a.py")) == "gradguard: path is a symlink loop: a.py"


def test_a_dangling_symlink_named_on_the_command_line(gg, tmp_path):
    os.symlink("gone.py", tmp_path / "train.py")
    assert one_line_error(*gg("train.py")) == "gradguard: path is a broken symlink: train.py -> gone.py"


def test_symlink_loops_inside_a_folder_are_skipped(gg, tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(LEAF_BUG)
    os.symlink("loop.py", tmp_path / "src" / "loop.py")
    os.symlink("src", tmp_path / "src" / "src")  # a folder loop: symlinked folders are not followed
    code, out, err = gg("src")
    assert code == 1 and "Traceback" not in err
    assert [line.split(":")[0] for line in out.splitlines() if not line.startswith(" ")] == ["src/train.py"]


def test_check_probe_that_does_not_finish_a_file_is_not_a_pass(tmp_path):
    """As ``gradguard probe``: a run cut short that found nothing exits 2, and the closing line says why."""
    pytest.importorskip("torch")
    (tmp_path / "slow.py").write_text("import time\nimport torch\nx = torch.ones(2)\ntime.sleep(60)\n")
    proc = subprocess.run([sys.executable, "-m", "gradguard", "check", "--probe", "--timeout", "2", "slow.py"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ("probe: slow.py: timed out after 2 s; findings up to that point are reported "
                           "(python slow.py)\n"), proc.stdout  # the report states the file's outcome
    assert "probe: slow.py: timeout: " in proc.stderr and ALL_CLEAR not in proc.stderr
    assert last_line(proc.stderr) == ("No problems found; the probe did not run 1 file to its end "
                                      "(see each file's outcome).")


# --- 6. an internal error in one file ------------------------------------------


@pytest.fixture
def boom(monkeypatch):
    """The analysis of any file named boom.py crashes."""
    import gradguard.api

    real = gradguard.api.analyze_bytes

    def flaky(data, path, config=None):
        if path.rsplit("/", 1)[-1] == "boom.py":
            raise RecursionError("maximum recursion depth exceeded")
        return real(data, path, config)

    monkeypatch.setattr(gradguard.api, "analyze_bytes", flaky)


def test_a_crash_with_nothing_else_found_is_not_an_all_clear(gg, tmp_path, boom):
    (tmp_path / "boom.py").write_text(CLEAN)
    (tmp_path / "ok.py").write_text(CLEAN)
    code, out, err = gg(".")
    assert (code, out) == (2, "")
    assert "gradguard: internal error while analysing boom.py: RecursionError" in err
    assert ALL_CLEAR not in err and last_line(err) == "1 file could not be analysed (internal error)."


def test_a_crash_beside_findings_is_counted_too(gg, tmp_path, boom):
    (tmp_path / "boom.py").write_text(CLEAN)
    (tmp_path / "train.py").write_text(LEAF_BUG)
    code, out, err = gg("--format", "json", ".")
    assert code == 2 and '"code": "GG002"' in out
    assert last_line(err) == "Found 1 problem in 1 file (1 fixable with --fix); 1 file could not be analysed (internal error)."


def test_a_crash_on_stdin_is_reported_like_a_file(gg, tmp_path, monkeypatch):
    import gradguard.api

    def crash(data, path, config=None):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(gradguard.api, "analyze_bytes", crash)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(CLEAN.encode())))
    code, out, err = gg("-", "--stdin-filename", "x.py")
    assert (code, out) == (2, "") and "Traceback" not in err
    assert "gradguard: internal error while analysing x.py: RecursionError" in err
    assert last_line(err) == "1 file could not be analysed (internal error)."


# --- the closing line ----------------------------------------------------------


def _finding(path: str) -> Diagnostic:
    return Diagnostic(path, Span(1, 1, 1, 2), "GG001", Severity.ERROR, "m")


@pytest.mark.parametrize("kwargs, expected", [
    ({}, ALL_CLEAR),
    ({"checked": 0}, "No files were checked."),
    ({"crashed": 2}, "2 files could not be analysed (internal error)."),
    ({"fixing": Fixing(True, 0, 0)}, ALL_CLEAR),
    ({"fixing": Fixing(True, 3, 2)}, "Fixed 3 problems in 2 files; no problems remain."),
    ({"fixing": Fixing(True, 0, 0, write_failures=1)}, "1 file could not be written."),
    ({"unprobed": 1}, "No problems found; the probe did not run 1 file to its end (see each file's outcome)."),
])
def test_summary_without_findings(kwargs, expected):
    assert summary([], **kwargs) == expected


@pytest.mark.parametrize("kwargs, expected", [
    ({}, "Found 2 problems in 1 file."),
    ({"checked": 0}, "Found 2 problems in 1 file."),
    ({"fixing": Fixing(False, 1, 1, unsafe_left=2)},
     "Would fix 1 problem in 1 file; 2 problems in 1 file would remain (2 fixable with --unsafe-fixes)."),
    ({"fixing": Fixing(True, 0, 0), "crashed": 1},
     "2 problems in 1 file remain; 1 file could not be analysed (internal error)."),
    ({"unprobed": 2}, "Found 2 problems in 1 file; the probe did not run 2 files to their end "
                      "(see each file's outcome)."),
])
def test_summary_with_findings(kwargs, expected):
    assert summary([_finding("a.py"), _finding("a.py")], **kwargs) == expected


def test_check_counts_what_fix_and_unsafe_fixes_would_repair(tmp_path, capsys):
    """A plain `check` says how many findings `--fix` repairs and how many more `--unsafe-fixes` would (as ruff
    does), and the counts are what `--fix` then does."""
    safe = "import torch\n\n\ndef run():\n    x = torch.randn(3, requires_grad=True)\n    y = x.exp()\n    y += 1\n    y.sum().backward()\n"
    unsafe = "import torch\n\n\ndef run():\n    x = torch.ones(3, requires_grad=True)\n    x += 1\n    return x\n"
    (tmp_path / "a.py").write_text(safe)
    (tmp_path / "b.py").write_text(unsafe)
    assert main(["check", "--no-cache", str(tmp_path)]) == 1
    assert last_line(capsys.readouterr().err) == (
        "Found 2 problems in 2 files (1 fixable with --fix, 1 more with --fix --unsafe-fixes).")
    assert main(["check", "--no-cache", "--fix", str(tmp_path)]) == 1
    assert last_line(capsys.readouterr().err) == (
        "Fixed 1 problem in 1 file; 1 problem in 1 file remains (1 fixable with --unsafe-fixes).")
