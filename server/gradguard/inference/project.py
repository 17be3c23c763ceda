"""The project's own modules, followed like the file's own code.

A training script imports its model and its trainer from the modules next to it (``from .trainer import
Trainer``, ``from models.networks import Generator``).  A call of such a function or class is followed into that
module with that module's imports and classes, as a call of the file's own function is: the bug often sits in
one file and shows in another.

A name is followed into a module only when the import resolves, as Python would resolve it when the file runs,
to a ``.py`` file (or a package's ``__init__.py``) of the project: relative imports from the file's package;
absolute imports from the folder of the file (a script's own folder comes first on ``sys.path``) or from the
folder above its outermost package.  Anything else (installed packages, the standard library) stays an import.
Each module is read and parsed once per process (again when it changes on disk); the result cache stamps the
project's files for any file that imports one of them.

Calls are followed into other modules only from training code (a unit that runs a backward, or calls by name
one of the file's functions that does: ``main()`` building the model ``train(model)`` trains; in a program's script,
also one the project's modules define, ``engine._imported_trainers``), where a bug spread
over modules shows (a model in one module, the step between its forward and backward in another), and only into
functions and classes of moderate size.  Following every model's calls into its library's layers costs four times
the analysis of the files themselves (timm, torchvision, Lightning, accelerate: 11 s became 55 s); this way it
costs a tenth more.  Summaries of functions (each analysed once) would lift the restriction.
"""

from __future__ import annotations

import ast
import contextvars
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .. import parsing
from ..messages import mark_other_file
from ..statements import every_node
from .classes import ClassInfo, find_classes, mro
from .imports import collect_imports, qualified_name

# Top-level names that are never the project's own code (the libraries every file imports).
NEVER_PROJECT = frozenset({"torch", "numpy", "typing", "torchvision", "einops", "scipy", "pandas", "sklearn"})

# Re-exports followed from one name to its definition (`pkg/__init__.py` importing from `pkg/impl.py`...).
MAX_REEXPORTS = 4
# How deep the imports a module runs at its top level are read for a global grad-mode switch.
MAX_IMPORT_DEPTH = 3
SET_GRAD = ("torch.set_grad_enabled", "torch.autograd.set_grad_enabled")

# Larger functions and classes of other modules stay unknown: following a framework's API (an `Accelerator`,
# a `Trainer` of thousands of lines) from every training loop would cost more than the file's own analysis.
MAX_FOLLOWED_FUNCTION_LINES = 150
MAX_FOLLOWED_CLASS_LINES = 800

# A module larger than this is not followed (a vendored library, generated code): its calls stay unknown.
MAX_MODULE_BYTES = 400_000


@dataclass
class ProjectModule:
    """One module of the project as the interpreter needs it: its imports, classes and functions."""

    path: str
    imports: dict[str, str]
    classes: dict[str, ClassInfo]
    functions: dict[str, ast.FunctionDef]
    tree: ast.Module
    trainers: frozenset[str] | None = None  # its training functions' names, found on first need (the engine's)
    text: str | None = None  # the text ``tree`` was parsed from (what a fix of a finding placed here edits)


