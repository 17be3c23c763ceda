"""Notebooks: cells analysed in order as one program, magics skipped, findings reported per cell, fixes
written into the cell sources only."""

from __future__ import annotations

import io
import json
import re
import shutil
import sys
from pathlib import Path

import jsonschema
import pytest

from gradguard.cli import main
from gradguard.diagnostics import Diagnostic
from gradguard.api import analyze_notebook, analyze_program
from gradguard.autofix.writer import fix_notebook
from gradguard.notebooks import Notebook, Program, make_cell
from test_output_formats import JSON_V1_SCHEMA, sarif_validator

FIXTURE = Path(__file__).parent / "notebooks" / "cross_cell.ipynb"
# What torch raises at `loss.backward()` in cell 6, up to the hint that follows.  The saving node is named
# `Exp` by torch 2.13 and `ExpBackward0` by older 2.x releases; everything else is exact.
TORCH_ERROR = re.compile(
    re.escape("one of the variables needed for gradient computation has been modified by an inplace operation: "
              "[torch.FloatTensor [4]], which is output 0 of ")
    + "(?:Exp|ExpBackward0)"
    + re.escape(", is at version 1; expected version 0 instead.")
)


def notebook(*cells: tuple[str, str], language: str = "python") -> dict:
    """An nbformat 4.5 notebook with these (cell_type, source) cells."""
    out = []
    for i, (kind, source) in enumerate(cells):
        cell = {"cell_type": kind, "id": f"c{i}", "metadata": {}, "source": source.splitlines(keepends=True)}
        if kind == "code":
            cell |= {"execution_count": None, "outputs": []}
        out.append(cell)
    meta = {"kernelspec": {"display_name": "k", "language": language, "name": "k"}, "language_info": {"name": language}}
    return {"cells": out, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}


def write_nb(path: Path, nb: dict) -> Path:
    path.write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def gg(monkeypatch, capsys, tmp_path):
    def run(*argv: str, stdin: bytes | None = None) -> tuple[int, str, str]:
        monkeypatch.chdir(tmp_path)
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


# --- the program and its map -------------------------------------------------


def test_magics_become_pass_and_keep_line_numbers():
    source = "\n".join([
        "import torch",
        "%matplotlib inline",
        "!pip install -q einops \\",
        "    rich",
        "files = !ls",
        "torch.Tensor.add_?",
        "for i in range(2):",
        "    %time y = torch.ones(2) * i",
        "    !echo {i}",
        "x = 1",
    ])
    cell = make_cell(1, source)
    assert cell.problem is None
    lines = cell.python.split("\n")
    assert len(lines) == len(source.split("\n"))
    assert lines == ["import torch", "pass", "pass", "", "pass", "pass", "for i in range(2):",
                     "    y = torch.ones(2) * i", "    pass", "x = 1"]
    assert cell.shifts == {8: len("%time ")}


def test_cell_magics_keep_python_bodies_and_blank_the_rest():
    timed = make_cell(1, "%%time\nx = 1\ny = 2")
    assert timed.python == "\nx = 1\ny = 2" and timed.problem is None
    bash = make_cell(2, "%%bash\nfor f in *; do echo $f; done\nexit 1")
    assert bash.python == "\n\n" and bash.problem is None


def test_plain_python_is_never_transformed():
    source = 's = """\n%d items\n!important\n"""\nfrom __future__ import annotations'
    cell = make_cell(1, 'x = 1\n' + source)
    assert cell.python.splitlines()[:5] == ['x = 1', 's = """', "%d items", "!important", '"""']
    assert cell.python.split("\n")[5] == ""  # a __future__ import only belongs at the top of a file


def test_program_maps_every_line_back_to_its_cell():
    program = Program.from_cells([("markdown", "# title"), ("code", "a = 1\nb = 2"), ("raw", "x"),
                                  ("code", ""), ("code", "%time c = 3")])
    assert program.text == "a = 1\nb = 2\n\nc = 3\n"
    assert [c.number for c in program.cells] == [2, 4, 5]
    cell, line, column = program.locate(2, 1)
    assert (cell.number, line, column) == (2, 2, 1)
    cell, line, column = program.locate(4, 1)
    assert (cell.number, line, column) == (5, 1, len("%time ") + 1)
    assert program.locate(99) is None


# --- the cross-cell finding, proved with torch --------------------------------


def test_cross_cell_finding_is_reported_in_cells():
    result = analyze_notebook(FIXTURE, "explore.ipynb")
    (d,) = result.diagnostics
    assert (d.code, d.cell, d.span.line, d.span.column) == ("GG001", 5, 3, 1)
    assert [(r.cell, r.line, r.column) for r in d.related] == [(3, 2, 5), (6, 2, 1)]
    assert "on line 2 of cell 3" in d.message and "the backward on line 2 of cell 6" in d.message
    (edit,) = d.fix.edits
    assert (edit.cell, edit.line, edit.column, edit.new_text) == (5, 3, 3, "= h +")


