"""Reads the fixture corpus (see tests/fixtures/README.md) for the torch and analyzer tests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
_EXPECT = re.compile(r"#\s*expect:\s*((?:GG\d{3}\s*)+)")
# `# expect-raise: MESSAGE` is torch's RuntimeError; `# expect-raise: AttributeError: MESSAGE` names another
# exception Python raises (`.backward()` on a float).
_RAISE = re.compile(r"^#\s*expect-raise:\s*(?:(AttributeError|TypeError):\s*)?(.+?)\s*$", re.M)
_SILENT = re.compile(r"^#\s*expect-silent\s*$", re.M)


@dataclass(frozen=True)
class Fixture:
    path: Path
    positive: bool
    expected_raise: str | None
    silent: bool
    expected: frozenset[tuple[int, str]]  # (line, code)
    raises: str = "RuntimeError"  # the exception's type, for an expect-raise positive

    @property
    def exception_type(self) -> type[BaseException]:
        return {"RuntimeError": RuntimeError, "AttributeError": AttributeError, "TypeError": TypeError}[self.raises]

    @property
    def id(self) -> str:
        return f"{self.path.parent.name}/{self.path.stem}"


def load_fixture(path: Path) -> Fixture:
    text = path.read_text(encoding="utf-8")
    expected = set()
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = _EXPECT.search(line)
        if m:
            for code in m.group(1).split():
                expected.add((lineno, code))
    raise_m = _RAISE.search(text)
    return Fixture(
        path=path,
        positive=path.name.startswith("pos_"),
        expected_raise=raise_m.group(2) if raise_m else None,
        silent=bool(_SILENT.search(text)),
        expected=frozenset(expected),
        raises=(raise_m.group(1) or "RuntimeError") if raise_m else "RuntimeError",
    )


def all_fixtures(root: Path = FIXTURES) -> list[Fixture]:
    return [load_fixture(p) for p in sorted(root.glob("*/*.py")) if p.name.startswith(("pos_", "neg_"))]