@dataclass
class Project:
    """The modules of the project around ``path``, loaded on first use."""

    path: Path
    function_bases: frozenset[str] = frozenset()
    # The analysed file is a program's script (``if __name__ == "__main__":``): only then are a class's bases
    # imported from the project resolved.  A library's module whose classes derive from its package's bases
    # would have them become modules whose forwards are analysed (new findings the corpus does not confirm).
    entry_script: bool = False
    _modules: dict[Path, ProjectModule | None] = field(default_factory=dict)
    # every class of every loaded module, by its node: an instance knows its class node, not its module
    _classes: dict[int, ClassInfo] = field(default_factory=dict)
    _resolved: dict[tuple[str, str], tuple[ProjectModule, str] | None] = field(default_factory=dict)
    # the classes whose imported bases this project has resolved, by id (each class once per analysed file)
    _based: set[int] = field(default_factory=set)
    # What ``grad_off_on_import`` read of the modules it went through (their imports and switch, ``_ImportsRead``),
    # by path and by resolved name: a module it only searches is neither marked nor kept as a tree.
    _imports_read: dict[Path, _ImportsRead | None] = field(default_factory=dict)
    _imports_resolved: dict[tuple[str, str], tuple[_ImportsRead, str] | None] = field(default_factory=dict)
    # ``_bases`` by (importer, level): each asks the file system (a resolve, a climb of ``__init__.py``s) once
    _base_folders: dict[tuple[str, int], list[Path]] = field(default_factory=dict)

    def module_of(self, qualname: str, importer: str) -> tuple[ProjectModule, str] | None:
        """The project module a qualified import name (``.trainer.Trainer``, ``pkg.nets.Generator``, as
        ``collect_imports`` writes them) defines, and the name inside it; None when it is not the project's."""
        key = (qualname, importer)
        if key not in self._resolved:
            self._resolved[key] = self._resolve(qualname, importer, self._load)
        return self._resolved[key]

    def _resolve(self, qualname: str, importer: str, load) -> tuple[ProjectModule, str] | None:
        level = len(qualname) - len(qualname.lstrip("."))
        parts = qualname[level:].split(".")
        if len(parts) < 2 or not level and (parts[0] in sys.stdlib_module_names or parts[0] in NEVER_PROJECT):
            return None
        for base in self._bases(importer, level):
            for cut in range(len(parts) - 1, 0, -1):  # the longest module path first
                module = load(base, parts[:cut])
                if module is not None:
                    return module, ".".join(parts[cut:])
        return None

    def definition(self, qualname: str, importer: str) -> ClassInfo | tuple[ast.FunctionDef, str] | None:
        """The class, or the function and its module's path, that an imported name of the project is; through
        the re-exports of a package's ``__init__.py`` (``from .lstm import LSTM``) too."""
        for _ in range(MAX_REEXPORTS):
            found = self.module_of(qualname, importer)
            if found is None:
                return None
            module, name = found
            if name in module.classes:
                info = module.classes[name]
                return info if _lines(info.node) <= MAX_FOLLOWED_CLASS_LINES else None
            if name in module.functions:
                function = module.functions[name]
                return (function, module.path) if _lines(function) <= MAX_FOLLOWED_FUNCTION_LINES else None
            if name not in module.imports:
                return None
            qualname, importer = module.imports[name], module.path
        return None

    def resolve_bases(self, info: ClassInfo, importer: str) -> None:
        """Find the classes of the project that ``info``'s imported bases are (``class LSTM(RNN)`` with ``from
        .rnn import RNN``), and theirs in turn, so that its methods and its torch base are looked up through them
        too.  Only for a class the analysis uses: only the modules of its bases are read, each once."""
        if id(info) in self._based:
            return
        self._based.add(id(info))
        where = info.module_path or importer
        foreign = []
        for qualname in info.imported_bases:
            found = self.definition(qualname, where)
            if isinstance(found, ClassInfo):
                self.resolve_bases(found, importer)
                foreign.append(found)
        for name in info.bases:
            if name in info.module_classes:
                self.resolve_bases(info.module_classes[name], importer)
        info.rebase(foreign)  # rewritten by each file's project: a module read anew has new classes
        info.torch_base = info.own_torch_base or next(
            (b.torch_base for b in mro(info.module_classes, info)[1:] if b.torch_base), None)

    def stamps(self) -> tuple[tuple[str, tuple | None], ...]:
        """The modules this project has read, with the (mtime, size) they were read at."""
        return (*((str(path), _PARSED[path][0][:2] if path in _PARSED else None) for path in self._modules),
                *((str(path), _IMPORTS_READ[path][0] if path in _IMPORTS_READ else
                   _PARSED[path][0][:2] if path in _PARSED else None)
                  for path in self._imports_read if path not in self._modules))

    @staticmethod
    def unchanged(stamps: tuple[tuple[str, tuple | None], ...]) -> bool:
        """Whether every module in ``stamps`` (from ``stamps()`` of an earlier run) is still as it was read."""
        for path, stamp in stamps:
            try:
                stat = Path(path).stat()
            except OSError:
                return stamp is None
            if stamp != (stat.st_mtime_ns, stat.st_size):
                return False
        return True

    def class_info(self, node: ast.ClassDef) -> ClassInfo | None:
        return self._classes.get(id(node))

    def module(self, path: str) -> ProjectModule | None:
        return self._modules.get(Path(path))

    def grad_off_on_import(self, imports: dict[str, str], importer: str) -> ast.Call | None:
        """The ``torch.set_grad_enabled(False)`` that a module of the project runs at its top level (and does not
        undo there) when the importer's imports load it: directly, or through the modules those import at their
        top level (a package's ``__init__.py`` importing its submodules), ``MAX_IMPORT_DEPTH`` levels down.
        Grad mode is then off, process-wide, for all the importer's code after its imports."""
        seen: set[str] = set()
        todo = [(qualname, importer, 0) for qualname in imports.values()]
        while todo:
            qualname, where, depth = todo.pop(0)
            key = (qualname, where)
            if key not in self._imports_resolved:
                self._imports_resolved[key] = self._resolve(qualname, where, self._load_imports)
            found = self._imports_resolved[key]
            if found is None or found[0].path in seen:
                continue
            module = found[0]
            seen.add(module.path)
            if module.switches_off:  # the module itself, read in full (its nodes are named in messages)
                return _grad_switched_off(self.module_of(qualname, where)[0])
            if depth < MAX_IMPORT_DEPTH:
                todo += [(q, module.path, depth + 1) for q in module.imports.values()]
        return None

    def _load_imports(self, base: Path, parts: list[str]) -> _ImportsRead | None:
        """``_load`` for ``grad_off_on_import``: the same module found, or none, but only its imports and whether it
        switches grad mode off are kept (from the module when this process has it in full)."""
        if not parts or not all(p.isidentifier() for p in parts):
            return None
        stem = base.joinpath(*parts)
        for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
            if candidate in self._modules:
                return _imports_of(self._modules[candidate])
            if candidate in self._imports_read:
                return self._imports_read[candidate]
            if candidate.is_file():
                self._imports_read[candidate] = read = _read_imports(candidate, self.function_bases)
                return read
        return None

    # ------------------------------------------------------------------ resolution
    def _bases(self, importer: str, level: int) -> list[Path]:
        key = (importer, level)
        found = self._base_folders.get(key)
        if found is None:
            found = self._base_folders[key] = self._find_bases(Path(importer), level)
        return found

    @staticmethod
    def _find_bases(importer: Path, level: int) -> list[Path]:
        folder = importer.resolve().parent
        if level:
            for _ in range(level - 1):
                folder = folder.parent
            return [folder]
        top = folder
        while (top / "__init__.py").exists() and top.parent != top:
            top = top.parent
        return [folder] if top == folder else [folder, top]

    def holds(self, qualname: str, importer: str) -> bool:
        """Whether an imported name (``.layers.LSTM``, ``models.vae.VAE``) comes from a module of the project,
        told from the paths alone: no module is read."""
        if qualname.startswith("."):
            return True  # relative to the importer's own package
        top = qualname.split(".", 1)[0]
        if top in sys.stdlib_module_names or top in NEVER_PROJECT:
            return False
        return any(self._file(base, [top]) is not None for base in self._bases(importer, 0))

    @staticmethod
    def _file(base: Path, parts: list[str]) -> Path | None:
        if not parts or not all(p.isidentifier() for p in parts):
            return None
        stem = base.joinpath(*parts)
        return next((c for c in (stem.with_suffix(".py"), stem / "__init__.py") if c.is_file()), None)

    def _load(self, base: Path, parts: list[str]) -> ProjectModule | None:
        if not parts or not all(p.isidentifier() for p in parts):
            return None
        stem = base.joinpath(*parts)
        for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
            if candidate in self._modules:
                return self._modules[candidate]
            if candidate.is_file():
                self._modules[candidate] = None  # a module importing itself back finds nothing while it loads
                self._modules[candidate] = module = self._parse(candidate)
                return module
        return None

    def _parse(self, path: Path) -> ProjectModule | None:
        overlay = _OVERLAY.get()
        if path in overlay:  # a fix's candidate text of this module (``overlaid``): never the cache's
            module = overlay[path]
            if module is not None:
                for info in module.classes.values():
                    self._classes[id(info.node)] = info
            return module
        try:
            stat = path.stat()
        except OSError:
            return None
        stamp = (stat.st_mtime_ns, stat.st_size, self.function_bases)
        cached = _PARSED.get(path)
        if cached is not None and cached[0] == stamp:
            module = cached[1]
        else:
            if cached is not None and cached[1] is not None:
                mark_other_file(cached[1].tree, None)  # read anew: the old nodes are no longer the module's
            module = _parse_module(path, stat.st_size, self.function_bases)
        _PARSED[path] = (stamp, module)
        _READ_AT[path] = _files_done
        if module is not None:
            for info in module.classes.values():
                self._classes[id(info.node)] = info
        return module


