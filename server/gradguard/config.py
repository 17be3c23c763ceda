"""User configuration: ``[tool.gradguard]`` in pyproject.toml, and overrides from the CLI or LSP.

```toml
[tool.gradguard]
select = ["GG0"]            # code prefixes to enable (default: all)
ignore = ["GG005"]          # code prefixes to disable
exclude = ["build/", "third_party/**"]   # gitignore-style patterns, relative to the pyproject.toml
jedi = false                # true: follow imports of project modules with jedi (3-5x slower)
view-functions = ["mylib.ops.flatten_heads"]  # functions that return a view of their first argument
docs-url = "https://example.org/gradguard/rules"  # where diagnostics link to CODE.md (default: the shipped pages)
baseline = "gradguard-baseline.json"  # report only findings not recorded there (`gradguard check --write-baseline`)
[tool.gradguard.severity]
GG001 = "warning"
```
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

from .baseline import Baseline, BaselineError
from .baseline import load as load_baseline
from .diagnostics import Severity
from .doc_links import is_docs_base
from .errors import ConfigError
from .output import INPUT_PROBLEMS
from .rules import ALL_RULES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


# Every code a finding can carry: the rules, then the input problems (GG900, GG901, GG903), the same list
# `gradguard rules` prints (``output.catalog``).  A selector naming none of them would silently turn rules off
# (``select = ["GG777"]`` checks nothing), so it is an error, as in ruff.
KNOWN_CODES: tuple[str, ...] = tuple(r.code for r in ALL_RULES) + tuple(
    p.code for p in INPUT_PROBLEMS if p.code not in {r.code for r in ALL_RULES})

# Where a table of settings comes from, as its error messages name it: ``[tool.gradguard]`` of a pyproject.toml,
# or the editor's settings (the language server's initializationOptions / workspace settings ``gradguard``).
PYPROJECT = "pyproject"
EDITOR = "editor"


def setting_name(source: str, key: str | None = None) -> str:
    """How an error names a setting: ``[tool.gradguard] select`` in a pyproject.toml, ``gradguard.select`` of
    the editor's settings."""
    if source == EDITOR:
        return "editor settings (gradguard)" if key is None else f"editor settings gradguard.{key}"
    if key == "severity":
        return "[tool.gradguard.severity]"
    return "[tool.gradguard]" if key is None else f"[tool.gradguard] {key}"


def check_codes(codes: Iterable[str], where: str, prefixes: bool = True) -> None:
    """Raise ``ConfigError`` naming the first of ``codes`` that matches no known code (``where``: the setting)."""
    for code in codes:
        known = any(k.startswith(code) for k in KNOWN_CODES) if prefixes else code in KNOWN_CODES
        if not known:
            what = "rule code or prefix" if prefixes else "rule code"
            raise ConfigError(f"{where}: unknown {what} {code!r} (valid codes: {', '.join(KNOWN_CODES)})")


@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] = ()  # empty: every rule
    ignore: tuple[str, ...] = ()
    severity: dict[str, Severity] = field(default_factory=dict)
    exclude: tuple[str, ...] = ()
    root: Path | None = None  # the folder of the pyproject.toml it came from
    jedi: bool = False  # ask jedi about values imported from other modules (slower, sees across files)
    # Qualified names of functions outside torch that return a view of their first argument, besides the
    # shipped table (knowledge/third_party_views.json: einops...).
    view_functions: tuple[str, ...] = ()
    # Where rule documentation links point (``<docs_url>/CODE.md``); None: the pages shipped in the package.
    # Not part of any cache key: links are made when findings are shown, never stored with them.
    docs_url: str | None = None
    # The findings to leave unreported (``baseline.py``): ``baseline = "FILE"``, or the CLI's --baseline.
    baseline: Baseline | None = None

    def enabled(self, code: str) -> bool:
        if self.select and not any(code.startswith(p) for p in self.select):
            return False
        return not any(code.startswith(p) for p in self.ignore)

    def severity_for(self, code: str, default: Severity) -> Severity:
        return self.severity.get(code, default)

    def with_overrides(
        self,
        select: Iterable[str] | None = None,
        ignore: Iterable[str] | None = None,
        extend_ignore: Iterable[str] = (),
        severity: dict[str, Severity] | None = None,
        docs_url: str | None = None,
    ) -> "Config":
        """Command-line or editor settings take precedence over the file."""
        return replace(
            self,
            select=tuple(select) if select is not None else self.select,
            ignore=(tuple(ignore) if ignore is not None else self.ignore) + tuple(extend_ignore),
            severity={**self.severity, **(severity or {})},
            docs_url=docs_url if docs_url is not None else self.docs_url,
        )


def _codes(value: Any, key: str, source: str = PYPROJECT) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{setting_name(source, key)} must be a list of rule codes")
    codes = tuple(v.strip().upper() for v in value if v.strip())
    check_codes(codes, setting_name(source, key))
    return codes