def run_cells(nb: dict) -> None:
    """Execute the code cells top to bottom in one namespace, as "Restart & Run All" does (magics skipped)."""
    namespace: dict = {"__name__": "__main__"}
    program = Program.from_cells(Notebook(nb, json.dumps(nb)).sources())
    for cell in program.cells:
        exec(compile(cell.python, f"<cell {cell.number}>", "exec"), namespace)


def test_torch_raises_in_cell_6_because_of_cell_5():
    torch = pytest.importorskip("torch")
    nb = json.loads(FIXTURE.read_text())
    with pytest.raises(RuntimeError) as info:
        run_cells(nb)
    assert TORCH_ERROR.match(str(info.value)), (torch.__version__, str(info.value))
    assert info.traceback[-1].frame.code.raw.co_filename != "<cell 5>"  # it fails at the backward, in cell 6
    assert any(entry.frame.code.raw.co_filename == "<cell 6>" for entry in info.traceback)


def test_fixed_notebook_runs_clean(tmp_path):
    pytest.importorskip("torch")
    path = shutil.copy(FIXTURE, tmp_path / "nb.ipynb")
    outcome = fix_notebook(Path(path), "nb.ipynb")
    assert outcome.changed and outcome.result.diagnostics == []
    run_cells(json.loads(Path(path).read_text()))  # no RuntimeError any more


# --- the CLI -----------------------------------------------------------------


def test_check_text_output_names_the_cell(gg, tmp_path):
    shutil.copy(FIXTURE, tmp_path / "explore.ipynb")
    code, out, err = gg("check", ".")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("explore.ipynb:cell 5:3:1: GG001 `+=` modifies the output of `torch.exp`")
    assert lines[1] == "    explore.ipynb:cell 3:2:5: note: torch.exp saves its output for backward here"
    assert lines[2] == "    explore.ipynb:cell 6:2:1: note: backward raises here"
    assert "Found 1 problem in 1 file (1 fixable with --fix)." in err


def test_check_json_sarif_github_carry_the_cell(gg, tmp_path):
    shutil.copy(FIXTURE, tmp_path / "explore.ipynb")
    (tmp_path / "train.py").write_text("import torch\nx = torch.zeros(3, requires_grad=True)\nx += 1\n")
    code, out, _ = gg("check", "--format", "json", ".")
    data = json.loads(out)
    jsonschema.validate(data, JSON_V1_SCHEMA)
    nb, py = data["diagnostics"]
    assert (nb["path"], nb["cell"], nb["line"], nb["column"]) == ("explore.ipynb", 5, 3, 1)
    assert [(r["cell"], r["line"]) for r in nb["related"]] == [(3, 2), (6, 2)]
    assert nb["fix"]["edits"][0]["cell"] == 5
    assert list(nb)[:3] == ["path", "cell", "line"]
    assert "cell" not in py and all("cell" not in r for r in py["related"])  # .py output is unchanged
    assert Diagnostic.from_json(nb).to_json() == nb and Diagnostic.from_json(py).to_json() == py

    code, out, _ = gg("check", "--format", "sarif", ".")
    log = json.loads(out)
    sarif_validator().validate(log)
    result = next(r for r in log["runs"][0]["results"]
                  if r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "explore.ipynb")
    assert result["properties"] == {"cell": 5, "cellLine": 3, "cellColumn": 1}
    assert result["message"]["text"].startswith("cell 5: ")
    assert result["locations"][0]["logicalLocations"] == [{"name": "cell 5", "kind": "module"}]
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 3
    assert [r["properties"]["cell"] for r in result["relatedLocations"]] == [3, 6]

    code, out, _ = gg("check", "--format", "github", "explore.ipynb")
    assert out.startswith("::error file=explore.ipynb,line=3,col=1,endLine=3,endColumn=11,title=GG001::cell 5: ")
    assert "%0Aexplore.ipynb:cell 3:2:5: note:" in out


def test_folders_find_notebooks_but_not_checkpoints(gg, tmp_path):
    (tmp_path / "nbs" / ".ipynb_checkpoints").mkdir(parents=True)
    shutil.copy(FIXTURE, tmp_path / "nbs" / "a.ipynb")
    shutil.copy(FIXTURE, tmp_path / "nbs" / ".ipynb_checkpoints" / "a-checkpoint.ipynb")
    code, out, _ = gg("check", "--statistics", ".")
    assert code == 1 and out == "1  GG001  saved-tensor-mutated\n"


