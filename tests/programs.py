"""Small torch programs the fix tests write inline: what the analyzer finds in one, and what it returns when run."""

from __future__ import annotations

import importlib.util
import itertools
import warnings
from pathlib import Path

from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.text import apply_edits
from gradients import grads_equal


def found(code: str, src: str) -> list:
    """The findings of rule ``code`` in ``src`` (without jedi: the tests' programs need none)."""
    return [d for d in analyze_source(src, "t.py", Config(jedi=False)).diagnostics if d.code == code]


def run_program(src: str, entry: str = "train"):
    """Execute ``src`` and return what its ``entry`` function returns (a list of gradients)."""
    scope: dict = {}
    exec(compile(src, "fixed", "exec"), scope)  # noqa: S102 - the tests' own programs
    return scope[entry]()


_loaded = itertools.count()


def load_program(path: Path):
    """``path`` imported as a fresh module each time (a program and its fixed copy share a file name)."""
    spec = importlib.util.spec_from_file_location(f"program_{path.stem}_{next(_loaded)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_fix_proven(text: str, path: Path, edits, fixed: Path) -> None:
    """``edits`` made to ``text`` (the program at ``path``), written to ``fixed``: the fixed program's ``run()`` must
    run clean under torch and give the gradients of the original's ``reference()``."""
    fixed.write_text(apply_edits(text, list(edits)), encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = load_program(fixed).run()  # must run clean: torch raising here fails the test
        expected = load_program(path).reference()
    assert grads_equal(got, expected), fixed.read_text(encoding="utf-8")
