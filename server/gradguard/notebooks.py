"""Jupyter notebooks: the code cells, in order, analysed as one program; findings mapped back to cells.

Execution order is cell order (top to bottom), not ``execution_count``: the counts only say in which order
cells last ran in one kernel session -- re-runs, cells never run (``null``), cells edited after running and
restarted kernels all make them unreliable -- while "Restart & Run All", ``nbconvert --execute``, papermill
and CI all run the cells top to bottom.  A tensor saved in cell 3 and mutated in cell 5 is therefore found.

IPython syntax that is not Python is turned into lines with the same line count, so every program line maps
to one (cell, line in cell):

- line magics and shell escapes (``%pip install x``, ``!nvidia-smi``, ``files = !ls``, ``obj?``) become
  ``pass`` at the same indentation (a magic can be the only statement of a block); a magic continued with a
  trailing backslash takes its continuation lines along;
- ``%time stmt`` / ``%timeit stmt`` / ``%prun stmt`` keep ``stmt`` (it runs), shifted left; columns on that
  line are shifted back when reported;
- ``%%time``, ``%%timeit``, ``%%capture`` and ``%%prun`` cells keep their Python body; any other cell magic
  (``%%bash``, ``%%writefile``, ``%%html``...) blanks the whole cell: its body is not Python;
- ``from __future__ import ...`` lines are blanked (IPython allows them in any cell, a program only on top);
- a cell that does not parse even so is reported once (GG900, in that cell) and left out, as Jupyter would
  only fail that cell.  Top-level ``await`` (IPython's autoawait) parses and is analysed like any statement.

A cell that parses as plain Python is never transformed, so ``%`` or ``!`` at the start of a line inside a
string is safe.  Notebooks whose kernel language is not Python are skipped.

Positions in a notebook's findings are cell positions: ``Diagnostic.cell`` is the 1-based number of the
cell counting every cell (markdown too, so ``cells[cell - 1]`` in the file) and the span is in that
cell's own lines; related locations and fix edits carry their own cell.  Messages name lines as "line 2 of
cell 6": their templates (``messages.Message``) are rendered with ``Program.line_name``.

This module reads notebooks and maps positions between cells and the program; it analyses nothing, so that
``api`` (``analyze_notebook``, ``analyze_program``) and ``autofix.writer`` (``fix_notebook``, ``CellsPlan``) can use
it one way.  ``fix_notebook`` applies fixes to the cell sources only: outputs, metadata, ids and the JSON
layout (indent, key order, trailing newline, list-or-string sources) are left as they were.

Notebooks are read with ``json``; ``nbformat`` (optional) is used only to upgrade nbformat 3 files for
analysis (fixes are not written to those).
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import Any

from . import parsing
from .config import Config
from .diagnostics import SYNTAX_ERROR, Diagnostic, FileResult, Fix, FixSource, Related, Severity, Span, TextEdit
from .text import apply_edits, split_lines

SUFFIX = ".ipynb"

# Cell magics whose body is Python that runs (once or more).
PYTHON_BODY_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun"})
_ESCAPE = re.compile(r"^(?P<indent>[ \t]*)(?:[%!]|\?)")  # %magic, !shell, ?help
_ASSIGNED_ESCAPE = re.compile(r"^(?P<indent>[ \t]*)[\w.,\[\]() \t*]+=[ \t]*[%!]")  # x = !ls, t = %timeit -o f()
_HELP = re.compile(r"^(?P<indent>[ \t]*)[\w.\[\]()]+\?\??[ \t]*$")  # torch.Tensor.add_?
_TIMED = re.compile(r"^(?P<indent>[ \t]*)(?P<magic>%(?:time|timeit|prun)[ \t]+)(?=[^\s-])")
_FUTURE = re.compile(r"^[ \t]*from[ \t]+__future__[ \t]+import[^(\\]*$")
_CELL_MAGIC = re.compile(r"^%%(?P<name>\w+)")


class NotebookError(ValueError):
    """The file is not a notebook we can read."""


# --- the program -------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One code cell: where it is in the notebook, its source, and the Python analysed for it."""

    number: int  # 1-based position among all cells of the notebook
    source: str
    python: str  # same number of lines as ``source``
    shifts: dict[int, int] = field(default_factory=dict)  # 1-based line -> columns removed at its start
    changed: frozenset[int] = frozenset()  # 1-based lines whose text differs from the source
    problem: parsing.SyntaxProblem | None = None  # set when the cell is left out: it does not parse

    @property
    def line_count(self) -> int:
        return len(split_lines(self.source))


