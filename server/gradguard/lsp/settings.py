"""The configuration the server analyses with: pyproject ``[tool.gradguard]`` of the workspace root, overridden by
``initializationOptions`` and ``workspace/didChangeConfiguration`` settings ``{"gradguard": {...}}`` (keys present
replace ``select``/``ignore``; ``severity`` entries are merged).  The pyproject.toml's (mtime, size, inode) is
kept, so that a changed file is noticed with a few ``stat`` calls and no read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import EDITOR, Config, ConfigError, config_from_table, find_pyproject, load_config_file

Stamp = tuple[int, int, int]
BESIDE = frozenset({"run", "probe", "trusted", "diagnosticMode"})  # options beside "gradguard", not in it
CONFIG_KEYS = frozenset({"select", "ignore", "exclude", "severity", "jedi", "view-functions", "docs-url",
                         "baseline"})  # the keys of "gradguard" (config.config_from_table)


def stamp_of(path: Path | None) -> Stamp | None:
    """A file's (mtime, size, inode); None when there is none."""
    try:
        st = path.stat() if path is not None else None
    except OSError:
        st = None
    return (st.st_mtime_ns, st.st_size, st.st_ino) if st is not None else None


def pyproject_of(root: str | None) -> tuple[Path | None, Stamp | None]:
    """The pyproject.toml that applies under ``root``, and its (mtime, size, inode)."""
    pyproject = find_pyproject(Path(root)) if root else None
    return pyproject, stamp_of(pyproject)


class Settings:
    """The file's configuration, the editor's overrides, and the two merged (``config``)."""

    def __init__(self) -> None:
        self.file_config = Config()
        self.overrides: dict[str, Any] = {}
        self.parsed = Config()  # ``overrides`` parsed
        self.config = Config()
        self.pyproject: Path | None = None  # the pyproject.toml ``file_config`` came from
        self.pyproject_stamp: Stamp | None = None  # ... and its (mtime, size, inode)
        self.baseline_stamp: Stamp | None = None  # of its baseline file: rewritten by ``--write-baseline``

    def _baseline_path(self) -> Path | None:
        return self.file_config.baseline.path if self.file_config.baseline is not None else None

    def pyproject_changed(self, root: str | None) -> bool:
        """The pyproject.toml, or the baseline file it names, changed on disk."""
        return (pyproject_of(root)[1] != self.pyproject_stamp
                or stamp_of(self._baseline_path()) != self.baseline_stamp)

    def load_file(self, root: str | None) -> list[str]:
        """Read the workspace's pyproject.toml again; the warnings to show."""
        pyproject, self.pyproject_stamp = pyproject_of(root)
        self.pyproject = pyproject
        try:
            self.file_config = load_config_file(pyproject) if pyproject is not None else Config()
        except ConfigError as exc:
            self.file_config = Config()
            return [f"ignoring pyproject configuration: {exc}"]
        finally:
            self.baseline_stamp = stamp_of(self._baseline_path())
        return []

    def set_overrides(self, table: Any) -> list[str]:
        """The editor's settings (``{"gradguard": {...}}`` or the inner table) over the file's; the warnings."""
        warnings = []
        if isinstance(table, dict) and "gradguard" in table:
            table = table["gradguard"]  # not an object: the warning below
        elif isinstance(table, dict) and table and set(table) <= BESIDE:
            table = {}  # only options beside "gradguard": no rule settings
        if table is None:
            table = {}
        if not isinstance(table, dict):
            warnings.append("editor settings: \"gradguard\" must be an object like {\"select\": [...], \"ignore\": [...]}; "
                            "pyproject.toml's [tool.gradguard], if any, still applies")
            table = {}
        try:
            parsed = config_from_table(table, source=EDITOR)
        except ConfigError as exc:  # named as the editor's (not the pyproject.toml's, which is still used)
            warnings.append(f"ignoring the editor settings (initializationOptions / workspace settings "
                            f"\"gradguard\"; pyproject.toml's [tool.gradguard], if any, still applies): {exc}")
            table, parsed = {}, Config()
        self.overrides, self.parsed = table, parsed
        self.config = self.merged(self.file_config)
        return warnings

    def merged(self, file_config: Config) -> Config:
        """``file_config`` (the root's, or another folder's: ``folders.py``) with the editor's settings over it."""
        table, parsed = self.overrides, self.parsed
        return file_config.with_overrides(
            select=parsed.select if "select" in table else None,
            ignore=parsed.ignore if "ignore" in table else None,
            severity=parsed.severity,
            docs_url=parsed.docs_url,
        )

    def reload(self, root: str | None) -> list[str]:
        """The file changed: read it and apply the same overrides on top."""
        return self.load_file(root) + self.set_overrides(self.overrides)
