"""The CLI's content-hash result cache: unchanged files are not analysed again, and nothing stale is served."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import gradguard.api
from gradguard.cli import main
from gradguard.config import Config
from gradguard.result_cache import ENV_DIR, ResultCache, imports_other_code

LEAF_BUG = "import torch\nx = torch.zeros(3, requires_grad=True)\nx += 1\n"
NOTEBOOK = Path(__file__).parent / "notebooks" / "cross_cell.ipynb"


@pytest.fixture
def gg(monkeypatch, capsys, tmp_path):
    """Run the CLI in tmp_path with the cache on; ``analysed`` lists the files really analysed."""
    monkeypatch.delenv("GRADGUARD_NO_CACHE", raising=False)
    monkeypatch.delenv(ENV_DIR, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()  # the project root: the cache goes in tmp_path/.gradguard_cache
    analysed: list[str] = []
    real = gradguard.api.analyze_bytes

    def counting(data, path, config=None):
        analysed.append(path)
        return real(data, path, config)

    monkeypatch.setattr(gradguard.api, "analyze_bytes", counting)

    def run(*argv: str):
        analysed.clear()
        code = main(["check", "--jobs", "1", *argv])  # in-process, so `analysed` sees every analysis
        out, err = capsys.readouterr()
        return code, out, sorted(analysed)

    return run


def test_second_run_analyses_nothing_and_reports_the_same(gg, tmp_path):
    (tmp_path / "bug.py").write_text(LEAF_BUG)
    (tmp_path / "clean.py").write_text("import torch\n")
    shutil.copy(NOTEBOOK, tmp_path / "nb.ipynb")
    first = gg(".")
    assert first[2] == ["bug.py", "clean.py", "nb.ipynb"]
    second = gg(".")
    assert second[2] == [] and second[:2] == first[:2]
    assert gg("--format", "json", ".")[2] == []  # the format is not part of the key
    cache = tmp_path / ".gradguard_cache"
    assert (cache / ".gitignore").read_text().splitlines()[-1] == "*"
    assert (cache / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")


def test_changed_file_settings_and_no_cache_miss(gg, tmp_path):
    (tmp_path / "bug.py").write_text(LEAF_BUG)
    (tmp_path / "other.py").write_text(LEAF_BUG)
    gg(".")
    (tmp_path / "bug.py").write_text(LEAF_BUG + "x.mul_(2)\n")
    assert gg(".")[2] == ["bug.py"]
    assert gg("--select", "GG001", ".")[2] == ["bug.py", "other.py"]  # settings are part of the key
    assert gg("--jedi", ".")[2] == ["bug.py", "other.py"]
    assert gg("--no-cache", ".")[2] == ["bug.py", "other.py"]
    assert gg(".")[2] == []


def test_editing_an_imported_helper_reanalyses_its_importers(gg, tmp_path):
    (tmp_path / "helpers.py").write_text("import torch\ndef make():\n    return torch.zeros(3, requires_grad=True)\n")
    (tmp_path / "uses.py").write_text("from helpers import make\nw = make()\nw += 1\n")
    (tmp_path / "alone.py").write_text(LEAF_BUG)
    code, out, analysed = gg("--jedi", ".")
    assert analysed == ["alone.py", "helpers.py", "uses.py"]
    (tmp_path / "helpers.py").write_text("import torch\ndef make():\n    return torch.zeros(3)\n")
    code, out, analysed = gg("--jedi", ".")
    assert analysed == ["helpers.py", "uses.py"]  # uses.py may depend on helpers.py through jedi
    assert gg(".")[2] == ["alone.py", "helpers.py", "uses.py"]  # jedi off (the default): other settings
    (tmp_path / "helpers.py").write_text("import torch\ndef make():\n    return torch.ones(3)\n")
    assert gg(".")[2] == ["helpers.py", "uses.py"]  # without jedi too: calls into helpers.py are followed


def test_fix_works_from_a_cache_hit(gg, tmp_path):
    (tmp_path / "t.py").write_text("import torch\nw = torch.randn(3, requires_grad=True)\nh = torch.exp(w)\nh += 1\n"
                                   "h.sum().backward()\n")
    shutil.copy(NOTEBOOK, tmp_path / "nb.ipynb")
    gg(".")
    code, out, analysed = gg("--fix", ".")
    assert code == 0 and "h = h + 1" in (tmp_path / "t.py").read_text()
    assert '"h = h + scale"' in (tmp_path / "nb.ipynb").read_text()


def test_a_corrupt_entry_is_a_miss(gg, tmp_path):
    (tmp_path / "bug.py").write_text(LEAF_BUG)
    gg(".")
    for entry in (tmp_path / ".gradguard_cache").rglob("*"):
        if entry.is_file() and entry.parent.name != ".gradguard_cache":
            entry.write_text("{broken")
    code, out, analysed = gg(".")
    assert analysed == ["bug.py"] and "bug.py:3:1: GG002" in out


def test_cache_dir_from_environment(gg, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_DIR, str(tmp_path / "elsewhere"))
    (tmp_path / "bug.py").write_text(LEAF_BUG)
    gg(".")
    assert (tmp_path / "elsewhere" / "CACHEDIR.TAG").is_file() and not (tmp_path / ".gradguard_cache").exists()


def test_keys_depend_on_name_and_content(tmp_path):
    cache = ResultCache(tmp_path / "c", Config(jedi=False))
    path = tmp_path / "a.py"
    assert cache.key(path, "a.py", b"x") == cache.key(path, "a.py", b"x")
    assert cache.key(path, "a.py", b"x") != cache.key(path, "a.py", b"y")
    assert cache.key(path, "a.py", b"x") != cache.key(path, "b/a.py", b"x")
    assert cache.key(path, "a.py", b"x") != ResultCache(tmp_path / "c", Config(jedi=False, ignore=("GG1",))).key(
        path, "a.py", b"x")


@pytest.mark.parametrize("text,expected", [
    (b"import torch\nimport torch.nn as nn\nfrom torch import optim\nimport os, sys\n", False),
    (b"import numpy as np\nfrom typing import Any\n", False),
    (b"from helpers import make\n", True),
    (b"from . import sibling\n", True),
    (b"import os, einops\n", True),
    (b"    import mypkg.sub as m\n", True),
])
def test_imports_other_code(text, expected):
    assert imports_other_code(text) is expected


def test_imports_other_code_in_notebooks():
    nb = NOTEBOOK.read_bytes()
    assert imports_other_code(nb, notebook=True) is False
    assert imports_other_code(nb.replace(b'"import torch\\n"', b'"import mylib\\n"'), notebook=True) is True
    assert json.loads(nb)  # still the fixture
    as_one_string = json.dumps({"cells": [{"cell_type": "code", "source": "import torch\nimport mylib\n"}]})
    assert imports_other_code(as_one_string.encode(), notebook=True) is True


def test_a_finding_an_entry_file_places_in_another_module_follows_edits_of_either(gg, tmp_path):
    """main.py's entry holds a finding in pkg/ops.py (a write there that only main.py's call reaches): editing
    ops.py or main.py analyses main.py again, and a folder run reports the finding once, under ops.py."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text("def scale(t):\n    t.mul_(2)\n")
    main_py = ("import torch\n\nfrom .ops import scale\n\nx = torch.randn(3, requires_grad=True)\nh = torch.tanh(x)\n"
               "scale(h)\nh.sum().backward()\n")
    (pkg / "main.py").write_text(main_py)
    code, out, analysed = gg("--format", "json", "pkg/main.py")
    found = json.loads(out)["diagnostics"]
    assert [(d["path"], d["line"], d["code"]) for d in found] == [("pkg/ops.py", 2, "GG001")], found
    assert ("pkg/main.py", 7) in {(r["path"], r["line"]) for r in found[0]["related"]}
    assert gg("--format", "json", "pkg/main.py")[1:] == (out, [])  # a hit, with the same finding
    (pkg / "ops.py").write_text("def scale(t):\n    return t * 2\n")
    code, out, analysed = gg("--format", "json", "pkg/main.py")
    assert analysed == ["pkg/main.py"] and json.loads(out)["diagnostics"] == []
    (pkg / "ops.py").write_text("def scale(t):\n    t.mul_(2)\n")
    code, out, analysed = gg("--format", "json", "pkg")
    assert analysed == ["pkg/__init__.py", "pkg/main.py", "pkg/ops.py"]
    assert [(d["path"], d["line"]) for d in json.loads(out)["diagnostics"]] == [("pkg/ops.py", 2)]
    (pkg / "main.py").write_text(main_py.replace("scale(h)", "scale(h.clone())"))
    code, out, analysed = gg("--format", "json", "pkg")
    assert analysed == ["pkg/main.py"] and json.loads(out)["diagnostics"] == []
