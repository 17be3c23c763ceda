"""The fixes never run the analysis themselves: nothing in ``gradguard/fixes/`` imports the engine, the API or
the rules, at module level or inside a function (a fix checks a candidate through the ``still_found`` callback
``api`` passes in, the planner re-analyses through its ``analyse`` callback, and a fix that defers to another
rule's asks the builders ``api`` hands down)."""

from __future__ import annotations

import ast
from pathlib import Path

import gradguard.fixes

FIXES = Path(gradguard.fixes.__file__).parent
FORBIDDEN = ("gradguard.engine", "gradguard.api", "gradguard.rules")


def _imported(module: Path, package: tuple[str, ...] = ("gradguard", "fixes")) -> list[tuple[int, str]]:
    """Every module an import statement of ``module`` (in ``package``) names, relative ones made absolute, with its
    line."""
    package = list(package)
    found = []
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            stem = ".".join([*base, *([node.module] if node.module else [])])
            found.append((node.lineno, stem))
            found.extend((node.lineno, f"{stem}.{alias.name}") for alias in node.names)  # `from .. import engine`
    return found


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def test_no_module_of_fixes_imports_the_engine_the_api_or_the_rules():
    modules = sorted(FIXES.glob("*.py"))
    assert len(modules) >= 8
    bad = [f"{m.name}:{line}: {name}" for m in modules for line, name in _imported(m) if _forbidden(name)]
    assert not bad, bad


def test_the_check_sees_function_level_and_relative_imports(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from .. import engine\n    from ..api import analyze_source\n"
                      "import gradguard.engine\nfrom ..engine import analyze_module\nfrom ..rules import RULES\n")
    assert sorted(line for line, name in _imported(sample) if _forbidden(name)) == [2, 3, 3, 4, 5, 5, 6, 6]


def test_each_rule_fix_is_written_in_the_rule_file():
    """A rule's fix lives beside its check and docs (as ruff keeps a rule's fix with its violation): ``Rule.fix``
    is defined in the rule's own module, and no module of ``fixes/`` is used by one rule alone."""
    from gradguard.rules import ALL_RULES

    with_fix = [rule for rule in ALL_RULES if rule.fix is not None]
    assert len(with_fix) >= 14
    elsewhere = [(rule.code, rule.fix.__module__) for rule in with_fix
                 if rule.fix.__module__ != rule.check.__module__]
    assert not elsewhere, elsewhere
    rules_dir = FIXES.parent / "rules"
    users: dict[str, set[str]] = {}
    for rule_file in rules_dir.glob("gg*.py"):
        for _, name in _imported(rule_file, ("gradguard", "rules")):
            if name.startswith("gradguard.fixes.") and len(name.split(".")) > 2:  # `from ..fixes.x import ...`
                users.setdefault(name.split(".")[2], set()).add(rule_file.stem)
    used_by_fixes = {name.split(".")[2] for m in FIXES.glob("*.py") for _, name in _imported(m)
                     if name.startswith("gradguard.fixes.") and len(name.split(".")) > 2 and name.split(".")[2] != m.stem}
    alone = sorted(module for module, rules in users.items() if len(rules) == 1 and module not in used_by_fixes)
    assert not alone, f"fixes modules used by one rule only (their code belongs in that rule's file): {alone}"