@dataclass(frozen=True)
class _ImportsRead:
    """What ``grad_off_on_import`` needs of a module: its imports and whether it switches grad mode off at its top
    level, with the text (for ``calls_named``, which counts over every module this process read)."""

    path: str
    imports: dict[str, str]
    switches_off: bool
    text: str | None = None


def _imports_of(module: ProjectModule | None) -> _ImportsRead | None:
    return None if module is None else _ImportsRead(module.path, module.imports, _grad_switched_off(module) is not None)


def _read_imports(path: Path, function_bases: frozenset[str]) -> _ImportsRead | None:
    """The module ``path`` for ``grad_off_on_import``: found as ``Project._parse`` finds it (a fix's candidate text,
    the module this process has in full, else its file, parsed and dropped), none where that finds none."""
    overlay = _OVERLAY.get()
    if path in overlay:
        return _imports_of(overlay[path])
    try:
        stat = path.stat()
    except OSError:
        return None
    stamp = (stat.st_mtime_ns, stat.st_size)
    cached = _PARSED.get(path)
    if cached is not None and cached[0] == (*stamp, function_bases):
        _READ_AT[path] = _files_done
        return _imports_of(cached[1])
    kept = _IMPORTS_READ.get(path)
    if kept is None or kept[0] != stamp:
        module = _parse_module(path, stat.st_size, function_bases, light=True)
        kept = (stamp, None if module is None else _ImportsRead(module.path, module.imports,
                                                                 _grad_switched_off(module) is not None,
                                                                 module.text))
    _IMPORTS_READ[path] = (*kept[:2], _files_done)
    return kept[1]


