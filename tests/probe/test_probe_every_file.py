"""``gradguard check --probe FOLDER`` runs every file that can run, whether or not the static analysis found
anything in it, and states how each run ended, in text, JSON and SARIF: ran to the end; stopped at line N
by the autograd error it reports; stopped at line N by an error that is not an autograd one; timed out; not
run: no entry point.  "All checks passed." and exit 0 only when every file ran to its end or has no entry
point.  Real torch, the real sandbox, each run in its own warm workers.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jsonschema
import pytest
from gradguard.cli import main

ALL_CLEAR = "All checks passed."
SARIF_SCHEMA = Path(__import__("gradguard.output", fromlist=["x"]).__file__).with_name("sarif-2.1.0.schema.json")
ARGS = "--epochs 1 'a b'"

FILES = {
    # A clean script: runs to its end, nothing to report.
    "clean.py": """\
        import torch

        x = torch.randn(3, requires_grad=True)
        torch.sigmoid(x).sum().backward()
        assert x.grad is not None
        """,
    # A bug only the probe finds: the in-place call is spelled through getattr, which static analysis does not
    # follow; it sits in a helper, reached from the __main__ block.
    "hidden.py": """\
        import torch


        def squash(t):
            y = torch.sigmoid(t)
            getattr(y, "mul_")(2)
            return y


        if __name__ == "__main__":
            x = torch.randn(3, requires_grad=True)
            squash(x).sum().backward()
        """,
    # A package: main.py imports its helper relatively, so it runs only as `python -m pkg.main`; the helper
    # module (only definitions) has no entry point.
    "pkg/__init__.py": "",
    "pkg/layers.py": """\
        import torch


        def gate(t):
            y = torch.exp(t)
            getattr(y, "add_")(1)
            return y
        """,
    "pkg/main.py": """\
        import torch

        from .layers import gate


        def train():
            x = torch.randn(4, requires_grad=True)
            gate(x).sum().backward()


        if __name__ == "__main__":
            train()
        """,
    # An error that is not an autograd one, at line 5: the probe cannot confirm what comes after.
    "broken.py": """\
        import torch

        x = torch.randn(3, requires_grad=True)
        y = torch.tanh(x)
        raise ValueError("the config has no key 'lr'")
        y.mul_(2)
        """,
    # Never ends: killed after --timeout.
    "slow.py": """\
        import time

        import torch

        x = torch.ones(2)
        while True:
            time.sleep(0.1)
        """,
    # Runs its training step only with the arguments --probe-args gives it (sys.argv[1:]).
    "cli_args.py": """\
        import sys

        import torch

        if sys.argv[1:] != ["--epochs", "1", "a b"]:
            raise SystemExit(f"usage: cli_args.py --epochs N NAME, not {sys.argv[1:]}")
        x = torch.randn(3, requires_grad=True)
        y = torch.sigmoid(x)
        getattr(y, "mul_")(0.5)
        y.sum().backward()
        """,
}


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, source in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")


def _run(folder: Path, argv: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.chdir(folder)
    code = main(["check", "--no-cache", "--no-jedi", "--no-progress", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    folder = tmp_path_factory.mktemp("every_file")
    _write(folder, FILES)
    return folder


@pytest.fixture(scope="module")
def runs(project):
    """The folder checked once per format, under the probe (2 workers, a 3 s timeout, --probe-args)."""
    done = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project)
        for fmt in ("json", "text", "sarif"):
            import io
            import sys

            out, err = io.StringIO(), io.StringIO()
            mp.setattr(sys, "stdout", out)
            mp.setattr(sys, "stderr", err)
            code = main(["check", "--no-cache", "--no-jedi", "--no-progress", "--probe", "--timeout", "3",
                         "--jobs", "2", "--probe-args", ARGS, "--format", fmt, "."])
            done[fmt] = (code, out.getvalue(), err.getvalue())
    return done


def test_static_analysis_alone_finds_no_bug_in_the_files_only_the_probe_can_check(project, capsys, monkeypatch):
    """The premise: without --probe the folder's bugs are invisible (each one the probe reports below is its
    own), so the probe must run files with no static finding."""
    code, out, err = _run(project, ["--format", "json", "."], capsys, monkeypatch)
    found = {(d["path"], d["line"]) for d in json.loads(out)["diagnostics"]}
    assert not found & {("hidden.py", 6), ("pkg/layers.py", 6), ("cli_args.py", 9)}, found


def test_json_states_every_files_outcome(runs):
    code, out, err = runs["json"]
    data = json.loads(out)
    files = {f["path"]: f for f in data["probe"]["files"]}
    assert set(files) == set(FILES), files
    outcome = {path: f["outcome"] for path, f in files.items()}
    assert outcome == {
        "clean.py": "ran",
        "hidden.py": "stopped-by-finding",
        "pkg/__init__.py": "no-entry",
        "pkg/layers.py": "no-entry",
        "pkg/main.py": "stopped-by-finding",
        "broken.py": "stopped",
        "slow.py": "timed-out",
        "cli_args.py": "stopped-by-finding",
    }
    assert files["clean.py"]["detail"].startswith("ran to the end (python clean.py --epochs 1 'a b', ")
    assert files["pkg/main.py"]["how"] == "python -m pkg.main --epochs 1 'a b'"
    assert files["pkg/layers.py"]["detail"].startswith("not run: no entry point: only definitions")
    assert files["broken.py"]["line"] == 5 and files["broken.py"]["detail"].startswith(
        "stopped at line 5 by ValueError: the config has no key 'lr' -- not an autograd error the probe recognises")
    assert files["slow.py"]["detail"].startswith("timed out after 3 s")
    assert [f["path"] for f in data["probe"]["files"] if not f["complete"]] == ["broken.py", "slow.py"]
    assert data["probe"]["complete"] is False

    found = {(d["path"], d["line"], d["code"]) for d in data["diagnostics"] if d.get("confirmed")}
    # found only by the probe, in a file with no static finding
    assert ("hidden.py", 6, "GG001") in found
    # the package module ran as `python -m pkg.main`: its relative import worked, and the write is reported in
    # the helper module where it happens, once, with the call chain back to main.py
    assert ("pkg/layers.py", 6, "GG001") in found
    [layers] = [d for d in data["diagnostics"] if d["path"] == "pkg/layers.py" and d["line"] == 6]
    assert any(r["path"] == "pkg/main.py" for r in layers["related"]), layers["related"]
    # --probe-args reached the script as sys.argv[1:]: it got past its usage check to the bug
    assert ("cli_args.py", 9, "GG001") in found
    # a finding exists, so 1 (the unfinished files are said in the report and the closing line)
    assert code == 1
    assert err.rstrip().splitlines()[-1].endswith(
        "the probe did not run 2 files to their end (see each file's outcome).")


def test_text_states_every_files_outcome(runs):
    code, out, err = runs["text"]
    lines = [line for line in out.splitlines() if line.startswith("probe: ")]
    assert lines[0].startswith("probe: broken.py: stopped at line 5 by ValueError: the config has no key 'lr' -- "
                               "not an autograd error the probe recognises, so it could not confirm the code after it")
    shown = {line.split(": ", 2)[1]: line.split(": ", 2)[2] for line in lines}
    assert shown["clean.py"].startswith("ran to the end")
    assert shown["pkg/layers.py"].startswith("not run: no entry point")
    assert shown["slow.py"].startswith("timed out after 3 s")
    # backward() in train() raised: the innermost line of the user's code in the traceback is main.py's
    assert shown["pkg/main.py"].startswith("stopped at line 8 by the autograd error reported (RuntimeError; "
                                           "python -m pkg.main")
    assert out.startswith("cli_args.py:9:")  # the findings come first, as without --probe
    assert ALL_CLEAR not in err and code == 1


def test_sarif_states_every_files_outcome(runs):
    code, out, err = runs["sarif"]
    log = json.loads(out)
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.validators.validator_for(schema)(schema).validate(log)
    [invocation] = log["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    notes = {n["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]: n
             for n in invocation["toolExecutionNotifications"]}
    assert notes["broken.py"]["descriptor"]["id"] == "probe/stopped"
    assert notes["broken.py"]["locations"][0]["physicalLocation"]["region"] == {"startLine": 5}
    assert notes["broken.py"]["level"] == "warning"
    assert notes["slow.py"]["descriptor"]["id"] == "probe/timed-out"
    assert notes["clean.py"]["descriptor"]["id"] == "probe/ran" and notes["clean.py"]["level"] == "note"
    assert notes["pkg/layers.py"]["descriptor"]["id"] == "probe/no-entry"
    assert notes["pkg/layers.py"]["message"]["text"].startswith("probe: not run: no entry point")
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in log["runs"][0]["results"]} >= {
        "hidden.py", "pkg/layers.py", "cli_args.py"}


def test_all_checks_passed_only_when_every_file_ran_or_has_no_entry_point(tmp_path, capsys, monkeypatch):
    _write(tmp_path, {name: FILES[name] for name in ("clean.py", "pkg/__init__.py", "pkg/layers.py")})
    # pkg/layers.py has a bug, but nothing runs it: with no finding it is listed as not run, and passes
    (tmp_path / "pkg" / "layers.py").write_text("import torch\n\n\ndef double(t):\n    return t * 2\n")
    code, out, err = _run(tmp_path, ["--probe", "."], capsys, monkeypatch)
    assert out.splitlines() == [
        out.splitlines()[0],
        "probe: pkg/__init__.py: not run: no entry point: a package's __init__.py (it runs when its package is "
        "imported)",
        "probe: pkg/layers.py: not run: no entry point: only definitions (no top-level code, no "
        "`if __name__ == \"__main__\":` block)",
    ]
    assert out.startswith("probe: clean.py: ran to the end (python clean.py, ")
    assert (code, err.rstrip().splitlines()[-1]) == (0, ALL_CLEAR)

    # one more file that stops at a non-autograd error: no pass, exit 2, though nothing was found
    _write(tmp_path, {"broken.py": FILES["broken.py"]})
    code, out, err = _run(tmp_path, ["--probe", "."], capsys, monkeypatch)
    assert "probe: broken.py: stopped at line 5 by ValueError" in out
    assert code == 2 and ALL_CLEAR not in err
    assert err.rstrip().splitlines()[-1] == (
        "No problems found; the probe did not run 1 file to its end (see each file's outcome).")


def test_a_script_without_the_arguments_it_needs_did_not_run(tmp_path, capsys, monkeypatch):
    _write(tmp_path, {"cli_args.py": FILES["cli_args.py"]})
    code, out, err = _run(tmp_path, ["--probe", "--format", "json", "cli_args.py"], capsys, monkeypatch)
    data = json.loads(out)
    [run] = data["probe"]["files"]
    assert run["outcome"] == "stopped" and run["detail"].startswith(
        "stopped: the script called sys.exit('usage: cli_args.py --epochs N NAME, not []')")
    assert data["diagnostics"] == [] and code == 2 and ALL_CLEAR not in err


def test_a_package_module_run_as_a_script_cannot_import_relatively(tmp_path, capsys, monkeypatch):
    """What `-m` buys: the same module probed as a plain file (``gradguard probe`` on a copy outside its
    package) stops at the relative import, and that is said, never taken for a clean run."""
    _write(tmp_path, {"main.py": FILES["pkg/main.py"]})
    code, out, err = _run(tmp_path, ["--probe", "--format", "json", "main.py"], capsys, monkeypatch)
    [run] = json.loads(out)["probe"]["files"]
    assert run["outcome"] == "stopped" and run["line"] == 3 and "ImportError" in run["detail"], run
    assert code == 2


def test_probe_args_that_a_shell_could_not_split_are_a_usage_error(tmp_path, capsys, monkeypatch):
    _write(tmp_path, {"clean.py": FILES["clean.py"]})
    code, out, err = _run(tmp_path, ["--probe", "--probe-args", "--name 'unclosed", "clean.py"], capsys, monkeypatch)
    assert code == 2 and "--probe-args" in err and "No closing quotation" in err
    code, out, err = _run(tmp_path, ["--probe-args", "--x 1", "clean.py"], capsys, monkeypatch)
    assert code == 2 and "--probe-args only apply with --probe" in err


def test_gradguard_probe_runs_a_package_module_with_dash_m(project, capsys, monkeypatch):
    monkeypatch.chdir(project)
    assert main(["probe", "pkg/main.py", "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [(d["path"], d["line"], d["code"]) for d in data["diagnostics"]] == [("pkg/layers.py", 6, "GG001")]


def test_a_notebook_and_a_file_the_probe_could_not_run_are_no_pass(tmp_path, capsys, monkeypatch):
    """The probe runs no notebook (it says so), and an --entry the file does not define is a run that failed:
    neither is taken for a clean run."""
    _write(tmp_path, {"clean.py": FILES["clean.py"]})
    cell = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": ["import torch\n", "x = torch.ones(2)\n"]}
    notebook = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "explore.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
    code, out, err = _run(tmp_path, ["--probe", "--entry", "nothere", "--format", "json", "clean.py", "explore.ipynb"],
                          capsys, monkeypatch)
    data = json.loads(out)
    runs = {f["path"]: f for f in data["probe"]["files"]}
    assert runs["explore.ipynb"]["outcome"] == "not-run"
    assert runs["explore.ipynb"]["detail"] == "not run: the probe does not run notebooks"
    assert runs["clean.py"]["outcome"] == "did-not-run"
    assert "clean.py defines no 'nothere' to call (--entry)" in runs["clean.py"]["detail"]
    assert data["diagnostics"] == [] and code == 2 and ALL_CLEAR not in err
    assert err.rstrip().splitlines()[-1] == (
        "No problems found; the probe did not run 2 files to their end (see each file's outcome).")


@pytest.mark.parametrize(("source", "kind"), [
    ("import torch\nx = torch.ones(2)\n", "script"),  # a module-level value computed by torch: code runs
    ("def f():\n    pass\n\nif __name__ == '__main__':\n    f()\n", "script"),
    ("'''doc'''\nimport logging\nfrom typing import TypeVar\nlog = logging.getLogger(__name__)\nT = TypeVar('T')\n"
     "try:\n    import numpy\nexcept ImportError:\n    numpy = None\n\n\nclass A:\n    pass\n", "no-entry"),
    ("def train():\n    pass\n\ntrain()\n", "script"),
    ("import sys\nif sys.version_info >= (3, 11):\n    def f():\n        pass\n", "no-entry"),
])
def test_what_counts_as_an_entry_point(tmp_path, source, kind):
    from gradguard.probe.target import runnable

    path = tmp_path / "m.py"
    path.write_text(source, encoding="utf-8")
    assert runnable(str(path)).kind == kind
    # the same file inside a package is a module run with -m when it runs at all
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "m.py").write_text(source, encoding="utf-8")
    inside = runnable(str(tmp_path / "pkg" / "m.py"))
    assert (inside.kind, inside.module, inside.root) == (
        "module" if kind == "script" else kind, "pkg.m", str(tmp_path.resolve()))
    # --entry NAME makes a file that defines NAME runnable
    assert runnable(str(path), entry="A").kind == ("script" if "class A" in source else kind)
