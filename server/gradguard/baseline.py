"""Baselines: adopt gradguard in an existing codebase by recording today's findings and reporting only new ones.

A finding is recognised by its fingerprint, not its line number: the code, the flagged line's text with its
whitespace collapsed, and which occurrence of that (code, text) pair in the file it is.  Lines inserted above
a finding leave it matched; a second identical finding on a new line is a new occurrence, so it is reported.

The file (``gradguard check --write-baseline FILE``) is JSON, sorted, one finding a line, so it diffs well::

    {
      "version": 1,
      "files": {
        "src/train.py": [
          {"code": "GG001", "fingerprint": "2f1c0e9a7b3d", "line": 12}
        ]
      }
    }

Paths are relative to the project root: the folder of the ``pyproject.toml`` the configuration came from, else
the baseline file's folder.  ``line`` is for people reading the file; matching ignores it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

from .diagnostics import NOT_ANALYSED, Diagnostic, FileResult

VERSION = 1


class BaselineError(ValueError):
    """The baseline file is missing, not JSON, or not a baseline; the message says which, in one line."""


def fingerprinted(diagnostics: Sequence[Diagnostic], lines: Sequence[str]) -> list[Diagnostic]:
    """``diagnostics`` (in line order) with their fingerprints, from ``lines``: the text they were found in."""
    seen: Counter[tuple[str, str]] = Counter()
    normalized: dict[int, str] = {}  # a line is read once, however many findings it holds
    out = []
    for d in diagnostics:
        if d.line not in normalized:
            normalized[d.line] = " ".join(lines[d.line - 1].split()) if 1 <= d.line <= len(lines) else ""
        text = normalized[d.line]
        occurrence = seen[d.code, text]
        seen[d.code, text] += 1
        digest = hashlib.blake2b(f"{d.code}\0{text}\0{occurrence}".encode("utf-8", "surrogatepass"), digest_size=6)
        out.append(replace(d, fingerprint=digest.hexdigest()))
    return out


def relative_path(path: str | Path, root: Path) -> str:
    """How the baseline names a file: its path from ``root``, with ``/`` separators."""
    return Path(os.path.relpath(os.path.realpath(path), os.path.realpath(root))).as_posix()


@dataclass(frozen=True)
class Entry:
    code: str
    fingerprint: str
    line: int


@dataclass(frozen=True)
class Baseline:
    """The findings recorded in one baseline file; ``root`` is the folder its paths are relative to."""

    path: Path
    root: Path
    files: dict[str, tuple[Entry, ...]]

    def hides(self, path: str | Path, diagnostic: Diagnostic) -> bool:
        """Whether ``diagnostic``, found in the file at ``path``, is one the baseline recorded."""
        if diagnostic.fingerprint is None or diagnostic.code == NOT_ANALYSED:
            return False  # an input problem (syntax error...) or a part not analysed: never hidden
        entries = self.files.get(relative_path(path, self.root), ())
        return any(e.fingerprint == diagnostic.fingerprint and e.code == diagnostic.code for e in entries)

    def split(self, path: str | Path, diagnostics: Iterable[Diagnostic]) -> tuple[list[Diagnostic], list[Diagnostic]]:
        """(the findings to report, the findings the baseline hides)."""
        kept, hidden = [], []
        for d in diagnostics:
            (hidden if self.hides(path, d) else kept).append(d)
        return kept, hidden

    def unmatched(self, checked: dict[str, Iterable[Diagnostic]]) -> list[tuple[str, Entry]]:
        """Entries that match no finding any more: those of the files in ``checked`` (relative path -> every
        finding of the file, hidden ones included) that none of its findings has, and those of files that
        no longer exist."""
        out = []
        for name, entries in sorted(self.files.items()):
            if name in checked:
                found = {(d.code, d.fingerprint) for d in checked[name]}
                out += [(name, e) for e in entries if (e.code, e.fingerprint) not in found]
            elif not (self.root / name).exists():
                out += [(name, e) for e in entries]
        return out


def load(path: Path, root: Path | None = None) -> Baseline:
    """Read a baseline file; ``root`` defaults to its folder.  Raises ``BaselineError``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineError(f"baseline file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"cannot read baseline {path}: {getattr(exc, 'strerror', None) or exc}") from None
    except ValueError as exc:
        raise BaselineError(f"baseline {path} is not JSON: {exc}") from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(files, dict):
        raise BaselineError(f"{path} is not a gradguard baseline (expected {{\"version\": {VERSION}, \"files\": "
                            "{...}}; write one with `gradguard check --write-baseline FILE`)")
    parsed: dict[str, tuple[Entry, ...]] = {}
    for name, entries in files.items():
        if not isinstance(entries, list) or not all(_is_entry(e) for e in entries):
            raise BaselineError(f"baseline {path}: the entries of {name!r} must be a list of "
                                '{"code": ..., "fingerprint": ..., "line": ...} objects')
        parsed[name] = tuple(Entry(e["code"], e["fingerprint"], e["line"]) for e in entries)
    return Baseline(path, (root or path.resolve().parent), parsed)


def _entry(d: Diagnostic) -> dict[str, object]:
    where = {"line": d.span.line} if d.cell is None else {"cell": d.cell, "line": d.span.line}
    return {"code": d.code, "fingerprint": d.fingerprint} | where


def _is_entry(value: object) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("code"), str) and isinstance(value.get("fingerprint"), str)
            and isinstance(value.get("line"), int))


def dumps(results: Iterable[tuple[str, FileResult]]) -> tuple[str, int]:
    """The baseline file's text for (relative path, result) pairs, and how many findings it records.  Files
    that could not be analysed record nothing: a baseline never hides that a file went unchecked."""
    files: dict[str, list[Diagnostic]] = {}
    for name, result in results:
        kept = [d for d in result.diagnostics if d.fingerprint is not None]
        if kept and result.error is None:
            files.setdefault(name, []).extend(kept)
    count = 0
    rows = []
    for name in sorted(files):
        diags = sorted(files[name], key=lambda d: (*d.order, d.fingerprint))
        count += len(diags)
        entries = ",\n".join(
            "      " + json.dumps(_entry(d)) for d in diags)
        rows.append(f"    {json.dumps(name)}: [\n{entries}\n    ]")
    body = ",\n".join(rows)
    text = f'{{\n  "version": {VERSION},\n  "files": {{' + (f"\n{body}\n  " if rows else "") + "}\n}\n"
    return text, count
