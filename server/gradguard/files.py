"""Which files ``gradguard check`` analyses.

Walking follows git's rules closely enough that a checkout and a working tree
give the same answer: ``.gitignore`` files (the repository's and nested ones,
the deeper file winning, an ignored folder never entered), a fixed set of
folders that are never source (virtualenvs, build output), and the configured
``exclude`` patterns.  A path named on the command line is analysed even when
it would be ignored, as ruff does: the user asked for it.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import pathspec

from .config import Config, invalid_pattern
from .notebooks import is_notebook, read_language

SKIP_DIRS = frozenset(
    {".git", ".venv", "venv", "__pycache__", "node_modules", "site-packages", "build", "dist", ".tox", ".eggs",
     ".ipynb_checkpoints", ".gradguard_cache"}
)
SOURCE_SUFFIXES = (".py", ".ipynb")  # notebooks: see gradguard.notebooks


class MissingPath(Exception):
    """A path given on the command line does not exist; the message says so, and what the path is instead."""


def _missing(given: str, path: Path) -> MissingPath:
    """The error for a ``given`` path that is not there: a symlink loop and a dangling symlink say so."""
    if not path.is_symlink():
        return MissingPath(f"path does not exist: {given}")
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return MissingPath(f"path is a symlink loop: {given}")
    return MissingPath(f"path is a broken symlink: {given} -> {os.readlink(path)}")


def _kind(path: Path) -> str:
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "unreadable"
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a file"


def _refuse_other_language(path: Path, given: str) -> None:
    """A notebook named explicitly whose kernel is not Python: refused (it would be skipped, and the run
    would say "All checks passed." about a file it never read).  One in a folder is skipped quietly."""
    if not is_notebook(path):
        return
    try:
        data = path.read_bytes()
    except OSError:
        return  # the analysis reports it
    language = read_language(data)
    if language is not None and language != "python":
        raise MissingPath(f"not a Python notebook (its kernel language is {language}), so not analysed: {given}")


@dataclass(frozen=True)
class Target:
    """A file to analyse and the name it is shown under."""

    path: Path
    display: str


@dataclass(frozen=True)
class _Rules:
    """Gitignore-style pattern sets, each anchored at a folder; later sets take precedence."""

    anchored: tuple[tuple[Path, pathspec.PathSpec], ...] = ()

    def with_file(self, folder: Path, ignore_file: Path) -> "_Rules":
        try:
            lines = ignore_file.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return self
        return _Rules(self.anchored + ((folder, gitignore_spec(lines)),))

    def ignored(self, path: Path, is_dir: bool) -> bool:
        verdict = False
        for folder, spec in self.anchored:
            try:
                rel = path.relative_to(folder).as_posix()
            except ValueError:
                continue
            include = spec.check_file(rel + "/" if is_dir else rel).include
            if include is not None:
                verdict = include
        return verdict


def gitignore_spec(lines: list[str]) -> pathspec.GitIgnoreSpec:
    """The patterns of a ``.gitignore`` file, as git reads them: a line git accepts but that matches nothing
    (a lone ``!``, a pattern ending in an unescaped ``\\``) is skipped, never an error."""
    try:
        return pathspec.GitIgnoreSpec.from_lines(lines)
    except ValueError:
        return pathspec.GitIgnoreSpec.from_lines([line for line in lines if not invalid_pattern(line)])


def _git_root(folder: Path) -> Path | None:
    for candidate in [folder, *folder.parents]:
        if (candidate / ".git").exists():
            return candidate
    return None


def _inherited_rules(folder: Path) -> _Rules:
    """The ``.gitignore`` files above ``folder`` up to its repository root (``_walk`` reads its own)."""
    root = _git_root(folder)
    rules = _Rules()
    if root is None:
        return rules
    for parent in reversed(folder.parents):
        if (parent == root or root in parent.parents) and (parent / ".gitignore").is_file():
            rules = rules.with_file(parent, parent / ".gitignore")
    return rules


def _exclude_rules(config: Config, cwd: Path) -> _Rules:
    if not config.exclude:
        return _Rules()
    root = (config.root or cwd).resolve()
    return _Rules(((root, pathspec.GitIgnoreSpec.from_lines(config.exclude)),))


def _display(path: Path, cwd: Path) -> str:
    try:
        return path.relative_to(cwd).as_posix()
    except ValueError:
        return str(path)


def _walk(folder: Path, rules: _Rules, exclude: _Rules) -> Iterable[Path]:
    if (folder / ".gitignore").is_file():
        rules = rules.with_file(folder, folder / ".gitignore")
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return  # unreadable folder: nothing we can list in it
    for entry in entries:
        path = folder / entry.name
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            # Broken symlinks (editor lock files such as ``.#model.py`` are exactly that) are not files.
            is_file = not is_dir and entry.is_file(follow_symlinks=True)
        except OSError:
            continue
        if is_dir:
            if entry.name in SKIP_DIRS or rules.ignored(path, True) or exclude.ignored(path, True):
                continue
            yield from _walk(path, rules, exclude)
        elif is_file and entry.name.endswith(SOURCE_SUFFIXES):
            if not (rules.ignored(path, False) or exclude.ignored(path, False)):
                yield path


def discover(paths: Sequence[str], config: Config, cwd: Path | None = None) -> list[Target]:
    """Every source file under ``paths``, once each, sorted by display name.

    Raises ``MissingPath`` for a path that does not exist, or that is named explicitly and is not a regular
    file (a FIFO would block the read forever).
    """
    cwd = (cwd or Path.cwd()).resolve()
    exclude = _exclude_rules(config, cwd)
    found: dict[Path, Target] = {}
    for given in paths:
        path = Path(given)
        absolute = (cwd / path) if not path.is_absolute() else path
        if not absolute.exists():
            raise _missing(given, absolute)
        absolute = Path(os.path.normpath(absolute))
        if absolute.is_dir():
            inherited = _inherited_rules(absolute)
            if inherited.ignored(absolute, True):  # a folder named explicitly is analysed even if ignored (like ruff)
                inherited = _Rules()
            for file in _walk(absolute, inherited, exclude):
                found.setdefault(file, Target(file, _display(file, cwd)))
        elif not absolute.is_file():  # a FIFO, socket or device: reading it may never end
            raise MissingPath(f"not a regular file ({_kind(absolute)}), so not analysed: {given}")
        else:  # named explicitly: analysed whatever its name or ignore status
            _refuse_other_language(absolute, given)
            found.setdefault(absolute, Target(absolute, _display(absolute, cwd)))
    return sorted(found.values(), key=lambda t: t.display)