def _lines(node: ast.AST) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1


# Modules parsed in this process, by path, with the (mtime, size) they were read at: a CLI run over a package
# reads each module once however many files import it; an edit on disk is read again.
_PARSED: dict[Path, tuple[tuple, ProjectModule | None]] = {}
# For each, the count of ``forget_modules`` calls (files a batch finished) when a file last read it.
_READ_AT: dict[Path, int] = {}
# The modules ``grad_off_on_import`` read and only searched (``_read_imports``), by path: stamp, what it kept, and the
# count of files done when a file last read it.
_IMPORTS_READ: dict[Path, tuple[tuple, _ImportsRead | None, int]] = {}
_files_done = 0

# A batch forgets a module no file read in this many of its last files: files come folder by folder, and a run over
# several packages kept the modules of every package it had left (30 MB of accelerate's in a run over four).
FORGET_AFTER_FILES = 32


def forget_modules(unread_for: int = FORGET_AFTER_FILES) -> None:
    """Count one file done and drop the modules no file read in the last ``unread_for``.  For a batch between its
    files only, when no analysis runs in this process: a dropped module's nodes lose their mark as another file's
    (``mark_other_file``), which an analysis still holding the module would need for its messages."""
    global _files_done
    _files_done += 1
    for path in [p for p, done in _READ_AT.items() if _files_done - done > unread_for]:
        del _READ_AT[path]
        _, module = _PARSED.pop(path, (None, None))
        if module is not None:
            mark_other_file(module.tree, None)  # while the tree is alive, so no other node has these ids yet
    for path in [p for p, kept in _IMPORTS_READ.items() if _files_done - kept[2] > unread_for]:
        del _IMPORTS_READ[path]


