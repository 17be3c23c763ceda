"""docs/rules/ and the pages shipped in the package (server/gradguard/rule_docs/) are generated from the rule
files (``python -m gradguard.docs``) and must stay in sync; diagnostics link to the shipped ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gradguard import docs
from gradguard.cli import main
from gradguard.doc_links import SHIPPED_DOCS, rule_doc_url
from gradguard.rules import ALL_RULES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "rules"


@pytest.mark.parametrize("folder", [DOCS, SHIPPED_DOCS], ids=["docs/rules", "package rule_docs"])
def test_committed_pages_are_what_the_rules_generate(folder, tmp_path):
    problems = docs.stale(folder)
    assert not problems, "\n".join(problems) + "\nrun `python -m gradguard.docs` and commit both folders"
    docs.write(tmp_path)  # regenerating from scratch gives the same set of files, byte for byte
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in folder.glob("*.md"))
    for page in tmp_path.iterdir():
        assert page.read_bytes() == (folder / page.name).read_bytes(), page.name


def test_the_generator_writes_both_folders_by_default():
    assert docs.default_directories() == [SHIPPED_DOCS, DOCS]
    assert SHIPPED_DOCS.parent == Path(docs.__file__).resolve().parent  # inside the package: shipped with it


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_rule_command_prints_the_page(rule, capsys):
    assert main(["rule", rule.code.lower()]) == 0
    assert capsys.readouterr().out == (DOCS / f"{rule.code}.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_page_has_every_part_and_the_examples_the_suite_runs(rule):
    page = (DOCS / f"{rule.code}.md").read_text(encoding="utf-8")
    assert rule_doc_url(rule.code) == (SHIPPED_DOCS / f"{rule.code}.md").as_uri()  # diagnostics link here
    assert page.startswith(f"# {rule.code} {rule.name}\n")
    for section in ("## What torch does", "## Flagged", "## How to fix it", "## Suppressing it"):
        assert section in page
    for example in rule.invalid:  # run with torch by tests/test_rule_examples.py
        assert f"```python\n{example.code.strip()}\n```" in page
        if example.raises:
            assert f"RuntimeError: {example.raises}" in page
    assert f"[{rule.code}]({rule.code}.md)" in (DOCS / "README.md").read_text(encoding="utf-8")


def test_check_mode_names_a_stale_page(tmp_path):
    docs.write(tmp_path)
    (tmp_path / "GG001.md").write_text("edited by hand\n")
    (tmp_path / "GG999.md").write_text("a rule that is gone\n")
    assert docs.main(["--check", "--out", str(tmp_path)]) == 1
    assert sorted(Path(p.split(":")[0]).name for p in docs.stale(tmp_path)) == ["GG001.md", "GG999.md"]
    docs.main(["--out", str(tmp_path)])
    assert docs.stale(tmp_path) == [] and not (tmp_path / "GG999.md").exists()


def test_module_runs_as_a_script():
    run = subprocess.run([sys.executable, "-m", "gradguard.docs", "--check"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr


def test_the_wheel_ships_the_pages_and_the_license(tmp_path):
    """Diagnostics link to rule_docs/ of the installed package: the wheel must carry it (package data)."""
    pytest.importorskip("setuptools")
    import shutil
    import zipfile

    src = tmp_path / "src"
    shutil.copytree(ROOT / "server", src / "server", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = tmp_path.glob("gradguard-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for page in [*(f"{rule.code}.md" for rule in ALL_RULES), "README.md"]:
        assert f"gradguard/rule_docs/{page}" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
