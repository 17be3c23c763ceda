"""`make demo` is what a newcomer runs first: it must show the findings themselves (location, message, notes),
not only counts, and stay fast.  The target's own recipe runs, with `setup` skipped (it would install into a
venv) and `gradguard` pointing at this tree."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


@pytest.fixture(scope="module")
def demo_output(tmp_path_factory) -> tuple[str, float]:
    bin_dir = tmp_path_factory.mktemp("bin")
    shim = bin_dir / "gradguard"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gradguard "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "server"), "GRADGUARD_NO_CACHE": "1"}
    start = time.monotonic()
    done = subprocess.run(["make", "--no-print-directory", "-o", "setup", "demo", f"BIN={bin_dir}"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    return done.stdout, elapsed


def test_demo_prints_every_finding_with_its_notes_then_the_counts(demo_output):
    out, _ = demo_output
    findings = re.findall(r"^examples/\w+\.py:\d+:\d+: (GG\d{3}) .+$", out, re.MULTILINE)
    notes = re.findall(r"^    examples/\w+\.py:\d+:\d+: note: .+$", out, re.MULTILINE)
    count_lines = list(re.finditer(r"^(\d+)\s+(GG\d{3})\s+[\w-]+$", out, re.MULTILINE))
    counts = [m.groups() for m in count_lines]
    assert findings and notes, out
    assert counts, out
    # every finding of the listing is in the counts, and the counts come after the listing
    assert sorted({code for code in findings}) == sorted(code for _, code in counts)
    assert sum(int(n) for n, _ in counts) == len(findings)
    assert count_lines[0].start() > out.rindex("note:")
    assert "Traceback" not in out


def test_demo_is_fast(demo_output):
    _, elapsed = demo_output
    assert elapsed < 30, f"make demo took {elapsed:.1f} s"


def test_demo_ends_with_the_next_step(demo_output):
    """A newcomer's next move: gradguard on their own code (it is in .venv/bin/, not on PATH), the fixes as a diff,
    the fixes applied, and which example is clean on purpose."""
    import shlex

    from gradguard.cli import build_parser

    out, _ = demo_output
    tail = out[out.index("== next"):]
    assert out.index("== next") > out.index("== findings per rule"), out  # last, after the counts
    commands = [line.split("#")[0].strip() for line in tail.splitlines() if line.strip().startswith(".venv/bin/gradguard")]
    assert [c.split()[2:] for c in commands] == [["PATH"], ["--diff", "PATH"], ["--fix", "PATH"]], tail
    for command in commands:  # each one is a command the CLI takes
        assert build_parser().parse_args(shlex.split(command)[1:]).command == "check"
    assert "--unsafe-fixes" in tail
    assert "examples/resnet_block.py has no finding on purpose" in tail
    assert "examples/resnet_block.py:" not in out  # and indeed it has none
    assert (ROOT / "examples" / "resnet_block.py").exists()


def test_the_readme_is_a_newcomers_page_and_links_every_docs_page():
    """README.md is what a newcomer reads first (issue 29): at most 250 lines, its two commands are `make demo` and
    `make test`, and every page of docs/ is linked from it (the reference lives there)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    two = readme[readme.index("## Two commands"):]
    block = two[two.index("```sh\n") + 6:two.index("```", two.index("```sh\n") + 6)]
    assert [line.split("#")[0].strip() for line in block.splitlines()] == ["make demo", "make test"]
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"](docs/{page.name}" in readme, f"README.md does not link docs/{page.name}"
    assert "](docs/rules/" in readme