def _cell_python(source: str) -> tuple[str, dict[int, int], frozenset[int]]:
    """The cell as Python (see the module docs), the column shifts and the lines that changed."""
    lines = split_lines(source)
    out, shifts, changed = list(lines), {}, set()
    for i, line in enumerate(lines):
        if _FUTURE.match(line):
            out[i] = ""
            changed.add(i + 1)
    plain = "\n".join(out)
    if _parses(plain):
        return plain, {}, frozenset(changed)
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and (m := _CELL_MAGIC.match(lines[first])):
        out[first] = ""
        changed.add(first + 1)
        if m["name"] not in PYTHON_BODY_CELL_MAGICS:
            return "\n".join("" for _ in lines), {}, frozenset(range(1, len(lines) + 1))
    continued = False
    for i, line in enumerate(lines):
        if (i + 1) in changed:
            continue
        if continued:  # the continuation of a magic or shell line
            out[i], continued = "", line.rstrip().endswith("\\")
            changed.add(i + 1)
            continue
        if m := _TIMED.match(line):
            cut = len(m["magic"])
            out[i] = m["indent"] + line[len(m["indent"]) + cut:]
            shifts[i + 1] = cut
            changed.add(i + 1)
        elif (m := _ESCAPE.match(line) or _ASSIGNED_ESCAPE.match(line) or _HELP.match(line)):
            out[i] = m["indent"] + "pass"
            continued = line.rstrip().endswith("\\")
            changed.add(i + 1)
    return "\n".join(out), shifts, frozenset(changed)


