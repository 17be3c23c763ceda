"""Bad input never stops a run: each bad file becomes one finding and the other files are still checked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gradguard.cli import main

LEAF_BUG = "import torch\nx = torch.zeros(3, requires_grad=True)\nx += 1\n"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A folder with one real finding in ``good.py``, to show the run went on."""
    (tmp_path / "good.py").write_text(LEAF_BUG)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check(capsys, *argv: str) -> tuple[int, list[dict], str]:
    code = main(["check", "--format", "json", "--jobs", "1", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out)["diagnostics"] if out else []), err


def found(diagnostics: list[dict]) -> list[tuple[str, int, str]]:
    return [(d["path"], d["line"], d["code"]) for d in diagnostics]


def test_syntax_error_at_its_line(tree, capsys):
    (tree / "broken.py").write_text("import torch\nx = torch.zeros(3)\nx += 1\n\ndef f(:\n    pass\n")
    code, diags, err = check(capsys)
    assert code == 1 and "Traceback" not in err
    assert found(diags) == [("broken.py", 5, "GG900"), ("good.py", 3, "GG002")]
    assert diags[0]["severity"] == "error" and "syntax error" in diags[0]["message"]


def test_empty_file(tree, capsys):
    (tree / "empty.py").write_bytes(b"")
    code, diags, _ = check(capsys)
    assert found(diags) == [("good.py", 3, "GG002")]


def test_binary_file(tree, capsys):
    (tree / "blob.py").write_bytes(b"import torch\n\x00\x01\x02\xff" * 50)
    code, diags, err = check(capsys)
    assert code == 1 and "Traceback" not in err
    assert found(diags) == [("blob.py", 1, "GG901"), ("good.py", 3, "GG002")]
    assert "binary" in diags[0]["message"] and diags[0]["severity"] == "error"


def test_non_utf8_bytes(tree, capsys):
    (tree / "latin.py").write_bytes(b"import torch\nname = '\xe9t\xe9'\n")
    code, diags, _ = check(capsys)
    assert found(diags) == [("good.py", 3, "GG002"), ("latin.py", 1, "GG901")]
    assert "line 2" in diags[1]["message"]


def test_latin1_with_coding_cookie_is_analysed(tree, capsys):
    source = "# -*- coding: latin-1 -*-\nname = 'été'\n" + LEAF_BUG
    (tree / "cookie.py").write_bytes(source.encode("latin-1"))
    code, diags, _ = check(capsys, "cookie.py")
    assert code == 1 and found(diags) == [("cookie.py", 5, "GG002")]


def test_too_large_file(tree, capsys):
    (tree / "huge.py").write_bytes(b"import torch\n" + b"y = 1\n" * (800 * 1024))
    code, diags, _ = check(capsys)
    assert found(diags) == [("good.py", 3, "GG002"), ("huge.py", 1, "GG901")]


def test_ten_thousand_lines(tree, capsys):
    filler = "".join(f"def f{i}(a, b):\n    c = a + b\n    return c\n\n" for i in range(2500))
    (tree / "long.py").write_text(filler + LEAF_BUG)
    code, diags, _ = check(capsys, "long.py")
    assert code == 1 and found(diags) == [("long.py", 10003, "GG002")]


def test_deeply_nested_expression_does_not_crash(tree, capsys):
    (tree / "deep.py").write_text("import torch\nx = torch.zeros(3)\nx += " + "+".join(["1"] * 20000) + "\n")
    (tree / "parens.py").write_text("import torch\nx = torch.zeros(3)\nx += " + "(" * 300 + "1" + ")" * 300 + "\n")
    code, diags, err = check(capsys)
    assert code == 1 and "Traceback" not in err and "internal error" not in err
    assert ("good.py", 3, "GG002") in found(diags)


def test_broken_symlink_is_skipped(tree, capsys):
    os.symlink(tree / "missing.py", tree / "dangling.py")
    os.symlink(tree / "missing.py", tree / ".#good.py")  # an editor lock file
    code, diags, err = check(capsys)
    assert code == 1 and "Traceback" not in err
    assert found(diags) == [("good.py", 3, "GG002")]


def test_symlinked_file_is_analysed_and_symlinked_dir_not_followed(tree, capsys):
    (tree / "real").mkdir()
    (tree / "real" / "m.py").write_text(LEAF_BUG)
    os.symlink(tree / "real", tree / "loop")
    os.symlink(tree / "good.py", tree / "alias.py")
    code, diags, _ = check(capsys)
    assert found(diags) == [("alias.py", 3, "GG002"), ("good.py", 3, "GG002"), ("real/m.py", 3, "GG002")]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can read a chmod 000 file")
def test_unreadable_file_real_permissions(tree, capsys):
    secret = tree / "secret.py"
    secret.write_text(LEAF_BUG)
    secret.chmod(0)
    try:
        code, diags, err = check(capsys)
    finally:
        secret.chmod(0o644)
    assert found(diags) == [("good.py", 3, "GG002"), ("secret.py", 1, "GG901")]
    assert "cannot read file" in diags[1]["message"]


def test_unreadable_file(tree, capsys, monkeypatch):
    """The same, for any user: reading the file fails with EACCES."""
    (tree / "secret.py").write_text(LEAF_BUG)
    real_read = Path.read_bytes

    def read_bytes(self):
        if self.name == "secret.py":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    code, diags, err = check(capsys)
    assert code == 1 and "Traceback" not in err
    assert found(diags) == [("good.py", 3, "GG002"), ("secret.py", 1, "GG901")]
    assert diags[1]["message"] == "cannot read file: Permission denied"


def test_many_bad_files_in_parallel(tree, capsys):
    for i in range(6):
        (tree / f"bin{i}.py").write_bytes(b"\0" * 10)
        (tree / f"syn{i}.py").write_text("import torch\nx = torch.ones(1)\nx += (\n")
    code = main(["check", "--format", "json", "--jobs", "2"])
    diags = json.loads(capsys.readouterr().out)["diagnostics"]
    assert code == 1
    assert sorted(d["code"] for d in diags) == ["GG002"] + ["GG900"] * 6 + ["GG901"] * 6


NOT_TENSORS = '''\
import numpy as np
import torch

def ints(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
        total *= 2
    return total

def lists(xs: list) -> list:
    out = []
    out += xs
    out[0] = 1
    out[1:2] = [3, 4]
    return out

def arrays() -> np.ndarray:
    a = np.zeros(3)
    a += 1
    a[0] = 5
    np.add(a, 1, out=a)
    return a

def strings(parts: list[str]) -> str:
    s = ""
    for p in parts:
        s += p
    return s

def dicts() -> dict:
    d = {}
    d["k"] = 1
    d["k"] += 1
    return d

class Counter:
    def __init__(self):
        self.n = 0

    def bump(self):
        self.n += 1

def tensor_without_grad() -> torch.Tensor:
    t = torch.zeros(3)
    t += 1
    t[0] = 2
    t.add_(1)
    return t
'''


def test_in_place_syntax_on_non_tensors_is_not_flagged(tree, capsys):
    (tree / "plain.py").write_text(NOT_TENSORS)
    code, diags, _ = check(capsys, "plain.py")
    assert (code, diags) == (0, [])