def parse_severity(value: str) -> Severity:
    try:
        return Severity(value.lower())
    except ValueError:
        raise ConfigError(f"unknown severity {value!r} (use error, warning or info)") from None


def config_from_table(table: dict[str, Any], root: Path | None = None, source: str = PYPROJECT) -> Config:
    """Build a Config from the ``[tool.gradguard]`` table (or the LSP's settings object: ``source=EDITOR``, so
    that an error names the editor's settings, not the pyproject.toml the value is not in)."""
    def name(key: str | None = None) -> str:
        return setting_name(source, key)

    known = {"select", "ignore", "exclude", "severity", "jedi", "view-functions", "docs-url", "baseline"}
    unknown = set(table) - known
    if unknown:
        raise ConfigError(f"{name()} has unknown keys: {', '.join(sorted(unknown))}")
    severity = table.get("severity", {})
    if not isinstance(severity, dict):
        raise ConfigError(f"{name('severity')} must map rule codes to error|warning|info")
    exclude = table.get("exclude", [])
    if isinstance(exclude, str):
        exclude = [exclude]
    if not isinstance(exclude, list) or not all(isinstance(v, str) for v in exclude):
        raise ConfigError(f"{name('exclude')} must be a list of patterns")
    bad = next((v for v in exclude if invalid_pattern(v)), None)
    if bad is not None:
        raise ConfigError(f"{name('exclude')}: {bad!r} is not a gitignore pattern that matches anything")
    jedi = table.get("jedi", False)
    if not isinstance(jedi, bool):
        raise ConfigError(f"{name('jedi')} must be true or false")
    views = table.get("view-functions", [])
    if not isinstance(views, list) or not all(isinstance(v, str) and re.fullmatch(r"[A-Za-z_][\w.]*", v) for v in views):
        raise ConfigError(f"{name('view-functions')} must be a list of qualified names (\"pkg.module.function\")")
    try:
        severities = {str(k).strip().upper(): parse_severity(str(v)) for k, v in severity.items()}
    except ConfigError as exc:
        raise ConfigError(f"{name('severity')}: {exc}") from None
    check_codes(severities, name("severity"), prefixes=False)
    docs_url = table.get("docs-url")
    if docs_url is not None and not (isinstance(docs_url, str) and is_docs_base(docs_url)):
        raise ConfigError(f'{name("docs-url")} must be a URL such as "https://example.org/gradguard/rules"')
    return Config(
        baseline=_baseline(table.get("baseline"), root, source),
        docs_url=docs_url,
        jedi=jedi,
        view_functions=tuple(views),
        select=_codes(table.get("select", []), "select", source),
        ignore=_codes(table.get("ignore", []), "ignore", source),
        severity=severities,
        exclude=tuple(exclude),
        root=root,
    )


def _baseline(value: Any, root: Path | None, source: str = PYPROJECT) -> Baseline | None:
    """``baseline = "FILE"``: read now, so a bad file is reported where the configuration is."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f'{setting_name(source, "baseline")} must be a file name such as "gradguard-baseline.json"')
    if root is None:
        raise ConfigError(f"{setting_name(source, 'baseline')}: the baseline is read from pyproject.toml only "
                          "(its path is relative to it)")
    try:
        return load_baseline(root / value, root)
    except BaselineError as exc:
        raise ConfigError(f"[tool.gradguard] baseline: {exc}") from None


def find_pyproject(start: Path) -> Path | None:
    start = Path(os.path.realpath(start))  # not Path.resolve(): it raises on a symlink loop
    for folder in [start, *start.parents] if start.is_dir() else list(start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_config_file(pyproject: Path) -> Config:
    """The ``[tool.gradguard]`` table of one pyproject.toml (or any TOML file with that table)."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {pyproject}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{pyproject}: {exc}") from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{pyproject}: `tool` must be a table ([tool.gradguard]), not {type(tool).__name__}")
    table = tool.get("gradguard", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject}: [tool.gradguard] must be a table")
    try:
        return config_from_table(table, root=pyproject.resolve().parent)
    except ConfigError as exc:  # the file it came from: a project can have several pyproject.toml
        raise ConfigError(f"{pyproject}: {exc}") from None


def load_config(start: Path) -> Config:
    """The ``[tool.gradguard]`` table of the nearest pyproject.toml at or above ``start``."""
    pyproject = find_pyproject(start)
    return Config() if pyproject is None else load_config_file(pyproject)


def invalid_pattern(line: str) -> bool:
    """Whether pathspec refuses the gitignore line (``!``, ``build\\``: git takes them, and they match nothing)."""
    import pathspec  # only for a table with ``exclude``: ~6 ms of the language server's start otherwise

    try:
        pathspec.GitIgnoreSpec.from_lines([line])
    except ValueError:
        return True
    return False