def test_fix_edits_only_the_cell_source(gg, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    path = shutil.copy(FIXTURE, tmp_path / "explore.ipynb")
    code, out, err = gg("check", "--diff", "explore.ipynb")
    assert code == 1
    assert out.splitlines()[:2] == ["--- a/explore.ipynb:cell 5", "+++ b/explore.ipynb:cell 5"]
    assert "-h += scale\n+h = h + scale\n" in out
    assert Path(path).read_bytes() == FIXTURE.read_bytes()  # --diff changes nothing

    code, out, err = gg("check", "--fix", "explore.ipynb")
    assert code == 0 and err.strip().splitlines()[-1] == "Fixed 1 problem in 1 file; no problems remain."
    before, after = FIXTURE.read_text(), Path(path).read_text()
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert changed == [('    "h += scale"', '    "h = h + scale"')]  # one line of the file, the rest byte for byte
    assert len(before.splitlines()) == len(after.splitlines()) and after.endswith("}\n")
    nbformat.validate(nbformat.reads(after, as_version=4))
    assert gg("check", "explore.ipynb")[0] == 0


def test_fix_keeps_string_sources_and_other_layouts(tmp_path):
    nb = notebook(("code", "import torch\nw = torch.randn(3, requires_grad=True)\n"),
                  ("code", "h = torch.sigmoid(w)\n%time h += 1\nh.sum().backward()"))
    nb["cells"][1]["source"] = "".join(nb["cells"][1]["source"])  # a string, not a list of lines
    raw = json.dumps(nb, indent=2)  # no final newline, indent 2, keys in insertion order
    path = tmp_path / "nb.ipynb"
    path.write_text(raw)
    outcome = fix_notebook(path, "nb.ipynb")
    assert outcome.changed
    fixed = path.read_text()
    assert fixed == raw.replace("%time h += 1", "%time h = h + 1")  # the fix lands after the magic's prefix


def test_a_broken_cell_is_reported_and_the_others_still_analysed(tmp_path):
    nb = notebook(("code", "import torch\nx = torch.zeros(3, requires_grad=True)"), ("code", "def f(:\n  pass"),
                  ("code", "x += 1"))
    result = analyze_notebook(write_nb(tmp_path / "nb.ipynb", nb), "nb.ipynb")
    codes = [(d.code, d.cell, d.span.line) for d in result.diagnostics]
    assert ("GG900", 2, 1) in codes and ("GG002", 3, 1) in codes
    assert result.error is None


def test_unreadable_and_foreign_notebooks(tmp_path):
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{not json")
    (d,) = analyze_notebook(bad, "bad.ipynb").diagnostics
    assert d.code == "GG901" and "invalid JSON" in d.message and d.cell is None
    r_nb = notebook(("code", "x <- c(1, 2)\nx[1] <- 3"), language="R")
    assert analyze_notebook(write_nb(tmp_path / "r.ipynb", r_nb), "r.ipynb").diagnostics == []


def test_cells_run_in_cell_order_not_execution_count(tmp_path):
    nb = notebook(("code", "import torch\nx = torch.zeros(3, requires_grad=True)"), ("code", "x += 1"))
    nb["cells"][0]["execution_count"], nb["cells"][1]["execution_count"] = 7, 2  # ran out of order once
    (d,) = analyze_notebook(write_nb(tmp_path / "nb.ipynb", nb), "nb.ipynb").diagnostics
    assert (d.code, d.cell) == ("GG002", 2)


def test_stdin_with_a_notebook_name(gg):
    code, out, _ = gg("check", "--stdin-filename", "explore.ipynb", "-", stdin=FIXTURE.read_bytes())
    assert code == 1 and out.startswith("explore.ipynb:cell 5:3:1: GG001")


def test_probe_leaves_notebooks_to_the_static_analysis(gg, tmp_path):
    shutil.copy(FIXTURE, tmp_path / "explore.ipynb")
    code, out, err = gg("check", "--probe", "explore.ipynb")
    assert code == 1 and out.startswith("explore.ipynb:cell 5:3:1: GG001") and "not confirmed" not in out


def test_the_per_document_cache_serves_notebooks_after_a_cell_grows():
    """The language server keeps one cache per notebook: lines added to an early cell move the later cells'
    findings (mapped back to their cells) exactly as a fresh analysis places them."""
    from gradguard import engine

    nb = json.loads(FIXTURE.read_text(encoding="utf-8"))
    sources = Notebook(nb, json.dumps(nb)).sources()
    helper = ("code", "import torch\n\n\ndef double_(t):\n    t.mul_(2)\n\n\ndef train():\n"
                      "    w = torch.randn(3, requires_grad=True)\n    y = w.exp()\n    double_(y)\n"
                      "    y.sum().backward()\n")
    cells = [sources[0], helper, *sources[1:]]
    cache: dict = {}
    first, _ = analyze_program(Program.from_cells(cells), "nb.ipynb", cache=cache)
    grown = [(cells[0][0], cells[0][1] + "\n# a note\nimport math\n"), *cells[1:]]
    ran = []
    real = engine._run_unit
    try:
        engine._run_unit = lambda ctx, fn, *rest: ran.append(fn.name if fn else "<module>") or real(ctx, fn, *rest)
        cached, _ = analyze_program(Program.from_cells(grown), "nb.ipynb", cache=cache)
    finally:
        engine._run_unit = real
    fresh, _ = analyze_program(Program.from_cells(grown), "nb.ipynb")

    def shown(result):
        return [(d.cell, d.span, d.code, d.message, d.related, d.fix) for d in result.diagnostics]

    assert "train" not in ran and "double_" not in ran, ran
    assert shown(cached) == shown(fresh)
    assert {d.code for d in fresh.diagnostics} == {"GG001"} and len(fresh.diagnostics) == 2