def _parses(text: str) -> bool:
    try:
        compile(text, "<cell>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)  # top-level await parses too
    except (SyntaxError, ValueError):
        return False
    except (RecursionError, MemoryError):
        return True  # too deep for Python's parser is not a syntax error: the analysis reports what it skips
    return True


def make_cell(number: int, source: str) -> Cell:
    python, shifts, changed = _cell_python(source)
    problem = None
    if not _parses(python):
        parsed = parsing.parse(python)
        problem = parsed if isinstance(parsed, parsing.SyntaxProblem) else parsing.SyntaxProblem("invalid syntax", 1, 1)
        python = "\n".join("" for _ in split_lines(source))
    return Cell(number, source, python, shifts, changed, problem)


@dataclass(frozen=True)
class Program:
    """The code cells joined into one Python program, one line per cell line, and the way back."""

    cells: tuple[Cell, ...]
    text: str
    starts: tuple[int, ...]  # the program line each cell starts on

    @classmethod
    def from_cells(cls, cells: list[tuple[str, str]]) -> "Program":
        """``cells``: (cell_type, source) for every cell of the notebook, in order; only code cells count."""
        code = tuple(make_cell(n, src) for n, (kind, src) in enumerate(cells, start=1) if kind == "code")
        starts, line = [], 1
        for cell in code:
            starts.append(line)
            line += cell.line_count
        return cls(code, "\n".join(c.python for c in code) + "\n" if code else "", tuple(starts))

    def locate(self, line: int, column: int = 1) -> tuple[Cell, int, int] | None:
        """The cell, line in cell and column in cell of a 1-based program position; None past the end."""
        i = bisect.bisect_right(self.starts, line) - 1
        if i < 0:
            return None
        cell = self.cells[i]
        local = line - self.starts[i] + 1
        if local > cell.line_count:
            return None
        return cell, local, column + cell.shifts.get(local, 0)

    def line_name(self, line: int) -> str:
        """A program line as messages name it: "line 2 of cell 6"."""
        where = self.locate(line)
        if where is None:
            return f"line {line}"
        cell, local, _ = where
        return f"line {local} of cell {cell.number}"


# --- mapping findings --------------------------------------------------------


def _map_edit(program: Program, edit: TextEdit) -> TextEdit | None:
    start, end = program.locate(edit.line, edit.column), program.locate(edit.end_line, edit.end_column)
    if start is None:
        return None
    cell, line, column = start
    if end is None or end[0] is not cell:
        # An edit may end at column 1 of the next cell's first line: the end of this cell's last line.
        if end is not None and end[1:] == (1, 1) and edit.new_text.endswith("\n"):
            lines = split_lines(cell.source)
            return TextEdit(line, column, len(lines), len(lines[-1]) + 1, edit.new_text[:-1], cell.number)
        return None
    if any(n in cell.changed and n not in cell.shifts for n in range(line, end[1] + 1)):
        return None  # the edit touches a magic line: it cannot be made in the cell's source
    return TextEdit(line, column, end[1], end[2], edit.new_text, cell.number)


def map_fix(program: Program, fix: Fix | None) -> Fix | None:
    if fix is None or fix.file is not None:  # a fix of another module's text (``Fix.file``): not offered in cells
        return None
    edits = [_map_edit(program, e) for e in fix.edits]
    if any(e is None for e in edits):
        return None
    return replace(fix, edits=tuple(edits))


def map_diagnostic(program: Program, d: Diagnostic) -> Diagnostic | None:
    """``d`` (in program positions) in cell positions; None if it is outside every cell."""
    start = program.locate(d.span.line, d.span.column)
    if start is None:
        return None
    cell, line, column = start
    end = program.locate(d.span.end_line, d.span.end_column)
    if end is None or end[0] is not cell:
        last = split_lines(cell.source)
        end_line, end_column = len(last), len(last[-1]) + 1
    else:
        end_line, end_column = end[1], end[2]
    related = []
    for r in d.related:
        where = program.locate(r.line, r.column) if r.path == d.path else None
        if where is None:
            related.append(r)
        else:
            related.append(Related(r.path, where[1], where[2], r.message, where[0].number))
    return replace(
        d,
        span=Span(line, column, end_line, end_column),
        related=tuple(related),
        fix=map_fix(program, d.fix),
        cell=cell.number,
    )


# --- reading -----------------------------------------------------------------


@dataclass
class Notebook:
    """A parsed .ipynb: the JSON as loaded (written back as it was, but for fixed sources) and its cells."""

    data: dict[str, Any]
    raw: str
    upgraded: bool = False  # read through nbformat from an older format: never written back

    @classmethod
    def loads(cls, raw: str | bytes) -> "Notebook":
        if isinstance(raw, bytes):
            if len(raw) > parsing.MAX_BYTES * 8:  # outputs make notebooks big; the sources are what we read
                raise NotebookError(f"notebook is larger than {parsing.MAX_BYTES * 8 // (1024 * 1024)} MiB")
            try:
                raw = raw.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise NotebookError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x})") from None
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise NotebookError(f"not a valid notebook: invalid JSON on line {exc.lineno}: {exc.msg}") from None
        if not isinstance(data, dict):
            raise NotebookError("not a valid notebook: the JSON is not an object")
        version = data.get("nbformat", 4)
        if isinstance(version, bool) or not isinstance(version, int):
            raise NotebookError(f"not a valid notebook: nbformat must be a number, not {_shown(version)}")
        if version < 4 or "worksheets" in data:
            data = _upgrade(raw)
            _check_fields(data)
            return cls(data, raw, upgraded=True)
        _check_fields(data)
        return cls(data, raw)

    @property
    def cells(self) -> list[dict[str, Any]]:
        return self.data["cells"]

    def language(self) -> str:
        meta = self.data.get("metadata") or {}
        info = meta.get("language_info") or {}
        spec = meta.get("kernelspec") or {}
        return str(info.get("name") or spec.get("language") or "python").lower()

    def sources(self) -> list[tuple[str, str]]:
        return [(str(c.get("cell_type", "")), cell_source(c)) for c in self.cells]

    def program(self) -> Program:
        return Program.from_cells(self.sources())

    def set_source(self, number: int, text: str) -> None:
        cell = self.cells[number - 1]
        if isinstance(cell.get("source"), list):
            cell["source"] = text.splitlines(keepends=True)
        else:
            cell["source"] = text

    def dumps(self) -> str:
        """The JSON in the layout it was read in (indent, key order, escaping, final newline)."""
        indent_match = re.search(r"\n([ \t]+)\S", self.raw)
        indent: int | str | None = None
        if indent_match:
            ws = indent_match.group(1)
            indent = len(ws) if set(ws) == {" "} else ws
        ascii_only = self.raw.isascii() and "\\u" in self.raw
        separators = (",", ": ") if indent is not None else ((",", ":") if ", " not in self.raw else None)
        text = json.dumps(self.data, indent=indent, ensure_ascii=ascii_only, separators=separators)
        return text + "\n" if self.raw.endswith("\n") else text


def _shown(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(value), "a number")


