"""The CLI's content-hash cache: a file whose bytes, name and settings are unchanged is not analysed again.

One entry per file, named by a key that hashes everything the file's result depends on:

- gradguard itself: its version and a stamp (name, size, mtime) of its own modules, so an upgrade or an
  edit of an editable install never serves old results;
- the op table ``knowledge/torch_ops.json`` (its bytes: the table's format and torch version are in them);
- the settings that change results (select, ignore, severities, jedi, view functions), and whether fixes
  can be built here (libcst);
- the file: its display name, absolute path and the hash of its bytes;
- for a file that imports anything but the standard library, torch, numpy and typing: a stamp of every ``.py``
  file under the file's project root (calls are followed into the project's modules, and jedi may read any of
  them to learn what an imported helper returns), so editing a helper re-analyses the files that may use it.

An entry holds its own key, the error and the diagnostics as JSON (``Diagnostic.to_json``, fixes included,
so ``--fix`` can use a hit, and each one's baseline fingerprint); a clean file's entry says so explicitly.  An
entry is only ever stored under the key of the very bytes its result is the analysis of (``put`` is given
their digest; a file edited between the cache's read and the analysis's is not stored).  Entries are written
atomically (a temporary file in the same folder, fsync'd, then ``os.replace``), so parallel runs -- pre-commit
starts several -- can share one cache, and a crash leaves the old entry or the new one.  An entry that does not
parse or validate (empty, torn, the wrong shape, another key's) is a miss, never a clean result.  Nothing is
ever pruned: delete the folder to reclaim space.

``--no-cache`` or ``GRADGUARD_NO_CACHE=1`` turns it off.  Where: ``$GRADGUARD_CACHE_DIR`` when set; else
``.gradguard_cache/`` in the project root (the folder of the ``pyproject.toml`` the configuration came
from, else the git root, else the current folder), which holds a ``.gitignore`` of ``*`` and a
``CACHEDIR.TAG``; if that folder cannot be written, ``gradguard/`` under ``$XDG_CACHE_HOME`` (default
``~/.cache``), one subfolder per project.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__
from .config import Config
from .diagnostics import Diagnostic, FileResult
from .fixes import unavailable as fixes_unavailable

FORMAT = 2  # 1: a clean file's entry was empty, which a torn write could fake
DIR_NAME = ".gradguard_cache"
ENV_DIR = "GRADGUARD_CACHE_DIR"
ENV_OFF = "GRADGUARD_NO_CACHE"
CACHEDIR_TAG = (  # https://bford.info/cachedir/
    "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by gradguard.\n"
)

_IMPORT = re.compile(rb"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import|import[ \t]+([\w. \t,]+))", re.MULTILINE)
_NOTEBOOK_IMPORT = re.compile(rb'(?:"|\\n)[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import|import[ \t]+([\w. \t,]+))')
_SKIP = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", "venv", ".tox", ".eggs",
                   DIR_NAME, ".ipynb_checkpoints", ".mypy_cache", ".pytest_cache", ".ruff_cache"})


def _hash(*parts: bytes | str) -> str:
    h = hashlib.blake2b(digest_size=20)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def digest_of(data: bytes) -> str:
    """The digest of a file's bytes the cache keys on (``batch`` returns it with each result)."""
    return hashlib.blake2b(data, digest_size=20).hexdigest()


def _tree_stamp(root: Path, suffix: str = ".py") -> str:
    """A hash of (relative path, size, mtime) of every ``suffix`` file under ``root``."""
    rows = []
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in _SKIP:
                        stack.append(Path(entry.path))
                elif entry.name.endswith(suffix):
                    st = entry.stat()
                    rows.append(f"{os.path.relpath(entry.path, root)}\0{st.st_size}\0{st.st_mtime_ns}")
            except OSError:
                continue
    rows.sort()
    return _hash(*rows)


def imports_other_code(data: bytes, notebook: bool = False) -> bool:
    """Whether the text imports a module jedi might read (mirrors ``engine._imports_project_code``,
    but from the raw text: it must cost far less than parsing).  Errs towards yes."""
    stdlib = sys.stdlib_module_names
    for m in (_NOTEBOOK_IMPORT if notebook else _IMPORT).finditer(data):
        names = [m.group(1)] if m.group(1) is not None else re.split(rb"[ \t]*,[ \t]*", m.group(2).strip())
        for name in names:
            name = name.split()[0].decode("ascii", "replace") if name.split() else ""
            if not name or name.startswith("."):
                return True
            if name.split(".")[0] not in stdlib and not name.startswith(("torch", "numpy", "typing")):
                return True
    return False


def project_root(config: Config, cwd: Path) -> Path:
    if config.root is not None:
        return config.root
    for folder in [cwd, *cwd.parents]:
        if (folder / ".git").exists():
            return folder
    return cwd