def _parse_module(path: Path, size: int, function_bases: frozenset[str], text: str | None = None,
                  light: bool = False) -> ProjectModule | None:
    """``light``: only the imports and the tree, for a search that drops them (neither marked nor classes found)."""
    if size > MAX_MODULE_BYTES:
        return None
    try:
        if text is None:
            text = parsing.decode(path.read_bytes())
            if isinstance(text, parsing.Unreadable):
                return None
        tree = ast.parse(text, str(path))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if light:
        return ProjectModule(str(path), collect_imports(tree.body), {}, {}, tree, text=text)
    nodes = list(every_node(tree))  # one walk for both (every node with a line: every_node skips only markers)
    mark_other_file(tree, str(path), nodes)
    imports = collect_imports(tree.body)
    class_nodes = [n for n in nodes if isinstance(n, ast.ClassDef)]
    class_nodes.sort(key=lambda n: (n.lineno, n.col_offset))
    classes = find_classes(class_nodes, imports, function_bases, module_path=str(path))
    functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    return ProjectModule(str(path), imports, classes, functions, tree, text=text)


# The modules a fix's check reads as candidate texts instead of their files (``overlaid``), per thread.
_OVERLAY: contextvars.ContextVar[Mapping[Path, ProjectModule | None]] = contextvars.ContextVar("overlay", default={})


@contextmanager
def overlaid(texts: Mapping[str, str]) -> Iterator[None]:
    """Analyses inside read each module of ``texts`` (by its path) as that text, not as its file: how a fix of a
    finding placed in another module (``engine._placed``) is checked against the analysis of the file that found
    it, before anything is written.  Neither the cache of modules read nor their nodes' marks change."""
    modules = {}
    for path, text in texts.items():
        resolved = Path(path).resolve()
        try:
            stat = resolved.stat()
        except OSError:
            stat = None
        bases = frozenset()
        cached = _PARSED.get(resolved)
        if cached is not None:
            bases = cached[0][2]
        modules[resolved] = _parse_module(resolved, len(text.encode("utf-8")), bases, text) if stat else None
    token = _OVERLAY.set({**_OVERLAY.get(), **modules})
    try:
        yield
    finally:
        _OVERLAY.reset(token)
        for module in modules.values():
            if module is not None:
                mark_other_file(module.tree, None)


def module_read(path: str) -> ProjectModule | None:
    """The module ``path`` as analyses now read it: a candidate text's (``overlaid``), else as read from its file."""
    resolved = Path(path)
    overlay = _OVERLAY.get()
    if resolved in overlay:
        return overlay[resolved]
    return _PARSED.get(resolved, (None, None))[1]


def function_around(node: ast.AST, path: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost function of the project's module ``path`` (as read by this process) whose lines hold ``node``."""
    module = module_read(path)
    if module is None:
        return None
    line, found = getattr(node, "lineno", 0), None
    stack: list[ast.AST] = list(module.tree.body)
    while stack:
        item = stack.pop()
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                item.lineno <= line <= (item.end_lineno or item.lineno):
            if not isinstance(item, ast.ClassDef):
                found = item
            stack = list(item.body)
    return found


def calls_named(name: str) -> int:
    """How many calls of a function or method named ``name`` the project's modules read by this process make."""
    count = 0
    overlay = _OVERLAY.get()
    searched = []
    for path, (_, module) in _PARSED.items():
        module = overlay.get(path, module)
        if module is not None:
            searched.append(module.tree)
    for path, (_, read, _) in _IMPORTS_READ.items():  # the modules only searched for a grad-mode switch
        if path in overlay and path not in _PARSED and overlay[path] is not None:
            searched.append(overlay[path].tree)
        elif path not in overlay and path not in _PARSED and read is not None and name in read.text:
            searched.append(ast.parse(read.text))
    for tree in searched:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
                count += called == name
    return count


def _grad_switched_off(module: ProjectModule) -> ast.Call | None:
    """The last top-level ``torch.set_grad_enabled(flag)`` statement of ``module`` when its flag is ``False``."""
    last = None
    for statement in module.tree.body:
        call = statement.value if isinstance(statement, ast.Expr) else None
        if not isinstance(call, ast.Call) or qualified_name(call.func, module.imports) not in SET_GRAD:
            continue
        flag = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "mode"), None)
        if not isinstance(flag, ast.Constant) or not isinstance(flag.value, bool):
            return None  # a mode the analysis cannot read: no claim
        last = None if flag.value else call
    return last
