"""The ``gradguard`` command line: exit codes, options, discovery, parallel runs, subcommands."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import gradguard
from gradguard.cli import main

LEAF_BUG = "import torch\nx = torch.zeros(3, requires_grad=True)\nx += 1\n"
CLEAN = "import torch\nx = torch.zeros(3)\ny = x + 1\n"
LINE = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<code>GG\d{3}) (?P<message>.+)$")


@dataclass
class Run:
    code: int
    out: str
    err: str

    def findings(self) -> list[tuple[str, int, str]]:
        """(path, line, code) of every finding line in text output."""
        return [(m["path"], int(m["line"]), m["code"]) for m in map(LINE.match, self.out.splitlines()) if m]


@pytest.fixture
def gg(monkeypatch, capsys, tmp_path):
    """Run ``gradguard.cli.main`` in-process in ``cwd`` (default tmp_path)."""

    def run(*argv: str, cwd: Path = tmp_path, stdin: bytes | None = None) -> Run:
        monkeypatch.chdir(cwd)
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        code = main(list(argv))
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run


def write(root: Path, rel: str, text: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


# --- check: exit codes and text output ---------------------------------------


def test_finding_exits_1_with_ruff_style_line(gg, tmp_path):
    write(tmp_path, "train.py", LEAF_BUG)
    run = gg("check")
    assert run.code == 1
    assert run.findings() == [("train.py", 3, "GG002")]
    assert run.err.strip().splitlines()[-1] == "Found 1 problem in 1 file (1 fixable with --fix)."


def test_clean_tree_exits_0(gg, tmp_path):
    write(tmp_path, "ok.py", CLEAN)
    run = gg("check", ".")
    assert (run.code, run.out) == (0, "")
    assert run.err.strip() == "All checks passed."


def test_exit_zero_and_quiet(gg, tmp_path):
    write(tmp_path, "train.py", LEAF_BUG)
    run = gg("check", "--exit-zero", "--quiet")
    assert run.code == 0
    assert run.findings() == [("train.py", 3, "GG002")]
    assert run.err == ""


def test_fail_level(gg, tmp_path):
    write(tmp_path, "train.py", LEAF_BUG)
    assert gg("check", "--severity", "GG002=warning", "--fail-level", "error").code == 0
    assert gg("check", "--severity", "GG002=warning").code == 1
    assert gg("check", "--severity", "GG002=info").code == 0  # default fail level: warning
    assert gg("check", "--severity", "GG002=info", "--fail-level", "info").code == 1


def test_output_file(gg, tmp_path):
    write(tmp_path, "train.py", LEAF_BUG)
    run = gg("check", "--output-file", "report.txt")
    assert run.code == 1 and run.out == ""
    assert (tmp_path / "report.txt").read_text().startswith("train.py:3:1: GG002 ")


def test_output_file_unwritable_is_usage_error(gg, tmp_path):
    write(tmp_path, "train.py", LEAF_BUG)
    run = gg("check", "--output-file", str(tmp_path / "no" / "such" / "dir" / "r.txt"))
    assert run.code == 2 and "cannot write" in run.err


def test_statistics(gg, tmp_path):
    write(tmp_path, "a.py", LEAF_BUG)
    write(tmp_path, "b.py", LEAF_BUG)
    write(tmp_path, "c.py", "import torch\ndef f(:\n    x += 1\n")
    run = gg("check", "--statistics")
    assert run.code == 1
    rows = [line.split() for line in run.out.splitlines()]
    assert [r[:2] for r in rows] == [["2", "GG002"], ["1", "GG900"]]
    assert rows[1][2] == "syntax-error"
    assert gg("check", "--statistics", "--format", "json").code == 2


def test_stdin(gg, tmp_path):
    run = gg("check", "-", "--stdin-filename", "pkg/model.py", stdin=LEAF_BUG.encode())
    assert run.code == 1
    assert run.findings() == [("pkg/model.py", 3, "GG002")]
    run = gg("check", "-", stdin=LEAF_BUG.encode())
    assert run.findings() == [("-", 3, "GG002")]


def test_missing_path_is_usage_error(gg, tmp_path):
    write(tmp_path, "train.py", LEAF_BUG)
    run = gg("check", "train.py", "nope.py")
    assert run.code == 2
    assert run.err.strip() == "gradguard: path does not exist: nope.py"
    assert "Traceback" not in run.err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["check", "--format", "xml"],
        ["check", "--severity", "GG001"],
        ["check", "--severity", "GG001=fatal"],
        ["check", "--jobs", "0"],
        ["check", "--no-such-option"],
        ["frobnicate"],
    ],
)
def test_usage_errors_exit_2(gg, argv):
    run = gg(*argv)
    assert run.code == 2
    assert "Traceback" not in run.err


def test_help_and_version_exit_0(gg):
    assert gg("--version").code == 0
    assert gg("check", "--help").code == 0


# --- parallel runs -----------------------------------------------------------


def test_parallel_output_is_sorted_and_equals_serial(gg, tmp_path):
    for i in range(12):
        write(tmp_path, f"pkg{i % 3}/m{i:02d}.py", LEAF_BUG if i % 2 else CLEAN)
    write(tmp_path, "pkg1/broken.py", b"import torch\0\0")
    serial = gg("check", "--jobs", "1")
    parallel = gg("check", "--jobs", "2")
    assert serial.code == parallel.code == 1
    assert serial.out == parallel.out
    found = parallel.findings()
    assert len(found) == 7
    assert found == sorted(found)
    assert ("pkg1/broken.py", 1, "GG901") in found


def test_no_process_pool_falls_back_to_in_process(gg, tmp_path, monkeypatch):
    import gradguard.batch

    def no_pool(*args, **kwargs):
        raise OSError(38, "Function not implemented")  # e.g. no /dev/shm semaphores in a sandbox

    monkeypatch.setattr(gradguard.batch, "ProcessPoolExecutor", no_pool)
    for i in range(10):
        write(tmp_path, f"m{i}.py", LEAF_BUG)
    run = gg("check", "--jobs", "4")
    assert run.code == 1 and len(run.findings()) == 10


@pytest.mark.skipif(sys.platform == "win32", reason="one job analyses in-process where no peak size can be read")
@pytest.mark.parametrize("dies", [False, True])
def test_one_job_runs_in_workers_replaced_as_they_grow_with_the_in_process_results(tmp_path, monkeypatch, dies):
    """With one job and many files, the files go in order through one worker process at a time, replaced once its
    peak has grown by ``RECYCLE_GROWTH_MB`` (0 here: a worker per file), so a heavy file's memory does not stay for
    the run.  Results, crashes and digests are those of the analysis in the process itself; a worker that dies
    leaves the rest to the process itself."""
    import multiprocessing

    import gradguard.api
    import gradguard.batch as batch
    from gradguard.config import Config
    from gradguard.files import Target

    if multiprocessing.get_start_method() != "fork":
        pytest.skip("the workers see the recording analysis only when forked")
    texts = {"pkg/model.py": "import torch\n\n\ndef bump(t):\n    t.add_(1)\n    return t\n",
             "pkg/train.py": "import torch\nfrom .model import bump\n\nw = torch.zeros(3, requires_grad=True)\n"
                             "y = torch.sigmoid(w)\nbump(y)\ny.sum().backward()\n",
             "pkg/__init__.py": "", "pkg/broken.py": b"import torch\0\0", "pkg/boom.py": LEAF_BUG,
             **{f"pkg/m{i}.py": LEAF_BUG if i % 2 else CLEAN for i in range(6)}}
    targets = [Target(write(tmp_path, rel, text), rel) for rel, text in sorted(texts.items())]
    monkeypatch.chdir(tmp_path)  # where the display names are, for the import of .model
    log, parent = tmp_path / "pids", os.getpid()
    real = gradguard.api.analyze_bytes

    def recording(data, path, config=None):
        with log.open("a") as out:
            out.write(f"{os.getpid()} {path}\n")
        if path == "pkg/boom.py":
            raise RecursionError("maximum recursion depth exceeded")
        if dies and path == "pkg/m2.py" and os.getpid() != parent:
            os._exit(1)
        return real(data, path, config)

    monkeypatch.setattr(gradguard.api, "analyze_bytes", recording)
    in_process = batch.analyze_chunk([(str(t.path), t.display) for t in targets], Config(), alone=True)
    log.unlink()
    monkeypatch.setattr(batch, "RECYCLE_GROWTH_MB", 0)
    digests, done = {}, []
    results, crashes = batch.analyze_files(targets, Config(), 1, done.append, digests)

    assert sorted(results, key=lambda r: r.path) == sorted(in_process[0], key=lambda r: r.path)
    assert any(r.diagnostics for r in results) and any(r.path == "pkg/train.py" and r.diagnostics for r in results)
    assert crashes == in_process[1] and len(crashes) == 1
    assert digests == in_process[2] and sum(done) == len(targets)
    pids = [int(line.split()[0]) for line in log.read_text().splitlines()]
    if dies:  # the files from m2.py on: a worker died on it, the process itself analyses them
        died = [line.split()[1] for line in log.read_text().splitlines()].index("pkg/m2.py")
        assert parent not in pids[:died + 1] and set(pids[died + 1:]) == {parent}
    else:
        assert parent not in pids and len(set(pids)) == len(targets)


def test_internal_error_in_one_file_reports_and_goes_on(gg, tmp_path, monkeypatch):
    import gradguard.api

    real = gradguard.api.analyze_bytes

    def flaky(data, path, config=None):
        if path.rsplit("/", 1)[-1] == "boom.py":
            raise RecursionError("maximum recursion depth exceeded")
        return real(data, path, config)

    monkeypatch.setattr(gradguard.api, "analyze_bytes", flaky)
    write(tmp_path, "boom.py", LEAF_BUG)
    write(tmp_path, "train.py", LEAF_BUG)
    run = gg("check", "--jobs", "1")
    assert run.code == 2
    assert run.findings() == [("train.py", 3, "GG002")]
    assert "gradguard: internal error while analysing boom.py: RecursionError: maximum recursion" in run.err
    assert "Traceback" not in run.err


def test_progress_bar_is_optional(gg, tmp_path, monkeypatch):
    """With a TTY on stderr and many files the run works whether or not tqdm is installed."""
    for i in range(25):
        write(tmp_path, f"m{i:02d}.py", CLEAN)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    run = gg("check", "--jobs", "1")
    assert run.code == 0
    assert run.err.strip().splitlines()[-1] == "All checks passed."


# --- discovery ---------------------------------------------------------------


def test_gitignore_and_skipped_dirs(gg, tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path, ".gitignore", "generated/\n*_tmp.py\n")
    write(tmp_path, "src/model.py", LEAF_BUG)
    write(tmp_path, "src/scratch_tmp.py", LEAF_BUG)
    write(tmp_path, "generated/out.py", LEAF_BUG)
    write(tmp_path, "src/.gitignore", "local.py\n!keep_tmp.py\n")
    write(tmp_path, "src/local.py", LEAF_BUG)
    write(tmp_path, "src/keep_tmp.py", LEAF_BUG)
    for skipped in (".venv", "venv", "__pycache__", "node_modules", "build", "dist", ".tox", ".eggs", "lib/site-packages"):
        write(tmp_path, f"{skipped}/x.py", LEAF_BUG)
    notebook = '{"cells": [{"cell_type": "code", "source": %s}], "nbformat": 4, "nbformat_minor": 5}' % (
        json.dumps(LEAF_BUG))
    write(tmp_path, "notebook.ipynb", notebook)
    write(tmp_path, ".ipynb_checkpoints/notebook-checkpoint.ipynb", notebook)  # Jupyter's autosaves
    write(tmp_path, "notes.txt", LEAF_BUG)

    paths = sorted(p for p, _, _ in gg("check").findings())
    assert paths == ["src/keep_tmp.py", "src/model.py"]
    assert "notebook.ipynb:cell 1:3:1: GG002" in gg("check").out  # `cell 1:` keeps it out of LINE's match
    # Checking a subfolder still applies the repository root's .gitignore.
    assert sorted(p for p, _, _ in gg("check", "src").findings()) == ["src/keep_tmp.py", "src/model.py"]


def test_explicit_paths_override_ignores(gg, tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path, ".gitignore", "generated/\n")
    write(tmp_path, "generated/out.py", LEAF_BUG)
    write(tmp_path, "build/gen.py", LEAF_BUG)
    write(tmp_path, "script", LEAF_BUG)  # no .py suffix, but named explicitly
    run = gg("check", "generated/out.py", "build", "script")
    assert sorted(p for p, _, _ in run.findings()) == ["build/gen.py", "generated/out.py", "script"]


def test_an_ignored_folder_named_explicitly_is_walked(gg, tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path, ".gitignore", "corpus/\n")
    write(tmp_path, "corpus/pkg/a.py", LEAF_BUG)
    assert [p for p, _, _ in gg("check", "corpus").findings()] == ["corpus/pkg/a.py"]
    assert [p for p, _, _ in gg("check", "corpus/pkg").findings()] == ["corpus/pkg/a.py"]
    assert gg("check").findings() == []  # walking from the root still respects it


def test_same_file_twice_is_reported_once(gg, tmp_path):
    write(tmp_path, "a.py", LEAF_BUG)
    assert len(gg("check", "a.py", ".", "./a.py").findings()) == 1


# --- rules / rule ------------------------------------------------------------


def test_rules_lists_every_code(gg):
    from gradguard.rules import ALL_RULES

    run = gg("rules")
    assert run.code == 0
    listed = [line.split()[0] for line in run.out.splitlines()]
    for rule in ALL_RULES:
        assert rule.code in listed
        assert any(line.split()[1] == rule.name for line in run.out.splitlines() if line.startswith(rule.code))
    assert "GG900" in listed and "GG901" in listed


def test_rule_prints_docs(gg):
    from gradguard.rules import RULES_BY_CODE

    run = gg("rule", "gg002")
    assert run.code == 0
    assert run.out.rstrip("\n") == RULES_BY_CODE["GG002"].docs().rstrip("\n")


def test_unknown_rule_exits_2(gg):
    run = gg("rule", "GG999")
    assert run.code == 2
    assert "unknown rule code 'GG999'" in run.err


# --- the real entry point ----------------------------------------------------


def _env() -> dict[str, str]:
    server = str(Path(gradguard.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (server, env.get("PYTHONPATH")) if p)
    return env


def test_python_m_gradguard_subprocess(tmp_path):
    write(tmp_path, "train.py", LEAF_BUG)
    write(tmp_path, "ok.py", CLEAN)
    proc = subprocess.run(
        [sys.executable, "-m", "gradguard", "check", "--format", "text", "."],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("train.py:3:1: GG002 ")
    assert proc.stderr.strip().splitlines()[-1] == "Found 1 problem in 1 file (1 fixable with --fix)."

    proc = subprocess.run(
        [sys.executable, "-m", "gradguard", "check", "-", "--stdin-filename", "x.py"],
        cwd=tmp_path, env=_env(), input=LEAF_BUG, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1 and proc.stdout.startswith("x.py:3:1: GG002 ")


# --- every code `gradguard rules` lists is a valid --select / --ignore (issue 29) -------------------------


def test_every_code_gradguard_rules_lists_is_accepted_by_select_and_ignore(gg, tmp_path):
    write(tmp_path, "clean.py", CLEAN)
    listed = [line.split()[0] for line in gg("rules").out.splitlines() if line.strip()]
    assert {"GG001", "GG101", "GG900", "GG901", "GG903"} <= set(listed), listed
    for code in listed:
        for option in ("--select", "--ignore", "--extend-ignore"):
            run = gg("check", option, code, "clean.py")
            assert run.code == 0 and "unknown rule code" not in run.err, (option, code, run.err)
    assert gg("check", "--select", "GG777", "clean.py").code == 2  # still refused: it names no code


DEEP = ("import torch\nw = torch.randn(3, requires_grad=True)\ny = torch.exp(w)\ny.add_(1)\n"
        "y.sum().backward()\nz = " + " + ".join(["y"] * 2000) + "\n")  # line 6 is too deep to analyse: GG903


def test_select_gg903(gg, tmp_path):
    """GG903 (a part of the file not analysed) is selected like any rule."""
    write(tmp_path, "deep.py", DEEP)
    both = gg("check", "--no-cache", "deep.py")
    assert both.code == 1 and {code for _, _, code in both.findings()} == {"GG001", "GG903"}, both.out
    only = gg("check", "--no-cache", "--select", "GG903", "deep.py")
    assert only.code == 1 and {code for _, _, code in only.findings()} == {"GG903"}, only.out
    rules = gg("check", "--no-cache", "--ignore", "GG903", "deep.py")
    assert rules.code == 1 and "GG001" in {code for _, _, code in rules.findings()}, rules.out


def test_ignore_gg903_hides_it(gg, tmp_path):
    write(tmp_path, "deep.py", DEEP)
    rules = gg("check", "--no-cache", "--ignore", "GG903", "deep.py")
    assert {code for _, _, code in rules.findings()} == {"GG001"}, rules.out
