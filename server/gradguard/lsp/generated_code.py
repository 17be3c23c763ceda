"""The code that class decorators generate, compiled once per interpreter and kept like bytecode.

``attrs`` writes and compiles the source of each class's ``__init__``, ``__eq__``, ``__repr__``...; ``dataclasses``
does the same for every dataclass.  Importing ``lsprotocol.types`` (pygls's protocol: ~560 attrs classes) spent
~110 ms of its ~230 ms CPU in ``compile`` of those sources, the largest single cost of the language server's
start; libcst's node dataclasses the same when the fix layer loads.  Python caches a module's bytecode in
``__pycache__`` but not code made at run time, so each start compiled it all again.

``install()`` (the server's first act: ``gradguard/lsp/__init__.py``) makes the one ``compile`` of ``attr._make``
and the one ``exec`` of ``dataclasses`` look the code up first, by the exact source, file name and compiler flags
it would have been compiled with; what is not there is compiled as before and remembered.  ``save()`` writes what
was compiled to one file beside this module's bytecode (it follows ``PYTHONPYCACHEPREFIX`` and, as bytecode is, is
not written under ``PYTHONDONTWRITEBYTECODE``), stamped with the interpreter's version: a file of another Python,
an unreadable or a damaged one is ignored.  The
code run is the code that compiling the same text gives; only the compiling is skipped.
"""

from __future__ import annotations

import __future__
import builtins
import hashlib
import marshal
import os
import sys
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

MAGIC = f"gradguard generated code, {sys.version}\n".encode()  # marshal's format is the interpreter's
# A start that found nearly all its code in the file leaves the file as it is: a few sources differ in each process
# (attrs' ``__hash__`` of a class holds ``hash()`` of a string, which differs per process), so one miss a start is usual.
REWRITE_SHARE = 0.01

_codes: dict[bytes, CodeType] = {}  # read from the file, and compiled here
_used: set[bytes] = set()  # the entries this process asked for: what the file is written with
_added = 0  # entries compiled since the file was read or written
_installed = False


def cache_path() -> Path | None:
    """The cache file, where this interpreter keeps this module's bytecode (as ``importlib.util.cache_from_source``
    places it); None where it keeps none."""
    tag = sys.implementation.cache_tag
    if tag is None:
        return None
    folder = Path(os.path.abspath(os.path.dirname(__file__)))
    if sys.pycache_prefix:
        folder = Path(sys.pycache_prefix, *folder.parts[1:])
    else:
        folder = folder / "__pycache__"
    return folder / f"generated_code.{tag}.generated"


def _flags(module: ModuleType) -> int:
    """The ``__future__`` flags ``compile`` inherits when ``module``'s code calls it."""
    return sum(f.compiler_flag for f in vars(module).values() if isinstance(f, __future__._Feature))


def compiled(source: str, filename: str, flags: int) -> CodeType:
    """``compile(source, filename, "exec", flags, dont_inherit=True)``, from the cache when it holds it."""
    global _added
    key = hashlib.blake2b(b"%d\0%s\0%s" % (flags, filename.encode("utf-8", "surrogatepass"),
                                           source.encode("utf-8", "surrogatepass")), digest_size=16).digest()
    code = _codes.get(key)
    if code is None:
        code = _codes[key] = builtins.compile(source, filename, "exec", flags, dont_inherit=True)
        _added += 1
    _used.add(key)
    return code


def _compile_for(module: ModuleType):
    flags = _flags(module)

    def compile(source: Any, filename: Any, mode: str, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or mode != "exec" or not isinstance(source, str) or not isinstance(filename, str):
            return builtins.compile(source, filename, mode, *args, **kwargs)
        return compiled(source, filename, flags)
    return compile


def _exec_for(module: ModuleType):
    flags = _flags(module)

    def exec(source: Any, *args: Any, **kwargs: Any) -> None:
        builtins.exec(compiled(source, "<string>", flags) if isinstance(source, str) else source, *args, **kwargs)
    return exec


def _read(path: Path) -> dict[bytes, CodeType]:
    try:
        data = path.read_bytes()
        if data[:len(MAGIC)] != MAGIC:
            return {}
        codes = marshal.loads(data[len(MAGIC):])
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not isinstance(codes, dict):
        return {}
    return {k: v for k, v in codes.items() if isinstance(k, bytes) and isinstance(v, CodeType)}


def install() -> None:
    """Read the cache file and route attrs' and dataclasses' compiling through the cache (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    import dataclasses

    path = cache_path()
    if path is not None:
        _codes.update(_read(path))
    try:
        import attr._make as attrs_make
    except ImportError:  # no attrs: pygls cannot run either, and says so
        attrs_make = None
    if attrs_make is not None and callable(getattr(attrs_make, "_compile_and_eval", None)):
        attrs_make.compile = _compile_for(attrs_make)  # the one call: compile(script, filename, "exec")
    dataclasses.exec = _exec_for(dataclasses)  # the one call: exec(txt, globals, ns)


def save() -> None:
    """Write the code this process used to the cache file, if more than a few of them had to be compiled (so the
    file holds what one start needs, not every version of a class ever met).  Atomically: servers may start
    together."""
    global _added
    path = cache_path()
    used = tuple(_used)
    if _added <= REWRITE_SHARE * len(used) or path is None or sys.dont_write_bytecode:
        return
    codes = {key: _codes[key] for key in used}
    _added = 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_bytes(MAGIC + marshal.dumps(codes))
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError:
        pass  # a read-only install: every start compiles, as before