def default_directory(config: Config, cwd: Path | None = None) -> Path:
    """Where the cache lives (see the module docs); the folder may not exist yet."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    root = project_root(config, (cwd or Path.cwd()).resolve())
    if os.access(root, os.W_OK) or os.access(root / DIR_NAME, os.W_OK):
        return root / DIR_NAME
    xdg = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return xdg / "gradguard" / _hash(str(root))[:16]


def open_cache(config: Config, cwd: Path | None = None) -> "ResultCache | None":
    """The cache for a run with ``config``; None when ``$GRADGUARD_NO_CACHE`` is set (as ``--no-cache``)."""
    if os.environ.get(ENV_OFF, "").strip() not in ("", "0"):
        return None
    return ResultCache(default_directory(config, cwd), config)


@dataclass
class ResultCache:
    directory: Path
    config: Config
    hits: int = 0
    misses: int = 0
    _keys: dict[str, str] = field(default_factory=dict)  # display path -> key of the bytes read for it
    _digests: dict[str, str] = field(default_factory=dict)  # display path -> digest of the bytes read for it
    _stamps: dict[Path, str] = field(default_factory=dict)
    _salt: str = ""

    def __post_init__(self) -> None:
        package = Path(__file__).parent
        from .knowledge import TABLE_PATH

        try:
            table = TABLE_PATH.read_bytes()
        except OSError:
            table = b""
        c = self.config
        settings = json.dumps([sorted(c.select), sorted(c.ignore), sorted((k, v.value) for k, v in c.severity.items()),
                               c.jedi, sorted(c.view_functions), fixes_unavailable()])
        self._salt = _hash(str(FORMAT), __version__, _tree_stamp(package), hashlib.blake2b(table).hexdigest(), settings)
        self.entries = self.directory / f"v{FORMAT}"

    # --- keys ---

    def _project_stamp(self, path: Path) -> str:
        from .inference.jedi_oracle import project_root as jedi_root

        root = jedi_root(path)
        if root not in self._stamps:
            self._stamps[root] = _tree_stamp(root)
        return self._stamps[root]

    def key(self, path: Path, display: str, data: bytes) -> str:
        notebook = display.lower().endswith(".ipynb")
        depends = ""
        if imports_other_code(data, notebook):  # calls are followed into the project's modules (and jedi reads them)
            depends = self._project_stamp(path)
        return _hash(self._salt, display, str(path.resolve()), hashlib.blake2b(data).digest(), depends)

    # --- entries ---

    def _file(self, key: str) -> Path:
        return self.entries / key[:2] / key

    def digest(self, display: str) -> str | None:
        """The digest of the bytes ``get`` read for ``display`` (what a hit is the result of)."""
        return self._digests.get(display)

    def get(self, path: Path, display: str) -> FileResult | None:
        """The cached result for the file as it is now, or None (then ``put`` stores the fresh one)."""
        try:
            data = path.read_bytes()
        except OSError:
            return None  # the analysis reports it; an unreadable file is never cached
        key = self._keys[display] = self.key(path, display, data)
        self._digests[display] = digest_of(data)
        result = self._load(key, display)
        if result is None:
            self.misses += 1
        else:
            self.hits += 1
        return result

    def _load(self, key: str, display: str) -> FileResult | None:
        """The entry ``key`` if it is whole and of the right shape; anything else is a miss."""
        try:
            stored = json.loads(self._file(key).read_bytes().decode("utf-8"))
        except (OSError, ValueError):  # missing, unreadable, empty, torn, not UTF-8, not JSON
            return None
        if not (isinstance(stored, dict) and stored.get("key") == key and isinstance(stored.get("diagnostics"), list)
                and (stored.get("error") is None or isinstance(stored.get("error"), str))
                and all(isinstance(d, dict) for d in stored["diagnostics"])):
            return None
        try:
            return FileResult(display, [Diagnostic.from_json(d) for d in stored["diagnostics"]], stored["error"])
        except Exception:  # noqa: BLE001 - a diagnostic of the wrong shape: analyse again
            return None

    def put(self, result: FileResult, digest: str) -> None:
        """Store ``result``: the analysis of the bytes whose digest is ``digest`` (``digest_of``).  When those
        are not the bytes ``get`` keyed (the file changed in between), nothing is stored."""
        key = self._keys.get(result.path)
        if key is None or digest != self._digests.get(result.path):
            return
        target = self._file(key)
        body = json.dumps({"key": key, "error": result.error, "diagnostics": [_stored(d) for d in result.diagnostics]})
        try:
            self._prepare()
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, body.encode("utf-8"))
        except OSError:
            pass  # a cache that cannot be written only costs time

    def _prepare(self) -> None:
        if (self.directory / "CACHEDIR.TAG").exists():
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / ".gitignore").write_text("# Created by gradguard: never commit the cache.\n*\n")
        (self.directory / "CACHEDIR.TAG").write_text(CACHEDIR_TAG)


def atomic_write(target: Path, data: bytes, like: os.stat_result | None = None) -> None:
    """Write ``data`` to ``target`` so that a reader, or a crash, sees the old file or the new one, never a part:
    a temporary file in the same folder, written and fsync'd, renamed over ``target``, the folder fsync'd.
    ``like``: the stat of the file replaced, whose mode (and owner, where allowed) the new one keeps."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if like is not None:
                os.fchmod(f.fileno(), like.st_mode & 0o7777)
                if (like.st_uid, like.st_gid) != (os.geteuid(), os.getegid()):
                    try:
                        os.fchown(f.fileno(), like.st_uid, like.st_gid)  # root fixing a user's file
                    except OSError:
                        pass
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        folder = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(folder)
    except OSError:
        pass
    finally:
        os.close(folder)


def _stored(d: Diagnostic) -> dict:
    """``to_json`` plus the fingerprint a baseline matches on (``Diagnostic.from_json`` reads it back)."""
    return d.to_json() if d.fingerprint is None else d.to_json() | {"fingerprint": d.fingerprint}
