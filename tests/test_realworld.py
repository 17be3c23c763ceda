"""The real-bug corpus of bench/realworld: every sidecar is valid, and static recall never drops.

Fast: no case is run under torch here (that is `python bench/realworld.py verify`, in `make realworld`); the
recall ratchet is one static `gradguard check` over our cases and one over ../shared/realworld-dev (when
present), compared with bench/realworld/ratchet.json.  Raise the ratchet with `python bench/realworld.py ratchet`.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _harness():
    spec = importlib.util.spec_from_file_location("bench_realworld", ROOT / "bench" / "realworld.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


rw = _harness()


def test_every_sidecar_is_valid():
    cases = rw.load_cases()
    assert cases, "no cases in bench/realworld/cases"
    problems = [f"{c.name}: {p}" for c in cases for p in c.problems]
    problems += [f"{name}: no sidecar" for name in rw.orphans()]
    assert not problems, "\n".join(problems)


def test_thread_keys_merge_posts_of_one_thread():
    key = rw.thread_key
    assert key("https://discuss.pytorch.org/t/some-title/12345/3") == key("https://discuss.pytorch.org/t/x/12345")
    assert key("https://github.com/a/b/issues/7#issuecomment-1") == key("https://github.com/a/b/issues/7/")
    assert key("https://stackoverflow.com/questions/42/title") == key("https://stackoverflow.com/q/42")
    assert key("https://github.com/a/b/issues/7") != key("https://github.com/a/b/issues/70")


def test_exception_line_is_read_from_the_last_traceback_block():
    stderr = ("Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\nValueError: first\n\n"
              "During handling of the above exception, another exception occurred:\n\n"
              "Traceback (most recent call last):\n  File \"a.py\", line 3, in <module>\n    x.backward()\n"
              "    ~~~~~~^^\nRuntimeError: second: details\nmore details\n")
    assert rw.last_exception_line(stderr) == "RuntimeError: second: details"


def test_static_recall_does_not_drop():
    ratchet = json.loads(rw.RATCHET.read_text())
    counts = rw.static_counts()
    print()
    for label, c in counts.items():
        print(f"{label}: static found {c['found']}/{c['cases']} (ratchet {ratchet.get(label, {}).get('found')})")
    for label in ("ours", "realworld_dev"):
        if label == "realworld_dev" and not rw.DEV.exists():
            pytest.skip("../shared/realworld-dev is absent")
        assert label in counts
        if label in ratchet:
            assert counts[label]["found"] >= ratchet[label]["found"], (
                f"{label}: static recall dropped to {counts[label]['found']}/{counts[label]['cases']} "
                f"from {ratchet[label]['found']}/{ratchet[label]['cases']} (see `python bench/realworld.py score`)")
