"""Multi-root workspaces: which ``[tool.gradguard]`` applies to a file.

A file in a workspace folder gets the nearest pyproject.toml from its own folder upward, stopping at the
workspace folder; when there is none inside the folder, the one the folder itself inherits (found upward from
it, as ``gradguard check FOLDER`` finds it).  A file in no folder gets the root's (``settings.py``).  The
editor's settings apply over each file's table.  A table is read once and kept with its pyproject.toml's
(mtime, size, inode): a lookup is a few ``stat`` calls, and an edited pyproject.toml applies at the next one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from ..config import Config, ConfigError, find_pyproject, load_config_file
from .settings import Settings, Stamp, pyproject_of

PYPROJECT = "pyproject.toml"


def folder_of(path: Path, folders: Iterable[Path]) -> Path | None:
    """The innermost of ``folders`` that holds ``path``."""
    holding = [f for f in folders if path == f or f in path.parents]
    return max(holding, key=lambda f: len(f.parts), default=None)


def pyproject_in(path: Path, folder: Path) -> Path | None:
    """The pyproject.toml for ``path`` in workspace folder ``folder`` (see the module docs)."""
    for parent in path.parents:
        if (parent / PYPROJECT).is_file():
            return Path(os.path.realpath(parent / PYPROJECT))
        if parent == folder or folder not in parent.parents:
            break
    return find_pyproject(folder)


class FolderConfigs:
    """The configurations of the pyproject.toml files other than the root's, each merged with the editor's
    settings; ``serial`` numbers them so that a result id can say which one a report was computed with."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # pyproject -> (its stamp, the root config it was merged under, the merged config, its serial)
        self._loaded: dict[Path | None, tuple[Stamp | None, Config, Config, int]] = {}
        self._serials = 0

    def config_for(self, path: Path, folders: Iterable[Path], warn: Callable[[str], None]) -> Config:
        """The configuration of the file at ``path``."""
        folder = folder_of(path, folders)
        if folder is None:
            return self.settings.config
        return self.of_pyproject(pyproject_in(path, folder), warn)

    def of_pyproject(self, pyproject: Path | None, warn: Callable[[str], None]) -> Config:
        """The configuration of a pyproject.toml (None: none), merged with the editor's settings."""
        root = self.settings
        if pyproject == root.pyproject:
            return root.config
        stamp = pyproject_of(str(pyproject.parent))[1] if pyproject is not None else None
        known = self._loaded.get(pyproject)
        if known is not None and known[0] == stamp and known[1] is root.config:
            return known[2]
        try:
            file_config = load_config_file(pyproject) if pyproject is not None else Config()
        except ConfigError as exc:
            if known is None or known[0] != stamp:  # once per version of the file
                warn(f"ignoring pyproject configuration: {exc}")
            file_config = Config()
        self._serials += 1
        merged = root.merged(file_config)
        self._loaded[pyproject] = (stamp, root.config, merged, self._serials)
        return merged

    def serial(self, config: Config) -> int:
        """0 for the root's configuration, else the number of the load that made ``config``."""
        return next((s for _, _, c, s in self._loaded.values() if c is config), 0)