def _check_fields(data: dict[str, Any]) -> None:
    """The fields gradguard reads have the types nbformat 4 gives them; else ``NotebookError`` (GG901) naming
    the first that does not (before: an "internal error" from deep inside the analysis)."""
    cells = data.get("cells")
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        raise NotebookError("not a valid notebook: no list of cells")
    meta = data.get("metadata", {})
    if not isinstance(meta, dict):
        raise NotebookError(f"not a valid notebook: metadata must be an object, not {_shown(meta)}")
    for key, name_key in (("language_info", "name"), ("kernelspec", "language")):
        table = meta.get(key)
        if table is not None and not isinstance(table, dict):
            raise NotebookError(f"not a valid notebook: metadata.{key} must be an object, not {_shown(table)}")
        name = (table or {}).get(name_key)
        if name is not None and not isinstance(name, str):
            raise NotebookError(f"not a valid notebook: metadata.{key}.{name_key} must be a string, not {_shown(name)}")
    for number, cell in enumerate(cells, start=1):
        kind = cell.get("cell_type", "")
        if not isinstance(kind, str):
            raise NotebookError(f"not a valid notebook: cell {number}: cell_type must be a string, not {_shown(kind)}")
        source = cell.get("source", "")
        if not (isinstance(source, str) or isinstance(source, list) and all(isinstance(s, str) for s in source)):
            raise NotebookError(f"not a valid notebook: cell {number}: source must be a string or a list of "
                                f"strings, not {_shown(source) if not isinstance(source, list) else 'a list of other things'}")


def read_language(data: bytes) -> str | None:
    """The kernel language of the notebook ``data`` is, or None when it is not a notebook that can be read."""
    try:
        return Notebook.loads(data).language()
    except NotebookError:
        return None


def _upgrade(raw: str) -> dict[str, Any]:
    try:
        import nbformat
    except ImportError:
        raise NotebookError("nbformat 3 notebooks need the `nbformat` package to be read") from None
    try:
        return json.loads(json.dumps(nbformat.reads(raw, as_version=4)))
    except Exception as exc:  # noqa: BLE001 - nbformat raises many kinds of errors for bad files
        raise NotebookError(f"not a valid notebook: {exc}") from None


def cell_source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def is_notebook(path: str | Path) -> bool:
    return str(path).lower().endswith(SUFFIX)


def map_result(program: Program, result: FileResult, config: Config) -> FileResult:
    """The analysis of ``program.text`` in cell positions, with one GG900 for each cell left out (it does
    not parse) when ``config`` enables it."""
    path = result.path
    pairs = [(m, d) for m, d in ((map_diagnostic(program, d), d) for d in result.diagnostics) if m is not None]
    mapped = [m for m, _ in pairs]
    if config.enabled(SYNTAX_ERROR):
        for cell in program.cells:
            if cell.problem is not None:
                p = cell.problem
                line, column = max(1, p.line), max(1, p.column)
                mapped.append(Diagnostic(path, Span(line, column, line, column), SYNTAX_ERROR, Severity.ERROR,
                                         f"cell {cell.number} does not parse: {p.message}; the cell was not analysed",
                                         cell=cell.number))
    mapped.sort(key=lambda d: d.order)
    on_demand = CellFixes(program, pairs, result.fixes) if result.fixes is not None else None
    return FileResult(path, mapped, error=result.error, fixes=on_demand)


class CellFixes:
    """The fixes of a notebook's findings (in cell positions) built on demand: those of the program's findings
    they were mapped from (``api``'s on-demand fixes), mapped as ``map_diagnostic`` maps them."""

    def __init__(self, program: Program, pairs: list[tuple[Diagnostic, Diagnostic]], source: FixSource):
        self.program, self.source = program, source
        self.raw = {_cell_place(m): d for m, d in pairs}

    def fixed(self, diagnostics: Sequence[Diagnostic]) -> list[Diagnostic]:
        return self._mapped(diagnostics, self.source.fixed)

    def checked(self, diagnostics: Sequence[Diagnostic]) -> list[Diagnostic]:
        return self._mapped(diagnostics, self.source.checked)

    def _mapped(self, diagnostics: Sequence[Diagnostic],
                build: Callable[[Sequence[Diagnostic]], list[Diagnostic]]) -> list[Diagnostic]:
        raw = [self.raw.get(_cell_place(d)) for d in diagnostics]
        built = iter(build([r for r in raw if r is not None]))
        out = []
        for d, r in zip(diagnostics, raw):
            fix = next(built).fix if r is not None else None
            out.append(replace(d, fix=map_fix(self.program, fix)) if fix is not None else d)
        return out


def _cell_place(d: Diagnostic) -> tuple[int | None, str, int, int]:
    return d.cell, *d.place


def apply_to_cells(program: Program, fixes: list[Fix]) -> dict[int, str] | None:
    """New sources of the cells that ``fixes`` (program positions) change; None if one cannot be mapped."""
    by_cell: dict[int, list[TextEdit]] = {}
    for fix in fixes:
        mapped = map_fix(program, fix)
        if mapped is None:
            return None
        for edit in mapped.edits:
            by_cell.setdefault(edit.cell, []).append(edit)
    cells = {c.number: c for c in program.cells}
    return {n: apply_edits(cells[n].source, edits) for n, edits in by_cell.items()}
