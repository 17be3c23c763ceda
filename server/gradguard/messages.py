"""Finding messages as templates: text with references to lines, rendered to text only at the output boundary.

A rule writes ``Message.format("`{op}` on {saved} saved it", op="sigmoid", saved=save_node)``; the saved node
stays a reference to its line.  So the per-document cache moves a message by shifting its references
(``moved.py``), and a notebook renders the same reference as "line 2 of cell 6" where a plain file says
"line 12" (``Finding.to_diagnostic``), with no line number ever read back out of text.
"""

from __future__ import annotations

import ast
import string
from dataclasses import dataclass
from pathlib import PurePath
from typing import Callable, Iterator, Union

from .statements import every_node


@dataclass(frozen=True)
class Line:
    """A reference to a 1-based line of the analysed file (or notebook program), or of another module of the
    project (``path``) that the analysis followed a call into."""

    number: int
    path: str | None = None


LineName = Callable[[int], str]  # how a line is named in text


def plain_line(number: int) -> str:
    return f"line {number}"


Part = Union[str, Line]


@dataclass(frozen=True)
class Message:
    parts: tuple[Part, ...]

    @classmethod
    def text(cls, text: str) -> "Message":
        return cls((text,))

    @classmethod
    def format(cls, template: str, **values: object) -> "Message":
        """``template`` with its ``{name}`` slots filled: an AST node or a ``Line`` becomes a line reference,
        a ``Message`` is spliced in, anything else becomes text (never parsed again, so braces in it are safe)."""
        parts: list[Part] = []
        for literal, name, spec, conversion in string.Formatter().parse(template):
            parts.append(literal)
            if name is None:
                continue
            if spec or conversion:
                raise ValueError(f"no format spec or conversion in message slots: {{{name}}}")
            parts.extend(_parts(values[name]))
        return cls(_merged(parts))

    def lines(self) -> Iterator[int]:
        """The lines of the analysed file it names."""
        return (p.number for p in self.parts if isinstance(p, Line) and p.path is None)

    def moved(self, move: Callable[[int], int]) -> "Message":
        """The same message with every line reference passed through ``move`` (itself when it has none: most
        related notes, moved at every edit below them)."""
        if not any(isinstance(p, Line) and p.path is None for p in self.parts):
            return self
        return Message(tuple(Line(move(p.number)) if isinstance(p, Line) and p.path is None else p
                             for p in self.parts))

    def removesuffix(self, suffix: str) -> "Message":
        """The message without ``suffix`` at its end (a rule that words the advice itself drops another's)."""
        last = self.parts[-1] if self.parts else None
        if not suffix or not isinstance(last, str) or not last.endswith(suffix):
            return self
        return Message(_merged([*self.parts[:-1], last[: -len(suffix)]]))

    def render(self, name: LineName = plain_line) -> str:
        return "".join(p if isinstance(p, str) else name(p.number) if p.path is None else
                       f"{plain_line(p.number)} of {PurePath(p.path).name}" for p in self.parts)

    def __str__(self) -> str:
        return self.render()


# The attribute that marks a node of one of the project's other modules that the analysis followed calls into
# with its file.  An attribute of the node, not a table by ``id``: it costs nothing where the node's ``__dict__``
# has room (most nodes; a table held a tuple, an int and an entry per node: 7.5 MB for a package's modules), and
# it goes with the tree, so no id of a dropped node can be taken for a marked one.
_FILE_MARK = "_gradguard_other_file"


def mark_other_file(tree: ast.AST, path: str | None, nodes: list[ast.AST] | None = None) -> None:
    """Record that the nodes of ``tree`` are in the file ``path``, not in the file being analysed (``None``: forget
    them again, when the module is read anew).  ``nodes``: every node of ``tree``, when the caller has them."""
    for node in every_node(tree) if nodes is None else nodes:  # in no set order: each node is marked alone
        if hasattr(node, "lineno"):
            if path is None:
                node.__dict__.pop(_FILE_MARK, None)
            else:
                setattr(node, _FILE_MARK, path)


def other_file(node: ast.AST) -> str | None:
    """The file a node of another module of the project is in; None for the analysed file's own nodes."""
    return getattr(node, _FILE_MARK, None)


def _parts(value: object) -> tuple[Part, ...]:
    if isinstance(value, Message):
        return value.parts
    if isinstance(value, Line):
        return (value,)
    if isinstance(value, ast.AST):
        return (Line(value.lineno, other_file(value)),)
    return (str(value),)


def _merged(parts: list[Part]) -> tuple[Part, ...]:
    """Adjacent text joined and empty text dropped, so equal messages have equal parts."""
    out: list[Part] = []
    for part in parts:
        if isinstance(part, str) and out and isinstance(out[-1], str):
            out[-1] += part
        elif part != "":
            out.append(part)
    return tuple(out)
